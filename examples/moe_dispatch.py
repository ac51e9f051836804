# SPDX-License-Identifier: Apache-2.0
"""MoE dispatch with p2pt.torch: the routing is computed on the GPU, and
one device-descriptor batch per receive buffer moves every token row to
its expert's slot, its descriptors built on the GPU by torch ops: no
device-to-host sync, so the whole step is captured in a CUDA graph and
replayed on new tokens.

Each step: a gate picks the top-k experts of every token; a token row goes
to the next free slot of each chosen expert (rows past an expert's capacity
are dropped, as capacity-based dispatch does). The receive buffer holds
`experts x capacity` rows. With two GPUs, the second half of the experts
live on GPU 1 (peer access enabled through p2pt) and their rows are pushed
over NVLink by the same kernel.

The descriptors (--build):
  fused  one (dst, src, bytes) record per (token, expert) pair, in place,
         from the routing's expert, slot and token tensors: dst = the
         buffer's base + (expert * capacity + slot) * row bytes, src = x's
         base + token * row bytes, bytes = row bytes for a kept pair and 0
         for a dropped one (a zero-byte piece touches nothing). The copy
         is order-independent and no two kept pairs share a slot, so there
         is no sort, no compaction, and the count is always every pair.
  old    what this example did before: per receive buffer, a mask of its
         kept pairs, a stable sort that puts them first, the index tensors
         gathered in that order, p2pt.torch.row_descriptors, and the count
         of kept pairs.

Captured graphs, each timed alone (CUDA events, median of replays): the
routing (shared, not part of either dispatch), (a) building the
descriptors, (b) the p2pt device batch alone over descriptors already
built, (c) the whole p2pt step (a then b), and (d) torch's dispatch (the
rows' slots, a gather and index_copy_). The ratios (c)/(d) and (b)/(d)
follow, and how many kernels and copies each part puts on the GPU (one
eager run under the profiler). Every checked replay, alternately (c) and
(a) then (b), is compared byte for byte with (d) (index_copy_ of the same
rows into a second buffer).

    python3 examples/moe_dispatch.py                # defaults: 4096 tokens, 7168 bf16
    python3 examples/moe_dispatch.py --build old    # the sort-and-mask build
    python3 examples/moe_dispatch.py --peer         # half the experts on GPU 1
Needs PyTorch with CUDA, a Hopper GPU, and p2pt (pip install ., or P2PT_LIBRARY).
Exit status: 0 when every replay matched, 1 otherwise, 2 when it cannot run.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
except ImportError:
    print("moe_dispatch: PyTorch is not installed", file=sys.stderr)
    sys.exit(2)
import p2pt.torch as pt  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=7168, help="bf16 elements per row (7168 = 14 KiB)")
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--capacity", type=float, default=1.25, help="slots per expert / (tokens*topk/experts)")
    ap.add_argument("--build", choices=("fused", "old"), default="fused",
                    help="how the descriptors are built (see above)")
    ap.add_argument("--replays", type=int, default=20, help="replays checked byte for byte")
    ap.add_argument("--timed", type=int, default=50, help="replays timed per graph")
    ap.add_argument("--peer", action="store_true", help="half the experts on GPU 1")
    return ap.parse_args()


class Dispatch:
    """Static buffers, the routing, both descriptor builds, the copy and
    torch's dispatch."""

    def __init__(self, a):
        dev = torch.device("cuda", 0)
        self.a = a
        self.cap = int(a.capacity * a.tokens * a.topk / a.experts + 0.5)
        self.pairs = a.tokens * a.topk
        self.x = torch.randn(a.tokens, a.hidden, device=dev).to(torch.bfloat16)
        self.rb = a.hidden * self.x.element_size()  # bytes per row
        self.gate = torch.randn(a.hidden, a.experts, dtype=torch.bfloat16, device=dev) / a.hidden ** 0.5
        # Receive buffers: experts [0, local) on GPU 0, the rest on GPU 1.
        self.local = a.experts // 2 if a.peer else a.experts
        self.first = [0, self.local]  # each buffer's first expert
        self.recv = [torch.zeros(self.local * self.cap, a.hidden, dtype=torch.bfloat16, device=dev)]
        if a.peer:
            n1 = (a.experts - self.local) * self.cap
            self.recv.append(torch.zeros(n1, a.hidden, dtype=torch.bfloat16, device="cuda:1"))
        # The device batches read only registered memory; the batch kernel
        # runs on GPU 0, so every window is GPU 0's.
        for t in self.recv + [self.x]:
            pt.register_window(t, device=0)
        # The fused build's static tables, one per receive buffer, their
        # count every pair. The base addresses are 0-d CPU tensors, which
        # enter the kernels as arguments: buffer b's base is shifted back by
        # its first expert's rows, so that expert * capacity + slot indexes
        # it directly.
        self.descs = [torch.zeros(self.pairs, 3, dtype=torch.int64, device=dev) for _ in self.recv]
        self.count = [torch.full((1,), self.pairs, dtype=torch.int32, device=dev) for _ in self.recv]
        self.x_base = torch.tensor(self.x.data_ptr())
        self.recv_base = [torch.tensor(r.data_ptr() - lo * self.cap * self.rb)
                          for r, lo in zip(self.recv, self.first)]
        # torch's dispatch, the reference: every expert's slots on GPU 0, plus
        # one row where dropped pairs land (no boolean indexing, which would
        # need the host to know the count and so could not be captured).
        self.trash = a.experts * self.cap
        self.ref = torch.zeros(self.trash + 1, a.hidden, dtype=torch.bfloat16, device=dev)

    def route(self):
        """Top-k experts per token and each (token, k) pair's slot, on the GPU,
        into static tensors both dispatches read."""
        a = self.a
        scores = self.x @ self.gate
        self.expert = scores.topk(a.topk, dim=1).indices.reshape(-1)  # [pairs], token-major
        self.token = torch.arange(a.tokens, device=self.expert.device).repeat_interleave(a.topk)
        onehot = torch.nn.functional.one_hot(self.expert, a.experts).to(torch.int32)
        self.pos = (onehot.cumsum(0) - 1).gather(1, self.expert[:, None]).squeeze(1)  # slot in expert
        self.keep = self.pos < self.cap

    def build_fused(self):
        """Every pair's descriptor in place: four kernels for one receive
        buffer (two for dst, one for src, one for bytes)."""
        rb = self.rb
        if len(self.recv) == 1:
            mine = [self.keep]
        else:
            half = torch.div(self.expert, self.local, rounding_mode="floor")
            owner = torch.where(self.keep, half, -1)
            mine = [owner == b for b in range(len(self.recv))]
        for d, base, m in zip(self.descs, self.recv_base, mine):
            torch.add(base, self.pos, alpha=rb, out=d[:, 0])
            d[:, 0].add_(self.expert, alpha=self.cap * rb)
            torch.add(self.x_base, self.token, alpha=rb, out=d[:, 1])
            torch.mul(m, rb, out=d[:, 2])
        return self.descs, self.count

    def build_old(self):
        """Each receive buffer's kept pairs first (a stable sort), their
        count read by the kernel."""
        descs, counts = [], []
        for recv, lo in zip(self.recv, self.first):
            mine = self.keep & (self.expert >= lo) & (self.expert < lo + recv.shape[0] // self.cap)
            order = torch.argsort((~mine).to(torch.int8), stable=True)
            row = (self.expert - lo) * self.cap + self.pos
            descs.append(pt.row_descriptors(recv, row[order], self.x, self.token[order]))
            counts.append(mine.sum().to(torch.int32).reshape(1))
        return descs, counts

    @staticmethod
    def copy(descs, counts):
        """One device batch per receive buffer; their status records."""
        return [pt.copy_batch_device_(d, c) for d, c in zip(descs, counts)]

    def step_torch(self):
        row = torch.where(self.keep, self.expert * self.cap + self.pos, self.trash)
        self.ref.index_copy_(0, row, self.x[self.token])

    def mismatches(self):
        """Rows of the p2pt buffers that differ from torch's."""
        n0 = self.local * self.cap
        parts = [(self.recv[0], self.ref[:n0])]
        if self.a.peer:
            parts.append((self.recv[1].to(self.ref.device), self.ref[n0:self.trash]))
        return sum((m.view(torch.int16) != r.view(torch.int16)).any(1).sum().item() for m, r in parts)


def capture(fn):
    """fn captured in a CUDA graph after two warm-up runs; the graph and what
    the captured call returned (tensors the graph writes at each replay)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()  # warm-up outside the graph (allocations, kernel compile)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def timed(g, n):
    """Median GPU time of one replay of g, in microseconds."""
    times = []
    for _ in range(n):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0)
    return statistics.median(times)


def launches(fn):
    """How many kernels, copies and memsets one eager run of fn puts on the
    GPU, from the profiler's CUDA activity: the nodes its captured graph
    replays, each with a fixed cost. None when the profiler cannot tell."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA) or None
    except Exception:  # the count is a hint; the timings stand without it
        return None


def main():
    a = parse()
    if not torch.cuda.is_available():
        print("moe_dispatch: no CUDA device", file=sys.stderr)
        return 2
    if a.peer and torch.cuda.device_count() < 2:
        print("moe_dispatch: --peer needs 2 GPUs", file=sys.stderr)
        return 2
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")  # make the primary context current
    h = pt.handle(transport="tma")
    if a.peer:
        h.peer_enable(0, 1)
    d = Dispatch(a)
    build = d.build_fused if a.build == "fused" else d.build_old
    g_route, _ = capture(d.route)
    g_route.replay()  # the builds' warm-ups read the routing's tensors
    g_build, built = capture(build)
    g_build.replay()  # the copy's warm-up reads these descriptors
    g_copy, st_copy = capture(lambda: d.copy(*built))
    g_step, st_step = capture(lambda: d.copy(*build()))
    g_torch, _ = capture(d.step_torch)
    bad = 0
    for r in range(a.replays):
        d.x.normal_()  # new tokens, so a new routing
        for buf in d.recv + [d.ref]:
            buf.zero_()
        g_route.replay()
        if r % 2 == 0:
            g_step.replay()
            st, how = st_step, "(c)"
        else:
            g_build.replay()
            g_copy.replay()
            st, how = st_copy, "(a) then (b)"
        g_torch.replay()
        torch.cuda.synchronize()
        st = [pt.batch_status(s) for s in st]
        rows = d.mismatches()
        if rows:
            print(f"moe_dispatch: replay {r}, {how}: {rows} rows differ from torch's dispatch",
                  file=sys.stderr)
            bad += 1
        if any(s.skipped for s in st):
            print(f"moe_dispatch: replay {r}, {how}: descriptors skipped: {st}", file=sys.stderr)
            bad += 1
    kept = int(d.keep.sum())
    t = {k: timed(g, a.timed) for k, g in
         (("route", g_route), ("a", g_build), ("b", g_copy), ("c", g_step), ("d", g_torch))}
    k = {"a": launches(build), "b": launches(lambda: d.copy(*built)),
         "c": launches(lambda: d.copy(*build())), "d": launches(d.step_torch)}
    print(f"moe_dispatch: {a.tokens} tokens x {a.hidden} bf16, top-{a.topk} of {a.experts} experts"
          f"{' (half on GPU 1)' if a.peer else ''}, capacity {d.cap}: {kept} rows, "
          f"{kept * d.rb / 2**20:.1f} MiB per step; descriptors built by --build {a.build}; "
          f"graphs, median of {a.timed} replays")
    for key, what in (("a", "building the descriptors"), ("b", "p2pt device batch alone"),
                      ("c", "p2pt step, (a) then (b)"), ("d", "torch: slots, gather, index_copy_")):
        n = "?" if k[key] is None else k[key]
        print(f"moe_dispatch: ({key}) {what:<34} {t[key]:8.1f} us  {n} GPU launches")
    print(f"moe_dispatch: (c)/(d) {t['c'] / t['d']:.3f}, (b)/(d) {t['b'] / t['d']:.3f}; routing "
          f"{t['route']:.1f} us (in neither); {a.replays} replays "
          f"{'byte-exact' if bad == 0 else f'with {bad} failures'}")
    p = h.properties()
    print(f"moe_dispatch: p2pt counters: {p['device_batches']} device batches, "
          f"{p['batch_launches']} batch launches")
    if bad:
        print(f"moe_dispatch: FAILED: {bad} checks of {a.replays} replays failed", file=sys.stderr)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
