# SPDX-License-Identifier: Apache-2.0
"""The cache the host-time probes share (swap_steps.py, c_call.py,
after_launch.py): examples/kv_offload.py's shapes, 32 layers of 16 KiB
blocks (1024 on the GPU, 512 in a pinned pool) and 256 random blocks, one
tensor per layer as vLLM holds them, swapped three times so that layouts,
kernels and windows are ready. Importing it builds the cache; run the
probes from the repository root."""
import sys

sys.path.insert(0, "python")
import torch  # noqa: E402
import p2pt.torch as pt  # noqa: E402

L, G, H, n = 32, 1024, 512, 256
gpu = torch.randn(L, G, 16, 8, 64, device="cuda").to(torch.bfloat16)
pool = torch.empty(L, H, 16, 8, 64, dtype=torch.bfloat16, pin_memory=True)
gl, pl = list(gpu.unbind(0)), list(pool.unbind(0))
g = torch.Generator().manual_seed(0)
m = torch.stack([torch.randperm(G, generator=g)[:n], torch.randperm(H, generator=g)[:n]], 1)
for _ in range(3):
    pt.swap_blocks(gl, pl, m)
torch.cuda.synchronize()
lay = pt._layout(gl, pl)
h = pt._get(0)
cur = pt._cur()


def c_call():
    """p2pt_copy_blocks_async of the offload: what swap_blocks calls."""
    h.copy_blocks_at(lay.c_layers_at, lay.layers, m.data_ptr(), n, cur)
