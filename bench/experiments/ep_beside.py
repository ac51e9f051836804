# SPDX-License-Identifier: Apache-2.0
"""Does a weighted sum beside the combine's rows slow them? One process per GPU:

    torchrun --nproc-per-node 4 bench/experiments/ep_beside.py [--tokens 4096] [--fs=0.25,0.5,0.75]
        [--grids=66,132] [--own-ctas=8,16] [--sum compiled]

A combine whose sum ran while its rows travel (each part of the tokens
summed once its rows are back) could hide most of the sum, if the sum's
kernels, reading and writing HBM on every SM, leave the peers' batch
(32 CTAs, NVLink writes landing in the same HBM) its speed. This measures
that premise alone, with no new signal: after one dispatch (the example's
routing and identity expert), in CUDA graphs, 100 replays back to back
(median of 5, largest over ranks):

- `combine`: p2pt's one-batch combine, no sum;
- `sum f`: the example's weighted sum (its `--sum`; peer.md 5m ran
  `--sum compiled`, then the default) of the first f x T tokens of a copy
  of the returned rows (its own buffers: no dependence on the combine);
- `combine || sum f`: both, the sum on a second stream forked at the
  graph's start, so it runs beside the combine's first kernels and its
  batch on every rank at once;
- `ranked || sum f`: the same, the sum's stream of the lowest priority
  and the combine's of the highest (a sum's CTAs queued first otherwise
  take every SM before the batch's 32 start);
- `combine; sum`: the example's step (its combine and sum as its
  arguments say).

If `combine || sum f` is `combine` plus little, a combine that sums each
part on arrival would cost about `combine` + `sum (1 - f)`.

The same with the sum in a kernel of N CTAs at most (`--grids=N,...`: the
example's `--sum capped`, a Triton kernel on a persistent grid, each CTA
summing tokens pid, pid + N, ..., the slots not sent not read), which
spreads the sum's HBM traffic over more of the batch: `tsum N f` alone and
`ranked || tsum N f` beside the combine.

Then what the rank's own rows, copied in a batch of their own on the
second stream beside the peers' batch, cost the dispatch and the combine:
each as it is, with no own rows (their count 0: the step then moves
wrong bytes, for timing only), and with the own batch on a handle of
`--own-ctas` CTAs at most (p2pt.torch's SM budget handle), so that it
spreads its HBM traffic over more of the peers' batch."""
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
from ep_chunks import dispatched  # noqa: E402
from ep_phases import back_to_back  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from p2pt.torch import _handles  # noqa: E402


def own_cases(a2a, s, own_ctas, device):
    """The dispatch and the combine as they are, with no own rows, and
    with the own rows' batch on a handle of N CTAs at most, for N in
    own_ctas: (name, callable) each, the callable capturable."""
    x = s.x.view(torch.uint8)
    zeros = torch.zeros_like(a2a._n_own)
    batch = a2a._batch

    def on_budget(n_ctas):
        """_batch with the own rows' batch on the handle of n_ctas CTAs
        (its windows registered here, once)."""
        hid = _handles._hid(None, sm_budget=n_ctas)
        _handles._windows(_handles._get(hid), a2a.device, [t.untyped_storage() for t in (
            x, a2a.recv, a2a.y, a2a.back, a2a.own_descs, a2a.back_split, a2a.ws_own)])

        def own_on_budget(descs, n, max_count, out, k, ws=None, stream=None, marks=1):
            if ws is not a2a.ws_own:
                return batch(descs, n, max_count, out, k, ws, stream, marks)
            saved, a2a.hid = a2a.hid, hid
            try:
                return batch(descs, n, max_count, out, k, ws, stream, marks)
            finally:
                a2a.hid = saved
        return own_on_budget

    batches = {n: on_budget(n) for n in own_ctas}

    def run(what, n_ctas=None, none=False):
        def fn():
            a2a._batch = batches[n_ctas] if n_ctas is not None else batch
            n_own, n_back = a2a._n_own, a2a._n_own_back
            if none:
                a2a._n_own, a2a._n_own_back, a2a._step = zeros, zeros[:1], (None, None)
            try:
                a2a.dispatch(x, s.dest) if what == "dispatch" else a2a.combine(s.dest)
            finally:
                a2a._batch = batch
                a2a._n_own, a2a._n_own_back, a2a._step = n_own, n_back, (None, None)
        return fn

    cases = []
    for what in ("dispatch", "combine"):
        cases += [(f"{what}, no own rows", run(what, none=True))]
        for n in own_ctas:
            run(what, n)()  # the budget handle prepared, eagerly
            cases += [(f"{what}, own on {n} CTAs", run(what, n))]
        cases += [(what, run(what))]
    return cases


def main():
    opts = {"--fs": [0.25, 0.5, 0.75], "--own-ctas": [8, 16], "--grids": []}
    for arg in [v for v in sys.argv if v.partition("=")[0] in opts]:  # --fs=F,F,... and so on
        name, _, vals = arg.partition("=")
        opts[name] = [(float if name == "--fs" else int)(v) for v in vals.split(",") if v]
        sys.argv.remove(arg)  # (taken out before the example's parser sees the rest)
    fs, own_ctas, sum_ctas = opts["--fs"], opts["--own-ctas"], opts["--grids"]
    a, rank, G, device, s, p = dispatched()
    p.combine(s)  # the sum of all T compiled, eagerly, before any capture
    T, H = a.tokens, a.hidden
    spare = p.a2a.back[:T].clone()  # the rows a sum beside reads: not the combine's
    spare_out = torch.empty(T, H, dtype=torch.bfloat16, device=device)
    side = torch.cuda.Stream(device)
    lo, hi = torch.cuda.Stream.priority_range()  # (lowest, highest)
    low, high = torch.cuda.Stream(device, priority=lo), torch.cuda.Stream(device, priority=hi)

    def part(f):
        n = max(1, int(f * T))
        return lambda: ep.weighted_sum(spare[:n], s.w[:n], n, H, p.how, out=spare_out[:n])

    def tpart(n_ctas, f):
        n = max(1, int(f * T))
        w = s.w.contiguous()
        return lambda: ep.weighted_sum(spare[:n], w[:n], n, H, "capped", out=spare_out[:n],
                                       ctas=n_ctas)

    def beside(f, ranked=False, fn=None):
        """The sum of f x T tokens (or fn) on a second stream beside the
        combine; `ranked`: the sum's stream of the lowest priority, the
        combine's (the current one, whose batch is the peers') of the
        highest."""
        fn = part(f) if fn is None else fn
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
        for n in sum_ctas:
            tpart(n, f)()
            cases += [(f"tsum {n} {f:g}", tpart(n, f)),
                      (f"ranked || tsum {n} {f:g}", beside(f, True, tpart(n, f)))]
    cases += own_cases(p.a2a, s, own_ctas, device)
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
