# SPDX-License-Identifier: Apache-2.0
"""An alltoallv of rows whose counts only the GPU knows (MoE dispatch and
combine), with no host sync, so a captured graph replays with new counts
(docs/SIGNALS.md, "The count exchange of an alltoallv"):

1. each rank puts its row of the count matrix (rows it sends to each rank)
   into every peer's matrix: one device batch of G small pieces that ends
   with a signal to every peer; each waits for G - 1 signals;
2. each rank works out on the GPU where its rows land in every receiver's
   buffer (rows from lower ranks first, then in token order) and puts them
   there: one device batch that ends with a signal to every peer; each
   waits for G - 1 signals, then reads what arrived.

The combine is the dispatch read backwards: every rank's processed rows
are shared, and each rank gets its own rows back from every peer (a device
batch of pulls), into a slot per (token, rank)."""
import torch
import torch.distributed as dist

from ..torch import _handles
from ._share import share
from ._signals import semaphores, wait

_COUNTS, _ROWS, _READY, _READ = range(4)  # the semaphores of each rank


@torch.library.custom_op("p2pt_dist::batch_signal", mutates_args=("out", "sems"))
def _batch_signal_op(descs: torch.Tensor, count: torch.Tensor, max_count: int,
                     workspace: torch.Tensor, out: torch.Tensor, sems: torch.Tensor,
                     signals: torch.Tensor, hid: int) -> None:
    """A device batch of `descs` (its writes land in `out`, for the
    dispatcher's bookkeeping) that signals every address of `signals` (a
    CPU int64 tensor) as it ends."""
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    h.copy_batch_device_signal(descs.data_ptr(), count.data_ptr(), max_count,
                               workspace.data_ptr(), signals.tolist(), _handles._cur(device))


@_batch_signal_op.register_fake
def _(descs, count, max_count, workspace, out, sems, signals, hid):
    return None


