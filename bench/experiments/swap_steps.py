# SPDX-License-Identifier: Apache-2.0
"""Host time of p2pt.torch.swap_blocks step by step (CPU mapping: the
steps of its short path, _again, for layers swapped before; the shapes
of examples/kv_offload.py: 32 layers, 16 KiB blocks, 256 blocks),
then the C call alone and followed by other CUDA calls, after a
synchronize and without. Run from the repository root on a GPU machine:

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
from kv_setup import c_call, gl, L, lay, m, n, pl  # noqa: E402


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


# The steps of the short path (_again) that swap_blocks takes here.
timed("layout by ids", lambda: pt._layouts.get((pt._ids(gl), pt._ids(pl))))
timed("layout serves", lambda: lay.serves(gl, pl))
timed("_plain_eager", lambda: pt._plain_eager(pl, m))
timed("_done_eager", lambda: pt._done_eager(n * L))
timed("_mutated", lambda: pt._mutated(pl))
timed("hold_pinned", lambda: lay.hold_pinned(), 50)
for synced in (False, True):
    timed("C call", c_call, 21, synced)
    timed("C call, hold_pinned", lambda: (c_call(), lay.hold_pinned()), 21, synced)
    timed("swap_blocks", lambda: pt.swap_blocks(gl, pl, m), 21, synced)
