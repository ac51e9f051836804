# SPDX-License-Identifier: Apache-2.0
"""An alltoallv of rows whose counts only the GPU knows (MoE dispatch and
combine), with no host sync, so a captured graph replays with new counts
(docs/SIGNALS.md, "The count exchange of an alltoallv"):

1. each rank counts its routing on the GPU and puts its row of the count
   matrix (rows it sends to each rank) into every peer's matrix, with a
   signal to every peer: one kernel of the library
   (p2pt_count_rows_async), which also writes each row's place among the
   rows to its rank; each waits for G - 1 signals, while two more streams
   describe what the counts do not decide;
2. each rank works out on the GPU where its rows land in every receiver's
   buffer (rows from lower ranks first, then in token order) and puts them
   there: one device batch that ends with a signal to every peer; beside
   it, packed the same way, the slot each row returns to, in a batch of G
   small pieces that signals too; each waits for 2 (G - 1) signals, then
   reads what arrived.

A rank's rows to itself never cross a link: they go in a batch of their
own on a second stream, beside the peers' batch, and the step waits for
both. The combine's own rows, the same. Through the step's handle the
policy holds both batches to the link's CTAs (its windows hold other
GPUs' memory, and a device batch's pieces are known only when it runs):
there a local copy as large as the rows to a peer runs at memory speed
beside the peers' batch, and slows its NVLink writes (by ~23 us of a
~500 us combine at four ranks, bench/results/peer.md 5x). So from three
ranks on they go through a handle of their own on 32 // G CTAs, about
the pace of the peers' batch (_own_ctas). At two ranks they keep the
link's 32: the combine's sums wait for them, and on 8 CTAs they made it
80 us longer.

The combine is the dispatch pushed backwards: each rank puts every row of
its `y` into the slot (token, rank) of the rank it came from, whose index
came with the row: one device batch that ends with a signal to every
peer; each waits for G - 1 signals. Pushes, because NVLink moves writes
faster than reads, and because a rank's own `y` is ready by stream order:
no round of signals before the rows. What its pieces take from the counts
alone (each row's place in y, its bytes) the dispatch writes beside its
own rows' batch, while its peers' batch runs: the combine only adds where
each row goes back before its batch starts.

Or each rank reads instead: `ready()` signals every peer that its `y` is
written (an empty device batch that ends with the signals) and waits for
theirs; then row t for rank d lies in `peer_y[d]` at `places(dest)[t, d]`,
for a kernel that reads and reduces the rows in one pass (a MoE combine's
weighted sum, bench/results/peer.md 5d)."""
import ctypes
import math
from collections import namedtuple

import torch
import torch.distributed as dist

from .._handle import BATCH_SIGNALS_MAX, COUNT_COLS_MAX, Handle
from ..torch import _handles
from ._agree import on_every_rank
from ._args import described, positive_int, same_on_every_rank
from ._share import _as_tensor, share
from ._signals import SEMAPHORE_WORDS, bump, direct, wait

_COUNTS, _ROWS, _BACK, _READY, _CHUNK0 = range(5)  # each rank's semaphores: chunk c's is _CHUNK0 + c
_MAX_CHUNKS = 16
# Windows of a step's handle besides the peers': the shared buffer, descs,
# my_slots, own_descs, back_split, and a dispatch's x.
_OWN_WINDOWS = 6
_LINK_CTAS = 32  # the peer link's built-in grid (P2P_TRANSPORT_LINK_PEER)


