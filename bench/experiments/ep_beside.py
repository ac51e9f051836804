# SPDX-License-Identifier: Apache-2.0
"""Does a weighted sum beside the combine's rows slow them? One process per GPU:

    torchrun --nproc-per-node 4 bench/experiments/ep_beside.py [--tokens 4096] [--fs=0.25,0.5,0.75]

A combine whose sum ran while its rows travel (each part of the tokens
summed once its rows are back) could hide most of the sum, if the sum's
kernels, reading and writing HBM on every SM, leave the peers' batch
(32 CTAs, NVLink writes landing in the same HBM) its speed. This measures
that premise alone, with no new signal: after one dispatch (the example's
routing and identity expert), in CUDA graphs, 100 replays back to back
(median of 5, largest over ranks):

- `combine`: p2pt's one-batch combine, no sum;
- `sum f`: the example's weighted sum of the first f x T tokens of a
  copy of the returned rows (its own buffers: no dependence on the combine);
- `combine || sum f`: both, the sum on a second stream forked at the
  graph's start, so it runs beside the combine's first kernels and its
  batch on every rank at once;
- `ranked || sum f`: the same, the sum's stream of the lowest priority
  and the combine's of the highest (a sum's CTAs queued first otherwise
  take every SM before the batch's 32 start);
- `combine; sum`: the example's step (the combine, then the sum of all T).

If `combine || sum f` is `combine` plus little, a combine that sums each
part on arrival would cost about `combine` + `sum (1 - f)`."""
import os
import statistics
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))
import ep_dispatch as ep  # noqa: E402  (its argument parser, routing and sum)
from ep_phases import back_to_back  # noqa: E402
import p2pt.torch as pt  # noqa: E402


def main():
    fs = [0.25, 0.5, 0.75]  # --fs=F,F,... (taken out before the example's parser sees the rest)
    for arg in [v for v in sys.argv if v.startswith("--fs=")]:
        fs = [float(f) for f in arg[5:].split(",")]
        sys.argv.remove(arg)
    a = ep.parse()
    rank, G, device = ep.start()
    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    p = ep.P2pt(a, G, rank, device)
    recv, _ = p.dispatch(s)
    p.expert(recv)
    p.combine(s)  # the compiled sum of all T, eagerly, before any capture
    T, H = a.tokens, a.hidden
    spare = p.a2a.back[:T].clone()  # the rows a sum beside reads: not the combine's
    spare_out = torch.empty(T, H, dtype=torch.bfloat16, device=device)
    side = torch.cuda.Stream(device)
    lo, hi = torch.cuda.Stream.priority_range()  # (lowest, highest)
    low, high = torch.cuda.Stream(device, priority=lo), torch.cuda.Stream(device, priority=hi)

    def part(f):
        n = max(1, int(f * T))
        return lambda: ep.weighted_sum(spare[:n], s.w[:n], n, H, p.how, out=spare_out[:n])

    def beside(f, ranked=False):
        """The sum of f x T tokens on a second stream beside the combine;
        `ranked`: the sum's stream of the lowest priority, the combine's
        (the current one, whose batch is the peers') of the highest."""
        fn = part(f)
        by, on = (low, high) if ranked else (side, None)

        def both():
            main = torch.cuda.current_stream()
            by.wait_stream(main)
            with torch.cuda.stream(by):
                fn()
            if on is None:
                p.a2a.combine(s.dest)
            else:
                on.wait_stream(main)
                with torch.cuda.stream(on):
                    p.a2a.combine(s.dest)
                main.wait_stream(on)
            main.wait_stream(by)
        return both

    cases = [("combine", lambda: p.a2a.combine(s.dest)), ("combine; sum", lambda: p.combine(s))]
    for f in fs:
        part(f)()  # compiled for this many tokens, eagerly
        cases += [(f"sum {f:g}", part(f)), (f"combine || sum {f:g}", beside(f)),
                  (f"ranked || sum {f:g}", beside(f, True))]
    torch.cuda.synchronize()
    pt.prepare()
    out = []
    for name, fn in cases:
        torch.cuda.synchronize()
        dist.barrier()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        us = statistics.median(back_to_back(g, 100, device) for _ in range(5))
        out.append((name, ep.largest(us, device), us))
    if rank == 0:
        print(f"# {G} ranks, {T} tokens of {H} bf16, top-{a.topk}: GPU time of a replay, "
              f"100 back to back, median of 5")
        for name, big, mine in out:
            print(f"{name:>22}: {big:8.1f} us (largest over ranks), rank 0 {mine:8.1f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
