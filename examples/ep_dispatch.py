# SPDX-License-Identifier: Apache-2.0
"""MoE dispatch and combine, one process per GPU, in the shape of DeepEP's
published tests: each rank holds --tokens tokens of --hidden bf16 values
(14 KiB rows at 7168), routes each to its top --topk of --experts experts
spread evenly over the ranks, sends a token's row once to every rank that
holds one of its experts (dispatch), and gets each back and sums the
returned rows with the token's weights on that rank (combine).

    torchrun --nproc-per-node 4 examples/ep_dispatch.py            # 4,096 tokens a rank
    torchrun --nproc-per-node 4 examples/ep_dispatch.py --tokens 128  # decode

Ways, each checked byte for byte against `nccl`:
  p2pt         p2pt.distributed.AlltoallV: counts exchanged on the GPU,
               one device batch a rank, no host sync; also captured in a
               CUDA graph and replayed with new routing; with --chunks K
               the combine's rows come back in one batch of K parts that
               signal apart, each chunk of tokens summed as soon as its
               part is in, while the later parts travel (with --sum
               capped, on a grid of --sum-ctas CTAs, so that the sum
               leaves the rows their speed)
  nccl         as a framework does it with NCCL: the counts to the host,
               the rows gathered, all_to_all_single with host split sizes
  p2pt_exchange  the combine's exchange alone, in a graph (no weighted
               sum): what nccl_packed's combine does
  p2pt_pull    the combine as one pass, in a graph: AlltoallV.ready()
               (a round of signals: every rank's y is written), then each
               rank sums its tokens' rows where AlltoallV.places() says,
               reading the peers' y through p2pt's mapping in one
               torch.compile'd kernel (no slots, no second pass)
  nccl_packed  NCCL's best case: rows already packed, sizes known, the
               bare exchange (no gather, no weighted sum)
  torch_symm   PyTorch's symmetric memory (all_to_all_vdev on its NVSHMEM
               backend), dispatch only, where it runs

p2pt's batches across NVLink take the table's `link peer` CTAs (32 on
sm_90); P2P_TRANSPORT_LINK_PEER=64 in the environment widens them where
the SMs can be spared: a shorter combine at four ranks, a dispatch 4 us
longer at two (bench/results/peer.md 5t, 5zb).

A step is timed with CUDA events from a common start on the GPUs, the
count exchange included: a host barrier, a one-value NCCL all_reduce
that every rank's stream leaves within a few microseconds of the others,
200 us of spinning on each GPU while its host enqueues the step, and a
second all_reduce that realigns the GPUs after their spins. So
a step's time holds neither the host barrier's skew nor the latency of
its first launch, as in a model where the step is one part of a longer
stream of work (the alltoall's ce_packed, the bandwidth yardstick, times
rounds back to back from a common start). --step-start barrier times
from the host barrier alone, as bench/results/peer.md's runs up to
section 5s did. `us` is the largest over the ranks of the median step.
A combine step of p2pt and nccl includes the weighted sum (weighted_sum:
--sum capped, the default, a Triton kernel in fp32 whose grid p2pt's
chunks cap at --sum-ctas while rows still travel, one CTA a token
otherwise, with p2pt's combine in a part per 512 tokens up to 8
(--chunks); --sum compiled, one torch.compile'd kernel in fp32 (bmm
where PyTorch cannot compile), the default where PyTorch has no Triton,
with one part; --sum bmm, a masked bf16 bmm).
--csv writes gpus,tokens,hidden_bytes,topk,phase,way,us,gbps_per_rank,vs_nccl
(gbps_per_rank: the bytes a rank sends to other ranks a step, the mean
over ranks, over `us`). --overlap also times a bf16 GEMM on every rank
alone and beside each way's steps.
"""
import argparse
import csv
import os
import statistics
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)  # NVLink multicast stays off

import torch
import torch.distributed as dist

try:
    import p2pt.distributed as pd
    import p2pt.torch as pt
