# SPDX-License-Identifier: Apache-2.0
"""KV-cache offload with p2pt.torch.swap_blocks: a synthetic cache of 32
layers of 16 KiB blocks on the GPU, 256 random blocks of every layer
offloaded to random slots of a pinned host pool and restored into other
GPU slots, every byte checked (the mapped blocks hold the source's bytes,
every other block still holds its poison fill).

Each way is timed (CUDA events; warm-up; median of --runs, the methods
taking turns within each run) twice: one call from an idle GPU, so that
its whole host enqueue counts, and a call of 4 back to back, where the
host enqueues each while the GPU moves the one before; for:
  swap_blocks, CPU mapping   one host batch of blocks x layers pieces
  swap_blocks, GPU mapping   one device batch built on the GPU (Hopper)
  per-block copy_ loop       one torch copy_ per block and layer
  index_select + copy_       a gather on the GPU into a contiguous buffer and
                             one copy_ to a contiguous pinned buffer (restore:
                             the copy_ back, then index_copy_)
  contiguous copy_           one copy_ of the same bytes, the yardstick
and the GB/s of each printed. --overlap runs each beside a loop of bf16
8192 x 8192 torch.matmul on another stream and prints how much slower the
matmul ran (its time alone measured just before each case) and the
transfer's GB/s beside it, both loops starting together and the
transfers lasting the whole matmul loop. Then each swap_blocks row as a
fraction of the contiguous copy_, and the host time of one swap_blocks
call against the C library's enqueue of the same pieces. --sm-budget N
passes P2P_TRANSPORT_SM_BUDGET=N to swap_blocks.

    python3 examples/kv_offload.py
    python3 examples/kv_offload.py --overlap
Needs PyTorch with CUDA and p2pt (pip install ., or P2PT_LIBRARY). Exit
status: 0 when every byte matched (or there is no GPU, said in one line),
1 when one did not, 2 when it cannot run.
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
except ImportError:
    print("kv_offload: PyTorch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(2)
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402

BLOCK = (16, 8, 64)  # tokens, heads, head dim: 16 KiB of bf16
POISON = 0xA5


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--gpu-blocks", type=int, default=1024)
    ap.add_argument("--host-blocks", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=256, help="blocks moved each way")
    ap.add_argument("--runs", type=int, default=7, help="timed runs (median)")
    ap.add_argument("--overlap", action="store_true", help="also beside a matmul loop")
    ap.add_argument("--matmuls", type=int, default=40, help="matmuls per --overlap window")
    ap.add_argument("--sm-budget", type=int, default=None)
    return ap.parse_args()


def as_blocks(t):
    """[layers, blocks, ...] as [layers, blocks, block bytes] uint8."""
    return t.view(torch.uint8).reshape(t.shape[0], t.shape[1], -1)


class Cache:
    def __init__(self, a):
        L, n = a.layers, a.blocks
        self.a = a
        self.gpu = torch.empty(L, a.gpu_blocks, *BLOCK, dtype=torch.bfloat16, device="cuda")
        self.gpu.copy_(torch.randn(L, a.gpu_blocks, *BLOCK, device="cuda"))
        self.back = torch.empty_like(self.gpu)  # where restores land
        self.pool = torch.empty(L, a.host_blocks, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
        # vLLM holds one tensor per layer: so does the swap.
        self.gl, self.bl, self.pl = (list(t.unbind(0)) for t in (self.gpu, self.back, self.pool))
        g = torch.Generator().manual_seed(0)
        self.s = torch.randperm(a.gpu_blocks, generator=g)[:n]   # GPU blocks offloaded
        self.d = torch.randperm(a.host_blocks, generator=g)[:n]  # their pool slots
        self.r = torch.randperm(a.gpu_blocks, generator=g)[:n]   # where they come back
        self.out_map = torch.stack([self.s, self.d], 1)
        self.in_map = torch.stack([self.d, self.r], 1)
        self.out_map_gpu, self.in_map_gpu = self.out_map.cuda(), self.in_map.cuda()
        self.s_gpu, self.r_gpu = self.s.cuda(), self.r.cuda()
        self.pairs_out = list(zip(self.s.tolist(), self.d.tolist()))
        self.pairs_in = list(zip(self.d.tolist(), self.r.tolist()))
        self.stage_gpu = torch.empty(L, n, *BLOCK, dtype=torch.bfloat16, device="cuda")
        self.stage_host = torch.empty(L, n, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
        self.bytes = L * n * self.gpu[0, 0].nbytes

    # -- the methods: (offload, restore)

    def swap(self, gpu_map):
        out = self.out_map_gpu if gpu_map else self.out_map
        back = self.in_map_gpu if gpu_map else self.in_map
        b = self.a.sm_budget
        return (lambda: pt.swap_blocks(self.gl, self.pl, out, sm_budget=b),
                lambda: pt.swap_blocks(self.pl, self.bl, back, sm_budget=b))

    def loop(self):
        def off():
            for g, p in zip(self.gl, self.pl):
                for s, d in self.pairs_out:
                    p[d].copy_(g[s], non_blocking=True)

        def res():
            for p, b in zip(self.pl, self.bl):
                for d, r in self.pairs_in:
                    b[r].copy_(p[d], non_blocking=True)
        return off, res

    def gather(self):
        def off():
            torch.index_select(self.gpu, 1, self.s_gpu, out=self.stage_gpu)
            self.stage_host.copy_(self.stage_gpu, non_blocking=True)

        def res():
            self.stage_gpu.copy_(self.stage_host, non_blocking=True)
            self.back.index_copy_(1, self.r_gpu, self.stage_gpu)
        return off, res

    def contiguous(self):
        return (lambda: self.stage_host.copy_(self.stage_gpu, non_blocking=True),
                lambda: self.stage_gpu.copy_(self.stage_host, non_blocking=True))

    # -- the checks

    def poison(self):
        torch.cuda.synchronize()
        self.pool.view(torch.uint8).fill_(POISON)
        self.back.view(torch.uint8).fill_(POISON)
        self.stage_host.view(torch.uint8).fill_(POISON)
        torch.cuda.synchronize()

    def moved_blocks(self):
        return as_blocks(self.gpu[:, self.s_gpu].cpu())

    def wrong_in_pool(self):
        """Layers x blocks whose pool bytes are not what the offload put there."""
        got, want = as_blocks(self.pool), self.moved_blocks()
        rest = torch.ones(self.pool.shape[1], dtype=torch.bool)
        rest[self.d] = False
        return int((got[:, self.d] != want).any(-1).sum()) + \
            int((got[:, rest] != POISON).any(-1).sum())

    def wrong_in_back(self):
        """The same for the GPU slots the restore wrote, and every other one."""
        got = as_blocks(self.back)
        rest = torch.ones(self.back.shape[1], dtype=torch.bool, device="cuda")
        rest[self.r_gpu] = False
        want = as_blocks(self.gpu[:, self.s_gpu])
        return int((got[:, self.r_gpu] != want).any(-1).sum()) + \
            int((got[:, rest] != POISON).any(-1).sum())

    def wrong_in_stage(self):
        return int((as_blocks(self.stage_host) != self.moved_blocks()).any(-1).sum())


def once(fn, stream, calls=1):
    """Milliseconds a call of fn on `stream`, from an idle GPU (CUDA events),
    over `calls` calls back to back. One call: the host's enqueue counts
    whole, as a caller waiting on a lone swap sees it. Several: each call's
    enqueue but the first runs while the GPU moves the one before, as in a
    server step (p2pt-bench times its modes so)."""
    with torch.cuda.stream(stream):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(calls):
            fn()
        e1.record()
        e1.synchronize()
    return e0.elapsed_time(e1) / calls


BACK_TO_BACK = 4


def timed(methods, runs, stream):
    """Median milliseconds a call of each method's two ways, after a
    warm-up: {label: ((offload, restore) alone, (offload, restore) back to
    back)}. The methods take turns within each run: the host link's speed
    moves between readings (a restore's reads wait on the host's memory),
    so each method's median is taken over the same stretch of time as the
    yardstick's."""
    fns = [fn for _, ways, _ in methods for fn in ways]
    with torch.cuda.stream(stream):
        for _ in range(2):
            for fn in fns:
                fn()
    torch.cuda.synchronize()
    alone, queued = [[] for _ in fns], [[] for _ in fns]
    for _ in range(runs):
        for fn, t, q in zip(fns, alone, queued):
            t.append(once(fn, stream))
            q.append(once(fn, stream, BACK_TO_BACK))
    a = [statistics.median(t) for t in alone]
    q = [statistics.median(t) for t in queued]
    return {label: ((a[2 * i], a[2 * i + 1]), (q[2 * i], q[2 * i + 1]))
            for i, (label, _, _) in enumerate(methods)}


