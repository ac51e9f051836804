# SPDX-License-Identifier: Apache-2.0
"""How long a host step takes right after another: a Python loop, an event
record, a small CPU tensor, each after p2pt_block_layout_swap (32 layers x
256 blocks of 16 KiB across the host link), after a copy-engine copy of
the same bytes, after a sleep kernel, and alone; every pair after
torch.cuda.synchronize(), medians of 25. Run from the repository root on a
GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/after_launch.py

bench/results/2026-11-25-h100-host-steps/after-launch.log holds its output
at c1c1215 (bench/results/offload.md, step 14)."""
import statistics
import sys
import time

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import c_call, cur, gl, h, L, m, n, pl  # noqa: E402

stage_g = torch.empty(n * L * 8192, dtype=torch.bfloat16, device="cuda")
stage_h = torch.empty(n * L * 8192, dtype=torch.bfloat16, pin_memory=True)
ev = torch.cuda.Event()

def work():
    s = 0
    for i in range(2000):
        s += i
    return s

def ce_copy():
    stage_h.copy_(stage_g, non_blocking=True)

def sleepk():
    torch.cuda._sleep(5_000_000)

def seg(name, first, then, runs=25):
    a, b = [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        if first: first()
        t1 = time.perf_counter_ns()
        then()
        t2 = time.perf_counter_ns()
        a.append(t1 - t0); b.append(t2 - t1)
    torch.cuda.synchronize()
    print(f"{name:40s} first {statistics.median(a)/1000:8.1f} us   then {statistics.median(b)/1000:8.1f} us", flush=True)

seg("work alone", None, work)
seg("ev.record alone", None, ev.record)
seg("torch.tensor alone", None, lambda: torch.tensor([1, 2, 3, 4, 5, 6, 7, 8], dtype=torch.int32))
seg("C call, work", c_call, work)
seg("C call, ev.record", c_call, ev.record)
seg("C call, torch.tensor", c_call, lambda: torch.tensor([1, 2, 3, 4, 5, 6, 7, 8], dtype=torch.int32))
seg("C call, sleep 300us", c_call, lambda: time.sleep(300e-6))
seg("C call+sleep300, ev.record", lambda: (c_call(), time.sleep(300e-6)), ev.record)
seg("C call+sleep300, work", lambda: (c_call(), time.sleep(300e-6)), work)
seg("ce copy_, work", ce_copy, work)
seg("ce copy_, ev.record", ce_copy, ev.record)
seg("sleep kernel, work", sleepk, work)
seg("sleep kernel, ev.record", sleepk, ev.record)
seg("work, C call", work, c_call)
seg("ev.record, C call", ev.record, c_call)
seg("C call, C call", c_call, c_call)
print("restore direction")
lay2 = pt._layout(pl, gl)
pt.swap_blocks(pl, gl, m.flip(1).contiguous()); torch.cuda.synchronize()
mr = m.flip(1).contiguous()
rec2 = torch.empty(8, dtype=torch.int32)
def c_back():
    h.block_layout_swap(lay2.c.pointer, mr.data_ptr(), n, 0, rec2.data_ptr(), cur)
seg("C back, work", c_back, work)
seg("C back, ev.record", c_back, ev.record)
