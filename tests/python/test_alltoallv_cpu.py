# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed.AlltoallV's protocol on the CPU: G ranks in one
process, each with its buffers in host memory, every device batch carried
out at once by copying its pieces (dst, src, bytes) between those buffers,
and the waits empty. The ranks take each step in turn (the count exchange
of all, then their rows, then the combine), as the signals order them on
GPUs. Checks the addresses the pieces carry: every row lands where its
receiver reads it, each row's slot travels with it, and the combine brings
every row back into its (token, rank) slot, over rounds whose routing
changes; that a rank's rows to itself go in a batch of their own, and no
other; that places() names where each row lies in every rank's y; that
a chunked combine sends each row once, in one batch of K parts, and that
each chunk's `then` runs only once every part that holds a row of its
tokens is in. And the construction whole over gloo, the GPU's calls stood
in for: a rank whose windows are refused fails every rank, naming it."""
import contextlib
import ctypes
import re

import pytest

torch = pytest.importorskip("torch")
try:
    from p2pt.distributed import _alltoallv as av
except ImportError as e:  # p2pt.distributed needs torch.distributed
    pytest.skip(f"p2pt.distributed: {e}", allow_module_level=True)

ROW = 48  # bytes a row: small, and not a multiple of 32


def _run(descs, n):
    """A device batch, carried out: each piece's bytes copied."""
    for dst, src, size in descs[:int(n)].tolist():
        if size:
            ctypes.memmove(dst, src, size)


class _Stream:
    """A stream on the CPU: work runs as it is issued."""

    def wait_stream(self, other):
        pass

    def record_event(self):
        return None

    def wait_event(self, event):
        pass


def _running(dest):
    """upto[t, d]: the rows to d up to and including row t."""
    return dest.to(torch.int64).cumsum(0)


def _inside(addr, t):
    return t.data_ptr() <= addr < t.data_ptr() + t.nbytes


def _batch_of(a):
    """Rank a's device batch, carried out, after checking the split: a
    batch with no signal (k None) holds a's rows to itself alone, in a
    workspace of its own (it runs beside the other); a signalling one, none
    of them; the runs of slots go in a signalling batch of their own, on the
    second side stream in a third workspace, into the ranks' slots. The
    own rows' batch goes through the own rows' handle, every other through
    the step's."""
    def batch(descs, n, max_count, out, k, ws=None, stream=None, marks=1, hid=None):
        assert int(n[0]) <= max_count <= descs.shape[0] and max_count >= 1  # as the library
        assert hid is (a._own_hid if k is None else None)
        assert 1 <= marks <= min(max_count, av._MAX_CHUNKS) and (marks == 1 or k is not None)
        slots = ws is a.ws_slots  # the runs of slots, beside the rows
        assert ws is (a.ws_own if k is None else None) or slots
        if slots:
            assert k == av._ROWS and stream is a._side2 and descs.data_ptr() == a.descs.data_ptr()
            assert int(n[0]) == a.G
            for dst, _, size in descs[:a.G].tolist():
                assert not size or any(_inside(dst, t) for t in a.peer_slots), \
                    f"rank {a.rank}'s slots batch writes outside the ranks' slots"
        for dst, _, size in descs[:int(n[0])].tolist():
            own = _inside(dst, a.recv) or _inside(dst, a.back)
            if size and k is None:
                assert own, f"rank {a.rank}'s own batch writes outside its recv and back"
            elif size and (own and k in (av._ROWS, av._BACK)):
                raise AssertionError(f"rank {a.rank}'s batch to its peers writes its own rows")
        if k is not None and k >= av._CHUNK0:
            a.chunk_batches.append((k - av._CHUNK0, marks, max_count, descs[:int(n[0])].clone()))
        a.log.append(("batch", k, "slots") if slots else ("batch", k))
        _run(descs, n[0])
    return batch


def _count_of(log):
    """The count exchange (p2pt_count_rows_async), carried out: the
    routing's column counts written at every put address, each row's
    running count in upto, counted by a loop."""
    def count(hid, dest, upto, puts, signals):
        T, G = dest.shape
        assert dest.is_contiguous() and upto.shape == (G, T) and len(puts) == G
        assert len(signals) == G - 1
        running = [0] * G
        for t in range(T):
            for d in range(G):
                running[d] += bool(dest[t, d])
                upto[d, t] = running[d]
        counts = torch.tensor(running, dtype=torch.int64)
        for at in puts:
            ctypes.memmove(at, counts.data_ptr(), counts.nbytes)
        log.append(("count",))
    return count


