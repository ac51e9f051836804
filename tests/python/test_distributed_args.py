# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed's argument checks, on the CPU: each bad argument of
semaphores, signal, wait, share and AlltoallV's constructor gets a
ValueError that names what was expected and what came, before any GPU
work or collective; and the check of a value every rank must give alike
(share's shape and dtype, AlltoallV's sizes), over gloo."""
import pytest

torch = pytest.importorskip("torch")
try:
    import p2pt.distributed as pd
    from p2pt.distributed import _alltoallv as av
    from p2pt.distributed._args import same_on_every_rank
except ImportError as e:  # p2pt.distributed needs torch.distributed
    pytest.skip(f"p2pt.distributed: {e}", allow_module_level=True)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "4"])
def test_semaphores_wants_a_count_of_at_least_one(n):
    with pytest.raises(ValueError, match=f"n must be an int of at least 1, not {n!r}"):
        pd.semaphores(n)


@pytest.mark.parametrize("count", [0, -1, 1 << 32, 1.0, False])
def test_wait_wants_a_count_that_fits_32_bits(count):
    with pytest.raises(ValueError, match=r"count must be an int of 1 to 2\^32 - 1"):
        pd.wait(torch.zeros(4, dtype=torch.int64), count)


@pytest.mark.parametrize("sem, says", [
    (torch.zeros(4, dtype=torch.int64), "on cpu"),
    (torch.zeros(4, dtype=torch.int32), "torch.int32"),
    (torch.zeros(2, 4, dtype=torch.int64), "(2, 4)"),
    (0x1000, "not int"),
])
def test_signal_and_wait_want_one_semaphore_of_gpu_memory(sem, says):
    for call in (lambda: pd.signal(sem), lambda: pd.wait(sem, 1)):
        with pytest.raises(ValueError, match="a semaphore is one row of semaphores") as e:
            call()
        assert says in str(e.value)


@pytest.mark.parametrize("t, says", [
    (torch.zeros(8), "on cpu"),
    (torch.zeros(4, 4).t(), "not contiguous"),
    ([0.0] * 8, "not list"),
])
def test_share_wants_a_contiguous_gpu_tensor(t, says):
    with pytest.raises(ValueError, match="share: expected a contiguous CUDA tensor") as e:
        pd.share(t)
    assert says in str(e.value)


@pytest.mark.parametrize("max_rows, row_bytes, says", [
    (0, 16, "max_rows must be an int of at least 1, not 0"),
    (16, 0, "row_bytes must be an int of at least 1, not 0"),
    (16.0, 16, "max_rows must be an int of at least 1, not 16.0"),
    (16, -3, "row_bytes must be an int of at least 1, not -3"),
])
def test_alltoallv_wants_positive_sizes(max_rows, row_bytes, says):
    with pytest.raises(ValueError, match=says):
        pd.AlltoallV(max_rows, row_bytes)


def test_alltoallv_refuses_a_group_its_batches_cannot_signal(monkeypatch):
    monkeypatch.setattr(av.dist, "get_world_size", lambda group=None: av.COUNT_COLS_MAX + 1)
    with pytest.raises(ValueError, match=f"a group of {av.COUNT_COLS_MAX + 1} ranks; a batch "
                                         f"signals at most {av.BATCH_SIGNALS_MAX} peers and the "
                                         f"count exchange counts at most {av.COUNT_COLS_MAX} "
                                         f"ranks, so at most 64 ranks"):
        pd.AlltoallV(16, 16)


def _agree_worker(rank, world, path, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        same_on_every_rank("where", "every rank gives one n", "gave", (8 if rank else 4, 2),
                              lambda z: f"{z[0]} and {z[1]}", None)
        said = "no error"
    except ValueError as e:
        said = str(e)
    same_on_every_rank("where", "every rank gives one n", "gave", 3, str, None)
    with open(f"{out}.{rank}", "w") as f:
        f.write(said)
    dist.destroy_process_group()


def test_a_value_that_differs_between_ranks_is_named_on_every_rank():
    """The check share and AlltoallV make before they export, over gloo on
    the CPU: both ranks raise, naming the other's value and their own, and
    the group goes on (a second, agreeing check passes)."""
    import os
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "said")
        mp.spawn(_agree_worker, args=(2, os.path.join(d, "rendezvous"), out), nprocs=2, join=True)
        said = [open(f"{out}.{r}").read() for r in range(2)]
    assert said == ["where: every rank gives one n; rank 1 gave 8 and 2, rank 0 (this one) "
                    "4 and 2",
                    "where: every rank gives one n; rank 0 gave 4 and 2, rank 1 (this one) "
                    "8 and 2"], said


class _FakeShareHandle:
    """share()'s handle calls, logged; `fail` names the call that raises a
    p2pt.Error here."""

    def __init__(self, rank, fail, where):
        self.rank, self.fail, self.log, self.where = rank, fail, [], where

    def _marker(self, rank):  # stands for rank's export, seen by every rank
        import os
        return os.path.join(self.where, f"export-{rank}")

    def _maybe_fail(self, call):
        if self.fail == call:
            import p2pt
            raise p2pt.Error(6, f"{call} refused on rank {self.rank}")

    def share_export(self, base, nbytes):
        self._maybe_fail("export")
        self.log.append(f"export {base:#x}")
        open(self._marker(self.rank), "w").close()
        return [b"rank%d" % self.rank]

    def share_import(self, device, blobs):
        import os
        self._maybe_fail("import")
        if not os.path.exists(self._marker(int(blobs[0][4:]))):
            import p2pt
            raise p2pt.Error(5, f"{blobs[0].decode()}'s export has ended")
        self.log.append(f"import {blobs[0].decode()}")
        return 0x10000 * (1 + int(blobs[0][4:])), f"imp{blobs[0][4:].decode()}"

    def share_unexport(self, base):
        import os
        os.remove(self._marker(self.rank))
        self.log.append(f"unexport {base:#x}")

    def share_close(self, imp):
        self.log.append(f"close {imp}")


def _exchange_worker(rank, world, path, out):
    import torch.distributed as dist
    from p2pt.distributed import _share
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    said = []
    # Every rank well; rank 1's export refused; rank 0's import refused.
    for fail_on in (None, (1, "export"), (0, "import")):
        import os
        h = _FakeShareHandle(rank, fail_on[1] if fail_on and fail_on[0] == rank else None,
                             os.path.dirname(path))
        try:
            got = _share._exchange(h, 0, 0x1000 * (rank + 1), 256, 16 * (rank + 1), None)
            said.append(f"{got} | {'; '.join(h.log)}")
        except Exception as e:
            said.append(f"{type(e).__name__} {getattr(e, 'status', '-')}: {e} | "
                        f"{'; '.join(h.log)}")
    # A step of any kind that fails on rank 1 alone.
    from p2pt.distributed._agree import on_every_rank

    def step():
        if rank == 1:
            raise MemoryError("no room on rank 1")
        return "made"
    try:
        said.append(on_every_rank("where", None, step))
    except Exception as e:
        said.append(f"{type(e).__name__}: {e}")
    said.append(on_every_rank("where", None, lambda: f"rank {rank} well"))
    dist.barrier()  # the group still works after every failure
    with open(f"{out}.{rank}", "w") as f:
        f.write("\n".join(said))
    dist.destroy_process_group()


def test_share_ends_its_export_and_a_failing_rank_fails_every_rank_naming_it():
    """share()'s exchange over gloo on the CPU, with a handle that logs:
    every rank imports every peer's export at that peer's offset (an import
    of an export that has ended fails), then ends its own export (after the
    gather that says every import is made);
    a rank whose export or import is refused raises its p2pt.Error, and
    every other rank one naming it with the same status, none waiting for
    it; exports end and imports made are closed either way. Any step that
    fails on one rank alone (on_every_rank, as AlltoallV's construction
    takes its own) raises there, and on every other rank naming it."""
    import os
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "said")
        mp.spawn(_exchange_worker, args=(2, os.path.join(d, "rendezvous"), out), nprocs=2,
                 join=True)
        said = [open(f"{out}.{r}").read().split("\n") for r in range(2)]
    assert said[0] == [
        "[None, (131104, 'imp1')] | export 0x1000; import rank1; unexport 0x1000",
        "Error 6: p2pt status 6 (NOT_SUPPORTED): p2pt.distributed.share: rank 1 failed: "
        "export refused on rank 1 | export 0x1000; unexport 0x1000",
        "Error 6: p2pt status 6 (NOT_SUPPORTED): import refused on rank 0 | export 0x1000; "
        "unexport 0x1000",
        "RuntimeError: where: rank 1 failed: MemoryError: no room on rank 1",
        "rank 0 well",
    ], said[0]
    assert said[1] == [
        "[(65552, 'imp0'), None] | export 0x2000; import rank0; unexport 0x2000",
        "Error 6: p2pt status 6 (NOT_SUPPORTED): export refused on rank 1 | ",
        "Error 6: p2pt status 6 (NOT_SUPPORTED): p2pt.distributed.share: rank 0 failed: "
        "import refused on rank 0 | export 0x2000; import rank0; close imp0; unexport 0x2000",
        "MemoryError: no room on rank 1",
        "rank 1 well",
    ], said[1]


class _FakeSymmetric:
    """The parts of PyTorch's _SymmetricMemory that share() reads."""

    def __init__(self, base, rank=0, world=3):
        self.buffer_ptrs, self.rank, self.world_size, self.asked = [base] * world, rank, world, []

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        self.asked.append((rank, tuple(sizes), dtype, storage_offset))
        return f"rank {rank}"


