# SPDX-License-Identifier: Apache-2.0
"""What the dispatcher adds to p2pt.torch.swap_blocks: host microseconds a
call (median of 400, back to back in bursts of 8 after a synchronize) of
the C call (p2pt_block_layout_swap on the layers' layout), the op's body,
the op through torch.ops, and swap_blocks, then a few of the body's steps;
then cProfile of 2,000 swap_blocks calls. The shapes of
examples/kv_offload.py (32 layers, 16 KiB blocks, 256 blocks, CPU
mapping, GPU to pinned host). Run from the repository root on a GPU
machine after a build in build/:

    P2PT_LIBRARY=build/libp2pt.so PYTHONPATH=python python3 bench/experiments/swap_dispatch.py
"""
import cProfile
import io
import pstats
import statistics
import time

import torch
import p2pt.torch as pt
from p2pt.torch import _swap_blocks as sb, _swap_layout as sl

torch.cuda.set_device(0)
L, NB, HB, n = 32, 1024, 512, 256
gl = [torch.empty(NB, 16, 512, dtype=torch.bfloat16, device="cuda") for _ in range(L)]
pl = [torch.empty(HB, 16, 512, dtype=torch.bfloat16).pin_memory() for _ in range(L)]
g = torch.Generator().manual_seed(0)
m = torch.stack([torch.randperm(NB, generator=g)[:n], torch.randperm(HB, generator=g)[:n]],
                1).contiguous()


def med(fn, k=400):
    fn()
    torch.cuda.synchronize()
    t = []
    for i in range(k):
        if i % 8 == 0:
            torch.cuda.synchronize()
            fn()
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(t)


lay = sl._layout(gl, pl)
h = pt._handles._get(0)
stream = torch.cuda.current_stream().cuda_stream
rec = torch.empty(8, dtype=torch.int32)
for name, fn in (
        ("C block_layout_swap", lambda: h.block_layout_swap(lay.c.pointer, m.data_ptr(), n, 0,
                                                            rec.data_ptr(), stream)),
        ("the op's body", lambda: sb._swap(gl, pl, m, 0)),
        ("torch.ops.p2pt.swap_blocks", lambda: torch.ops.p2pt.swap_blocks.default(gl, pl, m, 0)),
        ("pt.swap_blocks", lambda: pt.swap_blocks(gl, pl, m)),
        ("  _layout", lambda: sl._layout(gl, pl)),
        ("  the dst versions", lambda: torch.autograd.graph.increment_version(pl)),
        ("  the current stream", lambda: torch.cuda.current_stream(0).cuda_stream),
        ("  the pinned hold", lambda: pt._host._held(h).hold(lay.pinned, (0, stream))),
        ("  the record", lambda: torch.empty(8, dtype=torch.int32))):
    print(f"{name:28s} {med(fn):6.1f} us")
prof = cProfile.Profile()
prof.enable()
for i in range(2000):
    if i % 8 == 0:
        torch.cuda.synchronize()
    pt.swap_blocks(gl, pl, m)
prof.disable()
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
print(out.getvalue())
