# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed in real processes, one a GPU (2, or 4 where there are
4 GPUs), with torch.distributed (NCCL) as the bootstrap: every rank's
tensor shared and written by a put into a peer, ordered by signal and
wait; an AlltoallV of rows whose counts only the GPU knows, byte for byte
against the rows gathered on every rank, and its combine over rounds whose
rows change; the same captured in a CUDA graph and replayed with new
routing; the same with the sum of a rank's counts held back on its
stream; a tensor of PyTorch's symmetric memory, and a view inside it,
shared as PyTorch mapped them (skipped where PyTorch cannot make one); the
AlltoallV of a group of one; a rank whose tensor to share, or whose
AlltoallV sizes, differ from its peers' (a ValueError on every rank,
and the group still shares). Skips below two GPUs."""
import os
import tempfile

import pytest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    pytest.skip(f"no PyTorch: {e}", allow_module_level=True)
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA devices: PyTorch sees fewer", allow_module_level=True)

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

WORLD = 4 if torch.cuda.device_count() >= 4 else 2
ROW = 14336


def _init(rank, world, path):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{path}", rank=rank, world_size=world)


def _expected(x, dest, rank, world):
    """What rank `rank` must receive: every source's rows for it, sources
    in rank order, each in token order; and the rows from each source."""
    xs = [torch.empty_like(x) for _ in range(world)]
    ds = [torch.empty_like(dest) for _ in range(world)]
    dist.all_gather(xs, x)
    dist.all_gather(ds, dest)
    rows = [xs[s][ds[s][:, rank]] for s in range(world)]
    return torch.cat(rows), torch.tensor([r.shape[0] for r in rows], device=x.device)


def _routing(T, world, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randint(0, 256, (T, ROW), dtype=torch.uint8, device=device, generator=g)
    dest = torch.rand(T, world, device=device, generator=g) < 0.6
    return x, dest


def _check_back(back, x, dest, key, what):
    """back[t, d] is row t of x, as rank d's y held it (xor key), wherever
    dest[t, d]."""
    T, world = dest.shape
    mask = dest[:, :, None].expand(T, world, ROW)
    want = torch.bitwise_xor(x, key)[:, None, :].expand(T, world, ROW)
    assert torch.equal(back[mask], want[mask]), f"{what}: combine did not bring every row back"


def _worker(rank, world, path):
    import p2pt.distributed as pd
    import p2pt.torch as pt
    _init(rank, world, path)
    dev = torch.device("cuda", rank)
    # A put and its signal: each rank writes into the next one's buffer.
    buf = torch.zeros(4096, dtype=torch.uint8, device=dev)
    sems = pd.semaphores(1)
    # The group named once, and once left to its default.
    peers, peer_sems = pd.share(buf, dist.group.WORLD), pd.share(sems)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for r in range(50):
        data = torch.full((4096,), (rank * 50 + r) % 251, dtype=torch.uint8, device=dev)
        pt.copy_(peers[nxt], data)
        pd.signal(peer_sems[nxt][0])
        pd.wait(sems[0], 1)
        got = buf.clone()
        assert bool((got == (prv * 50 + r) % 251).all()), f"round {r}: a stale byte"
        dist.barrier()  # nobody overwrites buf before its owner read it
    _alltoallv(rank, world, dev)
    _late_counts(rank, world, dev)
    dist.barrier()
    dist.destroy_process_group()


def _alltoallv(rank, world, dev):
    """The alltoallv, eager and in a graph."""
    import p2pt.distributed as pd
    import p2pt.torch as pt
    T = 512
    a2a = pd.AlltoallV(T, ROW)
    x, dest = _routing(T, world, 100 + rank, dev)
    recv, counts = a2a.dispatch(x, dest)
    want, want_counts = _expected(x, dest, rank, world)
    assert torch.equal(counts, want_counts)
    assert torch.equal(recv[:want.shape[0]], want)
    a2a.y.copy_(recv)
    back = a2a.combine(dest)
    _check_back(back, x, dest, 0, "eager")
    # The own rows' batches: on the link's CTAs at two ranks, else through
    # a handle of their own on 32 // world CTAs.
    if world >= 3:
        assert a2a._own_h is not a2a.h
        assert 1 <= a2a._own_h.properties()["max_grid"] <= 32 // world
    else:
        assert a2a._own_h is a2a.h
    # Rounds whose rows and routing change, y a function of each round:
    # a stale slot, from any earlier round, fails.
    # Rounds 2 and 3 come back in 2 and 3 chunks, each copied out by
    # `then` as it lands.
    got = torch.zeros_like(a2a.back)

    def then(lo, hi):
        got[lo:hi].copy_(a2a.back[lo:hi])

    for r in range(1, 4):
        x, dest = _routing(T, world, 150 + 10 * r + rank, dev)
        recv, counts = a2a.dispatch(x, dest)
        torch.bitwise_xor(recv, r, out=a2a.y)
        _check_back(a2a.combine(dest, chunks=r, then=then), x, dest, r, f"eager round {r}")
        _check_back(got, x, dest, r, f"eager round {r}, then's copies")
    # Read instead: after ready(), every row where places() says, in the
    # y of the rank it went to (y changes first: a stale row fails).
    torch.bitwise_xor(recv, 7, out=a2a.y)
    a2a.ready()
    at = a2a.places(dest)
    pulled = torch.stack([a2a.peer_y[d][at[:, d]] for d in range(world)], dim=1)
    _check_back(pulled, x, dest, 7, "rows read where places() says")
    pt.prepare()
    gx, gdest = _routing(T, world, 200 + rank, dev)
    key = torch.zeros((), dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    dist.barrier()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        g_recv, g_counts = a2a.dispatch(gx, gdest)
        torch.bitwise_xor(g_recv, key, out=a2a.y)
        g_back = a2a.combine(gdest, chunks=2, then=then)
    for r in range(3):
        nx, nd = _routing(T, world, 300 + 7 * r + rank, dev)
        gx.copy_(nx)
        gdest.copy_(nd)
        key.fill_(11 + r)
        torch.cuda.synchronize()
        dist.barrier()
        g.replay()
        want, want_counts = _expected(nx, nd, rank, world)
        assert torch.equal(g_counts, want_counts), f"replay {r}: counts"
        assert torch.equal(g_recv[:want.shape[0]], want), f"replay {r}: rows"
        _check_back(g_back, nx, nd, 11 + r, f"replay {r}")
        _check_back(got, nx, nd, 11 + r, f"replay {r}, then's copies")


def _late_counts(rank, world, dev):
    """A dispatch whose count exchange starts late on the current stream
    (a sleep of ~1 ms before it): what reads its counts and places (the
    rows' descriptors, the runs of slots that travel with the rows) waits
    for them, so the rows land and the combine brings every row back,
    round after round of new routing."""
    import p2pt.distributed as pd
    T = 512
    a2a = pd.AlltoallV(T, ROW)
    count = a2a._counts_out

    def late(dest):
        torch.cuda._sleep(2_000_000)
        return count(dest)

    a2a._counts_out = late
    for r in range(3):
        x, dest = _routing(T, world, 500 + 10 * r + rank, dev)
        recv, counts = a2a.dispatch(x, dest)
        want, want_counts = _expected(x, dest, rank, world)
        assert torch.equal(counts, want_counts), f"late counts, round {r}: counts"
        assert torch.equal(recv[:want.shape[0]], want), f"late counts, round {r}: rows"
        torch.bitwise_xor(recv, 20 + r, out=a2a.y)
        _check_back(a2a.combine(dest), x, dest, 20 + r, f"late counts, round {r}")


def test_shared_tensors_signals_and_an_alltoallv_across_processes():
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(WORLD, os.path.join(d, "rendezvous")), nprocs=WORLD, join=True)


def _one_rank_worker(rank, world, path):
    _init(rank, world, path)
    _alltoallv(rank, world, torch.device("cuda", rank))
    dist.destroy_process_group()


def test_an_alltoallv_of_one_rank_sends_to_itself_and_waits_for_no_one():
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_one_rank_worker, args=(1, os.path.join(d, "rendezvous")), nprocs=1, join=True)


def _symmetric_worker(rank, world, path, out):
    """A tensor of PyTorch's symmetric memory, shared by p2pt.distributed
    as PyTorch mapped it: each rank puts a pattern of its own into the next
    rank's tensor and signals; the receiver finds every byte. Writes
    `out`.rank with "ok", or "unavailable: <why>" where PyTorch cannot make
    such a tensor here."""
    import p2pt.distributed as pd
    import p2pt.torch as pt
    _init(rank, world, path)
    dev = torch.device("cuda", rank)
    try:
        from torch.distributed import _symmetric_memory as symm_mem
        buf = symm_mem.empty(8192 + 7, dtype=torch.uint8, device=dev)
        sh = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    except Exception as e:  # no symmetric memory in this PyTorch or on this machine
        with open(f"{out}.{rank}", "w") as f:
            f.write(f"unavailable: {type(e).__name__}: {e}".splitlines()[0])
        dist.destroy_process_group()
        return
    buf.fill_(0xA5)
    sems = pd.semaphores(1)
    peers, peer_sems = pd.share(buf), pd.share(sems)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    others = [r for r in range(world) if r != rank]
    assert [peers[r].data_ptr() for r in others] == [sh.buffer_ptrs[r] for r in others], \
        "share did not hand back PyTorch's own mapping of the peers' buffers"
    g = torch.Generator(device=dev).manual_seed(40 + rank)
    data = torch.randint(0, 256, (8192,), dtype=torch.uint8, device=dev, generator=g)
    torch.cuda.synchronize()
    dist.barrier()
    pt.copy_(peers[nxt][3:8195], data)  # odd offset, guard bytes either side
    pd.signal(peer_sems[nxt][0])
    pd.wait(sems[0], 1)
    want = torch.randint(0, 256, (8192,), dtype=torch.uint8, device=dev,
                         generator=torch.Generator(device=dev).manual_seed(40 + prv))
    got = buf.clone()
    assert torch.equal(got[3:8195], want), "a byte of the put differs"
    assert bool((got[:3] == 0xA5).all()) and bool((got[8195:] == 0xA5).all()), "a guard changed"
    # A view that starts inside the buffer: each peer's at the same offset.
    dist.barrier()
    view = buf[4096:4096 + 1024]
    peer_views = pd.share(view)
    assert [peer_views[r].data_ptr() for r in others] == \
        [sh.buffer_ptrs[r] + 4096 for r in others], "a view's peers are not at its offset"
    torch.cuda.synchronize()
    dist.barrier()
    pt.copy_(peer_views[nxt], data[:1024])
    torch.cuda.synchronize()
    dist.barrier()
    assert torch.equal(buf[4096:5120], want[:1024]), "a byte put through a view differs"
    dist.barrier()
    with open(f"{out}.{rank}", "w") as f:
        f.write("ok")
    dist.destroy_process_group()


def _spawn_said(worker):
    """worker(rank, WORLD, rendezvous, out) on every rank; what each rank
    wrote to `out`.rank."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result")
        mp.spawn(worker, args=(WORLD, os.path.join(d, "rendezvous"), out), nprocs=WORLD,
                 join=True)
        return [open(f"{out}.{r}").read() for r in range(WORLD)]


