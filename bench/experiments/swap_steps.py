# SPDX-License-Identifier: Apache-2.0
"""Host time of p2pt.torch.swap_blocks step by step (CPU mapping, layers
swapped before; the shapes of examples/kv_offload.py: 32 layers, 16 KiB
blocks, 256 blocks): the steps of the operation's body (its layout by
the tensors' ids, the dst versions, the record, the stream, the pinned
hold), the body alone and through torch.library's dispatch, then the C
call alone and with the hold, after a synchronize and without. Run from
the repository root on a GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/swap_steps.py

bench/results/offload.md ("PyTorch") quotes these measurements, taken with
the two probes this script joins (the steps, then the calls after a
launch)."""
import statistics
import sys
import time

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import c_call, cur, gl, h, lay, m, pl  # noqa: E402


def timed(name, fn, runs=200, synced=False):
    fn()
    ts = []
    for _ in range(runs):
        if synced:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    print(f"{'synced ' if synced else ''}{name:24s} {statistics.median(ts) / 1000:8.1f} us")


# The steps of the operation's body (_swap) for layers swapped before.
timed("layout by ids, serves", lambda: pt._layout(gl, pl))
timed("dst versions", lambda: torch.autograd.graph.increment_version(pl))
timed("record", lambda: torch.empty(8, dtype=torch.int32))
timed("current stream", lambda: pt._cur(0))
timed("hold pinned", lambda: pt._held(h).hold(lay.pinned, (0, cur)), 50)
for synced in (False, True):
    timed("C call", c_call, 21, synced)
    timed("C call, hold pinned", lambda: (c_call(), pt._held(h).hold(lay.pinned, (0, cur))),
          21, synced)
    timed("body (_swap)", lambda: pt._swap_blocks._swap(gl, pl, m, 0), 21, synced)
    timed("op through dispatch", lambda: torch.ops.p2pt.swap_blocks.default(gl, pl, m, 0), 21,
          synced)
    timed("swap_blocks", lambda: pt.swap_blocks(gl, pl, m), 21, synced)
