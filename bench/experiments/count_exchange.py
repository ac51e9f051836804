# SPDX-License-Identifier: Apache-2.0
"""The GPU time of an alltoallv's count exchange on one GPU, two ways:

    python3 bench/experiments/count_exchange.py [--tokens 4096] [--ranks 2,4,8]

`kernel`: p2pt_count_rows_async, one kernel that counts the [T, G] bool
routing by column, puts the counts into G rows (here all on this GPU)
and signals, then writes each row's running count ([G, T] int64), and a
wait for its signal. `torch`: what AlltoallV did before it: the routing
cast to int64 and transposed, summed along its rows, the row sent by a
device batch of G pieces that signals, the same wait, and beside it the
running counts (torch.cumsum of the cast copy; AlltoallV ran it on a side
stream). `floor`: a signal and the wait for it, two one-thread kernels,
what no count exchange of two launches can beat. Each captured in a CUDA
graph; GPU microseconds a replay over 200 replays back to back, median
of 5. No peer: the link's latency is not in any."""
import argparse
import statistics

import torch

from p2pt import _handle

SEM_WORDS = _handle.SEMAPHORE_BYTES // 8


def timed(g, n=200):
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        g.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1000 / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--ranks", default="2,4,8")
    a = p.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    h = _handle.Handle(transport="tma")
    h.prepare(0)
    T = a.tokens
    print(f"# {torch.cuda.get_device_name(dev)}, {T} tokens: GPU us a replay, "
          f"median of 5 x 200 back to back")
    for G in (int(v) for v in a.ranks.split(",")):
        gen = torch.Generator(device=dev).manual_seed(G)
        dest = torch.rand(T, G, device=dev, generator=gen) < 0.5
        i64 = dict(dtype=torch.int64, device=dev)
        matrix = torch.zeros(G, G, **i64)
        upto = torch.zeros(G, T, **i64)
        dest_t = torch.zeros(G, T, **i64)
        upto_t = torch.zeros(G, T, **i64)
        mine = torch.zeros(G, **i64)
        sems = torch.zeros(3, SEM_WORDS, **i64)
        descs = torch.tensor([[matrix[d].data_ptr(), mine.data_ptr(), G * 8] for d in range(G)],
                             **i64)
        count = torch.tensor([G], dtype=torch.int32, device=dev)
        ws = torch.zeros(_handle.workspace_bytes(G), dtype=torch.uint8, device=dev)
        for t in (matrix, mine):
            h.window_register(0, t.data_ptr(), t.nbytes)
        torch.cuda.synchronize()
        puts = [matrix[d].data_ptr() for d in range(G)]
        side = torch.cuda.Stream(dev)

        def kernel():
            s = torch.cuda.current_stream().cuda_stream
            h.count_rows(dest.data_ptr(), T, G, upto.data_ptr(), puts, [sems[0].data_ptr()], s)
            h.wait(sems[0].data_ptr(), 1, s)

        def old():
            main_s = torch.cuda.current_stream()
            dest_t.copy_(dest.t())
            side.wait_stream(main_s)
            torch.sum(dest_t, 1, out=mine)
            s = main_s.cuda_stream
            h.copy_batch_device_signal(descs.data_ptr(), count.data_ptr(), G, ws.data_ptr(),
                                       [sems[1].data_ptr()], s)
            with torch.cuda.stream(side):
                torch.cumsum(dest_t, 1, out=upto_t)
            h.wait(sems[1].data_ptr(), 1, s)
            main_s.wait_stream(side)

        def floor():
            s = torch.cuda.current_stream().cuda_stream
            h.signal(sems[2].data_ptr(), s)
            h.wait(sems[2].data_ptr(), 1, s)

        graphs = {}
        for name, fn in (("kernel", kernel), ("torch", old), ("floor", floor)):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            graphs[name] = g
        us = {name: [] for name in graphs}
        for _ in range(5):
            for name, g in graphs.items():
                us[name].append(timed(g))
        want = dest.to(torch.int64).sum(0)
        ok = torch.equal(matrix[G - 1], want) and torch.equal(upto, upto_t) and \
            torch.equal(upto.t(), dest.to(torch.int64).cumsum(0))
        print(f"G={G}: kernel {statistics.median(us['kernel']):6.2f} us, torch "
              f"{statistics.median(us['torch']):6.2f} us, floor "
              f"{statistics.median(us['floor']):6.2f} us "
              f"(kernel {min(us['kernel']):.2f}-{max(us['kernel']):.2f}, torch "
              f"{min(us['torch']):.2f}-{max(us['torch']):.2f}); counts and places "
              f"{'equal' if ok else 'DIFFER'}", flush=True)
        for t in (matrix, mine):
            h.window_unregister(0, t.data_ptr())
    h.close()


if __name__ == "__main__":
    main()