def test_a_symmetric_memory_tensor_is_shared_as_pytorch_mapped_it():
    said = _spawn_said(_symmetric_worker)
    if all(s.startswith("unavailable") for s in said):
        pytest.skip(f"PyTorch's symmetric memory: {said[0]}")
    assert said == ["ok"] * WORLD, said


def _mismatch_worker(rank, world, path, out):
    """Every rank but the last shares a tensor of one shape, the last one
    of another; then every rank makes an AlltoallV, the last with another
    max_rows. Writes `out`.rank with what each call raised, one a line;
    then shares a tensor of one shape on every rank, to show the group
    still works."""
    import p2pt.distributed as pd
    import p2pt.torch as pt
    _init(rank, world, path)
    dev = torch.device("cuda", rank)
    said = []
    n = 4096 if rank < world - 1 else 2048
    try:
        pd.share(torch.zeros(n, dtype=torch.uint8, device=dev))
        said.append("no error")
    except ValueError as e:
        said.append(str(e))
    try:
        pd.AlltoallV(64 if rank < world - 1 else 32, 16)
        said.append("no error")
    except ValueError as e:
        said.append(str(e))
    mine = torch.full((16,), rank, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    peers = pd.share(mine)
    got = torch.empty(len(peers), 16, dtype=torch.uint8, device=dev)
    for r, p in enumerate(peers):
        pt.copy_(got[r], p)  # a get from each peer
    said.append(" ".join(str(int(v)) for v in got[:, 0].tolist()))
    with open(f"{out}.{rank}", "w") as f:
        f.write("\n".join(said))
    dist.barrier()
    dist.destroy_process_group()


def test_a_rank_with_another_shape_or_size_gets_a_clear_error_on_every_rank():
    said = [s.split("\n") for s in _spawn_said(_mismatch_worker)]
    last = WORLD - 1
    for r, (share_err, a2a_err, peers) in enumerate(said):
        assert share_err.startswith("p2pt.distributed.share: every rank passes a tensor of one "
                                    "shape and dtype"), share_err
        other = f"rank {last} passed [2048] torch.uint8" if r < last else \
            "rank 0 passed [4096] torch.uint8"
        assert other in share_err and f"rank {r} (this one)" in share_err, share_err
        assert a2a_err.startswith("p2pt.distributed.AlltoallV: every rank gives the same "
                                  "max_rows and row_bytes"), a2a_err
        other = f"rank {last} gave 32 and 16" if r < last else "rank 0 gave 64 and 16"
        assert other in a2a_err, a2a_err
        assert peers == " ".join(str(p) for p in range(WORLD)), peers
