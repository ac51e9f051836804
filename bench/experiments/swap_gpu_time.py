# SPDX-License-Identifier: Apache-2.0
"""How much of examples/kv_offload.py's figure for a swap is host time.
The example records its start event on an idle GPU, then calls the swap:
its GB/s count the host's enqueue as well as the copy. Here each method is
timed twice, median of 15: "as the example" (the same), and "GPU only",
where a sleep kernel of about 2 ms runs first, so that the host has
enqueued everything before the start event is reached. Same shapes as the
example (32 layers x 256 blocks of 16 KiB, GPU to pinned host and back).
Run from the repository root on a GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/swap_gpu_time.py
"""
import sys

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import gl, L, m, n, nbytes, pl, r, stage_gpu, stage_host, timed  # noqa: E402

back = [torch.empty_like(t) for t in gl]
m_gpu, r_gpu = m.cuda(), r.cuda()


methods = [
    ("swap_blocks, CPU mapping", lambda: pt.swap_blocks(gl, pl, m),
     lambda: pt.swap_blocks(pl, back, r)),
    ("swap_blocks, GPU mapping", lambda: pt.swap_blocks(gl, pl, m_gpu),
     lambda: pt.swap_blocks(pl, back, r_gpu)),
    ("contiguous copy_", lambda: stage_host.copy_(stage_gpu, non_blocking=True),
     lambda: stage_gpu.copy_(stage_host, non_blocking=True)),
]
print(f"# {torch.cuda.get_device_name(0)}; {L} layers x {n} blocks of 16 KiB "
      f"({nbytes / 2**20:.0f} MiB) each way; GB/s, median of 15")
print(f"{'method':28s} {'offload':>9s} {'GPU only':>9s} {'restore':>9s} {'GPU only':>9s}")
rows = {}
for name, off, res in methods:
    cells = [nbytes / timed(fn, gate) / 1e6 for fn in (off, res) for gate in (False, True)]
    rows[name] = cells
    print(f"{name:28s} " + " ".join(f"{c:9.1f}" for c in cells))
ref = rows["contiguous copy_"]
for name, cells in rows.items():
    if name.startswith("swap"):
        print(f"{name} / contiguous: " + ", ".join(
            f"{w} {c / ref[i]:.2f}" for i, (w, c) in enumerate(
                zip(("offload", "offload GPU only", "restore", "restore GPU only"), cells))))
