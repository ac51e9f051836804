# SPDX-License-Identifier: Apache-2.0
"""MoE dispatch with p2pt.torch: the routing is computed on the GPU, and
p2pt.torch.copy_rows_ moves every token row to its expert's slot as one
device-descriptor batch, its descriptors built on the GPU from the index
tensors: no device-to-host sync, so the whole step is captured in a CUDA
graph and replayed on new tokens.

Each step: a gate picks the top-k experts of every token; a token row goes
to the next free slot of each chosen expert (rows past an expert's capacity
are dropped, as capacity-based dispatch does). The receive buffer holds
`experts x capacity` rows. With two GPUs, the second half of the experts
live on GPU 1 (peer access enabled through p2pt) and their rows are pushed
over NVLink by the same kernel.

Every replay is checked byte for byte against torch's own dispatch
(index_copy_ of the same rows into a second buffer). Three graphs are
captured: the routing (shared), the p2pt dispatch (one copy_rows_ per
receive buffer) and the torch dispatch (gather + index_copy_); the two
dispatches are timed apart from the routing (CUDA events, median of
replays), and the whole step with each.

    python3 examples/moe_dispatch.py                # defaults: 4096 tokens, 7168 bf16
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
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--peer", action="store_true", help="half the experts on GPU 1")
    return ap.parse_args()


class Dispatch:
    """Static buffers and the captured step."""

    def __init__(self, a):
        dev = torch.device("cuda", 0)
        self.a = a
        self.cap = int(a.capacity * a.tokens * a.topk / a.experts + 0.5)
        self.pairs = a.tokens * a.topk
        self.x = torch.empty(a.tokens, a.hidden, dtype=torch.bfloat16, device=dev)
        self.gate = torch.randn(a.hidden, a.experts, dtype=torch.bfloat16, device=dev) / a.hidden ** 0.5
        # Receive buffers: experts [0, local) on GPU 0, the rest on GPU 1.
        self.local = a.experts // 2 if a.peer else a.experts
        self.recv = [torch.zeros(self.local * self.cap, a.hidden, dtype=torch.bfloat16, device=dev)]
        if a.peer:
            n1 = (a.experts - self.local) * self.cap
            self.recv.append(torch.zeros(n1, a.hidden, dtype=torch.bfloat16, device="cuda:1"))
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

    def step_p2pt(self):
        """Each receive buffer takes the kept pairs of its experts: those
        first (a stable sort), their count read by the kernel."""
        self.status = []
        for recv, lo in zip(self.recv, (0, self.local)):
            mine = self.keep & (self.expert >= lo) & (self.expert < lo + recv.shape[0] // self.cap)
            order = torch.argsort((~mine).to(torch.int8), stable=True)
            row = (self.expert - lo) * self.cap + self.pos
            self.status.append(pt.copy_rows_(recv, row[order], self.x, self.token[order],
                                             count=mine.sum().to(torch.int32).reshape(1)))

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
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()  # warm-up outside the graph (allocations, kernel compile)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def timed(g, n):
    times = []
    for _ in range(n):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0)
    return statistics.median(times)


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
    g_route = capture(d.route)
    g_p2pt = capture(d.step_p2pt)
    g_torch = capture(d.step_torch)
    bad = 0
    for r in range(a.replays):
        d.x.normal_()  # new tokens, so a new routing
        for buf in d.recv + [d.ref]:
            buf.zero_()
        g_route.replay()
        g_p2pt.replay()
        g_torch.replay()
        torch.cuda.synchronize()
        st = [pt.batch_status(s) for s in d.status]
        rows = d.mismatches()
        if rows:
            print(f"replay {r}: {rows} rows differ from torch's dispatch")
            bad += 1
        if any(s.skipped for s in st):
            print(f"replay {r}: descriptors skipped: {st}")
            bad += 1
    t_route, t_p2pt, t_torch = timed(g_route, 50), timed(g_p2pt, 50), timed(g_torch, 50)
    copied = sum(s.copied for s in st)
    moved = copied * a.hidden * 2
    print(f"moe_dispatch: {a.tokens} tokens x {a.hidden} bf16, top-{a.topk} of {a.experts} experts"
          f"{' (half on GPU 1)' if a.peer else ''}, capacity {d.cap}: {copied} rows, "
          f"{moved / 2**20:.1f} MiB per step")
    print(f"moe_dispatch: dispatch with p2pt {t_p2pt:.1f} us, with index_copy_ {t_torch:.1f} us "
          f"(ratio {t_p2pt / t_torch:.3f}); routing {t_route:.1f} us, so a whole step "
          f"{t_route + t_p2pt:.1f} vs {t_route + t_torch:.1f} us; {a.replays} replays "
          f"{'byte-exact' if bad == 0 else f'with {bad} mismatches'}")
    p = h.properties()
    print(f"moe_dispatch: p2pt counters: {p['device_batches']} device batches, "
          f"{p['batch_launches']} batch launches")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