class AlltoallV:
    """Rows of `row_bytes` bytes from every rank to every rank of `group`,
    at most `max_rows` from one rank to another a step. Collective to make
    (every rank calls it): it allocates and shares the receive buffers, the
    count matrix and the semaphores. Then each step:

        recv, counts = a2a.dispatch(x, dest)   # x: [T, row_bytes] view, dest: [T, G] bool
        ...                                    # write what goes back into a2a.y
        back = a2a.combine(dest)               # [T, G, row_bytes]: row t from rank d

    `recv[k]` for k in the region of source s (sources in rank order, their
    `counts[s]` rows each, in the sender's token order) is what s sent;
    `a2a.y` has recv's layout, and combine returns, for each token and rank
    it was sent to, that rank's row of y for it (zeros where not sent are
    not written: read only where dest is set).
    """

    def __init__(self, max_rows, row_bytes, group=None, *, handle=None):
        self.group = group
        self.G = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.hid = _handles._hid(handle)
        self.h = _handles._get(self.hid)
        self.device = torch.cuda.current_device()
        self.max_rows, self.rb = int(max_rows), int(row_bytes)
        G, dev = self.G, torch.device("cuda", self.device)
        u8 = dict(dtype=torch.uint8, device=dev)
        self.recv = torch.empty(G * self.max_rows, self.rb, **u8)
        self.y = torch.empty(G * self.max_rows, self.rb, **u8)
        self.matrix = torch.zeros(G, G, dtype=torch.int64, device=dev)
        self.mine = torch.zeros(G, dtype=torch.int64, device=dev)
        self.sems = semaphores(4, self.device)
        torch.cuda.synchronize(dev)
        self.peer_recv = share(self.recv, group, handle=handle)
        self.peer_y = share(self.y, group, handle=handle)
        self.peer_matrix = share(self.matrix, group, handle=handle)
        self.peer_sems = share(self.sems, group, handle=handle)
        peers = [p for p in range(G) if p != self.rank]
        self._signals = [torch.tensor([self.peer_sems[p][k].data_ptr() for p in peers],
                                      dtype=torch.int64) for k in range(4)]
        i64 = dict(dtype=torch.int64, device=dev)
        self.recv_base = torch.tensor([t.data_ptr() for t in self.peer_recv], **i64)
        self.y_base = torch.tensor([t.data_ptr() for t in self.peer_y], **i64)
        # The count exchange's pieces never change: my row into every matrix.
        self.count_descs = torch.tensor(
            [[self.peer_matrix[d].data_ptr() + self.rank * G * 8, self.mine.data_ptr(), G * 8]
             for d in range(G)], **i64)
        self.count_n = torch.tensor([G], dtype=torch.int32, device=dev)
        self.zero_n = torch.zeros(1, dtype=torch.int32, device=dev)
        self.descs = torch.zeros(self.max_rows * G, 3, **i64)
        self.n = torch.zeros(1, dtype=torch.int32, device=dev)
        self.ws = torch.zeros(self.h.workspace_bytes(self.max_rows * G), **u8)
        self.back = torch.empty(self.max_rows, G, self.rb, **u8)
        self._off = torch.zeros(G, **i64)
        for t in (self.recv, self.y, self.matrix, self.mine, self.sems, self.descs, self.back):
            _handles._windows(self.h, self.device, [t.untyped_storage()])
        dist.barrier(group)  # every semaphore zeroed before any peer signals it

    def _batch(self, descs, n, max_count, out, k):
        torch.ops.p2pt_dist.batch_signal(descs, n, max_count, self.ws, out, self.sems,
                                         self._signals[k], self.hid)

    def _send(self, dst, src, d, out, k):
        """Row pieces: [T, G] dst and src addresses, d * row_bytes bytes
        each (none where d is 0); one device batch into `out`, then wait
        for the G - 1 peers' signals on semaphore k."""
        T, G = d.shape
        descs = self.descs[:T * G].view(T, G, 3)
        descs[:, :, 0] = dst
        descs[:, :, 1] = src
        descs[:, :, 2] = d * self.rb
        self.n.fill_(T * G)
        self._batch(self.descs, self.n, self.max_rows * G, out, k)
        wait(self.sems[k], G - 1)

    def _place(self, dest):
        """The tokens, dest as int64, and pos[t, d]: the place of row t
        among this rank's rows to d."""
        if dest.dtype != torch.bool or dest.dim() != 2 or dest.shape[1] != self.G or \
                dest.shape[0] > self.max_rows:
            raise ValueError(f"p2pt.distributed.AlltoallV: dest must be a [T, {self.G}] bool "
                             f"tensor (row t goes to rank d), T at most {self.max_rows}")
        d = dest.to(torch.int64)
        # Scanned along rows of dest's transpose: a scan along dim 0 of a
        # [T, G] tensor runs G threads down T rows (650 us at T = 4,096 on
        # an H100, more than the rows' batch); along the last dim it is ~10 us.
        return dest.shape[0], d, d.t().contiguous().cumsum(1).t() - 1

    def dispatch(self, x, dest):
        """Send row t of `x` to every rank d with dest[t, d]; returns this
        rank's receive buffer and the rows from each source (int64 [G] on
        the GPU). On the current stream; no host sync."""
        G, rb = self.G, self.rb
        T, d, pos = self._place(dest)
        if x.shape[0] != T or not x.is_contiguous() or x.nbytes != T * rb:
            raise ValueError(f"p2pt.distributed.AlltoallV.dispatch: x must be {T} contiguous "
                             f"rows of {rb} bytes (dest's rows), not {tuple(x.shape)} "
                             f"{x.dtype}")
        _handles._windows(self.h, self.device, [x.untyped_storage()])
        self.mine.copy_(d.sum(0))
        self._batch(self.count_descs, self.count_n, G, self.matrix, _COUNTS)
        wait(self.sems[_COUNTS], G - 1)
        M = self.matrix
        self._off = (M.cumsum(0) - M)[self.rank]
        dst = self.recv_base + (self._off + pos) * rb
        src = x.data_ptr() + torch.arange(T, device=x.device, dtype=torch.int64) * rb
        self._send(dst, src[:, None], d, self.recv, _ROWS)
        return self.recv, M[:, self.rank]

    def combine(self, dest):
        """Get back, from every rank it went to, that rank's row of `y` for
        each row of the last dispatch: [T, G, row_bytes], slot (t, d) valid
        where dest[t, d]. On the current stream; no host sync."""
        G, rb = self.G, self.rb
        T, d, pos = self._place(dest)
        # My y is ready: a batch of no piece that signals every peer.
        self._batch(self.descs, self.zero_n, 1, self.y, _READY)
        wait(self.sems[_READY], G - 1)
        dst = self.back.data_ptr() + (torch.arange(T, device=d.device, dtype=torch.int64)[:, None]
                                      * G + torch.arange(G, device=d.device)) * rb
        src = self.y_base + (self._off + pos) * rb
        self._send(dst, src, d, self.back, _READ)  # the peers have read my y: it may change
        return self.back[:T]
