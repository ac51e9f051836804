# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed.AlltoallV between processes that share one GPU:

    python3 bench/experiments/ranks_one_gpu.py [--ranks 2] [--tokens 512]
        [--compile aot_eager,inductor]

Where one GPU is all a machine has, this still takes the step across
processes: each rank imports the others' buffers (CUDA IPC on one device),
so the count exchange's puts and signals, the rows' batches, their
signals and the combine cross processes as they do between GPUs, without
NVLink. torch.distributed over gloo is the bootstrap (NCCL refuses two
ranks on one GPU). Each rank checks byte for byte, against every rank's
rows and routing gathered on the host, the rows it received and the
counts, eagerly over rounds whose routing changes and in a CUDA graph
replayed with new routing, that the combine brings every row back, and
(eagerly) that each row lies in its rank's y where places() says; with
--compile, two rounds more of the whole step (dispatch, y, combine) under
torch.compile with each backend named. Prints one line a rank and exits
1 if any check failed. Times nothing."""
import argparse
import os
import sys
import tempfile

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROW = 14336


def routing(T, world, seed, dev):
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randint(0, 256, (T, ROW), dtype=torch.uint8, device=dev, generator=g)
    dest = torch.rand(T, world, device=dev, generator=g) < 0.6
    return x, dest


def expected(x, dest, rank, world):
    """Every source's rows for `rank`, sources in rank order, each in
    token order; and the rows from each source (gathered on the host)."""
    every = [None] * world
    dist.all_gather_object(every, (x.cpu(), dest.cpu()))
    rows = [xs[ds[:, rank]] for xs, ds in every]
    return torch.cat(rows).to(x.device), torch.tensor([r.shape[0] for r in rows],
                                                      device=x.device)


def came_back(back, x, dest, key):
    T, world = dest.shape
    mask = dest[:, :, None].expand(T, world, ROW)
    want = torch.bitwise_xor(x, key)[:, None, :].expand(T, world, ROW)
    return torch.equal(back[mask], want[mask])


def step(a2a, x, dest, key):
    """One step: the dispatch, y written from the rows received, the
    combine."""
    recv, counts = a2a.dispatch(x, dest)
    torch.bitwise_xor(recv, key, out=a2a.y)
    return recv, counts, a2a.combine(dest)


def compiled_rounds(a2a, backends, T, rank, world, dev, bad):
    """Two rounds of the step under torch.compile with each backend, new
    routing each, checked as the eager rounds are."""
    for backend in backends:
        torch._dynamo.reset()
        run = torch.compile(lambda x, dest, key: step(a2a, x, dest, key), backend=backend)
        for r in range(2):
            x, dest = routing(T, world, 400 + 10 * r + rank, dev)
            key = torch.full((), 21 + r, dtype=torch.uint8, device=dev)
            recv, counts, back = run(x, dest, key)
            want, want_counts = expected(x, dest, rank, world)
            if not torch.equal(counts, want_counts) or \
                    not torch.equal(recv[:want.shape[0]], want):
                bad.append(f"{backend} round {r}: rows or counts")
            if not came_back(back, x, dest, 21 + r):
                bad.append(f"{backend} round {r}: combine")
            torch.cuda.synchronize()
            dist.barrier()


def worker(rank, world, T, path, out, backends=()):
    import p2pt.distributed as pd
    import p2pt.torch as pt
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    a2a = pd.AlltoallV(T, ROW)
    bad = []
    for r in range(4):
        x, dest = routing(T, world, 100 + 10 * r + rank, dev)
        recv, counts = a2a.dispatch(x, dest)
        want, want_counts = expected(x, dest, rank, world)
        if not torch.equal(counts, want_counts) or not torch.equal(recv[:want.shape[0]], want):
            bad.append(f"eager round {r}: rows or counts")
        torch.bitwise_xor(recv, r, out=a2a.y)
        if not came_back(a2a.combine(dest), x, dest, r):
            bad.append(f"eager round {r}: combine")
        a2a.ready()  # or read instead: each row where places() says, in its rank's y
        at = a2a.places(dest)
        for d in range(world):
            sent = dest[:, d]
            if not torch.equal(a2a.peer_y[d][at[sent, d]], torch.bitwise_xor(x[sent], r)):
                bad.append(f"eager round {r}: places() in rank {d}'s y")
        torch.cuda.synchronize()
        dist.barrier()
    compiled_rounds(a2a, backends, T, rank, world, dev, bad)
    pt.prepare()
    gx, gdest = routing(T, world, 200 + rank, dev)
    key = torch.zeros((), dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    dist.barrier()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        g_recv, g_counts = a2a.dispatch(gx, gdest)
        torch.bitwise_xor(g_recv, key, out=a2a.y)
        g_back = a2a.combine(gdest)
    for r in range(3):
        nx, nd = routing(T, world, 300 + 7 * r + rank, dev)
        gx.copy_(nx)
        gdest.copy_(nd)
        key.fill_(11 + r)
        torch.cuda.synchronize()
        dist.barrier()
        g.replay()
        want, want_counts = expected(nx, nd, rank, world)
        if not torch.equal(g_counts, want_counts) or not torch.equal(g_recv[:want.shape[0]], want):
            bad.append(f"replay {r}: rows or counts")
        if not came_back(g_back, nx, nd, 11 + r):
            bad.append(f"replay {r}: combine")
        torch.cuda.synchronize()
        dist.barrier()
    compiled = f", 2 rounds with each of {', '.join(backends)}" if backends else ""
    print(f"rank {rank} of {world} on one GPU, {T} tokens: 4 eager rounds{compiled} and 3 "
          f"replays {'byte-exact' if not bad else 'WRONG: ' + '; '.join(bad)}; "
          f"{a2a.h.properties()['count_exchanges']} count exchanges", flush=True)
    out[rank] = len(bad)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--compile", default="",
                   help="torch.compile backends for two rounds more each (aot_eager,inductor)")
    a = p.parse_args()
    backends = tuple(b for b in a.compile.split(",") if b)
    if not torch.cuda.is_available():
        sys.exit("ranks_one_gpu.py: no CUDA device")
    out = mp.Manager().dict()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(a.ranks, a.tokens, os.path.join(d, "rendezvous"), out, backends),
                 nprocs=a.ranks, join=True)
    return 1 if any(out.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
