# SPDX-License-Identifier: Apache-2.0
"""Where a chunked combine's time goes, one process per GPU:

    torchrun --nproc-per-node 4 bench/experiments/ep_chunks.py [--tokens 4096] [--ks=1,2,4]
        [--sum capped [--sum-ctas 66] [--capped=BLOCK:WARPS,...]]

After one dispatch (examples/ep_dispatch.py's routing and identity
expert), p2pt's combine in K chunks for each K of --ks, captured in a
CUDA graph and replayed from a common start (examples/ep_dispatch.py's
`timed`, --step-start; median of --iters, largest over ranks): with the
example's weighted sum (`then` on each chunk; --sum capped: on a capped
grid while rows travel) and without it (the exchange alone: one batch in
K parts since 5bf2428, K batches before); --capped: each of these shapes
of the capped sum's kernel instead of the example's (capped_shape). Then
the GPU time of a replay over 100 back to back (no start's skew;
median of 5, largest over ranks). Then one replay of each K with its sum
under torch.profiler on every rank,
and rank 0's kernels printed as a timeline: start and length in
microseconds from the replay's first kernel, and the stream each ran on."""
import json
import os
import statistics
import sys
import tempfile

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its argument parser, routing and sum)
import p2pt.torch as pt  # noqa: E402


def timeline(prof):
    """This rank's kernels of the profiled replay, one line each."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    ks = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    # What common_start ran (an all_reduce, a spin) is not the replay's.
    spins = [i for i, e in enumerate(ks) if "spin_kernel" in e["name"]]
    ks = ks[spins[-1] + 1:] if spins else ks
    if not ks:
        return ["  (no kernel traced)"]
    t0 = ks[0]["ts"]
    return [f"  {e['ts'] - t0:9.1f} +{e['dur']:8.1f}  stream {e['args'].get('stream', '?'):>3}  "
            f"{e['name'][:70]}" for e in ks]


def back_to_back(g, n, device):
    """GPU microseconds a replay of `g`, over `n` replays back to back
    from a barrier (each waits for the peers' signals of the same replay)."""
    torch.cuda.synchronize(device)
    dist.barrier()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        g.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1000 / n


def dispatched():
    """The example's arguments, this rank, the group's size, its GPU, its
    routing (ep.Step) and p2pt's way after one dispatch and the identity
    expert (y holds what arrived)."""
    a = ep.parse()
    rank, G, device = ep.start()
    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    p = ep.P2pt(a, G, rank, device)
    recv, _ = p.dispatch(s)
    p.expert(recv)
    return a, rank, G, device, s, p


def main():
    ks = [1, 2, 4]  # --ks=K,K,... (taken out before the example's parser sees the rest)
    shapes = [None]  # --capped=BLOCK:WARPS,...: _sum_capped's shapes to try (None: the example's)
    for arg in [v for v in sys.argv if v.startswith(("--ks=", "--capped="))]:
        name, _, val = arg.partition("=")
        if name == "--ks":
            ks = [int(k) for k in val.split(",")]
        else:
            shapes = [tuple(int(x) for x in v.split(":")) for v in val.split(",")]
        sys.argv.remove(arg)
    a, rank, G, device, s, p = dispatched()
    pt.prepare()
    example_shape = ep.capped_shape
    graphs, out = {}, []
    for k in ks:
        p.chunks = k
        p.a2a.combine(s.dest, chunks=k)
        runs = [("no sum", None, lambda: p.a2a.combine(s.dest, chunks=k))]
        runs += [("sum", shape, lambda: p.combine(s)) for shape in shapes]
        for what, shape, fn in runs:
            ep.capped_shape = example_shape if shape is None else (lambda H, sh=shape: sh)
            fn()  # compiled before any capture
            torch.cuda.synchronize()
            dist.barrier()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            graphs[k, what, shape] = g
            us = ep.timed(g.replay, a, device)
            b2b = statistics.median(back_to_back(g, 100, device) for _ in range(5))
            out.append((k, what, shape, ep.largest(us, device), us, ep.largest(b2b, device)))
    ep.capped_shape = example_shape
    if rank == 0:
        print(f"# {G} ranks, {a.tokens} tokens of {a.hidden} bf16, top-{a.topk}: the combine in K "
              f"chunks, in a graph, median of {a.iters} replays from a {a.step_start} start (--sum {a.sum})")
        for k, what, shape, big, mine, b2b in out:
            tag = what if shape is None else f"{what} {shape[0]}:{shape[1]}"
            print(f"K={k:<2} {tag:>12}: {big:8.1f} us (largest over ranks), rank 0 {mine:8.1f}; "
                  f"back to back {b2b:8.1f}")
    from torch.profiler import ProfilerActivity, profile
    for (k, what, shape), g in graphs.items():
        if what != "sum":
            continue
        g.replay()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            ep.common_start(device, a.step_start)
            g.replay()
            torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            tag = "" if shape is None else f" {shape[0]}:{shape[1]}"
            print(f"# K={k}, with the sum{tag}: rank 0's kernels (start, +length, us)")
            print("\n".join(timeline(prof)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