class Matmul:
    """A loop of bf16 8192^2 matmuls on a stream of its own."""

    def __init__(self, count):
        self.a = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
        self.b = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
        self.c = torch.empty_like(self.a)
        self.count = count
        self.stream = torch.cuda.Stream()
        # cuBLAS picks and loads its kernel at the first call: a time alone
        # that includes it is several times the steady one.
        with torch.cuda.stream(self.stream):
            for _ in range(3):
                torch.matmul(self.a, self.b, out=self.c)
        torch.cuda.synchronize()

    def enqueue(self, after=None):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            if after is not None:
                self.stream.wait_event(after)
            e0.record()
            for _ in range(self.count):
                torch.matmul(self.a, self.b, out=self.c)
            e1.record()
        return e0, e1

    def alone(self):
        """Milliseconds per matmul with nothing else on the GPU."""
        torch.cuda.synchronize()
        e0, e1 = self.enqueue()
        e1.synchronize()
        return e0.elapsed_time(e1) / self.count

    def beside(self, fn, fn_ms, stream):
        """(ms per matmul alone, ms per matmul beside fn, transfer ms) with fn
        repeated on `stream` over the whole matmul loop: both loops wait
        for one event behind a sleep kernel, so that both are queued before
        either starts and they start together, and fn repeats until past
        the loop's end even at its speed alone."""
        alone = self.alone()  # just before, with nothing queued
        reps = math.ceil(self.count * alone / fn_ms) + 1
        torch.cuda.synchronize()
        gate = torch.cuda.current_stream()
        torch.cuda._sleep(50_000_000)  # ~25 ms: time to queue both loops
        go = torch.cuda.Event()
        go.record(gate)
        m0, m1 = self.enqueue(after=go)
        with torch.cuda.stream(stream):
            stream.wait_event(go)
            c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            c0.record()
            for _ in range(reps):
                fn()
            c1.record()
        torch.cuda.synchronize()
        return alone, m0.elapsed_time(m1) / self.count, c0.elapsed_time(c1) / reps