def _own_ctas(G):
    """The grid of a rank's own rows' batches in a group of G ranks: None
    (the step's handle, the link's CTAs) below three ranks, else 32 // G
    CTAs (module docstring)."""
    return None if G < 3 else max(1, _LINK_CTAS // G)


# A step of T tokens' views (AlltoallV._views): its rows' dst, src and
# bytes columns in descs, each row's offset in x, each slot, and the counts
# of the peers' and the own batch.
_Step = namedtuple("_Step", "dst src size row_off slot_of n_peers n_own")


def _enqueue(hid, descs, count, max_count, workspace, signals, stream=None, marks=1):
    """A device batch of `descs` that signals every address of the list
    `signals` as it ends, on `stream` (a torch stream; None: the current
    one); with `marks` > 1, in that many parts, each signalling the
    semaphore that many rows after each address (part j: semaphore j)."""
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    s = _handles._cur(device) if stream is None else stream.cuda_stream
    if marks > 1:
        h.copy_batch_device_marks(descs.data_ptr(), count.data_ptr(), max_count,
                                  workspace.data_ptr(), signals, marks, s)
    else:
        h.copy_batch_device_signal(descs.data_ptr(), count.data_ptr(), max_count,
                                   workspace.data_ptr(), signals, s)


def _count_enqueue(hid, dest, upto, puts, signals):
    """The count exchange of routing `dest` ([T, G] bool, contiguous) on
    the current stream: its column counts to every address of `puts`, a
    signal to every address of `signals`, each row's running count into
    `upto` ([G, T] int64)."""
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    T, G = dest.shape
    h.count_rows(dest.data_ptr(), T, G, upto.data_ptr(), puts, signals, _handles._cur(device))


def _count_rows_body(dest: torch.Tensor, upto: torch.Tensor, matrix: torch.Tensor,
                     sems: torch.Tensor, puts: torch.Tensor, signals: torch.Tensor,
                     hid: int) -> None:
    """_count_enqueue, with the addresses in CPU int64 tensors (`matrix`
    and `sems`, which the puts and signals reach, for the dispatcher's
    bookkeeping)."""
    _count_enqueue(hid, dest, upto, puts.tolist(), signals.tolist())


_count_rows_op = torch.library.custom_op("p2pt_dist::count_rows", _count_rows_body,
                                         mutates_args=("upto", "matrix", "sems"))


@_count_rows_op.register_fake
def _(dest, upto, matrix, sems, puts, signals, hid):
    return None


def _batch_signal_body(descs: torch.Tensor, count: torch.Tensor, max_count: int,
                       workspace: torch.Tensor, out: torch.Tensor, sems: torch.Tensor,
                       signals: torch.Tensor, hid: int, marks: int) -> None:
    """A device batch of `descs` (its writes land in `out`, for the
    dispatcher's bookkeeping) that signals every address of `signals` (a
    CPU int64 tensor) as it ends, or in `marks` parts (_enqueue)."""
    _enqueue(hid, descs, count, max_count, workspace, signals.tolist(), marks=marks)


_batch_signal_op = torch.library.custom_op("p2pt_dist::batch_signal", _batch_signal_body,
                                           mutates_args=("out", "sems"))


@_batch_signal_op.register_fake
def _(descs, count, max_count, workspace, out, sems, signals, hid, marks):
    return None


# Under torch.compile, dispatch, combine and ready run as they do eagerly,
# a graph break each. Their operations act on memory at its address that
# peers write (semaphores, count matrix, receive buffer), which AOTAutograd
# without re-inplacing (aot_eager) replaced by copies written back after:
# a whole step compiled for two processes on one H200 held the GPU in a
# wait on a copy. And dynamo does not enter the side streams of a step
# (bench/results/peer.md 5zd).
def _eager(fn):
    return _handles._eager(fn, f"p2pt.distributed.AlltoallV.{fn.__name__} acts on memory at its "
                               f"address and on side streams, which torch.compile would "
                               f"replace: it runs eagerly (call it between compiled functions)")


def _apart(buf, at, n):
    """Bytes [at, at + n) of `buf` as a uint8 tensor over a storage of its
    own that keeps `buf` alive: to torch, tensors made so from one buffer
    share no storage (their bytes are apart), so a compiled graph may
    mutate one and read another."""
    if buf.is_cuda:
        return _as_tensor(buf.data_ptr() + at, n, buf.device.index, buf)
    mem = (ctypes.c_uint8 * n).from_address(buf.data_ptr() + at)  # the CPU tests' buffers
    mem.keep = buf
    return torch.frombuffer(mem, dtype=torch.uint8)


class AlltoallV:
    """Rows of `row_bytes` bytes from every rank to every rank of `group`,
    at most `max_rows` from one rank to another a step. Collective to make
    (every rank calls it, with the same max_rows and row_bytes, else a
    ValueError on every rank names both): it allocates and shares the
    receive buffers, the count matrix and the semaphores (one allocation,
    one export, one window a peer). Then each step:

        recv, counts = a2a.dispatch(x, dest)   # x: [T, row_bytes] view, dest: [T, G] bool
        ...                                    # write what goes back into a2a.y
        back = a2a.combine(dest)               # [T, G, row_bytes]: row t from rank d
        # or, to read the rows where they lie:
        a2a.ready()                            # every rank's y is written
        at = a2a.places(dest)                  # row t from rank d: a2a.peer_y[d][at[t, d]]

    `recv[k]` for k in the region of source s (sources in rank order, their
    `counts[s]` rows each, in the sender's token order) is what s sent;
    `a2a.y` has recv's layout, and combine returns, for each token and rank
    it was sent to, that rank's row of y for it (slots not sent are not
    written: read only where dest is set). The peers write `back` during
    their combine, which follows (by the signals of the dispatch) this
    rank's next dispatch call: read `back` before calling dispatch again.
    `dest` of a combine is the last dispatch's. After `ready()` the peers
    read this rank's `y` until their own next dispatch: write `y` only
    after this rank's next dispatch, as for `back`. Under torch.compile,
    dispatch, ready and combine run as they do eagerly (a graph break
    each: their side streams and events are not traced); capture the step
    in a CUDA graph to take its host time away.

    `handle`: the p2pt handle of the step's batches (None: p2pt.torch's
    default). From three ranks on, a rank's rows to itself go through a
    second handle that AlltoallV makes, with the same transport and SM
    budget and at most 32 // G CTAs (module docstring): its counters, not
    `handle`'s, count those batches.
    """

    MAX_CHUNKS = _MAX_CHUNKS  # combine's parts at most (each has a semaphore of its own)

    def __init__(self, max_rows, row_bytes, group=None, *, handle=None):
        for name, v in (("max_rows", max_rows), ("row_bytes", row_bytes)):
            positive_int("p2pt.distributed.AlltoallV", name, v)
        self.group = group
        self.G = dist.get_world_size(group)
        most = min(BATCH_SIGNALS_MAX + 1, COUNT_COLS_MAX)
        if self.G > most:
            raise ValueError(f"p2pt.distributed.AlltoallV: a group of {self.G} ranks; a batch "
                             f"signals at most {BATCH_SIGNALS_MAX} peers and the count "
                             f"exchange counts at most {COUNT_COLS_MAX} ranks, so at most "
                             f"{most} ranks")
        self.rank = dist.get_rank(group)
        where = "p2pt.distributed.AlltoallV"
        self.handle, self.hid = handle, _handles._hid(handle)
        # What may fail on one rank alone (its handles, its memory, its
        # windows) is followed by a gather that tells every rank, so that
        # none waits for it in a later collective.
        self.h = on_every_rank(where, group, lambda: _handles._get(self.hid))
        # A window a peer (its shared buffer) and _OWN_WINDOWS here, of a
        # handle's max_windows a device: the same on every rank.
        windows = self.h.properties()["max_windows"]
        if self.G - 1 + _OWN_WINDOWS > windows:
            raise ValueError(f"p2pt.distributed.AlltoallV: a group of {self.G} ranks; its "
                             f"handle holds a window of each peer's buffers and "
                             f"{_OWN_WINDOWS} of its own, of at most {windows} a device, so "
                             f"at most {windows - _OWN_WINDOWS + 1} ranks")
        same_on_every_rank("p2pt.distributed.AlltoallV", "every rank gives the same max_rows "
                           "and row_bytes", "gave", (max_rows, row_bytes),
                           lambda z: f"{z[0]} and {z[1]}", group)
        self.max_rows, self.rb = int(max_rows), int(row_bytes)
        on_every_rank(where, group, self._make_local)
        peers = share(self._shared, group, handle=handle)
        # The gather after the link is also the barrier after which peers
        # signal: every semaphore here is zeroed (_make_local synchronized).
        on_every_rank(where, group, lambda: self._make_linked(peers))

    def _make_local(self):
        """This rank's handles, buffers, streams and windows (the peers'
        imports come next, within the handle's windows)."""
        self._own_h = self._own_handle(_own_ctas(self.G))
        self._own_hid = self._own_h.pointer
        self.device = torch.cuda.current_device()
        dev = torch.device("cuda", self.device)
        self._local(dev)
        self.ws = torch.zeros(self.h.workspace_bytes(self.cap), dtype=torch.uint8, device=dev)
        self.ws_own = torch.zeros(self.h.workspace_bytes(self.max_rows), dtype=torch.uint8,
                                  device=dev)
        self.ws_slots = torch.zeros(self.h.workspace_bytes(self.G), dtype=torch.uint8,
                                    device=dev)
        # Two side streams for what a dispatch describes while its counts
        # travel: the rows' places (a scan, its longest chain) and then
        # their slots, and beside it, once this rank's counts are summed,
        # the rows' sources and bytes. The first also carries the own rows'
        # batch, the second the slots' batch.
        self._side = torch.cuda.Stream(dev)
        self._side2 = torch.cuda.Stream(dev)
        for t in (self._shared, self.descs, self.my_slots, self.own_descs, self.back_split):
            _handles._windows(self.h, self.device, [t.untyped_storage()])
        torch.cuda.synchronize(dev)

    def _make_linked(self, peers):
        """The peers' shared buffers as mapped here, and the own rows'
        handle's windows."""
        self._link(*zip(*(self._shared_views(p) for p in peers)))
        if self._own_h is not self.h:
            _handles._ready(self._own_h, self.device)
            # recv, y and back lie in the shared allocation: its window.
            for t in (self._shared, self.own_descs, self.back_split, self.ws_own):
                _handles._windows(self._own_h, self.device, [t.untyped_storage()])

    def _own_handle(self, ctas):
        """The handle of this rank's own rows' batches: the step's where
        `ctas` is None, else one of the step's transport and SM budget
        whose launches take at most `ctas` CTAs (P2P_TRANSPORT_MAX_CTAS)
        and whose windows hold this GPU's memory alone."""
        if ctas is None:
            return self.h
        props = self.h.properties()
        if props["max_ctas"] > 0:
            ctas = min(ctas, props["max_ctas"])
        options = {"P2P_TRANSPORT_MAX_CTAS": ctas}
        if props["sm_budget"] >= 0:
            options["P2P_TRANSPORT_SM_BUDGET"] = props["sm_budget"]
        return Handle(transport=props["transport"], options=options)

    def _local(self, dev):
        """This rank's buffers and constants on `dev` (G, rank, max_rows and
        rb set)."""
        G = self.G
        self._dev = dev
        u8 = dict(dtype=torch.uint8, device=dev)
        i64 = dict(dtype=torch.int64, device=dev)
        self.sems_n = _CHUNK0 + _MAX_CHUNKS
        # What the peers reach (recv, back, slots, matrix, semaphores, y:
        # _shared_views), in one allocation that crosses as one export: a
        # window a peer, where six would hold 6 (G - 1) of a handle's
        # windows. Zeroed: the semaphores must start at 0.
        self._places, total = self._shared_places()
        self._shared = torch.zeros(total, **u8)
        self.recv, self.back, self.slots, self.matrix, self.sems, self.y = \
            self._shared_views(self._shared)
        self._y_at = torch.tensor(self.y.data_ptr(), **i64)
        self._mine = self.matrix[self.rank]  # my row: the rows I send to each rank
        self._off = torch.zeros(G, **i64)  # where my rows start in each rank's recv
        self.my_slots = torch.zeros(G * self.max_rows + 1, **i64)  # the last: a sink
        self._upto = torch.zeros(G * self.max_rows, **i64)  # [G, T]: _counts_out's places
        self._counted = None  # the tokens of the last dispatch's counts (places() reads them)
        self.count_n = torch.tensor([G], dtype=torch.int32, device=dev)
        # A dispatch's pieces: to each rank the run of slots of my rows to
        # it (a batch of their own), then T * G rows (row t to rank d at
        # G + t * G + d). Nothing else writes descs, so the runs' sources
        # are written once.
        self.cap = self.max_rows * G + G
        self.descs = torch.zeros(self.cap, 3, **i64)
        self._runs, self._peer_rows = self.descs[:G], self.descs[G:]
        self._n_none = torch.zeros(1, dtype=torch.int32, device=dev)  # ready()'s pieces
        # A step's pieces split by where they go. The peers' batch is the
        # rows of descs (token by token, ranks interleaved: a batch laid
        # out destination by destination is slower on NVLink), where a row
        # to this rank carries no bytes, and the runs of slots a batch
        # beside it; this rank's own rows go in a batch of their own,
        # own_descs, written on the side stream. So nothing gathers the
        # step's pieces between the count exchange and the peers' batch.
        self.own_descs = torch.zeros(self.max_rows, 3, **i64)
        self._rb_to = torch.full((G,), self.rb, **i64)
        self._rb_to[self.rank] = 0  # a row's bytes in the peers' batch, by destination
        # A one-batch combine's pieces, in a buffer of their own: to the
        # peers first, sources interleaved (piece j: row r of source s's
        # region, at r * G + s in back_at), then this rank's own rows. The
        # dispatch writes what its counts decide (each piece's row of y,
        # its bytes) on the side stream while its peers' batch runs; the
        # combine adds only where each row goes back (_back_describe).
        cols = torch.arange(G, **i64)
        rows_at = torch.arange(self.max_rows, **i64)[:, None] * G
        back_at = torch.cat([(rows_at + cols[cols != self.rank]).view(-1),
                             (rows_at + self.rank).view(-1)])
        n_back_peers = self.max_rows * (G - 1)
        self.back_split = torch.zeros(G * self.max_rows, 3, **i64)
        self._bk_r, self._bk_s = back_at // G, back_at % G
        # Row s + 1 of _bk_cum: the rows rank c holds from sources 0 to s,
        # in column c (row 0 stays 0): source s's region of recv starts at
        # _bk_cum[s, rank] and ends at _bk_cum[s + 1, rank], both read by
        # one gather (_bk_ends) for every piece.
        self._bk_cum = torch.zeros(G + 1, G, **i64)
        n = G * self.max_rows
        self._bk_ends = torch.cat([self._bk_s * G + self.rank, (self._bk_s + 1) * G + self.rank])
        self._bk_bounds = torch.zeros(2 * n, **i64)
        self._bk_valid = torch.zeros(n, dtype=torch.bool, device=dev)
        self._bk_k = torch.zeros(n, **i64)  # piece j's row of recv and y
        self._bk_slot = torch.zeros(n, **i64)
        self._bk_dst, self._bk_src, self._bk_size = self.back_split.unbind(1)
        self._bk_peers = self.back_split[:n_back_peers]
        self._bk_own = self.back_split[n_back_peers:]
        # The counts of the peers' and the own batch of a dispatch of T
        # tokens at [T], and of the combine's: constants, so no step
        # writes a count.
        self._n_peers = (G * torch.arange(self.max_rows + 1, **i64)).to(torch.int32)
        self._n_own = torch.arange(self.max_rows + 1, dtype=torch.int32, device=dev)
        self._n_back_peers = torch.tensor([n_back_peers], dtype=torch.int32, device=dev)
        self._no_signals = torch.zeros(0, dtype=torch.int64)
        rows = torch.arange(self.max_rows, **i64)
        self._slot_of = rows[:, None] * G + torch.arange(G, **i64)  # [max_rows, G]
        self._sink_at = torch.arange(G, **i64) * self.max_rows  # my_slots' run of each rank
        self._sink_at_1 = self._sink_at - 1
        self._sink = torch.tensor(G * self.max_rows, **i64)  # my_slots' last: the unsent's
        self._row_off = rows * self.rb  # row t of x at x + t * rb
        self.descs[:G, 1] = self.my_slots.data_ptr() + self._sink_at * 8
        # Views every step reads or writes, made once (an eager step's host
        # time is mostly calls into torch): the runs' places and bytes, the
        # count rows of the ranks before this one; a step of T tokens' own,
        # for the last T (_views).
        self._runs_dst, self._runs_bytes = self.descs[:G, 0], self.descs[:G, 2]
        self._above = self.matrix[:self.rank]
        self._step = (None, None)
        self._col = self.matrix[:, self.rank]  # rows from each source, in recv's order
        self._n_own_back = self._n_own[self.max_rows:]

    def _shared_layout(self):
        """(dtype, shape) of each shared tensor, in _shared_views' order:
        recv and y [G * max_rows, rb] (y: recv's layout), back [max_rows, G,
        rb], slots [G * max_rows] (slots[k]: the slot, token * G + rank, in
        its source's back of the row recv[k]; sent packed by destination
        beside the rows), the count matrix [G, G], the semaphores."""
        G, T, rb = self.G, self.max_rows, self.rb
        return [(torch.uint8, (G * T, rb)), (torch.uint8, (T, G, rb)), (torch.int64, (G * T,)),
                (torch.int64, (G, G)), (torch.int64, (self.sems_n, SEMAPHORE_WORDS)),
                (torch.uint8, (G * T, rb))]

    def _shared_places(self):
        """Where each shared tensor lies in the allocation: [(dtype, shape,
        byte offset, bytes)] in _shared_layout's order, each at a 256-byte
        boundary; and the allocation's bytes."""
        places, at = [], 0
        for dt, shape in self._shared_layout():
            n = math.prod(shape) * torch.empty((), dtype=dt).element_size()
            places.append((dt, shape, at, n))
            at += (n + 255) // 256 * 256
        return places, at

    def _shared_views(self, buf):
        """recv, back, slots, matrix, sems and y over `buf` (a rank's shared
        allocation, as mapped here), each over a storage of its own
        (_apart): views of one storage that differ in dtype, one mutated
        by an operation, are what AOTAutograd refuses to compile
        ("input mutations on views with different dtypes")."""
        return [_apart(buf, at, n).view(dt).view(shape) for dt, shape, at, n in self._places]

    def _link(self, peer_recv, peer_back, peer_slots, peer_matrix, peer_sems, peer_y):
        """Every rank's shared tensors, as mapped here (rank order): the
        addresses the pieces and signals use."""
        G, dev = self.G, self.recv.device
        i64 = dict(dtype=torch.int64, device=dev)
        peers = [p for p in range(G) if p != self.rank]
        self._signals = [torch.tensor([peer_sems[p][k].data_ptr() for p in peers],
                                      dtype=torch.int64) for k in range(self.sems_n)]
        self._signal_lists = [t.tolist() for t in self._signals]
        self._sem_rows = list(self.sems.unbind(0))
        self.recv_base = torch.tensor([t.data_ptr() for t in peer_recv], **i64)
        self._recv_before = self.recv_base - self.rb  # row 1 of a run lands at its base
        self.back_base = torch.tensor([t.data_ptr() for t in peer_back], **i64)
        self.slots_base = torch.tensor([t.data_ptr() for t in peer_slots], **i64)
        self._runs_dst.copy_(self.slots_base)  # rank 0's for good (_describe_runs)
        # Where the count exchange puts my row: every rank's matrix.
        self._count_puts = [peer_matrix[d][self.rank].data_ptr() for d in range(G)]
        self._count_puts_t = torch.tensor(self._count_puts, dtype=torch.int64)
        self.peer_recv, self.peer_back, self.peer_slots = peer_recv, peer_back, peer_slots
        self.peer_matrix, self.peer_sems, self.peer_y = peer_matrix, peer_sems, peer_y
        self._bk_back = self.back_base[self._bk_s]  # each combine piece's source's back
        self._back_describe()  # a combine before any dispatch: no rows, no bytes

    def _batch(self, descs, n, max_count, out, k, ws=None, stream=None, marks=1, hid=None):
        """A device batch of the first n[0] pieces of descs, signalling
        every peer's semaphore k as it ends (k None: no signal), or, with
        `marks` > 1, in that many parts, part j signalling semaphore k + j;
        on `stream` (None: the current one); through the handle `hid`
        (None: the step's). Eagerly the operation's body itself, without
        the dispatcher."""
        ws = self.ws if ws is None else ws
        hid = self.hid if hid is None else hid
        if direct(out):
            bump(out, self.sems)
            _enqueue(hid, descs, n, max_count, ws,
                     [] if k is None else self._signal_lists[k], stream, marks)
            return
        with _handles._stream(stream):
            torch.ops.p2pt_dist.batch_signal(descs, n, max_count, ws, out, self.sems,
                                             self._no_signals if k is None else self._signals[k],
                                             hid, marks)

    def _split_send(self, peers, own, n_peers, n_own, out, k, before_own=None, beside=None,
                    waits=1):
        """Pieces split by where they go: the peers' (n_peers of `peers`)
        into `out` with a signal to each, then a wait for `waits` signals
        of each peer on semaphore k; beside them, on the side stream,
        `before_own()` if given, this rank's own pieces (n_own of `own`),
        which need no link and no signal, then `beside()` if given. The
        current stream waits for all of it."""
        main = torch.cuda.current_stream()
        self._side.wait_stream(main)
        if peers.shape[0]:  # a group of one has no peer piece
            self._batch(peers, n_peers, peers.shape[0], out, k)
        if before_own is not None:
            with torch.cuda.stream(self._side):
                before_own()
        self._batch(own, n_own, self.max_rows, out, None, self.ws_own, self._side,
                    hid=self._own_hid)
        if beside is not None:
            with torch.cuda.stream(self._side):
                beside()
        self._wait(k, waits)
        main.wait_stream(self._side)

    def _send(self, descs, n, out, k):
        """The first n[0] pieces of descs (n: an int32 tensor of one on the
        GPU): one device batch into `out`, then wait for the G - 1 peers'
        signals on semaphore k."""
        self._batch(descs, n, descs.shape[0], out, k)
        self._wait(k)

    def _wait(self, k, n=1):
        """Hold the stream until the G - 1 peers' n signals each of this
        step reach semaphore k (nothing to wait for in a group of one)."""
        if self.G > 1:
            wait(self._sem_rows[k], n * (self.G - 1), handle=self.handle)

    def _tokens(self, dest):
        if not isinstance(dest, torch.Tensor) or dest.dtype != torch.bool or dest.dim() != 2 \
                or dest.shape[1] != self.G or dest.shape[0] > self.max_rows \
                or dest.device != self._dev:
            raise ValueError(f"p2pt.distributed.AlltoallV: dest must be a [T, {self.G}] bool "
                             f"tensor on {self._dev} (row t goes to rank d), T at most "
                             f"{self.max_rows}, not {described(dest, contiguity=False)}")
        return dest.shape[0]

    def _views(self, T):
        """The views of descs and of the constants that a step of T tokens
        uses, made again only when T changes."""
        last, v = self._step
        if last != T:
            G = self.G
            rows = self.descs[G:G + T * G].view(T, G, 3)
            v = _Step(rows[:, :, 0], rows[:, :, 1], rows[:, :, 2],
                      self._row_off[:T, None].expand(T, G), self._slot_of[:T].reshape(-1),
                      self._n_peers[T:T + 1], self._n_own[T:T + 1])
            self._step = (T, v)
        return v

    @_eager
    def dispatch(self, x, dest):
        """Send row t of `x` to every rank d with dest[t, d]; returns this
        rank's receive buffer and the rows from each source (int64 [G] on
        the GPU). On the current stream; no host sync."""
        T = self._tokens(dest)
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] != T or \
                not x.is_contiguous() or x.nbytes != T * self.rb or x.device != self._dev:
            raise ValueError(f"p2pt.distributed.AlltoallV.dispatch: x must be {T} contiguous "
                             f"rows of {self.rb} bytes (dest's rows) on {self._dev}, "
                             f"not {described(x)}")
        _handles._windows(self.h, self.device, [x.untyped_storage()])
        if self._own_h is not self.h:
            _handles._windows(self._own_h, self.device, [x.untyped_storage()])
        main = torch.cuda.current_stream()
        # The counts and the rows' places come from one kernel on the
        # current stream; what the counts do not decide is described on
        # the side streams while the counts travel and the current stream
        # waits for them (behind the count exchange, three kernels more
        # would lengthen a short step's wait). Both side streams join
        # after the kernel: the places and this rank's counts (the runs'
        # bytes) are written then.
        upto = self._counts_out(dest)
        self._side.wait_stream(main)
        self._side2.wait_stream(main)
        with torch.cuda.stream(self._side):
            self._describe_rows(dest, upto)
            placed = self._side.record_event()
            # The slots travel in a batch of their own on the second side
            # stream: the rows' batch does not wait for them.
            self._describe_slots(dest, upto)
            slotted = self._side.record_event()
        with torch.cuda.stream(self._side2):
            self._describe_sources(x, dest)
        self._wait(_COUNTS)
        starts = self._describe_starts()
        main.wait_event(placed)
        main.wait_stream(self._side2)
        self._side2.wait_stream(main)  # the counts, and the starts summed
        self._side2.wait_event(slotted)
        with torch.cuda.stream(self._side2):
            self._describe_runs()
        self._batch(self._runs, self.count_n, self.G, self.slots, _ROWS, self.ws_slots,
                    self._side2)
        self._describe_places(T, starts)
        self._rows_out(x, dest)
        main.wait_stream(self._side2)
        return self.recv, self._col

    def _rows_out(self, x, dest):
        """The described pieces of x's rows to `dest`: the rows of descs
        to the peers, and this rank's own rows in own_descs, described
        beside; then a wait for two signals of each peer, its rows' and its
        runs of slots' (dispatch sends the runs)."""
        v = self._views(dest.shape[0])
        self._split_send(self._peer_rows, self.own_descs, v.n_peers, v.n_own, self.recv, _ROWS,
                         lambda: self._describe_own(x, dest), self._back_describe, waits=2)

    def _counts_out(self, dest):
        """My row of the count matrix (the rows to each rank) into every
        rank's, signalling each peer, and upto[t, d] (this rank's rows to d
        up to and including row t: row t's place among them, plus one), in this
        rank's buffers: one kernel (p2pt_count_rows_async) on the current
        stream. Once G - 1 signals are here, so is the whole matrix. In
        the kernel's place the dispatch cast the routing to int64, summed
        it and sent the row in a device batch: three kernels, 12.3 us at
        T = 4,096 on an H200 (bench/results/peer.md 5zb)."""
        T = dest.shape[0]
        upto = self._upto[:self.G * T].view(self.G, T)
        self._counted = T
        dest = dest.contiguous()
        if direct(dest, upto):
            bump(upto, self.matrix, self.sems)
            _count_enqueue(self.hid, dest, upto, self._count_puts, self._signal_lists[_COUNTS])
        else:
            torch.ops.p2pt_dist.count_rows(dest, upto, self.matrix, self.sems,
                                           self._count_puts_t,
                                           self._signals[_COUNTS], self.hid)
        return upto.t()

    def _describe_sources(self, x, dest):
        """Each row's source and bytes (0 where not sent, and in the
        peers' batch where sent to this rank), and the runs' bytes (8 a
        row of this rank's counts: after _counts_out on its stream)."""
        v = self._views(dest.shape[0])
        torch.add(v.row_off, x.data_ptr(), out=v.src)
        torch.mul(dest, self._rb_to, out=v.size)
        torch.mul(self._mine, 8, out=self._runs_bytes)

    def _describe_rows(self, dest, upto):
        """Each row's place in each rank's recv but for the rows of lower
        ranks there (this rank's memory only)."""
        torch.add(self._recv_before, upto, alpha=self.rb, out=self._views(dest.shape[0]).dst)

    def _describe_slots(self, dest, upto):
        """Each row's slot packed by destination as its row is (a sink
        for the unsent), for the combine's way back (this rank's memory
        only)."""
        at = torch.where(dest, upto + self._sink_at_1, self._sink)
        self.my_slots.scatter_(0, at.view(-1), self._views(dest.shape[0]).slot_of)

    def _describe_own(self, x, dest):
        """This rank's rows to itself in own_descs: their places (written
        by _describe_places), sources and bytes."""
        T = dest.shape[0]
        own = self.own_descs[:T]
        own[:, 0].copy_(self._views(T).dst[:, self.rank])
        torch.add(self._row_off[:T], x.data_ptr(), out=own[:, 1])
        torch.mul(dest[:, self.rank], self.rb, out=own[:, 2])

    def _describe_starts(self):
        """Where my rows start in each rank's buffers: after every rank's
        rows to it from lower ranks (the count matrix), or None for rank
        0, whose rows start at 0 everywhere. Only ranks from 2 on sum
        them (a kernel on the current stream, between the counts' arrival
        and the rows' batch); rank 1's starts are rank 0's row of the
        matrix itself. Reads the counts alone, so it runs before the side
        streams join."""
        if self.rank >= 2:
            torch.sum(self._above, 0, out=self._off)
            return self._off
        return self.matrix[0] if self.rank == 1 else None

    def _describe_runs(self):
        """Where my runs of slots start in each rank's slots, and the
        starts kept in _off for places() (the matrix changes with the
        peers' next counts): on the second side stream, off the rows'
        path. Rank 0's were written once (_link)."""
        if self.rank == 1:
            self._off.copy_(self.matrix[0])
        if self.rank:
            torch.add(self.slots_base, self._off, alpha=8, out=self._runs_dst)

    def _describe_places(self, T, starts):
        """Where my rows of a step of T tokens land in each rank's recv:
        their places among my rows to it (_describe_rows) after its
        start (`starts`, _describe_starts; None: nothing to add)."""
        if starts is not None:
            self._views(T).dst.add_(starts, alpha=self.rb)

    def _back_describe(self):
        """What a one-batch combine's pieces take from the counts alone,
        in its layout (peers first, sources interleaved): piece j, row r
        of source s's region of recv, carries row k = (s's start) + r of
        y, its bytes rb if r is inside the region, else 0 (k = 0). Run by
        the dispatch on the side stream beside its peers' batch, so the
        combine's critical path only adds where each row goes back."""
        n = self._bk_r.shape[0]
        torch.cumsum(self.matrix, 0, out=self._bk_cum[1:])
        torch.index_select(self._bk_cum.view(-1), 0, self._bk_ends, out=self._bk_bounds)
        start, end = self._bk_bounds[:n], self._bk_bounds[n:]
        torch.add(start, self._bk_r, out=self._bk_k)
        torch.lt(self._bk_k, end, out=self._bk_valid)
        self._bk_k.mul_(self._bk_valid)
        torch.add(self._y_at, self._bk_k, alpha=self.rb, out=self._bk_src)
        torch.mul(self._bk_valid, self.rb, out=self._bk_size)

    @_eager
    def ready(self):
        """Signal every peer that this rank's `y` is written (everything
        before on the current stream), then hold the stream until every
        peer's is: one empty device batch that ends with the signals. No
        host sync."""
        self._send(self.descs, self._n_none, self.y, _READY)

    def places(self, dest):
        """Where each row of the last dispatch (`dest` its routing) lies in
        the `y` of the rank it went to: int64 [T, G], row t for rank d at
        row places[t, d] of peer_y[d] (0 where not dest[t, d]). On the
        current stream, after the dispatch; no host sync."""
        T = self._tokens(dest)
        if self._counted != T:
            raise ValueError(f"p2pt.distributed.AlltoallV.places: dest must be the routing of "
                             f"the last dispatch, of {self._counted} tokens, not {T}"
                             if self._counted is not None else
                             "p2pt.distributed.AlltoallV.places: no dispatch yet; places() "
                             "says where the last dispatch's rows lie")
        # The running counts that the dispatch's count kernel wrote, and
        # self._off: where this rank's rows start in each rank's y, kept
        # from the counts by the dispatch (_describe_runs). Both stay until
        # the next dispatch.
        upto = self._upto[:self.G * T].view(self.G, T).t()
        return torch.where(dest, upto + (self._off - 1), 0)

    def _chunks(self, K):
        """The tokens [lo, hi) of each of K chunks of a combine whose peers'
        batch runs in K parts: a peer's row for token t is piece
        r * (G - 1) + i of its batch, r (this rank's rows to that peer
        before t) at most t and i at most G - 2, so tokens below
        hi = (the end of part c) // (G - 1) are all back once parts 0 to c
        are; the last chunk ends at max_rows."""
        n, G = self._bk_peers.shape[0], self.G
        ends = [(c + 1) * n // K // (G - 1) for c in range(K)]
        return list(zip([0] + ends[:-1], ends))

    @_eager
    def combine(self, dest, *, chunks=1, then=None):
        """Bring back, from every rank it went to, that rank's row of `y`
        for each row of the last dispatch: [T, G, row_bytes], slot (t, d)
        valid where dest[t, d]. On the current stream; no host sync.

        `then(lo, hi)`, if given, is called for tokens [lo, hi) once their
        rows are back: with chunks=1, then(0, T) on the current stream.
        With `chunks` = K > 1 (at most MAX_CHUNKS, 16, and at most the
        pieces to the peers, max_rows x (G - 1)) the peers' batch runs in K
        parts that signal apart (p2pt_copy_batch_device_marks_async), so
        the rows land about in token order, and `then` runs for each of K
        chunks of the tokens on a second stream as soon as that chunk is
        back, while the later parts travel; the current stream waits for
        all of it before combine returns. Work that reads back[lo:hi] (a weighted sum) so overlaps
        the exchange, but only where it leaves the rows their speed: a
        kernel that fills every SM with memory traffic slows the batch
        beside it by about its own time, where one on a capped grid with
        a token's rows in flight a CTA hides (bench/results/peer.md 5m,
        5n)."""
        rb, K = self.rb, chunks
        T = self._tokens(dest)
        if isinstance(K, bool) or not isinstance(K, int) or not 1 <= K <= _MAX_CHUNKS:
            raise ValueError(f"p2pt.distributed.AlltoallV.combine: chunks must be an int of 1 "
                             f"to {_MAX_CHUNKS}, not {chunks!r}")
        n_peers = self._bk_peers.shape[0]
        if self.G > 1 and K > n_peers:  # a part is at least one piece
            raise ValueError(f"p2pt.distributed.AlltoallV.combine: chunks {K}: at most "
                             f"{n_peers}, the pieces to the peers (max_rows "
                             f"{self.max_rows} x {self.G - 1} peers)")
        if then is not None and not callable(then):
            # Checked before any batch: called later, it would fail with
            # the rows already on their way and the streams not joined.
            raise ValueError(f"p2pt.distributed.AlltoallV.combine: then must be a callable "
                             f"then(lo, hi) or None, not {type(then).__name__}")
        # The rest of the pieces came with the dispatch (_back_describe):
        # only where each row goes back, from the slot that came with it.
        torch.take(self.slots, self._bk_k, out=self._bk_slot)
        torch.add(self._bk_back, self._bk_slot, alpha=rb, out=self._bk_dst)
        if K == 1 or self.G == 1:
            self._split_send(self._bk_peers, self._bk_own, self._n_back_peers, self._n_own_back,
                             self.back, _BACK)
            if then is not None:
                then(0, T)
            return self.back[:T]
        main, side = torch.cuda.current_stream(), self._side
        side.wait_stream(main)
        self._batch(self._bk_peers, self._n_back_peers, n_peers, self.back, _CHUNK0, marks=K)
        self._batch(self._bk_own, self._n_own_back, self.max_rows, self.back, None, self.ws_own,
                    side, hid=self._own_hid)
        with torch.cuda.stream(side):  # each chunk after the own rows and its parts
            chunks = list(enumerate(self._chunks(K)))
            waited = 0
            try:
                for c, (lo, hi) in chunks:
                    self._wait(_CHUNK0 + c)
                    waited = c + 1
                    if then is not None and lo < min(hi, T):
                        then(lo, min(hi, T))
            finally:
                # Every part's signal waited for, `then` raising or not: a
                # signal left unwaited would let the next combine's wait for
                # that part pass before its rows land.
                for c, _ in chunks[waited:]:
                    self._wait(_CHUNK0 + c)
                main.wait_stream(side)
        return self.back[:T]