def test_a_symmetric_memory_view_maps_each_peer_at_its_own_offset():
    """A tensor inside its symmetric buffer (a view at an offset): each
    peer's buffer is asked for at that offset, in elements; a tensor at a
    byte offset that is no whole element is a ValueError naming it."""
    from p2pt.distributed import _share
    buf = torch.zeros(1024, dtype=torch.int32)
    view = buf[40:104].view(8, 8)
    sh = _FakeSymmetric(buf.data_ptr(), rank=1)
    got = _share._symmetric_views(sh, view)
    assert got[1] is view and got[0] == "rank 0" and got[2] == "rank 2"
    assert sh.asked == [(0, (8, 8), torch.int32, 40), (2, (8, 8), torch.int32, 40)]
    # A buffer that starts 2 bytes before the tensor (its dtype viewed
    # otherwise by its owner): no int32 of the peers' lies there.
    with pytest.raises(ValueError, match="a tensor 2 bytes into its symmetric buffer, not a "
                                         "whole number of its 4-byte elements"):
        _share._symmetric_views(_FakeSymmetric(buf.data_ptr() - 2), buf[:8])


def test_alltoallv_refuses_a_group_whose_windows_its_handle_cannot_hold(monkeypatch):
    """A window a peer and six of its own, of the handle's max_windows: a
    ValueError naming the most ranks, before any collective."""

    class Few:
        def properties(self):
            return {"max_windows": 16}

    monkeypatch.setattr(av.dist, "get_world_size", lambda group=None: 12)
    monkeypatch.setattr(av.dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(av._handles, "_get", lambda hid: Few())
    monkeypatch.setattr(av._handles, "_hid", lambda handle: 0)
    monkeypatch.setattr(av, "on_every_rank", lambda where, group, step: step())
    with pytest.raises(ValueError, match="a group of 12 ranks; its handle holds a window of each "
                                         "peer's buffers and 6 of its own, of at most 16 a "
                                         "device, so at most 11 ranks"):
        pd.AlltoallV(16, 16)
