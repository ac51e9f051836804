# SPDX-License-Identifier: Apache-2.0
"""One cuMemcpyBatchAsync of 8,192 pieces of 16 KiB, layer-major with
random slots on both sides (p2pt-bench --mode overlap's layout), called
through ctypes on a stream of its own, against p2pt's ce host batch of the
same pieces: GPU time from events, both directions, twice each in
alternation. Run from the repository root on a GPU machine with CUDA 13:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/ce_batch_h2d.py

bench/results/offload.md (step 10) quotes its output at 71f3cd2."""
import ctypes
import statistics
import sys

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt  # noqa: E402

P, L = 16384, 32
pieces = (128 << 20) // P
blocks = pieces // L
gpu = torch.empty(2 * pieces * P, dtype=torch.uint8, device="cuda")
host = torch.empty(2 * pieces * P, dtype=torch.uint8, pin_memory=True)
g = torch.Generator().manual_seed(1)
slot = torch.randperm(2 * blocks, generator=g)
hslot = torch.randperm(2 * pieces, generator=g)
G, H = gpu.data_ptr(), host.data_ptr()
cu = ctypes.CDLL("libcuda.so.1")
raw = cu.cuMemcpyBatchAsync_v2
raw.restype = ctypes.c_int
raw.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


class Attr(ctypes.Structure):  # CUmemcpyAttributes
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", ctypes.c_int * 2),
                ("dstLocHint", ctypes.c_int * 2), ("flags", ctypes.c_uint)]


attr = Attr()
attr.srcAccessOrder = 1  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
idx = ctypes.c_size_t(0)
st = torch.cuda.Stream()  # the batched call refuses the legacy default stream
torch.cuda.set_stream(st)
s = st.cuda_stream
h = p2pt.Handle(transport="ce")
for d2h in (True, False):
    out = []
    for lay in range(L):
        for b in range(blocks):
            gg = G + lay * 2 * blocks * P + int(slot[b]) * P
            hh = H + int(hslot[lay * blocks + b]) * P
            out.append((hh, gg, P) if d2h else (gg, hh, P))
    arr = p2pt.descs_array(out)
    n = len(out)
    D = (ctypes.c_uint64 * n)(*[o[0] for o in out])
    S = (ctypes.c_uint64 * n)(*[o[1] for o in out])
    Z = (ctypes.c_size_t * n)(*[o[2] for o in out])

    def f_p2pt():
        assert h._lib.p2pt_copy_batch_async(h._h, arr, n, s) == 0

    def f_raw():
        assert raw(D, S, Z, n, ctypes.byref(attr), ctypes.byref(idx), 1, s) == 0

    for name, fn in (("raw", f_raw), ("p2pt", f_p2pt), ("raw", f_raw), ("p2pt", f_p2pt)):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        ms = statistics.median(ts)
        print("d2h" if d2h else "h2d", name, f"{ms:.2f} ms {128 * 1.048576 / ms:.1f} GB/s")