def _signals(G, ranks, sem):
    """The signals a wait on `sem` must count: two a peer for a dispatch's
    rows (the rows and the runs of slots), one for the rest."""
    rows = any(sem.data_ptr() == a._sem_rows[av._ROWS].data_ptr() for a in ranks)
    return (2 if rows else 1) * (G - 1)


def _ranks(G, max_rows, monkeypatch):
    def wait(sem, count, **_):  # the library refuses a wait for no signal
        assert 1 <= count == _signals(G, ranks, sem)

    monkeypatch.setattr(av, "wait", wait)
    monkeypatch.setattr(av, "_count_enqueue", _count_of([]))
    monkeypatch.setattr(av.torch.cuda, "current_stream", lambda *_: _Stream())
    monkeypatch.setattr(av.torch.cuda, "stream", lambda _: contextlib.nullcontext())
    ranks = []
    for r in range(G):
        a = av.AlltoallV.__new__(av.AlltoallV)
        a.G, a.rank, a.max_rows, a.rb, a.handle, a.hid = G, r, max_rows, ROW, None, 0
        a._own_h, a._own_hid = None, object()  # a handle of its own, whatever G
        a._local(torch.device("cpu"))
        a._side, a._side2 = _Stream(), _Stream()
        a.ws_own, a.ws_slots, a.chunk_batches, a.log = object(), object(), [], []
        a._batch = _batch_of(a)
        ranks.append(a)
    for a in ranks:
        a._link(*([getattr(b, f) for b in ranks]
                  for f in ("recv", "back", "slots", "matrix", "sems", "y")))
    return ranks


def _rows_phase(a, x, dest):
    """Rank a's rows and their slots, once every rank's counts are here."""
    starts = a._describe_starts()
    a._describe_runs()
    a._batch(a._runs, a.count_n, a.G, a.slots, av._ROWS, a.ws_slots, a._side2)
    a._describe_places(dest.shape[0], starts)
    a._rows_out(x, dest)


def _dispatch(ranks, T, g, rows=_rows_phase):
    """A dispatch of T tokens of new rows and routing on every rank (rank
    0 sends nothing to rank 1), each phase of all ranks in turn; `rows`
    runs each rank's rows phase."""
    G = len(ranks)
    xs = [torch.randint(0, 256, (T, ROW), dtype=torch.uint8, generator=g) for _ in ranks]
    dests = [torch.rand(T, G, generator=g) < 0.5 for _ in ranks]
    dests[0][:, 1 % G] = False
    for a, x, dest in zip(ranks, xs, dests):
        upto = a._counts_out(dest)
        assert torch.equal(upto, _running(dest))
        a._describe_rows(dest, upto)
        a._describe_slots(dest, upto)
        a._describe_sources(x, dest)
    for a, x, dest in zip(ranks, xs, dests):  # every rank's counts are here
        rows(a, x, dest)
    return xs, dests


def _check_back(ranks, xs, dests, step):
    """Every rank's back: row t from rank d is what rank d sent back for
    it, x's row xor (1 + d + step), wherever dest sent it."""
    T, G = dests[0].shape
    for s, a in enumerate(ranks):
        for t in range(T):
            for d in range(G):
                if dests[s][t, d]:
                    want = torch.bitwise_xor(xs[s][t], 1 + d + step)
                    assert torch.equal(a.back[t, d], want), \
                        f"step {step}: rank {s}, token {t}, from rank {d}"


