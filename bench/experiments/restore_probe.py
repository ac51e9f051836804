# SPDX-License-Identifier: Apache-2.0
"""Why a swap_blocks restore (pinned host to GPU, the link kernel) moves
48-50 GB/s in one reading and 32-42 in the next on the same machine
(bench/results/offload.md, "PyTorch"), while offloads hold still.

The shapes of examples/kv_offload.py (32 layers x 256 blocks of 16 KiB, one
allocation per side). Each method is timed three ways, in three rounds that
take the methods in turn (so that a drift of the machine falls on all of
them alike):

  GPU only   one call behind a ~1 ms sleep kernel (the host's enqueue hidden)
  as timed   one call started on an idle GPU, as the example times it
  steady     8 calls back to back behind a ~15 ms sleep kernel, per call

then once beside the example's matmul loop. Methods: the contiguous copy_;
the CPU mapping through the link kernel on the built-in `link h2d` CTAs
and, through a table file, on 8, 16 and 24; on 8 with the pool's slots
in order instead of at random (host pages touched in order); the GPU
mapping (the batch kernel, 8 CTAs, and 16 under sm_budget=16); the copy
engine on the blocks grouped into 2D copies. Offloads (GPU to host) as the
control. Run from the repository root on a GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/restore_probe.py
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, "python")
sys.path.insert(0, "examples")
import torch  # noqa: E402
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import (L, bb, bl, back, check, descs, gl, gpu, m, n, nbytes, one, pl,  # noqa: E402
                      pool, r, stage_gpu, stage_host)
from kv_offload import Matmul  # noqa: E402

r_seq = torch.stack([torch.arange(n), r[:, 1]], 1)  # pool slots 0..n-1
ce = p2pt.Handle("ce")
name = torch.cuda.get_device_name(0)


def link_handle(h2d):
    """An auto handle whose table gives `link h2d` CTAs (the rest as built in)."""
    text = (f"p2pt-auto 1\narch sm_90\ndevice {name}\ncopy local 0 tma\ncopy push 0 ce\n"
            f"copy pull 0 tma\ncopy h2d 0 ce\ncopy d2h 0 ce\nbatch 0 tma\nbatch h2d 0 tma\n"
            f"batch d2h 0 tma\nlink h2d {h2d}\nlink d2h 3\n")
    fd, path = tempfile.mkstemp(suffix=".table")
    os.write(fd, text.encode())
    os.close(fd)
    return p2pt.Handle("auto", {"P2P_TRANSPORT_AUTO_TABLE": path})


def ce_2d(srcs, dsts, mapping):
    t = descs(srcs, dsts, mapping)
    return lambda: ce.copy_batch_at(t.data_ptr(), t.shape[0], torch.cuda.current_stream().cuda_stream)


links = {k: link_handle(k) for k in (8, 16, 24)}
r_gpu, m_gpu = r.cuda(), m.cuda()
restore = [
    ("contiguous copy_", lambda: stage_gpu.copy_(stage_host, non_blocking=True)),
    ("built in", lambda: pt.swap_blocks(pl, bl, r)),
    ("link 8", lambda: pt.swap_blocks(pl, bl, r, handle=links[8])),
    ("link 8, pool in order", lambda: pt.swap_blocks(pl, bl, r_seq, handle=links[8])),
    ("link 16", lambda: pt.swap_blocks(pl, bl, r, handle=links[16])),
    ("link 24", lambda: pt.swap_blocks(pl, bl, r, handle=links[24])),
    ("GPU mapping 8", lambda: pt.swap_blocks(pl, bl, r_gpu)),
    ("GPU mapping 16", lambda: pt.swap_blocks(pl, bl, r_gpu, sm_budget=16)),
    ("ce 2D", ce_2d(pl, bl, r)),
]
offload = [
    ("contiguous copy_", lambda: stage_host.copy_(stage_gpu, non_blocking=True)),
    ("CPU mapping 3", lambda: pt.swap_blocks(gl, pl, m)),
    ("GPU mapping 3", lambda: pt.swap_blocks(gl, pl, m_gpu)),
    ("ce 2D", ce_2d(gl, pl, m)),
]


def steady(fn, reps=8):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(30_000_000)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / reps


def gbps(ms):
    return nbytes / ms / 1e6


mm = Matmul(40)
stream = torch.cuda.Stream()
print(f"# {name}; {L} layers x {n} blocks of {bb} bytes ({nbytes / 2**20:.0f} MiB); GB/s: "
      f"median over 3 rounds [min-max], each round's figure a median of 5 (steady: 8 calls)")
for way, ms in (("restore", restore), ("offload", offload)):
    for label, fn in ms[1:]:
        if way == "restore":
            check(label, fn, back, r[:, 1], pool[:, (r_seq if "order" in label else r)[:, 0]])
        else:
            check(label, fn, pool, m[:, 1], gpu[:, m_gpu[:, 0]].cpu())
    res = {label: ([], [], []) for label, _ in ms}
    with torch.cuda.stream(stream):
        for label, fn in ms:
            for _ in range(2):
                fn()
        torch.cuda.synchronize()
        for _ in range(3):
            for label, fn in ms:
                g, a, s = res[label]
                g.append(gbps(statistics.median(one(fn, True) for _ in range(5))))
                a.append(gbps(statistics.median(one(fn, False) for _ in range(5))))
                s.append(gbps(steady(fn)))
    ref = statistics.median(res["contiguous copy_"][2])
    print(f"{way:8s} {'method':24s} {'GPU only':>20s} {'as timed':>20s} {'steady':>20s} "
          f"{'/contig':>8s} {'beside':>7s} {'matmul':>8s}")
    for label, fn in ms:
        cells = " ".join(f"{statistics.median(x):6.1f} [{min(x):5.1f}-{max(x):5.1f}]"
                         for x in res[label])
        with torch.cuda.stream(stream):
            alone, beside, t = mm.beside(fn, nbytes / ref / 1e6, stream)
        print(f"{way:8s} {label:24s} {cells} {statistics.median(res[label][2]) / ref:8.3f} "
              f"{gbps(t):7.1f} {(beside / alone - 1) * 100:+7.1f}%", flush=True)
