# SPDX-License-Identifier: Apache-2.0
"""Would the copy engine and a kernel, together, move a KV swap across the
host link faster than either alone, and cost a matmul beside it less?

A kernel's traffic reaches about 0.93 of the copy engine's speed on the
host link however many CTAs it has (bench/results/offload.md, step 3), and
the copy engine alone crawls on 16 KiB pieces unless they are grouped. Here
the shapes of examples/kv_offload.py (32 layers x 256 blocks of 16 KiB,
GPU to pinned host and back, one allocation per side) are moved by:

  contiguous copy_     the yardstick
  tma                  swap_blocks, CPU mapping (the link kernels)
  ce 2D                the copy engine, the pieces block by block, so that
                       each block's 32 layers are one 2D copy
  ce pieces            the copy engine, layer by layer (nothing to group)
  split f / N          the first f of the blocks as ce 2D on a second
                       stream, the rest by swap_blocks on N CTAs, joined

each timed "GPU only" (behind a sleep kernel, so the host's enqueue is not
counted) and as the example times it, then beside a matmul loop (the
example's Matmul). Every method's bytes are checked once first. Run from
the repository root on a GPU machine:

    P2PT_LIBRARY=build/libp2pt.so python3 bench/experiments/split_probe.py
"""
import sys

sys.path.insert(0, "python")
sys.path.insert(0, "examples")
import torch  # noqa: E402
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from kv_setup import (L, bb, bl, back, check, descs, gl, gpu, m, n, nbytes, pl, pool,  # noqa: E402
                      r, stage_gpu, stage_host, timed)
from kv_offload import Matmul  # noqa: E402

ce = p2pt.Handle("ce")
side = torch.cuda.Stream()


def ce_fn(t, stream=None):
    def run():
        s = stream or torch.cuda.current_stream()
        ce.copy_batch_at(t.data_ptr(), t.shape[0], s.cuda_stream)
    return run


def split_fn(srcs, dsts, mapping, f, budget):
    k = round(f * mapping.shape[0])
    head = descs(srcs, dsts, mapping[:k], True)
    rest = mapping[k:].contiguous()
    fork, join = torch.cuda.Event(), torch.cuda.Event()
    on_side = ce_fn(head, side)

    def run():
        cur = torch.cuda.current_stream()
        fork.record(cur)
        pt.swap_blocks(srcs, dsts, rest, sm_budget=budget)
        side.wait_event(fork)
        on_side()
        join.record(side)
        cur.wait_event(join)
    return run


def methods(srcs, dsts, mapping, small):
    out = [("tma", lambda: pt.swap_blocks(srcs, dsts, mapping)),
           ("ce 2D", ce_fn(descs(srcs, dsts, mapping, True))),
           ("ce pieces", ce_fn(descs(srcs, dsts, mapping, False))),
           ("swap sm_budget=0", lambda: pt.swap_blocks(srcs, dsts, mapping, sm_budget=0))]
    for f, b in ((0.5, None), (0.7, None), (0.85, None), (0.7, small), (0.85, small),
                 (0.85, 1)):
        out.append((f"split {f} / {'link' if b is None else b}",
                    split_fn(srcs, dsts, mapping, f, b)))
    return out


mm = Matmul(40)
print(f"# {torch.cuda.get_device_name(0)}; {L} layers x {n} blocks of {bb} bytes "
      f"({nbytes / 2**20:.0f} MiB) each way; GB/s (median of 9) and matmul slowdown")
print(f"{'way':8s} {'method':22s} {'GPU only':>9s} {'as timed':>9s} {'/contig':>8s} "
      f"{'beside':>8s} {'matmul':>8s}")
ways = (("offload", gl, pl, m, 2, pool, m[:, 1], gpu[:, m[:, 0].cuda()].cpu(),
         lambda: stage_host.copy_(stage_gpu, non_blocking=True)),
        ("restore", pl, bl, r, 4, back, r[:, 1], pool[:, r[:, 0]].clone(),
         lambda: stage_gpu.copy_(stage_host, non_blocking=True)))
for way, srcs, dsts, mapping, small, dst_all, dst_ids, want, contig in ways:
    if way == "restore":  # the pool holds the offloaded blocks
        pt.swap_blocks(gl, pl, m)
        torch.cuda.synchronize()
        want = pool[:, r[:, 0]].clone()
    ref = None
    for name, fn in [("contiguous copy_", contig)] + methods(srcs, dsts, mapping, small):
        if name != "contiguous copy_":
            check(f"{way} {name}", fn, dst_all, dst_ids, want)
        with torch.cuda.stream(torch.cuda.Stream()) as s:
            gpu_ms, as_ms = timed(fn, True, 9), timed(fn, False, 9)
            alone, beside, t_copy = mm.beside(fn, gpu_ms, torch.cuda.current_stream())
        ref = ref or nbytes / gpu_ms / 1e6
        print(f"{way:8s} {name:22s} {nbytes / gpu_ms / 1e6:9.1f} {nbytes / as_ms / 1e6:9.1f} "
              f"{nbytes / gpu_ms / 1e6 / ref:8.3f} {nbytes / t_copy / 1e6:8.1f} "
              f"{(beside / alone - 1) * 100:+7.1f}%", flush=True)