@pytest.mark.parametrize("G", [1, 2, 3, 4])
def test_rows_and_their_way_back_land_where_they_are_read(G, monkeypatch):
    T = 37
    ranks = _ranks(G, T, monkeypatch)
    g = torch.Generator().manual_seed(G)
    for step in range(3):  # rows, routing and y change every step
        xs, dests = _dispatch(ranks, T, g)
        for r, a in enumerate(ranks):
            want = torch.cat([xs[s][dests[s][:, r]] for s in range(G)])
            assert torch.equal(a.matrix[:, r], torch.tensor([int(dests[s][:, r].sum())
                                                              for s in range(G)]))
            assert torch.equal(a.recv[:want.shape[0]], want), f"step {step}: rank {r}'s rows"
            slots = torch.cat([dests[s][:, r].nonzero().flatten() * G + r for s in range(G)])
            assert torch.equal(a.slots[:slots.shape[0]], slots), f"step {step}: rank {r}'s slots"
            torch.bitwise_xor(a.recv, 1 + r + step, out=a.y)  # what rank r sends back
        for a in ranks:
            a.back.fill_(0)
        for a, dest in zip(ranks, dests):
            a.combine(dest)
        _check_back(ranks, xs, dests, step)
        # Read instead: each row where places() says, in its rank's y.
        for s, a in enumerate(ranks):
            a.ready()
            at = a.places(dests[s])
            assert at.shape == (T, G) and bool((at[~dests[s]] == 0).all())
            for t in range(T):
                for d in range(G):
                    if dests[s][t, d]:
                        want = torch.bitwise_xor(xs[s][t], 1 + d + step)
                        assert torch.equal(a.peer_y[d][at[t, d]], want), \
                            f"step {step}: rank {s} reads token {t} in rank {d}'s y"


