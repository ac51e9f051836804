# SPDX-License-Identifier: Apache-2.0
"""The host's time of p2pt's eager EP step, one process per GPU:

    torchrun --nproc-per-node G bench/experiments/ep_host.py [--tokens 4096]

An eager step (no graph) is only as fast as the host enqueues it: the
GPU waits between the count exchange and the rows for every call that
builds and launches the row batch. This prints, per rank (rank 0 and the
largest), the host microseconds of one call, the GPU drained every 50
calls outside the timing, for:

- a signal and a wait on this rank's own semaphore, three ways: the
  handle's ctypes calls, the torch.library operations, p2pt.distributed's
  signal and wait;
- a device batch of 3 small pieces that signals this rank's semaphore:
  the handle's call, the same batch every call and 3 batches in turn
  (other descriptors, count and workspace), and through the torch.library
  operation AlltoallV uses;
- AlltoallV.dispatch and .combine, eager (the host's part of the call, each
  from a drained GPU and a barrier), and the step's wall time;

then, on rank 0, cProfile's top functions (own time) over 20 eager steps.
Same routing as examples/ep_dispatch.py."""
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its argument parser and routing)
import p2pt.distributed as pd  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from p2pt.torch import _handles  # noqa: E402


def per_call(fn, calls=1000, every=50):
    """Host microseconds of one call of fn (median over runs of `every`
    calls, each from a drained GPU)."""
    runs = []
    for _ in range(calls // every):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(every):
            fn()
        runs.append((time.perf_counter() - t0) / every * 1e6)
    torch.cuda.synchronize()
    return statistics.median(runs)


def step_host(fn, iters):
    """Host microseconds of one call of fn from a drained GPU and a barrier
    (median), and the wall microseconds to its end on the GPU."""
    host, wall = [], []
    for _ in range(iters):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        wall.append((t2 - t0) * 1e6)
    return statistics.median(host), statistics.median(wall)


def main():
    a = ep.parse()
    rank, G, device = ep.start()
    dev = device
    h = _handles._get(0)
    pt.prepare()
    stream = torch.cuda.current_stream().cuda_stream
    sems = pd.semaphores(4)
    sem = sems[0]
    rows = []

    def pair_ctypes():
        h.signal(sem.data_ptr(), stream)
        h.wait(sem.data_ptr(), 1, stream)

    def pair_ops():
        torch.ops.p2pt_dist.signal(sem, 0)
        torch.ops.p2pt_dist.wait(sem, 1, 0)

    def pair_api():
        pd.signal(sem)
        pd.wait(sem)

    for name, fn in (("signal+wait, ctypes", pair_ctypes), ("signal+wait, torch.ops", pair_ops),
                     ("signal+wait, p2pt.distributed", pair_api)):
        fn()
        rows.append((name, per_call(fn)))

    # Three small batches, each its own descriptors, count and workspace.
    src = torch.arange(4096, dtype=torch.uint8, device=dev)
    dst = torch.empty(3, 4096, dtype=torch.uint8, device=dev)
    batches = []
    for b in range(3):
        d = torch.tensor([[dst[b].data_ptr() + 1024 * i, src.data_ptr() + 1024 * i, 1000]
                          for i in range(3)], dtype=torch.int64, device=dev)
        n = torch.tensor([3], dtype=torch.int32, device=dev)
        ws = torch.zeros(h.workspace_bytes(3), dtype=torch.uint8, device=dev)
        batches.append((d, n, ws))
    for t in (src, dst, sems):
        pt.register_window(t)
    signals = [sems[1].data_ptr()]
    turn = [0]

    def one_batch():
        d, n, ws = batches[0]
        h.copy_batch_device_signal(d.data_ptr(), n.data_ptr(), 3, ws.data_ptr(), signals, stream)

    def three_batches():
        d, n, ws = batches[turn[0] % 3]
        turn[0] += 1
        h.copy_batch_device_signal(d.data_ptr(), n.data_ptr(), 3, ws.data_ptr(), signals, stream)

    sig_cpu = torch.tensor(signals, dtype=torch.int64)

    def op_batch():
        d, n, ws = batches[turn[0] % 3]
        turn[0] += 1
        torch.ops.p2pt_dist.batch_signal(d, n, 3, ws, dst, sems, sig_cpu, 0)

    for name, fn in (("batch+signal, ctypes, one batch", one_batch),
                     ("batch+signal, ctypes, 3 in turn", three_batches),
                     ("batch+signal, torch.ops, 3 in turn", op_batch)):
        fn()
        rows.append((name, per_call(fn)))

    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    a2a = pd.AlltoallV(a.tokens, a.hidden * 2)
    x = s.x.view(torch.uint8)
    for _ in range(3):
        a2a.dispatch(x, s.dest)
        a2a.combine(s.dest)
    d_host, d_wall = step_host(lambda: a2a.dispatch(x, s.dest), a.iters)
    c_host, c_wall = step_host(lambda: a2a.combine(s.dest), a.iters)
    rows += [("dispatch, host", d_host), ("dispatch, wall", d_wall),
             ("combine, host", c_host), ("combine, wall", c_wall)]

    if rank == 0:
        print(f"# {G} ranks, {a.tokens} tokens of {a.hidden} bf16, top-{a.topk}: host "
              f"microseconds of one call (rank 0, the largest over ranks)")
    for name, us in rows:
        big = ep.largest(us, device)
        if rank == 0:
            print(f"{name:>36}: {us:9.1f} {big:9.1f}")

    torch.cuda.synchronize()
    dist.barrier()
    prof = cProfile.Profile()
    for _ in range(20):
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            prof.enable()
        a2a.dispatch(x, s.dest)
        a2a.combine(s.dest)
        if rank == 0:
            prof.disable()
    torch.cuda.synchronize()
    if rank == 0:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print("# cProfile, 20 eager dispatches and combines on rank 0, by own time")
        print("\n".join(out.getvalue().splitlines()[:45]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
