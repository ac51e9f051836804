# SPDX-License-Identifier: Apache-2.0
"""p2pt-bench's alltoall across processes, one a GPU, to set beside the
one-process figure of `p2pt-bench --mode alltoall` on the same machine:

    torchrun --nproc-per-node G bench/experiments/a2a_ranks.py [--row-bytes 4096,14336,65536]

Every rank holds --rows rows of --row-bytes bytes (random) and sends
--frac of them, picked at random for each peer, into that peer's receive
buffer, which p2pt.distributed.share mapped here (an imported window, not
peer access in one process). The pieces are laid out in row order (a
source row's peers in turn), as p2pt-bench's default: one device batch a
rank that ends with a signal to every peer, then a wait for the G - 1
peers' signals. `p2pt`: a round timed from a barrier, the median of
--iters, the largest over ranks; `p2pt back to back`: --iters rounds
without a barrier, over --iters. `nccl_packed`: all_to_all_single of the
same rows already packed (NCCL's best case, as in ep_dispatch.py), the
same timings. Every rank checks every byte it received after the first
round. GB/s per GPU: the bytes a rank sends to its peers a round over the
round's time. Rank 0 prints the engine and grid p2pt's explain gives the
batch."""
import argparse
import os
import statistics
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its start and largest)
import p2pt.distributed as pd  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from p2pt.torch import _handles  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--frac", type=float, default=0.5)
    p.add_argument("--row-bytes", default="4096,14336,65536")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    return p.parse_args()


def rows_of(rank, R, rb, device):
    g = torch.Generator(device=device).manual_seed(1000 + rank)
    return torch.randint(0, 256, (R, rb), dtype=torch.uint8, device=device, generator=g)


def picks_of(src, dst, R, n):
    """The rows `src` sends to `dst`, in row order (every rank can work
    them out, to check what arrived)."""
    g = torch.Generator().manual_seed(src * 131 + dst)
    return torch.randperm(R, generator=g)[:n].sort().values


def pieces(rank, G, x, peer_recv, R, n, rb):
    """[N, 3] int64 on the GPU: (dst, src, bytes) of every row to every
    peer, in row order; a source's rows land in region `rank` of the
    receiver's buffer, in its row order."""
    rows, dsts = [], []
    for d in range(G):
        if d == rank:
            continue
        p = picks_of(rank, d, R, n)
        rows.append(p)
        dsts.append(peer_recv[d].data_ptr() + (rank * n + torch.arange(n)) * rb)
    t = torch.cat(rows)
    order = torch.argsort(t * G + torch.cat([torch.full((n,), d) for d in range(G) if d != rank]),
                          stable=True)
    src = x.data_ptr() + t * rb
    descs = torch.stack([torch.cat(dsts), src, torch.full_like(t, rb)], dim=1)[order]
    return descs.to(x.device)


def timed(step, iters, warmup, device):
    for _ in range(warmup):
        step()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    one = []
    for _ in range(iters):
        torch.cuda.synchronize(device)
        dist.barrier()
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        one.append(e0.elapsed_time(e1) * 1000)
    torch.cuda.synchronize(device)
    dist.barrier()
    e0.record()
    for _ in range(iters):
        step()
    e1.record()
    e1.synchronize()
    return statistics.median(one), e0.elapsed_time(e1) * 1000 / iters


def main():
    a = parse()
    rank, G, device = ep.start()
    h = _handles._get(_handles._hid(None))
    R, n = a.rows, int(a.rows * a.frac)
    sems = pd.semaphores(1)
    peer_sems = pd.share(sems)
    signals = torch.tensor([peer_sems[d][0].data_ptr() for d in range(G) if d != rank],
                           dtype=torch.int64)
    if rank == 0:
        print(f"# alltoall across {G} processes: {R} rows a rank, {n} to each peer, row order; "
              f"us a round (median from a barrier / back to back), largest over ranks")
        print(f"{'row_bytes':>9} {'way':>12} {'us':>9} {'GB/s':>8} {'us b2b':>9} {'GB/s b2b':>8}")
    for rb in (int(v) for v in a.row_bytes.split(",")):
        x = rows_of(rank, R, rb, device)
        recv = torch.zeros(G * n, rb, dtype=torch.uint8, device=device)
        peer_recv = pd.share(recv)
        descs = pieces(rank, G, x, peer_recv, R, n, rb)
        N = descs.shape[0]
        count = torch.tensor([N], dtype=torch.int32, device=device)
        ws = torch.zeros(h.workspace_bytes(N), dtype=torch.uint8, device=device)
        _handles._windows(h, device.index, [x.untyped_storage(), recv.untyped_storage(),
                                            descs.untyped_storage(), ws.untyped_storage()])

        def p2pt_round():
            torch.ops.p2pt_dist.batch_signal(descs, count, N, ws, recv, sems, signals,
                                             _handles._hid(None))
            pd.wait(sems[0], G - 1)

        pt.prepare()
        if rank == 0 and rb == int(a.row_bytes.split(",")[0]):
            torch.cuda.synchronize(device)
            c = h.explain_batch_device(descs.data_ptr(), count.data_ptr(), N, ws.data_ptr(),
                                       torch.cuda.current_stream().cuda_stream)
            print(f"# explain: {c.transport} {c.path}: {c.reason}")
        p2pt_round()
        torch.cuda.synchronize(device)
        dist.barrier()
        want = None
        for s in range(G):  # every byte from every peer, in its row order
            if s != rank:
                want = rows_of(s, R, rb, device)[picks_of(s, rank, R, n).to(device)]
                assert torch.equal(recv[s * n:(s + 1) * n], want), \
                    f"rank {rank}: rows from rank {s}, {rb}-byte rows"
        del want
        send = torch.cat([x[picks_of(rank, d, R, n).to(device)] if d != rank else x[:0]
                          for d in range(G)])
        packed = torch.empty((G - 1) * n, rb, dtype=torch.uint8, device=device)
        splits = [n if d != rank else 0 for d in range(G)]

        def nccl_round():
            dist.all_to_all_single(packed, send, splits, splits)

        bytes_sent = (G - 1) * n * rb
        for way, step in (("p2pt", p2pt_round), ("nccl_packed", nccl_round)):
            one, b2b = timed(step, a.iters, a.warmup, device)
            one, b2b = ep.largest(one, device), ep.largest(b2b, device)
            if rank == 0:
                print(f"{rb:>9} {way:>12} {one:9.1f} {bytes_sent / one / 1e3:8.1f} "
                      f"{b2b:9.1f} {bytes_sent / b2b / 1e3:8.1f}", flush=True)
        torch.cuda.synchronize(device)
        dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