class _LoggedStream:
    """A CPU stream whose waits land in a rank's log."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def wait_stream(self, other):
        self.log.append(("wait_stream", self.name, getattr(other, "name", None)))

    def record_event(self):
        self.log.append(("record", self.name))
        return _Event(self.name)

    def wait_event(self, event):
        self.log.append(("wait_event", self.name, event.at))


class _Event:
    """Where a _LoggedStream's event was recorded: on its stream, after
    what was logged before."""

    def __init__(self, at):
        self.at = at


@pytest.mark.parametrize("G,K,T", [(1, 3, 37), (2, 2, 37), (3, 4, 30), (4, 16, 37), (3, 5, 37)])
def test_a_chunked_combine_tells_each_chunk_once_its_parts_are_in(G, K, T, monkeypatch):
    """The peers' rows go back in one batch of K parts (part p: pieces
    [p n / K, (p + 1) n / K) of its max_count n) that signal semaphores
    _CHUNK0 + p; `then` is told the chunks' tokens in order, covering all
    T, on the second stream, after the own rows' batch and after the waits
    for parts 0 to c, and every row of a chunk's tokens travels in a part
    it waited for; every row comes back to its slot once."""
    max_rows = 37
    ranks = _ranks(G, max_rows, monkeypatch)

    def wait(sem, count, **_):
        assert 1 <= count == _signals(G, ranks, sem)
        log.append(("wait", sem.data_ptr()))

    log = []
    main = _LoggedStream("main", log)
    monkeypatch.setattr(av, "wait", wait)
    monkeypatch.setattr(av.torch.cuda, "current_stream", lambda *_: main)
    g = torch.Generator().manual_seed(10 * G + K)
    for step in range(2):
        xs, dests = _dispatch(ranks, T, g)
        for r, a in enumerate(ranks):
            torch.bitwise_xor(a.recv, 1 + r + step, out=a.y)
            a.back.fill_(0)
            a.chunk_batches.clear()
            a.told_parts = {}  # token -> the parts its chunk waited for
        told = []
        for a, dest in zip(ranks, dests):
            told.append([])
            log.clear()
            a.log = log
            a._side = _LoggedStream("side", log)

            def then(lo, hi, t=told[-1]):
                t.append((lo, hi))
                log.append(("then", lo, hi))

            a.combine(dest, chunks=K, then=then)
            chunks = told[-1]
            assert chunks[0][0] == 0 and chunks[-1][1] == T
            assert all(h0 == l1 for (_, h0), (l1, _) in zip(chunks, chunks[1:]))
            if G == 1:
                assert chunks == [(0, T)]
                continue
            waits = [("wait", a._sem_rows[av._CHUNK0 + c].data_ptr()) for c in range(K)]
            assert [e for e in log if e[0] == "wait"] == waits, "one wait a part, in order"
            assert log.index(("batch", None)) < log.index(waits[0]), "the own rows first"
            for lo, hi in chunks:
                at = log.index(("then", lo, hi))
                for t in range(lo, hi):
                    a.told_parts[t] = sum(w in log[:at] for w in waits)  # parts 0 .. c
        _check_back(ranks, xs, dests, step)
        for d, a in enumerate(ranks):  # d: the rank sending back
            if G == 1:
                continue
            assert [(c, m) for c, m, _, _ in a.chunk_batches] == [(0, K)], "one batch, K parts"
            _, _, n, descs = a.chunk_batches[0]
            sent = set()
            for j, (dst, _, size) in enumerate(descs.tolist()):
                if not size:
                    continue
                s = next(i for i, b in enumerate(ranks) if _inside(dst, b.back))
                token, slot_rank = divmod((dst - ranks[s].back.data_ptr()) // ROW, G)
                assert slot_rank == d and dests[s][token, d], f"rank {d}: a stray piece"
                part = next(p for p in range(K) if j < (p + 1) * n // K)
                assert part < ranks[s].told_parts[token], \
                    f"rank {d}: token {token} of rank {s} in part {part}, told after " \
                    f"{ranks[s].told_parts[token]} parts"
                assert (s, token) not in sent, f"rank {d}: token {token} of rank {s} twice"
                sent.add((s, token))
            own = {(d, t) for t in range(T) if dests[d][t, d]}
            assert sent | own == {(s, t) for s in range(G) for t in range(T) if dests[s][t, d]}


def _stream_log(ranks, monkeypatch):
    """A log of every rank's batches, waits, stream joins and the streams
    its work is entered on (each rank's side stream logged as "side", the
    current one as "main")."""
    log = []

    def wait(sem, count, **_):
        log.append(("wait", sem.data_ptr()))

    @contextlib.contextmanager
    def on(stream):
        log.append(("enter", stream.name))
        yield
        log.append(("leave", stream.name))

    main = _LoggedStream("main", log)
    monkeypatch.setattr(av, "wait", wait)
    monkeypatch.setattr(av, "_count_enqueue", _count_of(log))
    monkeypatch.setattr(av.torch.cuda, "current_stream", lambda *_: main)
    monkeypatch.setattr(av.torch.cuda, "stream", on)
    for a in ranks:
        a.log, a._side, a._side2 = log, _LoggedStream("side", log), _LoggedStream("side2", log)
    return log


def test_a_then_that_raises_still_leaves_every_part_waited_for(monkeypatch):
    # The peers' parts signal whatever `then` does: a part left unwaited
    # would let the next combine's wait for it pass before its rows land.
    G, K, T = 2, 4, 37
    ranks = _ranks(G, T, monkeypatch)
    log = _stream_log(ranks, monkeypatch)
    xs, dests = _dispatch(ranks, T, torch.Generator().manual_seed(1))
    log.clear()

    def then(lo, hi):
        raise RuntimeError("the caller's sum failed")

    with pytest.raises(RuntimeError, match="the caller's sum failed"):
        ranks[0].combine(dests[0], chunks=K, then=then)
    assert sum(1 for e in log if e[0] == "wait") == K
    assert any(e[:3] == ("wait_stream", "main", "side") for e in log), \
        "the current stream joins the side stream"


def test_the_dispatch_writes_the_combines_pieces_beside_its_peers_batch(monkeypatch):
    """What a one-batch combine's pieces take from the counts is written
    by the dispatch on the side stream, after that stream joined the
    current one (so after the count wait) and after the own rows' batch,
    and before the current stream joins it back; the combine writes only
    where each row goes back, and writes nothing on the side stream."""
    G, T = 3, 37
    ranks = _ranks(G, T, monkeypatch)
    log = _stream_log(ranks, monkeypatch)
    for a in ranks:
        describe = a._back_describe
        a._back_describe = lambda d=describe: (log.append(("describe back",)), d())[1]

    def rows(a, x, dest):
        log.clear()
        _rows_phase(a, x, dest)
        assert log == [("batch", av._ROWS, "slots"),
                       ("wait_stream", "side", "main"), ("batch", av._ROWS),
                       ("enter", "side"), ("leave", "side"), ("batch", None),  # own places, batch
                       ("enter", "side"), ("describe back",), ("leave", "side"),
                       ("wait", a._sem_rows[av._ROWS].data_ptr()),
                       ("wait_stream", "main", "side")]

    xs, dests = _dispatch(ranks, T, torch.Generator().manual_seed(3), rows)
    for r, b in enumerate(ranks):
        torch.bitwise_xor(b.recv, 1 + r, out=b.y)
        b.back.fill_(0)
    log.clear()
    for b, dest in zip(ranks, dests):
        b.combine(dest)
    assert ("describe back",) not in log and ("enter", "side") not in log
    _check_back(ranks, xs, dests, 0)


def test_the_dispatch_describes_its_rows_beside_the_count_exchange(monkeypatch):
    """dispatch() counts its routing and sends its counts on the
    current stream (one kernel), and writes what they do not decide on two side streams
    while the current stream waits for the peers' counts: the rows' places,
    then their slots, on one, their sources and bytes on the other, which
    reads this rank's counts (the runs' bytes): both join the current
    stream after the count exchange, whose kernel writes the places and
    the counts. Where the rows start in each
    rank (the count matrix alone) is written before the current stream
    joins the second stream and the first where its places are written
    (not its slots); then the second stream joins the current one and the
    first where the slots are written, writes where the runs of slots
    start (rank 1 and up; rank 0's never change) and sends them; the
    rows' places, then the peers' rows on the current stream and this
    rank's own rows on the side stream; the current stream joins the second
    at the end. Its places, kept in the rank's buffers, are the routing's running
    counts."""
    G, T = 3, 37
    ranks = _ranks(G, T, monkeypatch)
    log = _stream_log(ranks, monkeypatch)
    monkeypatch.setattr(av._handles, "_windows", lambda *_: None)
    a = ranks[1]
    a.h, a.device = None, None
    for name, what in (("_describe_rows", "rows"),
                       ("_describe_slots", "slots"), ("_describe_sources", "sources"),
                       ("_describe_starts", "starts"), ("_describe_runs", "runs"),
                       ("_describe_places", "places"), ("_describe_own", "own")):
        monkeypatch.setattr(a, name, lambda *args, f=getattr(a, name), w=what:
                            (log.append((w,)), f(*args))[1])
    g = torch.Generator().manual_seed(5)
    for t in (T, 1, 20):
        x = torch.randint(0, 256, (t, ROW), dtype=torch.uint8, generator=g)
        dest = torch.rand(t, G, generator=g) < 0.5
        log.clear()
        a.dispatch(x, dest)
        counts = a._sem_rows[av._COUNTS].data_ptr()
        assert log[:27] == [("count",), ("wait_stream", "side", "main"),
                            ("wait_stream", "side2", "main"), ("enter", "side"), ("rows",), ("record", "side"), ("slots",),
                            ("record", "side"), ("leave", "side"), ("enter", "side2"),
                            ("sources",), ("leave", "side2"), ("wait", counts), ("starts",),
                            ("wait_event", "main", "side"), ("wait_stream", "main", "side2"),
                            ("wait_stream", "side2", "main"), ("wait_event", "side2", "side"),
                            ("enter", "side2"), ("runs",), ("leave", "side2"),
                            ("batch", av._ROWS, "slots"), ("places",),
                            ("wait_stream", "side", "main"), ("batch", av._ROWS),
                            ("enter", "side"), ("own",)], log
        assert log[-1] == ("wait_stream", "main", "side2"), log
        kept = a._upto[:G * t].view(G, t).t()
        assert torch.equal(kept, _running(dest))


def test_bad_routing_rows_and_chunks_get_a_clear_error(monkeypatch):
    """Every argument a step takes is checked before any batch: the
    message names what was expected and what came."""
    G, T = 3, 8
    a = _ranks(G, T, monkeypatch)[0]
    dest = torch.ones(T, G, dtype=torch.bool)
    x = torch.zeros(T, ROW, dtype=torch.uint8)
    bad_dests = [
        (dest.to(torch.int64), "torch.int64"),
        (dest[:, :2], "(8, 2)"),
        (torch.ones(T + 1, G, dtype=torch.bool), "T at most 8"),
        (dest.to("meta"), "on meta"),
        (dest[0], "(3,)"),
        ([[True] * G] * T, "not list"),
    ]
    for bad, says in bad_dests:
        for call in (lambda: a.dispatch(x, bad), lambda: a.combine(bad), lambda: a.places(bad)):
            with pytest.raises(ValueError, match=r"dest must be a \[T, 3\] bool tensor on cpu") as e:
                call()
            assert says in str(e.value)
    bad_xs = [
        (x[:T - 1], "(7, 48)"),
        (torch.zeros(T, ROW + 1, dtype=torch.uint8), "(8, 49)"),
        (torch.zeros(ROW, T, dtype=torch.uint8).t(), "not contiguous"),
        (x.view(torch.bfloat16)[:, :ROW // 4], "torch.bfloat16"),
        (x.to("meta"), "on meta"),
        (torch.zeros(()), "()"),
        (bytes(T * ROW), "not bytes"),
    ]
    for bad, says in bad_xs:
        with pytest.raises(ValueError, match=r"x must be 8 contiguous rows of 48 bytes") as e:
            a.dispatch(bad, dest)
        assert says in str(e.value)
    assert av.AlltoallV.MAX_CHUNKS == av._MAX_CHUNKS == 16  # the public bound is the one checked
    for chunks in (0, av._MAX_CHUNKS + 1, 2.5, "2", True):
        with pytest.raises(ValueError, match=f"chunks must be an int of 1 to {av._MAX_CHUNKS}, "
                                             f"not {re.escape(repr(chunks))}"):
            a.combine(dest, chunks=chunks)
    batches = len(a.log)
    for then in ("sum", 3):
        with pytest.raises(ValueError, match=r"then must be a callable then\(lo, hi\) or None, "
                                             f"not {type(then).__name__}"):
            a.combine(dest, chunks=2, then=then)
    assert len(a.log) == batches, "a refused combine enqueued a batch"


def test_places_before_a_dispatch_or_of_another_routing_get_a_clear_error(monkeypatch):
    """places() reads the running counts the last dispatch's count kernel
    wrote: before any dispatch it says there is none; a routing of another
    number of tokens than that dispatch's is named, not read past."""
    G, T = 2, 9
    ranks = _ranks(G, T, monkeypatch)
    a = ranks[0]
    dest = torch.ones(T, G, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"places: no dispatch yet"):
        a.places(dest)
    g = torch.Generator().manual_seed(3)
    _, dests = _dispatch(ranks, 5, g)
    with pytest.raises(ValueError, match=r"the routing of the last dispatch, of 5 tokens, not 9"):
        a.places(dest)
    assert a.places(dests[0]).shape == (5, G)


def test_more_chunks_than_the_peers_pieces_get_a_clear_error(monkeypatch):
    """A part of the peers' batch is at least one piece: 3 rows to one
    peer make at most 3 chunks, refused before any batch."""
    ranks = _ranks(2, 3, monkeypatch)
    dest = torch.ones(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"chunks 4: at most 3, the pieces to the peers "
                                         r"\(max_rows 3 x 1 peers\)"):
        ranks[0].combine(dest, chunks=4)
    assert ranks[0].log == []
    ranks[0].combine(dest, chunks=3)  # as many parts as pieces
    assert ranks[0].chunk_batches[0][1] == 3


def test_an_eager_batch_skips_the_dispatcher_and_a_mode_keeps_it(monkeypatch):
    """Eagerly a batch runs the operation's body itself (the dispatcher's
    ~20 us of host time saved) and bumps the versions of what it writes,
    as the dispatcher does; under a __torch_function__ mode it goes through
    torch.ops, which the mode sees. Both enqueue the same batch."""
    from torch.overrides import TorchFunctionMode

    a = _ranks(2, 8, monkeypatch)[0]
    del a.__dict__["_batch"]  # the real one
    a.ws, a.hid = torch.zeros(16, dtype=torch.uint8), 0
    enqueued = []
    monkeypatch.setattr(av, "_enqueue",
                        lambda hid, descs, n, max_count, ws, signals, stream=None, marks=1:
                        enqueued.append((hid, descs, n, max_count, ws, signals, stream, marks)))

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    for mode in (None, Seen()):
        enqueued.clear()
        versions = (a.recv._version, a.sems._version)
        with mode or contextlib.nullcontext():
            a._batch(a._runs, a.count_n, a.G, a.recv, av._ROWS)
        assert len(enqueued) == 1
        hid, descs, n, max_count, ws, signals, stream, marks = enqueued[0]
        assert descs is a._runs and n is a.count_n and max_count == a.G and ws is a.ws
        assert stream is None and marks == 1  # the current stream; one part
        assert hid == 0 and signals == [a.peer_sems[1][av._ROWS].data_ptr()]
        # Both written, as their versions say: one write each (in one
        # allocation, but each over a storage of its own).
        assert (a.recv._version, a.sems._version) == (versions[0] + 1, versions[1] + 1)
        if mode is not None:
            assert any("batch_signal" in op for op in mode.ops), mode.ops
        with mode or contextlib.nullcontext():  # in parts: semaphore _CHUNK0 + part
            a._batch(a._runs, a.count_n, a.G, a.recv, av._CHUNK0, marks=2)
        assert enqueued[-1][5:] == ([a.peer_sems[1][av._CHUNK0].data_ptr()], None, 2)
    enqueued.clear()
    a._batch(a.own_descs, a._n_own[:1], a.max_rows, a.recv, None, a.ws_own, a._side)
    _, _, _, _, ws, signals, stream, _ = enqueued[0]
    assert ws is a.ws_own and signals == [] and stream is a._side  # no signal; its stream


def test_own_rows_keep_the_links_grid_at_two_ranks_and_narrow_it_beyond():
    """The own rows' batches: the step's handle (the link's CTAs) below
    three ranks, else 32 // G CTAs, at least one."""
    assert [av._own_ctas(G) for G in (1, 2, 3, 4, 8, 64)] == [None, None, 10, 8, 4, 1]


def _construct_worker(rank, world, path, out):
    """AlltoallV's construction whole, on the CPU over gloo: CUDA calls
    stand-ins, every handle a recorder, share() hands each rank's shared
    buffer (here, its own) back. Rank `world - 1`'s windows are refused
    when `out` ends in "-fail"."""
    import signal
    import torch.distributed as dist
    from p2pt.distributed import _alltoallv as av
    signal.alarm(60)  # a rank left waiting dies, and the test fails
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    fail = out.endswith("-fail") and rank == world - 1
    cpu = torch.device("cpu")

    windows = []

    class H:
        pointer = 0x1000 + rank
        _prepared = set()

        def properties(self):
            return {"max_windows": 64, "max_ctas": 0, "sm_budget": -1, "transport": "tma"}

        def workspace_bytes(self, n):
            return 64 + 16 * n

        def window(self, device, base, nbytes, owner, moves=False):
            if fail:
                import p2pt
                raise p2pt.Error(5, "no window left")
            windows.append((device, base, nbytes))

    h = H()
    av.torch.device = lambda *a: cpu
    av.torch.cuda.current_device = lambda: 0
    av.torch.cuda.Stream = lambda dev: object()
    av.torch.cuda.synchronize = lambda dev=None: None
    av._handles._get = lambda hid: h
    av._handles._ready = lambda hh, dev: None
    av.Handle = lambda **kw: H()  # the own rows' handle, from three ranks
    av.share = lambda t, group, handle=None: [t if r == rank else t.clone() for r in range(world)]
    try:
        a = av.AlltoallV(8, 48)
        said = (f"made: {len(a.peer_recv)} peers' recv, {len(windows)} windows, shared "
                f"{a._shared.numel()} bytes, sems {tuple(a.sems.shape)} zero "
                f"{bool((a.sems == 0).all())}")
    except Exception as e:
        said = f"{type(e).__name__}: {e}"
    with open(f"{out}.{rank}", "w") as f:
        f.write(said)
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_construction_runs_whole_and_a_rank_without_windows_fails_every_rank(world):
    """AlltoallV(8, 48) made on every rank with the GPU's calls stood in
    for: the shared buffer, its views and the peers' linked; then with the
    last rank's windows refused: that rank raises its p2pt.Error, every
    other rank one naming it, and none waits for it."""
    import os
    import tempfile
    import torch.multiprocessing as mp
    for tail in ("", "-fail"):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "said" + tail)
            mp.spawn(_construct_worker, args=(world, os.path.join(d, "rendezvous"), out),
                     nprocs=world, join=True)
            said = [open(f"{out}.{r}").read() for r in range(world)]
        if not tail:
            assert all(s.startswith(f"made: {world} peers' recv") and s.endswith(
                f"sems ({av._CHUNK0 + av._MAX_CHUNKS}, 4) zero True") for s in said), said
            continue
        last = world - 1
        assert said[last] == "Error: p2pt status 5 (INVALID_USAGE): no window left", said
        assert all(s == f"Error: p2pt status 5 (INVALID_USAGE): p2pt.distributed.AlltoallV: "
                        f"rank {last} failed: no window left" for s in said[:last]), said


