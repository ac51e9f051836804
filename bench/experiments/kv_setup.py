# SPDX-License-Identifier: Apache-2.0
"""The cache the probes share (swap_steps.py, c_call.py, after_launch.py,
swap_gpu_time.py, restore_probe.py, split_probe.py): examples/kv_offload.py's
shapes, 32 layers of 16 KiB blocks (1024 on the GPU, 512 in a pinned pool)
and 256 random blocks, one tensor per layer as vLLM holds them, swapped
three times so that layouts, kernels and windows are ready; where restores
land (`back`, one allocation) and their mapping `r`; the contiguous
yardstick's buffers; and the helpers the GPU-time probes share. Importing
it builds the cache; run the probes from the repository root."""
import statistics
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
record = torch.empty(8, dtype=torch.int32)


def c_call():
    """p2pt_block_layout_swap of the offload on its layout: what swap_blocks
    calls."""
    h.block_layout_swap(lay.c.pointer, m.data_ptr(), n, 0, record.data_ptr(), cur)


# Restores: pool slot m[i, 1] back to a random GPU slot of `back`.
bb = gl[0].stride(0) * gl[0].element_size()
back = torch.empty_like(gpu)
bl = list(back.unbind(0))
r = torch.stack([m[:, 1], torch.randperm(G, generator=torch.Generator().manual_seed(1))[:n]], 1)
# The yardstick: one contiguous copy_ of the same bytes.
stage_gpu = torch.empty(L, n, *gpu.shape[2:], dtype=gpu.dtype, device="cuda")
stage_host = torch.empty_like(stage_gpu, device="cpu").pin_memory()
nbytes = stage_gpu.nbytes


def one(fn, gate):
    """Milliseconds of one call of fn between CUDA events; with `gate`,
    behind a sleep kernel of about 1 ms, so that the host has enqueued the
    call before the start event is reached (the GPU's time alone)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if gate:
        torch.cuda._sleep(2_000_000)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1)


def timed(fn, gate, runs=15):
    """The median of `runs` one(fn, gate), after two warm-up calls."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    return statistics.median(one(fn, gate) for _ in range(runs))


def descs(srcs, dsts, mapping, block_major=True):
    """(count, 3) int64 p2pt_copy_desc records of `mapping`'s blocks over
    the layers: block by block (each block's layers in turn, which the copy
    engine groups into one 2D copy a block) or layer by layer."""
    sb = torch.tensor([t.data_ptr() for t in srcs], dtype=torch.int64)
    db = torch.tensor([t.data_ptr() for t in dsts], dtype=torch.int64)
    s, d = mapping[:, 0] * bb, mapping[:, 1] * bb
    if block_major:
        S, D = sb[None, :] + s[:, None], db[None, :] + d[:, None]
    else:
        S, D = sb[:, None] + s[None, :], db[:, None] + d[None, :]
    return torch.stack([D.flatten(), S.flatten(), torch.full_like(D.flatten(), bb)], 1).contiguous()


def check(label, fn, dst_all, dst_ids, want):
    """Poison dst_all, run fn once, and say so where blocks dst_ids (of
    every layer) do not hold `want`."""
    torch.cuda.synchronize()
    dst_all.view(torch.uint8).fill_(0xA5)
    torch.cuda.synchronize()
    fn()
    torch.cuda.synchronize()
    got = dst_all[:, dst_ids.to(dst_all.device)].cpu()
    if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
        print(f"WRONG BYTES: {label}", flush=True)