except ImportError as e:
    sys.exit(f"ep_dispatch.py: {e} (pip install '.[torch]' from a p2pt checkout)")


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--replays", type=int, default=3, help="graph replays with new routing")
    p.add_argument("--csv", default=None)
    p.add_argument("--step-start", choices=("gpu", "barrier"), default="gpu",
                   help="where a timed step starts: every GPU's stream after a one-value "
                        "all_reduce and a 200 us spin that the step's launches queue behind "
                        "(default), or each rank's host after a barrier")
    p.add_argument("--overlap", action="store_true")
    p.add_argument("--gemm", type=int, default=8192)
    p.add_argument("--sum", choices=("compiled", "bmm", "capped"), default=None,
                   help="how combine sums the weighted rows (the same for every way; "
                        "default capped, compiled where PyTorch has no Triton)")
    p.add_argument("--chunks", type=int, default=None,
                   help="p2pt's combine in one batch of this many parts, each chunk of tokens "
                        "summed as soon as it is back, beside the later parts (default: "
                        "with --sum capped a chunk per 512 tokens up to 8, else 1)")
    p.add_argument("--sum-ctas", type=int, default=66,
                   help="--sum capped: the grid of a chunk's sum while rows still travel")
    a = p.parse_args()
    if a.sum is None:
        a.sum = "compiled" if triton is None else "capped"
    if a.chunks is None:  # a chunk of fewer tokens costs more in waits than it hides
        a.chunks = min(8, max(1, a.tokens // 512)) if a.sum == "capped" else 1
    elif not 1 <= a.chunks <= pd.AlltoallV.MAX_CHUNKS:
        p.error(f"--chunks {a.chunks}: expected 1 to {pd.AlltoallV.MAX_CHUNKS} "
                f"(p2pt.distributed.AlltoallV.combine's parts)")
    return a


class Step:
    """One rank's routing: the tokens, which ranks each goes to, the
    weights of its experts there."""

    def __init__(self, a, rank, G, device, seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        T, H = a.tokens, a.hidden
        self.x = torch.randn(T, H, generator=gen, device=device).to(torch.bfloat16)
        scores = torch.randn(T, a.experts, generator=gen, device=device)
        top, idx = scores.topk(a.topk, dim=1)
        w = torch.softmax(top, dim=1)
        owner = idx // (a.experts // G)
        self.dest = torch.zeros(T, G, dtype=torch.bool, device=device)
        self.dest.scatter_(1, owner, True)
        self.w = torch.zeros(T, G, device=device).scatter_add_(1, owner, w)

    def load(self, other):
        for name in ("x", "dest", "w"):
            getattr(self, name).copy_(getattr(other, name))


def by_destination(dest):
    """The token of each row sent: rows by destination, each in token
    order (the layout of p2pt's receive buffers)."""
    return torch.cat([dest[:, d].nonzero().flatten() for d in range(dest.shape[1])])


try:  # --sum capped's kernel; Triton comes with PyTorch's CUDA builds
    import triton
    import triton.language as tl
except ImportError:
    triton = None
else:
    @triton.jit
    def _sum_capped(rows, w, out, T, N, G: tl.constexpr, H: tl.constexpr,
                    BLOCK: tl.constexpr):
        """_sum_fp32's formula, token by token: CTA p sums tokens p,
        p + N, ... (N CTAs, whatever the tokens), a slot of weight 0 not
        read; each token's sum the same whatever N. A block of BLOCK
        values of each of the G rows is loaded before any is summed: on a
        capped grid the bytes in flight set the speed."""
        pid = tl.program_id(0)
        for t in range(pid, T, N):
            for h0 in range(0, H, BLOCK):
                offs = h0 + tl.arange(0, BLOCK)
                m = offs < H
                acc = tl.zeros([BLOCK], dtype=tl.float32)
                for g in tl.static_range(G):
                    wg = tl.load(w + t * G + g)
                    r = tl.load(rows + (t * G + g) * H + offs, mask=m & (wg > 0), other=0.0)
                    acc += r.to(tl.float32) * wg
                tl.store(out + t * H + offs, acc.to(tl.bfloat16), mask=m)


def _sum_bmm(rows, w):
    """Slots not sent masked to zero, then a [1, G] x [G, H] product per
    token (bmm, fp32 accumulation)."""
    rows = torch.where(w[:, :, None] > 0, rows, torch.zeros((), dtype=rows.dtype,
                                                            device=rows.device))
    return torch.bmm(w.to(torch.bfloat16)[:, None, :], rows).squeeze(1)


def _sum_fp32(rows, w):
    """Each sent slot times its weight in fp32, summed over the ranks, one
    rounding to bf16; compiled, one kernel that reads every row once."""
    prod = torch.where(w[:, :, None] > 0, rows.float() * w[:, :, None], 0.0)
    return prod.sum(1).to(torch.bfloat16)


def _sum_bmm_into(rows, w, out):
    """_sum_bmm into `out`."""
    out.copy_(_sum_bmm(rows, w))


def _sum_fp32_into(rows, w, out):
    """_sum_fp32 stored straight into `out` (compiled, the same one kernel:
    no second pass to copy the result)."""
    out.copy_(_sum_fp32(rows, w))


_summers = {("bmm", False): _sum_bmm, ("bmm", True): _sum_bmm_into}


def _pull_fp32(ys, idx, w):
    """_sum_fp32's formula over the rows where they lie: token t's row
    from rank r is ys[r][idx[t, r]] (rank r's y, mapped here)."""
    acc = None
    for r, y in enumerate(ys):
        wr = w[:, r, None]
        term = torch.where(wr > 0, y[idx[:, r]].float() * wr, 0.0)
        acc = term if acc is None else acc + term
    return acc.to(torch.bfloat16)


def _compiled_or(fn, fallback, what, *args):
    """torch.compile of fn, and its result on args; where PyTorch cannot
    compile it (no Triton or no compiler here), says why (`what`: the way
    and what it does instead) and returns fallback and its result."""
    try:
        c = torch.compile(fn, dynamic=False, fullgraph=True)
        return c, c(*args)
    except Exception as e:
        way, instead = what
        print(f"# {way}: {type(e).__name__}: {e}".splitlines()[0] + f"; {instead}", flush=True)
        return fallback, fallback(*args)


def capped_shape(H):
    """_sum_capped's BLOCK and warps: a row's values up to 8,192 (a whole
    14 KiB row: 56 KiB of a token's 4 rows in flight a CTA), 16 a thread
    (16 warps at 8,192; measured against 8: bench/results/peer.md 5n)."""
    block = min(triton.next_power_of_2(H), 8192)
    return block, min(16, max(1, block // 512))


def weighted_sum(back, w, T, H, how, out=None, ctas=None):
    """The combine's sum: every returned row times the token's weight on
    the rank it came from (slots not sent have weight 0 and are masked:
    their bytes are whatever was there), the same code for every way.
    `how`: "compiled" (torch.compile of _sum_fp32; "bmm" where it cannot
    compile), "bmm", or "capped" (_sum_capped on `ctas` CTAs, None: one a
    token). Into `out` ([T, H] bf16) where given, else a new tensor."""
    rows = back.view(T, -1, H * 2).view(torch.bfloat16)
    if how == "capped":
        if triton is None:
            sys.exit("ep_dispatch.py: --sum capped needs Triton (PyTorch's CUDA builds have it)")
        res = torch.empty(T, H, dtype=torch.bfloat16, device=back.device) if out is None \
            else out
        n = T if ctas is None else max(1, min(ctas, T))
        block, warps = capped_shape(H)
        _sum_capped[(n,)](rows, w.contiguous(), res, T, n, G=rows.shape[1], H=H, BLOCK=block,
                          num_warps=warps)
        return res
    key = (how, out is not None)
    args = (rows, w) if out is None else (rows, w, out.view(T, H))
    if key not in _summers:
        fn, fallback = (_sum_fp32, _sum_bmm) if out is None else (_sum_fp32_into, _sum_bmm_into)
        _summers[key], res = _compiled_or(fn, fallback, ("--sum compiled", "summing with bmm"),
                                          *args)
    else:
        res = _summers[key](*args)
    return out if out is not None else res.view(T, H)


class P2pt:
    name = "p2pt"

    def __init__(self, a, G, rank, device):
        if G > 1 and a.chunks > a.tokens * (G - 1):  # a part is at least one piece
            sys.exit(f"ep_dispatch.py: --chunks {a.chunks}: at most {a.tokens * (G - 1)}, "
                     f"the pieces to the peers ({a.tokens} tokens x {G - 1} peers)")
        self.a2a = pd.AlltoallV(a.tokens, a.hidden * 2)
        self.T, self.H, self.how = a.tokens, a.hidden, a.sum
        self.chunks = a.chunks
        self.sum_ctas = a.sum_ctas
        self.out = torch.empty(a.tokens, a.hidden, dtype=torch.bfloat16, device=device)

    def dispatch(self, s):
        return self.a2a.dispatch(s.x.view(torch.uint8), s.dest)

    def expert(self, recv):
        self.a2a.y.copy_(recv)  # the identity expert: what arrived goes back

    def combine(self, s):
        back = self.a2a.back[:self.T]

        def then(lo, hi):  # tokens [lo, hi) are back: their sum, beside the later parts
            ctas = self.sum_ctas if hi < self.T else None  # a capped grid while rows travel
            weighted_sum(back[lo:hi], s.w[lo:hi], hi - lo, self.H, self.how, out=self.out[lo:hi],
                         ctas=ctas)

        self.a2a.combine(s.dest, chunks=self.chunks, then=then)
        return self.out


class P2ptPull:
    """p2pt's combine as one pass: every rank's y is shared (AlltoallV's
    peer_y); after ready() (each rank's y is written), each rank reads
    its tokens' rows where places() says and sums them in one compiled
    kernel."""
    name = "p2pt_pull"

    def __init__(self, p):
        self.a2a = p.a2a
        self.ys = [y.view(torch.bfloat16).view(-1, p.H) for y in p.a2a.peer_y]
        self.sum = None

    def combine(self, s):
        self.a2a.ready()
        at = self.a2a.places(s.dest)
        if self.sum is None:
            self.sum, out = _compiled_or(_pull_fp32, _pull_fp32, ("p2pt_pull", "summing eagerly"),
                                         self.ys, at, s.w)
            return out
        return self.sum(self.ys, at, s.w)


class Nccl:
    """As a framework writes it: counts to the host, a gather, NCCL."""
    name = "nccl"

    def __init__(self, a, G, rank, device):
        self.G, self.T, self.H, self.device, self.how = G, a.tokens, a.hidden, device, a.sum
        self.recv = torch.empty(G * a.tokens, a.hidden * 2, dtype=torch.uint8, device=device)

    def plan(self, s):
        counts = s.dest.sum(0)
        got = torch.empty_like(counts)
        dist.all_to_all_single(got, counts)
        self.send_split = counts.tolist()
        self.recv_split = got.tolist()
        self.order = by_destination(s.dest)

    def dispatch(self, s):
        self.plan(s)
        send = s.x.view(torch.uint8)[self.order]
        n = sum(self.recv_split)
        dist.all_to_all_single(self.recv[:n], send, self.recv_split, self.send_split)
        return self.recv, torch.tensor(self.recv_split, device=self.device)

    def expert(self, recv):
        self.y = recv[:sum(self.recv_split)]

    def combine(self, s):
        back = torch.empty(sum(self.send_split), self.H * 2, dtype=torch.uint8,
                           device=self.device)
        dist.all_to_all_single(back, self.y, self.send_split, self.recv_split)
        slots = torch.zeros(self.T, self.G, self.H * 2, dtype=torch.uint8, device=self.device)
        dest_of = torch.repeat_interleave(torch.arange(self.G, device=self.device),
                                          torch.tensor(self.send_split, device=self.device))
        slots[self.order, dest_of] = back
        return weighted_sum(slots, s.w, self.T, self.H, self.how)


class NcclPacked(Nccl):
    """NCCL's best case: packed rows and known sizes; only the exchange."""
    name = "nccl_packed"

    def prepare(self, s):
        self.plan(s)
        self.send = s.x.view(torch.uint8)[self.order].contiguous()
        self.n = sum(self.recv_split)
        self.back = torch.empty(sum(self.send_split), self.H * 2, dtype=torch.uint8,
                                device=self.device)

    def dispatch(self, s):
        dist.all_to_all_single(self.recv[:self.n], self.send, self.recv_split, self.send_split)
        return self.recv, None

    def combine(self, s):
        dist.all_to_all_single(self.back, self.recv[:self.n], self.send_split, self.recv_split)
        return self.back


class TorchSymm:
    """torch.distributed._symmetric_memory's all_to_all_vdev: rows packed
    by destination, counts in GPU memory."""
    name = "torch_symm"

    def __init__(self, a, G, rank, device):
        from torch.distributed import _symmetric_memory as symm
        if hasattr(symm, "set_backend"):  # all_to_all_vdev is NVSHMEM's ("NYI" on CUDA's)
            symm.set_backend("NVSHMEM")
        group = dist.group.WORLD.group_name
        symm.enable_symm_mem_for_group(group)
        self.group = group
        rows = G * a.tokens
        self.inp = symm.empty(rows, a.hidden, dtype=torch.bfloat16, device=device)
        self.out = symm.empty(rows, a.hidden, dtype=torch.bfloat16, device=device)
        # PyTorch 2.8 took one (3, G) splits tensor; later releases take the
        # input splits (G,) and the output splits and offsets (2, G) apart.
        op = torch.ops.symm_mem.all_to_all_vdev
        self.split_apart = "out_splits_offsets" in [x.name for x in op.default._schema.arguments]
        self.splits = symm.empty(3, G, dtype=torch.int64, device=device)
        self.in_splits = symm.empty(G, dtype=torch.int64, device=device)
        self.out_splits = symm.empty(2, G, dtype=torch.int64, device=device)
        for t in (self.inp, self.out, self.splits, self.in_splits, self.out_splits):
            symm.rendezvous(t, group)

    def dispatch(self, s):
        order = by_destination(s.dest)
        self.inp[:order.numel()] = s.x[order]
        op = torch.ops.symm_mem.all_to_all_vdev
        if self.split_apart:
            self.in_splits.copy_(s.dest.sum(0))
            op(self.inp, self.out, self.in_splits, self.out_splits, self.group)
            return self.out, self.out_splits[0]
        self.splits[0] = s.dest.sum(0)
        op(self.inp, self.out, self.splits, self.group)
        return self.out, self.splits[1]


def spin_cycles(us, device, _per_us={}):
    """Clock cycles of torch.cuda._sleep that take about `us` on `device`
    (measured once)."""
    if device not in _per_us:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        e0.record()
        torch.cuda._sleep(1_000_000)
        e1.record()
        e1.synchronize()
        _per_us[device] = 1_000_000 / (e0.elapsed_time(e1) * 1000)
    return int(_per_us[device] * us)


def common_start(device, how="gpu"):
    """Every rank idle, then leaving a host barrier; with how="gpu" also
    every GPU's current stream leaving a one-value all_reduce (within a
    few microseconds of the others), spinning ~200 us while the host
    queues what comes next, and leaving a second all_reduce, so that what
    is enqueued next starts together on every GPU, its launches queued.
    Without the second, one rank's step could start tens of microseconds
    after the other's: spins of the same count of cycles need not end
    together (bench/results/peer.md 5zb)."""
    torch.cuda.synchronize(device)
    dist.barrier()
    if how == "gpu":
        one = torch.ones(1, device=device)
        dist.all_reduce(one)  # the current stream waits for it
        torch.cuda._sleep(spin_cycles(200, device))
        dist.all_reduce(one)


def timed(fn, a, device):
    """Median of a.iters steps in microseconds, each from a common start
    (common_start, --step-start)."""
    t = []
    for i in range(a.warmup + a.iters):
        common_start(device, a.step_start)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        if i >= a.warmup:
            t.append(e0.elapsed_time(e1) * 1000)
    return statistics.median(t)


def start():
    """This process's rank, the world size and its GPU (torchrun's
    LOCAL_RANK), made current; NCCL as torch.distributed's backend."""
    dist.init_process_group("nccl")
    rank, G = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    return rank, G, device


def largest(v, device):
    x = torch.tensor([v], device=device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.item()


def mean(v, device):
    x = torch.tensor([float(v)], device=device)
    dist.all_reduce(x)
    return x.item() / dist.get_world_size()


def reference(nccl, s):
    """nccl's dispatch, identity expert and combine of step s: the rows
    that arrived, the rows from each source, the combined rows."""
    recv, counts = nccl.dispatch(s)
    recv = recv[:int(counts.sum())].clone()
    nccl.expert(recv)
    return recv, counts, nccl.combine(s)


def check(a, b, what, rank):
    if not torch.equal(a, b):
        bad = (a != b).nonzero()
        raise SystemExit(f"rank {rank}: {what} differs from nccl's "
                         f"({bad.shape[0]} elements, first at {bad[0].tolist()})")


def main():
    a = parse()
    rank, G, device = start()
    if a.experts % G:
        sys.exit(f"ep_dispatch.py: --experts {a.experts} must be a multiple of the {G} ranks")
    s = Step(a, rank, G, device, seed=1000 + rank)
    T, H = a.tokens, a.hidden
    ways = {"p2pt": P2pt(a, G, rank, device), "nccl": Nccl(a, G, rank, device),
            "nccl_packed": NcclPacked(a, G, rank, device)}
    try:
        ways["torch_symm"] = TorchSymm(a, G, rank, device)
    except Exception as e:  # not built with NVSHMEM, or no symmetric memory here
        if rank == 0:
            print(f"# torch_symm skipped: {type(e).__name__}: {e}".splitlines()[0], flush=True)

    # Byte-exact against nccl: what arrived, and the combined rows.
    ref_recv, ref_counts, ref_out = reference(ways["nccl"], s)
    p = ways["p2pt"]
    recv, counts = p.dispatch(s)
    check(counts, ref_counts, "p2pt's counts", rank)
    check(recv[:len(ref_recv)], ref_recv, "p2pt's dispatch", rank)
    p.expert(recv)
    check(p.combine(s), ref_out, "p2pt's combine", rank)

    if "torch_symm" in ways:
        try:
            got, got_counts = ways["torch_symm"].dispatch(s)
        except Exception as e:  # the op's signature or NVSHMEM's bootstrap
            if rank == 0:
                print(f"# torch_symm skipped: {type(e).__name__}: {e}".splitlines()[0])
            del ways["torch_symm"]
        else:
            check(got_counts, ref_counts, "torch_symm's counts", rank)
            check(got.view(torch.uint8)[:len(ref_recv)], ref_recv, "torch_symm's dispatch", rank)

    # A CUDA graph of p2pt's step, replayed with new routing each time.
    pt.prepare()
    g_step = Step(a, rank, G, device, seed=5000 + rank)
    g = torch.cuda.CUDAGraph()
    common_start(device, "barrier")
    with torch.cuda.graph(g):
        g_recv, g_counts = p.dispatch(g_step)
        p.expert(g_recv)
        g_out = p.combine(g_step)
    for r in range(a.replays):
        fresh = Step(a, rank, G, device, seed=7000 + 10 * r + rank)
        g_step.load(fresh)
        common_start(device, "barrier")
        g.replay()
        want_recv, want_counts, want_out = reference(ways["nccl"], fresh)
        check(g_counts, want_counts, f"replay {r}'s counts", rank)
        check(g_recv[:len(want_recv)], want_recv, f"replay {r}'s dispatch", rank)
        check(g_out, want_out, f"replay {r}'s combine", rank)
    if rank == 0:
        print(f"# {G} ranks, {T} tokens of {H} bf16, top-{a.topk} of {a.experts} experts: "
              f"dispatch and combine byte-exact against nccl, eager and in a graph replayed "
              f"{a.replays} times with new routing", flush=True)

    # Timing: each phase of each way. p2pt as a framework runs it, each
    # phase captured in a CUDA graph and replayed (one launch of host time),
    # and eagerly (p2pt_eager: its Python and launches on the host).
    sent = float((s.dest.sum(0) * (torch.arange(G, device=device) != rank)).sum()) * H * 2
    rows = []
    graphs = {}
    for phase in ("dispatch", "combine"):
        common_start(device, "barrier")
        graphs[phase] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[phase]):
            if phase == "dispatch":
                p.dispatch(s)
            else:
                p.combine(s)
        if phase == "dispatch":
            common_start(device, "barrier")
            graphs[phase].replay()
            p.expert(p.a2a.recv)
    common_start(device, "barrier")
    graphs["exchange"] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs["exchange"]):
        p.a2a.combine(s.dest)
    # The combine as one pass over the shared y (y and the counts hold
    # step s's): byte-exact against nccl eagerly and replayed.
    pull = P2ptPull(p)
    check(pull.combine(s), ref_out, "p2pt_pull's combine", rank)
    common_start(device, "barrier")
    graphs["pull"] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs["pull"]):
        pull_out = pull.combine(s)
    common_start(device, "barrier")
    graphs["pull"].replay()
    check(pull_out, ref_out, "p2pt_pull's combine, replayed", rank)
    for phase in ("dispatch", "combine"):
        rows.append(("p2pt", phase, timed(graphs[phase].replay, a, device)))
    rows.append(("p2pt_exchange", "combine", timed(graphs["exchange"].replay, a, device)))
    rows.append(("p2pt_pull", "combine", timed(graphs["pull"].replay, a, device)))
    ways["p2pt_eager"] = ways.pop("p2pt")
    ways["nccl_packed"].prepare(s)
    for name, w in ways.items():
        if name == "torch_symm":  # dispatch only: PyTorch has no combine of it
            rows.append((name, "dispatch", timed(lambda: w.dispatch(s), a, device)))
            continue
        us_d = timed(lambda: w.dispatch(s), a, device)
        recv, _ = w.dispatch(s)
        w.expert(recv)
        us_c = timed(lambda: w.combine(s), a, device)
        rows.append((name, "dispatch", us_d))
        rows.append((name, "combine", us_c))
    table = []
    base = {}
    sent_mean = mean(sent, device)
    for name, phase, us in rows:
        us = largest(us, device)
        if name == "nccl":
            base[phase] = us
        table.append([G, T, H * 2, a.topk, phase, name, us, sent_mean / us / 1e3])
    for r in table:
        r.append(base.get(r[4], 0) / r[6] if base.get(r[4]) else "")
    if a.overlap:
        steps = {name: (lambda w=ways[name]: (w.dispatch(s), w.combine(s)))
                 for name in ("p2pt_eager", "nccl_packed")}
        steps["p2pt_pull"] = lambda: (p.dispatch(s), pull.combine(s))
        gemm_rows = overlap(a, steps, device)
    if rank == 0:
        print(f"{'phase':>8} {'way':>13} {'us':>10} {'GB/s/rank':>10} {'vs nccl':>8}")
        for r in table:
            vs = f"{r[8]:.3f}" if r[8] != "" else "-"
            print(f"{r[4]:>8} {r[5]:>13} {r[6]:10.1f} {r[7]:10.1f} {vs:>8}")
        if a.overlap:
            for line in gemm_rows:
                print(line)
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                out = csv.writer(f)
                out.writerow(["gpus", "tokens", "hidden_bytes", "topk", "phase", "way", "us",
                              "gbps_per_rank", "vs_nccl"])
                for r in table:
                    out.writerow([r[0], r[1], r[2], r[3], r[4], r[5], f"{r[6]:.1f}",
                                  f"{r[7]:.1f}", f"{r[8]:.3f}" if r[8] != "" else ""])
    dist.barrier()
    dist.destroy_process_group()


def overlap(a, steps, device):
    """A bf16 GEMM on every rank, alone and beside each of `steps` (a
    dispatch and a combine, eagerly) on another stream: how much slower it
    runs (the largest over ranks)."""
    n = a.gemm
    A = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    B = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    side = torch.cuda.Stream(device)
    out = []

    def gemm_time(step):
        common_start(device, "barrier")
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if step is not None:
            with torch.cuda.stream(side):
                for _ in range(4):
                    step()
        e0.record()
        for _ in range(4):
            A @ B
        e1.record()
        e1.synchronize()
        torch.cuda.synchronize(device)
        return e0.elapsed_time(e1)

    for name, step in steps.items():
        alone = statistics.median(gemm_time(None) for _ in range(5))
        beside = statistics.median(gemm_time(step) for _ in range(5))
        x = largest(beside / alone, device)
        out.append(f"# gemm {n}^3 bf16 beside {name}: {x:.3f}x its time alone")
    return out


if __name__ == "__main__":
    main()
