# SPDX-License-Identifier: Apache-2.0
"""What the weighted sum of examples/ep_dispatch.py's combine costs on one
GPU, by way of computing it: T tokens, each with G returned rows of H bf16
values (slots of tokens not sent to a rank hold garbage, weight 0) and
[T, G] weights. Ways:

  where_bmm   the example's: unsent slots masked to zero, then a [1, G] x
              [G, H] product per token (bmm, fp32 accumulation)
  bmm         the product alone, on slots whose unsent rows are zeros
  gather_bmm  rows packed by rank (what a push of contiguous blocks
              leaves), gathered into slots by index, then bmm
  compiled    examples/ep_dispatch.py's --sum compiled: each sent slot
              times its weight in fp32, summed, one rounding to bf16, as
              one torch.compile'd kernel (checked against the same formula
              run eagerly, to 1 bf16 ulp)
  copy        a device copy of the slots' bytes (the floor of one read and
              one write)

Each line: the median of --iters timed runs (CUDA events), GB/s of the
slots' bytes read. Checks that where_bmm, bmm and gather_bmm agree byte
for byte.

    python3 bench/experiments/ep_reduce.py --gpus-list 2,4
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its fp32 formula, the one --sum compiled runs)


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1e3)
    return statistics.median(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--gpus-list", default="2,4")
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    dev = torch.device("cuda")
    T, H = a.tokens, a.hidden
    for G in (int(x) for x in a.gpus_list.split(",")):
        gen = torch.Generator(device=dev).manual_seed(G)
        sent = torch.rand(T, G, generator=gen, device=dev) < 0.9
        w = torch.rand(T, G, generator=gen, device=dev) * sent
        slots = torch.randn(T, G, H, generator=gen, device=dev).to(torch.bfloat16)
        garbage = torch.full_like(slots, float("nan"))
        dirty = torch.where(sent[:, :, None], slots, garbage)
        clean = torch.where(sent[:, :, None], slots, torch.zeros((), dtype=slots.dtype, device=dev))
        wb = w.to(torch.bfloat16)[:, None, :]
        # Packed by rank: rank d's rows in token order, as a push of blocks.
        order = torch.cat([sent[:, d].nonzero().flatten() * G + d for d in range(G)])
        packed = clean.view(T * G, H)[order].contiguous()
        index = torch.zeros(T * G, dtype=torch.int64, device=dev)  # slot -> packed row
        zero_row = packed.shape[0]
        packed = torch.cat([packed, torch.zeros(1, H, dtype=packed.dtype, device=dev)])
        index.fill_(zero_row)
        index[order] = torch.arange(order.numel(), device=dev)

        def where_bmm():
            r = torch.where(w[:, :, None] > 0, dirty, torch.zeros((), dtype=dirty.dtype, device=dev))
            return torch.bmm(wb, r).view(T, H)

        def bmm():
            return torch.bmm(wb, clean).view(T, H)

        def gather_bmm():
            return torch.bmm(wb, packed[index].view(T, G, H)).view(T, H)

        out = torch.empty_like(clean)

        def copy():
            out.copy_(clean)

        def fp32_sum(r):
            return ep._sum_fp32(r, w)

        fused = torch.compile(fp32_sum, dynamic=False, fullgraph=True)

        def compiled():
            return fused(dirty)

        ref = where_bmm()
        for name, fn in (("bmm", bmm), ("gather_bmm", gather_bmm)):
            if not torch.equal(fn().view(torch.int16), ref.view(torch.int16)):
                raise SystemExit(f"ep_reduce: {name} differs from where_bmm at G {G}")
        close = torch.isclose(compiled().float(), fp32_sum(dirty).float(), rtol=2 ** -7, atol=0)
        if not bool(close.all()):
            raise SystemExit(f"ep_reduce: compiled differs from its eager formula at G {G}")
        nbytes = clean.nbytes
        for name, fn in (("where_bmm", where_bmm), ("bmm", bmm), ("gather_bmm", gather_bmm),
                         ("compiled", compiled), ("copy", copy)):
            us = timed(fn, a.iters)
            print(f"G {G} T {T} H {H} {name:<10} {us:8.1f} us {nbytes / us / 1e3:7.1f} GB/s")


if __name__ == "__main__":
    main()
