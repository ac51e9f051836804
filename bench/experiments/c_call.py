# SPDX-License-Identifier: Apache-2.0
"""Host microseconds of p2pt_block_layout_swap (32 layers x 256 blocks of
16 KiB, GPU to pinned host, CPU mapping: what swap_blocks calls), of the
dry run of the same pieces (p2pt_explain_blocks), of whole
swap_blocks calls and of single driver calls, each "synced" (after
torch.cuda.synchronize()) and "busy" (back to back while the GPU runs the
previous ones); medians. Run from the repository root on a GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/c_call.py

bench/results/2026-11-25-h100-host-steps/c-call.log holds two runs of it
(bench/results/offload.md, steps 15 and 16)."""
import ctypes
import statistics
import sys
import time

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import L, c_call, cur, gl, h, lay, m, n, pl, pool  # noqa: E402

cu = ctypes.CDLL("libcuda.so.1")
v1 = ctypes.c_uint64(); v2 = ctypes.c_int()
datas = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(v2), ctypes.c_void_p), ctypes.cast(ctypes.byref(v1), ctypes.c_void_p))
attrs = (ctypes.c_int * 2)(2, 11)  # MEMORY_TYPE, RANGE_START_ADDR
st = ctypes.c_int()
recs = p2pt.layers_array([(d.data_ptr(), s.data_ptr(), bb, d.shape[0], s.shape[0])
                          for s, d, bb in zip(gl, pl, lay.sizes)])
def explain():
    h.explain_blocks_at(ctypes.addressof(recs), L, m.data_ptr(), n, cur)
def ptrq():
    cu.cuPointerGetAttributes(2, attrs, datas, ctypes.c_uint64(pool.data_ptr()))
def squery():
    cu.cuStreamQuery(ctypes.c_void_p(cur))
def iscap():
    cu.cuStreamIsCapturing(ctypes.c_void_p(cur), ctypes.byref(st))
def swap():
    pt.swap_blocks(gl, pl, m)

def timed(name, fn, runs=31, synced=True):
    ts = []
    for _ in range(runs):
        if synced:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize()
    print(f"{'synced ' if synced else 'busy   '}{name:28s} {statistics.median(ts)/1000:8.1f} us", flush=True)

for synced in (True, False):
    timed("ctypes nothing", lambda: cu.cuCtxGetCurrent(ctypes.byref(v1)), synced=synced)
    timed("cuPointerGetAttributes", ptrq, synced=synced)
    timed("cuStreamQuery", squery, synced=synced)
    timed("cuStreamIsCapturing", iscap, synced=synced)
    timed("explain_blocks (dry run)", explain, synced=synced)
    timed("block_layout_swap (C call)", c_call, runs=15, synced=synced)
    timed("swap_blocks", swap, runs=15, synced=synced)
