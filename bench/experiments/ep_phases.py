# SPDX-License-Identifier: Apache-2.0
"""Where the time of p2pt's EP dispatch goes, one process per GPU:

    torchrun --nproc-per-node 4 bench/experiments/ep_phases.py [--tokens 4096]
    EP_PHASES="exchange alone,dispatch" torchrun ... ep_phases.py   # those phases only

Each phase of p2pt.distributed.AlltoallV.dispatch, captured alone in a
CUDA graph and replayed from a common start (examples/ep_dispatch.py's
`timed`, --step-start; median of --iters, largest over ranks): the
counts (counted from the routing and put into every rank's matrix by
one kernel that signals every peer, p2pt_count_rows_async, and the wait
for the G - 1 peers), the exchange alone (the same, now that the
counting and the exchange are one kernel; before it, the batch of G
pieces of G counts alone), the counts and the descriptors built on the GPU,
the row batches alone (the runs of slots, the peers' rows and, beside
them, the rank's own; their descriptors already built) and the wait, the
whole dispatch, the combine without the weighted sum, the dispatch and
the combine together; the GPU time of the counts, of the exchange alone,
of the dispatch, of the combine and of both, from 100 replays back to
back (no barrier's skew); then one replay of the dispatch and one of the
combine under torch.profiler on every rank, rank 0's kernels printed as
a timeline (ep_chunks.timeline: start and length from the replay's first
kernel, and the stream), and with EP_PHASES every rank's; then, without
EP_PHASES, the kernels of eager dispatches and combines on rank 0, from
torch.profiler. Same routing as examples/ep_dispatch.py."""
import os
import statistics
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its argument parser and routing)
from ep_chunks import back_to_back, timeline  # noqa: E402
import p2pt.distributed as pd  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from p2pt.distributed import _alltoallv as av  # noqa: E402


def phases(a2a, x, dest):
    """Callables, each a prefix of dispatch's work (or the row batch alone)."""
    G = a2a.G

    def counts():
        upto = a2a._counts_out(dest)
        a2a._wait(av._COUNTS)
        return dest.shape[0], upto

    def exchange():  # the counts and places come in one kernel: the same as counts()
        counts()

    def descs():  # dispatch's work in its order, on one stream: the rows described while the counts travel
        T, upto = dest.shape[0], a2a._counts_out(dest)
        a2a._describe_rows(dest, upto)
        a2a._describe_slots(dest, upto)
        a2a._describe_sources(x, dest)
        a2a._wait(av._COUNTS)
        starts = a2a._describe_starts()
        a2a._describe_runs()
        a2a._describe_places(T, starts)

    def rows():  # the runs of slots, the rows' batches (their descriptors built), the wait
        a2a._batch(a2a._runs, a2a.count_n, G, a2a.slots, av._ROWS, a2a.ws_slots)
        a2a._rows_out(x, dest)

    def whole():
        a2a.dispatch(x, dest)

    def back():
        a2a.combine(dest)

    def step():
        a2a.dispatch(x, dest)
        a2a.combine(dest)

    return [("counts", counts), ("exchange alone", exchange), ("counts+descs", descs), ("rows batch+wait", rows),
            ("dispatch", whole), ("combine, no sum", back), ("dispatch+combine", step)]


def main():
    a = ep.parse()
    rank, G, device = ep.start()
    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    a2a = pd.AlltoallV(a.tokens, a.hidden * 2)
    x = s.x.view(torch.uint8)
    a2a.dispatch(x, s.dest)  # descriptors for the row batch alone
    pt.prepare()
    out, graphs = [], {}
    only = os.environ.get("EP_PHASES")
    only = None if only is None else only.split(",")
    steps = phases(a2a, x, s.dest)
    names = [name for name, _ in steps]
    if only is not None and not set(only) <= set(names):
        sys.exit(f"ep_phases.py: EP_PHASES names {sorted(set(only) - set(names))}; "
                 f"the phases are {names}")
    for name, fn in steps:
        if only is not None and name not in only:
            continue
        torch.cuda.synchronize()
        dist.barrier()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs[name] = g
        us = ep.timed(g.replay, a, device)
        out.append((name, ep.largest(us, device), us))
        if name in ("counts", "exchange alone", "dispatch", "combine, no sum", "dispatch+combine"):
            us = statistics.median(back_to_back(g, 100, device) for _ in range(5))
            out.append((f"{name}, 100 back to back", ep.largest(us, device), us))
    if rank == 0:
        print(f"# {G} ranks, {a.tokens} tokens of {a.hidden} bf16, top-{a.topk}: each phase "
              f"alone in a graph, median of {a.iters} replays from a {a.step_start} start")
        for name, big, mine in out:
            print(f"{name:>18}: {big:9.1f} us (largest over ranks), rank 0 {mine:9.1f}")
    from torch.profiler import ProfilerActivity, profile
    for name in ("dispatch", "combine, no sum"):
        if name not in graphs:
            continue
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            ep.common_start(device, a.step_start)
            graphs[name].replay()
            torch.cuda.synchronize()
        dist.barrier()
        for r in range(G if only is not None else 1):
            if rank == r:
                print(f"# {name}, one replay: rank {r}'s kernels (start, +length, us)")
                print("\n".join(timeline(prof)), flush=True)
            dist.barrier()
    torch.cuda.synchronize()
    dist.barrier()
    if only is not None:
        dist.destroy_process_group()
        return
    if rank == 0:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                a2a.dispatch(x, s.dest)
                a2a.combine(s.dest)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25,
                                        max_name_column_width=60))
    else:
        for _ in range(5):
            a2a.dispatch(x, s.dest)
            a2a.combine(s.dest)
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