def _recorded_rank(monkeypatch):
    """Rank 0 of two with its real _batch, the library's calls stood in for
    and recorded outside any compiled graph (a traced append to a list
    would be replayed by dynamo over the operations' own appends): the
    rank and the list of its calls."""
    a = _ranks(2, 16, monkeypatch)[0]
    del a.__dict__["_batch"]  # the real one
    a.ws, a.hid, a._own_hid = torch.zeros(16, dtype=torch.uint8), 0, 1
    a.ws_own, a.ws_slots = torch.zeros(16, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8)
    a.h = a._own_h = object()
    a.device = 0
    monkeypatch.setattr(av._handles, "_windows", lambda *_, **__: None)
    seen = []

    @torch._dynamo.disable
    def record(call):
        seen.append(call)

    count = _count_of([])
    monkeypatch.setattr(av, "_count_enqueue",
                        lambda *args: (record(("count", tuple(args[4]))), count(*args)))
    monkeypatch.setattr(av, "wait", lambda sem, count, **_: record(("wait", sem.data_ptr(),
                                                                     count)))
    monkeypatch.setattr(av, "_enqueue",
                        lambda hid, descs, n, max_count, ws, signals, stream=None, marks=1:
                        record(("batch", hid, descs.data_ptr(), n.data_ptr(), max_count,
                                ws.data_ptr(), tuple(signals), marks)))
    return a, seen


