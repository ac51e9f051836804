# SPDX-License-Identifier: Apache-2.0
"""Would a receive layout with a region of max_rows rows for every source
take the count exchange off the dispatch's path?

    torchrun --nproc-per-node 2 bench/experiments/ep_padded.py [--tokens 4096]

AlltoallV packs the rows from each source after the rows of the lower
ranks, so a rank learns where its rows land only once the counts are
exchanged. With source s's rows at row s * max_rows of every receive
buffer (the layout of DeepEP's low-latency kernels), a row's place is
known from the routing alone: the peers' batch starts after the scan of
the routing, and the count exchange travels beside it. `Padded` below
is that dispatch (the combine is not changed: this times the dispatch
only). Prints the dispatch of AlltoallV and of Padded, 100 graph replays
back to back (median of 5, largest over ranks), alternating, and checks
that each source's rows in Padded's buffer equal AlltoallV's."""
import os
import statistics
import sys

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import ep_dispatch as ep  # noqa: E402  (its argument parser and routing)
import p2pt.distributed as pd  # noqa: E402
import p2pt.torch as pt  # noqa: E402
from p2pt.distributed import _alltoallv as av  # noqa: E402
from ep_phases import back_to_back  # noqa: E402  (100 replays back to back)


class Padded(pd.AlltoallV):
    """The dispatch into regions of max_rows rows a source."""

    def _link(self, *peers):
        super()._link(*peers)
        start = self.rank * self.max_rows
        self._recv_before = self.recv_base + (start - 1) * self.rb
        self._runs_dst.copy_(self.slots_base + start * 8)

    def dispatch(self, x, dest):
        T = self._tokens(dest)
        v = self._views(T)
        main = torch.cuda.current_stream()
        side, side2 = self._side, self._side2
        side.wait_stream(main)
        side2.wait_stream(main)
        with torch.cuda.stream(side2):  # sources and bytes: the routing alone
            torch.add(v.row_off, x.data_ptr(), out=v.src)
            torch.mul(dest, self._rb_to, out=v.size)
            sourced = side2.record_event()
        with torch.cuda.stream(side):  # the counts, beside the rows
            self._counts_out(dest)
        # Each row's running count, scanned here (not _counts_out's buffer:
        # the side stream's), along the transpose's rows (a scan down a
        # [T, G] tensor's columns runs G threads down T rows).
        upto = dest.t().contiguous().cumsum(1, dtype=torch.int64).t()
        self._describe_rows(dest, upto)  # final places: the region is known
        placed = main.record_event()
        main.wait_event(sourced)
        if self.G > 1:
            self._batch(self._peer_rows, v.n_peers, self._peer_rows.shape[0], self.recv, av._ROWS)
        with torch.cuda.stream(side):
            torch.mul(self._mine, 8, out=self._runs_bytes)
            side.wait_event(placed)
            self._describe_slots(dest, upto)
        self._batch(self._runs, self.count_n, self.G, self.slots, av._ROWS, self.ws_slots, side)
        with torch.cuda.stream(side):
            self._describe_own(x, dest)
        self._batch(self.own_descs, v.n_own, self.max_rows, self.recv, None, self.ws_own, side)
        self._wait(av._ROWS, 2)
        self._wait(av._COUNTS)
        main.wait_stream(side)
        return self.recv, self._col


def main():
    a = ep.parse()
    rank, G, device = ep.start()
    s = ep.Step(a, rank, G, device, seed=1000 + rank)
    x = s.x.view(torch.uint8)
    ways = {"packed": pd.AlltoallV(a.tokens, a.hidden * 2),
            "padded": Padded(a.tokens, a.hidden * 2)}
    recv, counts = ways["packed"].dispatch(x, s.dest)
    recv2, counts2 = ways["padded"].dispatch(x, s.dest)
    torch.cuda.synchronize()
    at, bad = 0, 0
    for src in range(G):
        n = int(counts[src])
        region = recv2[src * a.tokens:src * a.tokens + n]
        bad += int((recv[at:at + n] != region).sum())
        at += n
    bad += int((counts != counts2).sum())
    print(f"rank {rank}: padded against packed, {bad} bytes differ", flush=True)
    pt.prepare()
    graphs = {}
    for name, w in ways.items():
        torch.cuda.synchronize()
        dist.barrier()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            w.dispatch(x, s.dest)
        graphs[name] = g
    res = {name: [] for name in ways}
    for _ in range(3):
        for name, g in graphs.items():
            us = statistics.median(back_to_back(g, 100, device) for _ in range(5))
            res[name].append(ep.largest(us, device))
    if rank == 0:
        print(f"# {G} ranks, {a.tokens} tokens: dispatch, 100 replays back to back "
              f"(median of 5, largest over ranks), three rounds alternating")
        for name, v in res.items():
            print(f"{name:>8}: " + ", ".join(f"{u:.1f}" for u in v) + " us")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