def host_overhead(c, runs=61, burst=8):
    """Host microseconds per call, median: the C library's enqueue of the
    offload (p2pt_copy_blocks_async with the same layers and mapping: what
    swap_blocks calls) and a whole swap_blocks with the CPU mapping. Twice:
    each call right after a synchronize (the GPU idle, as at the start of a
    server step), and back to back, in bursts of `burst` calls while the GPU
    runs the earlier ones (as beside a model's work)."""
    h = pt.handle()
    n, layers = c.out_map.shape[0], len(c.gl)
    bb = c.gl[0].stride(0) * c.gl[0].element_size()
    recs = (p2pt.BlockLayer * layers)(*[
        p2pt.BlockLayer(ctypes.sizeof(p2pt.BlockLayer), d.data_ptr(), s.data_ptr(), bb,
                        d.shape[0], s.shape[0]) for s, d in zip(c.gl, c.pl)])
    ids = c.out_map.contiguous()
    stream = torch.cuda.current_stream().cuda_stream
    b = c.a.sm_budget
    calls = (lambda: h.copy_blocks_at(ctypes.addressof(recs), layers, ids.data_ptr(), n, stream),
             lambda: pt.swap_blocks(c.gl, c.pl, c.out_map, sm_budget=b))
    synced, busy = ([], []), ([], [])
    for _ in range(runs):
        for fn, t in zip(calls, synced):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            t.append((time.perf_counter() - t0) * 1e6)
    for _ in range(runs // burst):
        for fn, t in zip(calls, busy):
            torch.cuda.synchronize()
            fn()  # the GPU is busy from here on
            for _ in range(burst):
                t0 = time.perf_counter()
                fn()
                t.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return n * layers, [tuple(statistics.median(x) for x in t) for t in (synced, busy)]


def main():
    a = parse()
    if not torch.cuda.is_available():
        print("kv_offload: no CUDA device, nothing to measure")
        return 0
    torch.cuda.set_device(0)
    name = torch.cuda.get_device_name(0)
    c = Cache(a)
    stream = torch.cuda.Stream()
    hopper = torch.cuda.get_device_capability(0) >= (9, 0)
    methods = [("swap_blocks, CPU mapping", c.swap(False), "pool")]
    if hopper and a.sm_budget != 0:
        methods.append(("swap_blocks, GPU mapping", c.swap(True), "pool"))
    elif hopper:
        print("kv_offload: no GPU mapping under sm_budget=0: its pieces are read on the GPU, "
              "which only a kernel can do (p2pt refuses it with status 6)")
    methods += [("per-block copy_ loop", c.loop(), "pool"),
                ("index_select + copy_", c.gather(), "stage"),
                ("contiguous copy_", c.contiguous(), "copy")]
    mm = Matmul(a.matmuls) if a.overlap else None
    print(f"kv_offload: {name}; {a.layers} layers x {a.gpu_blocks} GPU blocks of 16 KiB, a "
          f"pinned pool of {a.host_blocks}; {a.blocks} blocks x {a.layers} layers "
          f"({c.bytes / 2**20:.1f} MiB) each way; median of {a.runs} runs, methods in turn"
          f"{'' if a.sm_budget is None else f'; swap_blocks sm_budget={a.sm_budget}'}")
    print(f"kv_offload: GB/s of one call from an idle GPU, then a call of {BACK_TO_BACK} back "
          f"to back")
    head = f"kv_offload: {'method':<26} {'offload GB/s':>15} {'restore GB/s':>15}"
    if mm:
        head += f"  {'beside matmul: offload GB/s, matmul slower':>44}  {'restore':>18}"
    print(head)
    bad = 0
    for label, (off, res), lands in methods:
        # One checked run of each way, from poisoned destinations.
        c.poison()
        with torch.cuda.stream(stream):
            off()
        stream.synchronize()
        if lands == "pool":
            wrong = c.wrong_in_pool()
        elif lands == "stage":
            wrong = c.wrong_in_stage()
        else:  # the contiguous yardstick: the pinned buffer is the GPU one's copy
            wrong = int(not torch.equal(c.stage_host.view(torch.uint8),
                                        c.stage_gpu.cpu().view(torch.uint8)))
        if lands != "copy":
            with torch.cuda.stream(stream):
                res()
            stream.synchronize()
            wrong += c.wrong_in_back()
        if wrong:
            print(f"kv_offload: {label}: {wrong} blocks hold wrong bytes", file=sys.stderr)
            bad += 1
    ms = timed(methods, a.runs, stream)
    rates, queued = {}, {}
    for label, (off, res), lands in methods:
        (t_off, t_res), (q_off, q_res) = ms[label]
        rates[label] = (c.bytes / t_off / 1e6, c.bytes / t_res / 1e6)
        queued[label] = (c.bytes / q_off / 1e6, c.bytes / q_res / 1e6)
        line = (f"kv_offload: {label:<26} {rates[label][0]:7.1f} {queued[label][0]:7.1f} "
                f"{rates[label][1]:7.1f} {queued[label][1]:7.1f}")
        if mm:
            cells = []
            for fn, t in ((off, t_off), (res, t_res)):
                alone, with_copy, t_copy = mm.beside(fn, t, stream)
                cells.append(f"{c.bytes / t_copy / 1e6:7.1f} GB/s, "
                             f"{(with_copy / alone - 1) * 100:+6.1f}% "
                             f"({alone:.2f} ms alone)")
            line += "  " + "  ".join(cells)
        print(line)
    ref, qref = rates["contiguous copy_"], queued["contiguous copy_"]
    for label, (r_off, r_res) in rates.items():
        if label.startswith("swap_blocks"):
            q_off, q_res = queued[label]
            print(f"kv_offload: {label} / contiguous copy_: offload {r_off / ref[0]:.2f} "
                  f"(back to back {q_off / qref[0]:.2f}), restore {r_res / ref[1]:.2f} "
                  f"(back to back {q_res / qref[1]:.2f})")
    pieces, states = host_overhead(c)
    for state, (c_us, swap_us) in zip(("after a synchronize", "back to back"), states):
        print(f"kv_offload: host time a call, CPU mapping, {pieces} pieces (median), {state}: "
              f"the C enqueue (p2pt_copy_blocks_async) {c_us:.0f} us, swap_blocks "
              f"{swap_us:.0f} us: {swap_us - c_us:.0f} us of Python")
    print(f"kv_offload: {'every byte checked: right' if not bad else f'{bad} methods WRONG'}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
