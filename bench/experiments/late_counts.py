# SPDX-License-Identifier: Apache-2.0
"""An AlltoallV dispatch whose count sum starts late on the current stream:

    torchrun --nproc-per-node 2 bench/experiments/late_counts.py

A sleep of ~1 ms (torch.cuda._sleep) before the sum of each rank's counts
(before its count exchange, where `_counts_out` returns the places),
then three rounds of dispatch and combine with new routing; prints the
bytes the combine got wrong a round on each rank and exits 1 if any. Works
with a tree whose dispatch sums in `_count_rows` (the sum alone) or, before
dfce648, in `_counts_out` (the sum and the count batch), so the same check
runs on either side of that fix (bench/results/peer.md 5r);
tests/python/test_distributed.py's `_late_counts` is the test."""
import os
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

import p2pt.distributed as pd

ROW, T = 14336, 512


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    a2a = pd.AlltoallV(T, ROW)
    name = "_count_rows" if hasattr(a2a, "_count_rows") else "_counts_out"
    count = getattr(a2a, name)

    def late(dest):
        torch.cuda._sleep(2_000_000)
        return count(dest)

    setattr(a2a, name, late)
    bad = 0
    for r in range(3):
        g = torch.Generator(device=dev).manual_seed(500 + 10 * r + rank)
        x = torch.randint(0, 256, (T, ROW), dtype=torch.uint8, device=dev, generator=g)
        dest = torch.rand(T, world, device=dev, generator=g) < 0.6
        recv, _ = a2a.dispatch(x, dest)
        torch.bitwise_xor(recv, 20 + r, out=a2a.y)
        back = a2a.combine(dest)
        mask = dest[:, :, None].expand(T, world, ROW)
        want = torch.bitwise_xor(x, 20 + r)[:, None, :].expand(T, world, ROW)
        wrong = int((back[mask] != want[mask]).sum())
        print(f"rank {rank} patched {name} round {r}: {wrong} wrong bytes in the combine",
              flush=True)
        bad += wrong != 0
        dist.barrier()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