def _compiled_as_eager(fn, seen, *args):
    """The calls of fn(*args) eagerly, and whether fn compiled with
    aot_eager and with inductor made the same, in their order."""
    seen.clear()
    fn(*args)
    eager, same = list(seen), {}
    for backend in ("aot_eager", "inductor"):
        seen.clear()
        torch._dynamo.reset()
        torch.compile(fn, backend=backend)(*args)
        same[backend] = seen == eager
    return eager, same


def test_a_compiled_step_makes_the_calls_of_an_eager_one(monkeypatch):
    """Under torch.compile (aot_eager and inductor) a whole step (dispatch,
    ready, combine) makes the library calls of an eager one, in its order:
    the count exchange, the waits, every batch with its handle, pieces,
    workspace, signals and parts. (Dispatch, ready and combine run as
    eagerly under torch.compile: their side streams and events.)"""
    a, seen = _recorded_rank(monkeypatch)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 256, (16, ROW), dtype=torch.uint8, generator=g)
    dest = torch.rand(16, 2, generator=g) < 0.5

    def step(x, dest):
        a.dispatch(x, dest)
        a.ready()
        a.combine(dest)

    eager, same = _compiled_as_eager(step, seen, x, dest)
    assert [c[0] for c in eager] == ["count", "wait", "batch", "batch", "batch", "wait",
                                     "batch", "wait", "batch", "batch", "wait"], eager
    assert same == {"aot_eager": True, "inductor": True}, (same, eager)


