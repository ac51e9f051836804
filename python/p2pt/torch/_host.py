# SPDX-License-Identifier: Apache-2.0
"""Where a tensor's bytes are: which side of an operation is GPU memory,
pinned or pageable host memory (_side; _pageable warns once per operation
and role, in _warned), the pinned storages each handle holds until the
stream has passed the work on them (_Held, _held, _hold_pinned), and what
torch's own copies of host memory need (_flat_bytes, _host_only)."""
import collections
import threading
import warnings

import torch

from ._handles import _lock

# The pageable warnings given, (operation, role): a process-wide fact that
# no handle holds (pageable memory never reaches one).
_warned = set()


def _side(t, op, role):
    """"cuda", "pinned" or "pageable": how `role` of `op` reaches p2pt."""
    if t.is_cuda:
        return "cuda"
    if t.device.type != "cpu":
        raise ValueError(f"p2pt.torch.{op}: {role} is on {t.device}; expected a CUDA tensor or "
                         f"a CPU tensor (pinned with pin_memory() for p2pt)")
    return "pinned" if t.is_pinned() else "pageable"


def _pageable(op, sides):
    """Whether any (tensor, role) of `sides` of `op` is pageable memory, which
    no stream reaches; warns once per op and role (src[3] counts as src)."""
    found = False
    for t, role in sides:
        if _side(t, op, role) == "pageable":
            found = True
            key = (op, role.split("[")[0])
            if key not in _warned:
                _warned.add(key)
                warnings.warn(f"p2pt.torch.{op}: {role} is a pageable CPU tensor, which a CUDA "
                              f"stream cannot reach: it is copied with torch instead (correct, "
                              f"slower, synchronous); allocate it with pin_memory=True or call "
                              f"{role}.pin_memory() to let p2pt move it", stacklevel=2)
    return found


class _Held:
    """Pinned storages that work on a stream may still read or write, each
    kept alive until the stream has passed that work: torch's cache of
    pinned memory tracks only its own copies, and would hand a storage
    freed meanwhile to a new tensor (whose bytes the CPU writes at once).
    Not while capturing: a graph's memory must outlive the graph anyway.
    One per handle: the work queued through it.

    A call only appends its storages and stream (no CUDA call: right after
    a launch across the host link every host step is several times
    slower, bench/results/offload.md). Every MARK_EVERY calls, an event is
    recorded on each stream among them; an entry goes, its event reused,
    once a later call finds the event passed."""

    MARK_EVERY = 8

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = []                   # ((device, stream), storages) since the last mark
        self.entries = collections.deque()  # (event, storages, device) in the order marked
        self.spare = collections.defaultdict(list)  # device -> events whose work has passed

    def hold(self, storages, where):
        """Hold `storages` for the work just enqueued on stream `where`
        ((its device, its handle))."""
        if not storages or torch.cuda.is_current_stream_capturing():
            return
        with self.lock:
            self.pending.append((where, storages))
            if len(self.pending) >= self.MARK_EVERY:
                self._mark()
                self._drain()

    def _mark(self):
        """An event after the pending work of each of its streams (torch's,
        or the caller's, which outlive the work enqueued on them)."""
        streams = {}
        for key, storages in self.pending:
            streams.setdefault(key, []).extend(storages)
        # An event is recorded on its own device's streams only: spares are
        # kept by device. The pending work stays pending until every stream
        # has its event, so a record that fails leaves nothing unheld.
        marked = []
        for (device, raw), storages in streams.items():
            spare = self.spare[device]
            ev = spare.pop() if spare else torch.cuda.Event()
            ev.record(torch.cuda.ExternalStream(raw, device=device))
            marked.append((ev, storages, device))
        self.entries.extend(marked)
        self.pending = []

    def _drain(self):
        entries, spare = self.entries, self.spare
        while entries and entries[0][0].query():
            ev, _, device = entries.popleft()
            spare[device].append(ev)

    def drain(self, wait=False):
        """Mark what is pending and drop what has passed (wait=True: wait
        for it to pass first)."""
        with self.lock:
            if self.pending:
                self._mark()
            if wait:
                for ev, _, _ in self.entries:
                    ev.synchronize()
            self._drain()

    def pending_storages(self):
        """The storages still held (for tests)."""
        with self.lock:
            return [s for _, ss in self.pending for s in ss] + \
                [s for _, ss, _ in self.entries for s in ss]


def _held(h):
    """The _Held of handle `h`, made at its first use."""
    if h.held is None:
        with _lock:
            if h.held is None:
                h.held = _Held()
    return h.held


def _pinned_storages(tensors):
    """The distinct non-empty pinned storages among `tensors`."""
    found = {}
    for t in tensors:
        if not t.is_cuda and t.is_pinned() and t.untyped_storage().nbytes():
            found.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage())
    return tuple(found.values())


def _hold_pinned(h, tensors, device, stream):
    """Keep the pinned storages among `tensors` alive until `stream` (of
    `device`) has passed the work just enqueued on them through `h`."""
    _held(h).hold(_pinned_storages(tensors), (device, stream))


def _flat_bytes(t):
    return t.reshape(-1).view(torch.uint8)


def _host_only(*tensors):
    """No CUDA tensor among them: torch copies them on the CPU at once, so
    earlier work of the current stream (which may write pinned memory) must
    be done first."""
    if all(not t.is_cuda for t in tensors) and torch.cuda.is_initialized():
        torch.cuda.current_stream().synchronize()
