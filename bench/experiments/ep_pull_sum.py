# SPDX-License-Identifier: Apache-2.0
"""The MoE combine as one pass that reads the returned rows where they lie,
one process per GPU:

    torchrun --nproc-per-node 4 bench/experiments/ep_pull_sum.py [--tokens 4096]

p2pt.distributed.AlltoallV.combine pushes each rank's rows of `y` into the
slots [T, G] of the ranks they came from, and the example then sums the
slots with the tokens' weights: two passes over the rows. Here instead
every rank shares its `y` as well; after a round of signals ("my y is
ready") each rank sums, in one torch.compile'd kernel, the rows of every
rank's `y` (read across NVLink through the shared mapping) at the places
the dispatch put them (the example's _pull_fp32, the sum of its
p2pt_pull way). Timed, each captured in a CUDA graph and replayed
from a common start (examples/ep_dispatch.py's `timed`, --step-start;
median of --iters, largest over ranks):

  push_sum   AlltoallV.combine, then the example's compiled weighted sum
  pull_sum   the signal round, then the one-pass sum over the peers' y
  pull_only  the one-pass sum alone (no signal round: a lower bound)

and the bytes of pull_sum's result against push_sum's. Same routing as
examples/ep_dispatch.py."""
import os
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its argument parser, routing, sums and timing)
import p2pt.distributed as pd  # noqa: E402
import p2pt.torch as pt  # noqa: E402


def main():
    a = ep.parse()
    rank, G, device = ep.start()
    T, H = a.tokens, a.hidden
    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    a2a = pd.AlltoallV(T, H * 2)
    ys = [y.view(torch.bfloat16).view(-1, H) for y in pd.share(a2a.y)]
    sems = pd.semaphores(1)
    peer_sems = pd.share(sems)
    pt.prepare()

    recv, _ = a2a.dispatch(s.x.view(torch.uint8), s.dest)
    a2a.y.copy_(recv)  # the identity expert
    torch.cuda.synchronize()
    dist.barrier()
    idx = a2a.places(s.dest)  # row t for rank r lies in r's y at idx[t, r]
    compiled = torch.compile(ep._pull_fp32, dynamic=False, fullgraph=True)

    def push_sum():
        back = a2a.combine(s.dest)
        return ep.weighted_sum(back, s.w, T, H, "compiled")

    def pull_only():
        return compiled(ys, idx, s.w)

    def pull():
        for p in range(G):
            if p != rank:
                pd.signal(peer_sems[p][0])
        pd.wait(sems[0], G - 1)
        return compiled(ys, idx, s.w)

    want = push_sum().clone()
    torch.cuda.synchronize()
    dist.barrier()
    got = pull().clone()
    torch.cuda.synchronize()
    same = torch.equal(got, want)
    diff = (got.float() - want.float()).abs().max().item()
    results = {}
    for name, fn in (("push_sum", push_sum), ("pull_sum", pull), ("pull_only", pull_only)):
        torch.cuda.synchronize()
        dist.barrier()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        results[name] = ep.largest(ep.timed(g.replay, a, device), device)
    same_all = torch.tensor([1 if same else 0], device=device)
    dist.all_reduce(same_all, op=dist.ReduceOp.MIN)
    diff_all = torch.tensor([diff], device=device)
    dist.all_reduce(diff_all, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"# {G} ranks, {T} tokens of {H} bf16: pull_sum's bytes "
              f"{'equal' if same_all.item() else 'differ from'} push_sum's on every rank "
              f"(largest difference {diff_all.item():g})")
        for name, us in results.items():
            print(f"{name:>10} {us:9.1f} us")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