def test_the_steps_operations_compile_over_the_shared_tensors(monkeypatch):
    """A graph that holds a step's count exchange and batches, and reads
    the shared tensors they write, compiles with aot_eager and inductor
    and makes the eager calls: recv and slots, the count matrix and the
    semaphores lie in one allocation, each over a storage of its own,
    since AOTAutograd refuses to compile a mutation of one of several
    views of one storage that differ in dtype. (The step's methods run
    eagerly under torch.compile; a graph of the caller's still reads and
    writes the shared tensors, as `y`.)"""
    a, seen = _recorded_rank(monkeypatch)
    assert a.recv.untyped_storage().data_ptr() != a.sems.untyped_storage().data_ptr()
    assert a.recv.data_ptr() >= a._shared.data_ptr() and \
        a.sems.data_ptr() + a.sems.nbytes <= a._shared.data_ptr() + a._shared.nbytes

    def operations(dest):
        upto = a._counts_out(dest)
        a._batch(a._runs, a.count_n, a.G, a.slots, av._ROWS, a.ws_slots, a._side2)
        a._batch(a._runs, a.count_n, a.G, a.recv, av._ROWS)
        return upto.sum() + a.matrix.sum() + a.recv.sum() + a.sems.sum()

    eager, same = _compiled_as_eager(operations, seen, torch.ones(16, 2, dtype=torch.bool))
    assert [c[0] for c in eager] == ["count", "batch", "batch"], eager
    assert same == {"aot_eager": True, "inductor": True}, (same, eager)
