# SPDX-License-Identifier: Apache-2.0
"""p2pt.Handle: one p2pt handle and every call of the C API on it.

Pointers and streams are plain integers (a CUstream or cudaStream_t; 0 or
None is the legacy default stream). Every failure raises p2pt.Error.
"""
import collections
import ctypes
import operator
import threading
import weakref

from . import _structs as S
from ._lib import check, load

Choice = collections.namedtuple("Choice", "transport path device reason")
Link = collections.namedtuple("Link", "can_access perf_rank native_atomics")
Topology = collections.namedtuple("Topology", "device_count island_count island link")
BatchStatus = collections.namedtuple("BatchStatus", "count copied skipped first_bad reasons")

BATCH_SKIPPED_WINDOW = 1
BATCH_SKIPPED_OVER_MAX = 2
BATCH_SKIPPED_OVERLAP = 4
BATCH_SKIPPED_TOO_LARGE = 8

BLOCK_MAPPING_ON_GPU = 1  # P2PT_BLOCK_MAPPING_ON_GPU: Handle.block_layout_swap's flag

SEMAPHORE_BYTES = 32      # P2PT_SEMAPHORE_BYTES: a semaphore's GPU memory, zeroed once
SEMAPHORE_TIMEOUTS = 16   # P2PT_SEMAPHORE_TIMEOUTS: byte offset of its count of timed-out waits
BATCH_SIGNALS_MAX = 64    # P2PT_BATCH_SIGNALS_MAX
COUNT_COLS_MAX = 64       # P2PT_COUNT_COLS_MAX: destinations a count exchange counts


_DESCS = ctypes.POINTER(S.CopyDesc)


def _text(b):
    return None if b is None else b.decode(errors="replace")


def _addresses(addrs):
    """GPU addresses (ints) as a C array of void *, one element at least so
    that an empty list still passes a valid pointer (with its count 0)."""
    return (ctypes.c_void_p * max(len(addrs), 1))(*addrs)


def _u64(v, what):
    """v, an integer from 0 to 2**64 - 1 (None as 0), or a ValueError
    naming it: a ctypes field would wrap -1 or 2**64 + 5 into another valid
    value."""
    v = 0 if v is None else operator.index(v)  # None: a NULL address
    if not 0 <= v < 1 << 64:
        raise ValueError(f"{what} is {v}: expected an integer from 0 to 2**64 - 1")
    return v


# Buffer formats that hold records: raw bytes, or 8-byte integers.
_RECORD_FORMATS = ("B", "b", "c", "q", "Q", "l", "L", "<q", "<Q", "=q", "=Q")


def descs_array(descs):
    """A ctypes array of CopyDesc from: such an array; a buffer of 24-byte
    records (bytes, a NumPy int64 array of shape (n, 3)); or a sequence of
    (dst, src, bytes) integer triples."""
    if isinstance(descs, ctypes.Array) and descs._type_ is S.CopyDesc:
        return descs
    try:
        view = memoryview(descs)
    except TypeError:
        view = None
    if view is not None:
        if view.format not in _RECORD_FORMATS or (view.format not in ("B", "b", "c") and
                                                   view.itemsize != 8):
            raise ValueError(f"a descriptor buffer of format {view.format!r} (item size "
                             f"{view.itemsize}): expected raw bytes or 8-byte integers, three "
                             f"to a (dst, src, bytes) record")
        if view.nbytes % ctypes.sizeof(S.CopyDesc):
            raise ValueError(f"a descriptor buffer of {view.nbytes} bytes is not a whole number "
                             f"of {ctypes.sizeof(S.CopyDesc)}-byte p2pt_copy_desc records")
        n = view.nbytes // ctypes.sizeof(S.CopyDesc)
        return (S.CopyDesc * n).from_buffer_copy(view.cast("B"))
    descs = list(descs)
    return (S.CopyDesc * len(descs))(*[
        S.CopyDesc(_u64(d, f"descriptor {i}: dst"), _u64(s, f"descriptor {i}: src"),
                   _u64(n, f"descriptor {i}: bytes")) for i, (d, s, n) in enumerate(descs)])


def workspace_bytes(max_count):
    """GPU bytes a device batch of up to max_count descriptors needs."""
    return load().p2pt_batch_workspace_bytes(max_count)


def blocks_workspace_bytes(n_layers, pairs):
    """GPU bytes p2pt_copy_blocks_device_async needs for n_layers x pairs
    pieces (status record, count and descriptors)."""
    return load().p2pt_blocks_workspace_bytes(n_layers, pairs)


def layers_array(layers):
    """A ctypes array of BlockLayer from such an array or from a sequence of
    (dst, src, block_bytes, dst_blocks, src_blocks) integer tuples."""
    if isinstance(layers, ctypes.Array) and layers._type_ is S.BlockLayer:
        return layers
    size = ctypes.sizeof(S.BlockLayer)
    names = ("dst", "src", "block_bytes", "dst_blocks", "src_blocks")
    return (S.BlockLayer * len(layers))(*[
        S.BlockLayer(size, *[_u64(v, f"layer {i}: {names[k] if k < 5 else k}")
                             for k, v in enumerate(t)]) for i, t in enumerate(layers)])


class BlockLayout:
    """A cache's layers checked once and kept (p2pt_block_layout_create),
    for Handle.block_layout_swap and check; freed by close() or when
    collected. Belongs to no handle and needs no driver. `layers`: see
    layers_array; the layers' memory must outlive the layout."""

    def __init__(self, layers):
        arr = layers_array(layers)
        lib = load()
        p = ctypes.c_void_p()
        check(lib.p2pt_block_layout_create(arr, len(arr), ctypes.byref(p)))
        self.pointer, self.n_layers = p.value, len(arr)
        self._finalizer = weakref.finalize(self, lib.p2pt_block_layout_destroy, p.value)
        self._finalizer.atexit = False

    def check(self, mapping, rows, record=None):
        """p2pt_block_layout_check: `rows` (src id, dst id) int64 rows at host
        address `mapping`; `record`: host address of a p2pt_batch_status to
        fill (None: none). Raises p2pt.Error naming the bad cell or rows."""
        check(load().p2pt_block_layout_check(self.pointer, mapping, rows, record))

    def workspace_bytes(self, rows):
        """GPU bytes a swap of `rows` rows in GPU memory needs as workspace."""
        return blocks_workspace_bytes(self.n_layers, rows)

    def close(self):
        """p2pt_block_layout_destroy; safe to call twice."""
        self._finalizer()


def read_batch_status(raw):
    """BatchStatus from the first 32 bytes of a workspace copied to the host."""
    st = S.BatchStatus.from_buffer_copy(bytes(raw)[:ctypes.sizeof(S.BatchStatus)])
    return BatchStatus(st.count, st.copied, st.skipped, st.first_bad, st.reasons)


# Live handles by pointer: how an operation that carries only the pointer
# (p2pt.torch's, registered with torch.library) finds its Handle.
_by_pointer = weakref.WeakValueDictionary()


def lookup(pointer):
    """The live Handle whose p2pt_handle * is `pointer`, else None."""
    return _by_pointer.get(pointer)


class _Live:
    """The handle's pointer, shared with window finalizers, which must not
    keep the Handle itself alive; 0 once the handle is finalized. `lock`
    guards the handle's table of windows: re-entrant, since a collection
    may run a finalizer inside Handle.window on the same thread."""

    def __init__(self):
        self.ptr = 0
        self.lock = threading.RLock()


def _unregister(live, table, key):
    with live.lock:
        table.pop(key, None)
        if live.ptr:
            device, base = key
            load().p2pt_window_unregister(live.ptr, device, base)


class Window:
    """A window registered through Handle.window: unregistered by release(),
    when its owner is collected, or when the handle closes, whichever comes
    first (so it never outlives the memory its owner holds)."""

    def __init__(self, finalizer, device, base, nbytes):
        self._finalizer = finalizer
        self.device, self.base, self.nbytes = device, base, nbytes

    @property
    def registered(self):
        return self._finalizer.alive

    def release(self):
        self._finalizer()

    def __repr__(self):
        state = "registered" if self.registered else "released"
        return f"<p2pt.Window device {self.device} [{self.base:#x}, +{self.nbytes}) {state}>"


def options_text(options):
    """p2pt_init_args.options from a string ("NAME=VALUE ...", returned as
    it is), a dict ({"P2P_TRANSPORT_STAGES": 2}; True and False are 1 and
    0) or None."""
    if options is None or isinstance(options, str):
        return options
    if not isinstance(options, dict):
        raise TypeError(f"p2pt.Handle: options must be a str or a dict of NAME: value, not "
                        f"{type(options).__name__}")
    items = []
    for name, value in options.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"p2pt.Handle: option names are non-empty str, not {name!r}")
        if isinstance(value, bool):
            value = int(value)
        text = str(value)
        # The C parser cuts items at whitespace and commas: such a value
        # would silently become two items.
        if not text or any(c in text for c in " \t\n,"):
            raise ValueError(f"p2pt.Handle: option {name}={text!r}: a value must be non-empty "
                             f"with no whitespace or comma")
        items.append(f"{name}={text}")
    return " ".join(items)


class Handle:
    """One p2pt handle (p2pt_init). Thread-safe: one serves any number of
    threads. `transport`: "ce", "tma" or "auto" (else P2P_TRANSPORT decides);
    `options`: the settings of env.md, overriding the environment, as a dict
    ({"P2P_TRANSPORT_STAGES": 2}) or a string ("P2P_TRANSPORT_STAGES=2 ...")."""

    def __init__(self, transport=None, options=None):
        options = options_text(options)
        self._lib = load()
        self._live = _Live()
        self._windows = {}  # (device, base) -> Window
        self._prepared = set()
        # What a binding keeps alive for work queued through this handle
        # (p2pt.torch: the pinned storages that work may still read).
        self.held = None
        args = S.InitArgs(ctypes.sizeof(S.InitArgs), None,
                          transport.encode() if transport else None,
                          options.encode() if options else None)
        self._h = ctypes.c_void_p()
        check(self._lib.p2pt_init(ctypes.byref(args), ctypes.byref(self._h)))
        self._live.ptr = self._h.value
        _by_pointer[self._live.ptr] = self

    @property
    def pointer(self):
        """The p2pt_handle * as an integer (0 once closed)."""
        return self._live.ptr

    def close(self):
        """Unregister every Window of this handle, then p2pt_finalize. Safe
        to call twice."""
        with self._live.lock:
            for w in list(self._windows.values()):
                w.release()
            if self._h:
                _by_pointer.pop(self._live.ptr, None)
                self._lib.p2pt_finalize(self._h)
                self._h = ctypes.c_void_p()
            self._live.ptr = 0

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def window(self, device, base, nbytes, owner, *, moves=False):
        """Register [base, base + nbytes) for device batches on `device` for
        as long as `owner` (any object that holds the memory, e.g. a tensor)
        lives; see Window. A base already registered through this call with
        at least nbytes returns the same Window. `moves`: [base, base +
        nbytes) is all the memory `owner` holds, which it may move (a
        storage that resize_ reallocates): a window of `owner` on `device`
        at another base, made with `moves` too, is released first."""
        key = (device, base)
        with self._live.lock:  # two threads, one storage: one registration
            w = self._windows.get(key)
            # A moving owner's base may be another's now (it moved away and
            # the memory came back to someone else): the window goes with
            # the memory's owner of now.
            if w is not None and w.registered and w.nbytes >= nbytes and \
                    not (moves and w.moves and w.owner() is not owner):
                return w
            if w is not None:
                w.release()
            if moves:
                for old in [o for o in self._windows.values()
                            if o.moves and o.device == device and o.owner() is owner]:
                    old.release()
            # The finalizer first: an owner that cannot be weakly referenced
            # is refused before anything is registered.
            fin = weakref.finalize(owner, _unregister, self._live, self._windows, key)
            fin.atexit = False
            try:
                self.window_register(device, base, nbytes)
            except BaseException:
                fin.detach()
                raise
            w = Window(fin, device, base, nbytes)
            w.owner, w.moves = weakref.ref(owner), moves
            self._windows[key] = w
            return w

    def prepare(self, device):
        check(self._lib.p2pt_prepare(self._h, device))
        self._prepared.add(device)

    def copy(self, dst, src, nbytes, stream=None):
        check(self._lib.p2pt_copy_async(self._h, dst, src, nbytes, stream or None))

    def copy_batch(self, descs, stream=None):
        """descs: see descs_array (triples, a buffer of records, a CopyDesc array)."""
        arr = descs_array(descs)
        check(self._lib.p2pt_copy_batch_async(self._h, arr, len(arr), stream or None))

    def copy_batch_at(self, address, count, stream=None):
        """A host batch of `count` p2pt_copy_desc records at host `address`
        (e.g. the data_ptr of a contiguous (count, 3) int64 tensor), read
        before the call returns."""
        check(self._lib.p2pt_copy_batch_async(self._h, ctypes.cast(address, _DESCS), count,
                                              stream or None))

    def copy_blocks_at(self, layers, n_layers, mapping, pairs, stream=None):
        """p2pt_copy_blocks_async: `n_layers` BlockLayer records at host
        address `layers` and `pairs` (src id, dst id) int64 rows at host
        address `mapping` (a contiguous (pairs, 2) int64 tensor's data_ptr),
        both read before the call returns."""
        check(self._lib.p2pt_copy_blocks_async(self._h, layers, n_layers, mapping, pairs,
                                               stream or None))

    def block_layout_swap(self, layout, mapping, rows, flags, record_or_workspace, stream=None):
        """p2pt_block_layout_swap on BlockLayout `layout` (or its pointer):
        `rows` (src id, dst id) int64 rows at `mapping`, host memory read
        before the call returns (flags 0; `record_or_workspace`: host
        address of a p2pt_batch_status, or None) or GPU memory read when the
        batch runs (flags BLOCK_MAPPING_ON_GPU; `record_or_workspace`: GPU
        address of layout.workspace_bytes(rows) bytes, 16-byte aligned,
        whose first 32 bytes become the status record)."""
        if isinstance(layout, BlockLayout):
            layout = layout.pointer
        check(self._lib.p2pt_block_layout_swap(self._h, layout, mapping, rows, flags,
                                               record_or_workspace, stream or None))

    def explain_blocks_at(self, layers, n_layers, mapping, pairs, stream=None):
        """What copy_blocks_at would do, and why (p2pt_explain_blocks)."""
        return self._explain(self._lib.p2pt_explain_blocks, layers, n_layers, mapping, pairs,
                             stream or None)

    def copy_blocks_device_at(self, layers, n_layers, mapping, pairs, workspace, stream=None):
        """p2pt_copy_blocks_device_async: `n_layers` BlockLayer records at
        host address `layers` (read before the call returns); `mapping`:
        GPU address of `pairs` (src id, dst id) int64 rows, read when the
        batch runs; `workspace`: GPU address of
        blocks_workspace_bytes(n_layers, pairs) bytes, 16-byte aligned,
        whose first 32 bytes become the status record."""
        check(self._lib.p2pt_copy_blocks_device_async(self._h, layers, n_layers, mapping, pairs,
                                                      workspace, stream or None))

    workspace_bytes = staticmethod(workspace_bytes)
    blocks_workspace_bytes = staticmethod(blocks_workspace_bytes)

    def copy_batch_device(self, descs, count, max_count, workspace, stream=None):
        """descs, count, workspace: GPU addresses (descs: max_count records of
        three 64-bit words; count: one uint32; workspace:
        workspace_bytes(max_count) bytes, 16-byte aligned)."""
        check(self._lib.p2pt_copy_batch_device_async(self._h, descs, count, max_count, workspace,
                                                     stream or None))

    def window_register(self, device, base, nbytes):
        check(self._lib.p2pt_window_register(self._h, device, base, nbytes))

    def window_unregister(self, device, base):
        check(self._lib.p2pt_window_unregister(self._h, device, base))

    def _explain(self, fn, *args):
        """fn (a p2pt_explain_* call) on this handle, `args`, and the Choice
        it fills in."""
        c = S.Choice(size=ctypes.sizeof(S.Choice))
        check(fn(self._h, *args, ctypes.byref(c)))
        return Choice(_text(c.transport), _text(c.path), c.device, _text(c.reason))

    def explain_copy(self, dst, src, nbytes, stream=None):
        """Which engine the copy would go to, and why; enqueues nothing."""
        return self._explain(self._lib.p2pt_explain_copy, dst, src, nbytes, stream or None)

    def explain_batch(self, descs, stream=None):
        arr = descs_array(descs)
        return self._explain(self._lib.p2pt_explain_batch, arr, len(arr), stream or None)

    def signal(self, sem, stream=None):
        """Signal the semaphore at GPU address `sem` once everything before it
        on `stream` is visible to its GPU (p2pt_signal_async)."""
        check(self._lib.p2pt_signal_async(self._h, sem, stream or None))

    def wait(self, sem, count=1, stream=None):
        """Hold `stream` until `count` more signals reach the semaphore at
        `sem`, this stream's device's memory (p2pt_wait_async)."""
        check(self._lib.p2pt_wait_async(self._h, sem, count, stream or None))

    def copy_batch_device_signal(self, descs, count, max_count, workspace, signals,
                                 stream=None):
        """copy_batch_device, then a signal to each semaphore address of
        `signals` once every piece is visible (p2pt_copy_batch_device_signal_async)."""
        arr = _addresses(signals)
        check(self._lib.p2pt_copy_batch_device_signal_async(
            self._h, descs, count, max_count, workspace, arr, len(signals), stream or None))

    def copy_batch_device_marks(self, descs, count, max_count, workspace, signals, n_marks,
                                stream=None):
        """copy_batch_device in `n_marks` parts that signal apart: each
        address of `signals` is the first of n_marks semaphores in a row,
        semaphore j counting one signal once part j's pieces (pieces
        j * max_count // n_marks up to the next part's) are visible
        (p2pt_copy_batch_device_marks_async)."""
        arr = _addresses(signals)
        check(self._lib.p2pt_copy_batch_device_marks_async(
            self._h, descs, count, max_count, workspace, arr, len(signals), n_marks,
            stream or None))

    def count_rows(self, routing, rows, cols, upto, puts, signals, stream=None):
        """The count exchange of an alltoallv (p2pt_count_rows_async): count
        the rows x cols routing bytes at GPU address `routing` by column,
        write the cols int64 counts to each address of `puts`, signal each
        semaphore address of `signals`, then write each row's running
        count to `upto` ([cols][rows] int64; None or 0: not written)."""
        p, s = _addresses(puts), _addresses(signals)
        check(self._lib.p2pt_count_rows_async(self._h, routing, rows, cols, upto or None, p,
                                              len(puts), s, len(signals), stream or None))

    def explain_count_rows(self, routing, rows, cols, upto, puts, signals, stream=None):
        p, s = _addresses(puts), _addresses(signals)
        return self._explain(self._lib.p2pt_explain_count_rows, routing, rows, cols,
                             upto or None, p, len(puts), s, len(signals), stream or None)

    def explain_signal(self, sem, stream=None):
        return self._explain(self._lib.p2pt_explain_signal, sem, stream or None)

    def explain_wait(self, sem, count=1, stream=None):
        return self._explain(self._lib.p2pt_explain_wait, sem, count, stream or None)

    def explain_batch_device(self, descs, count, max_count, workspace, stream=None):
        """Which engine a device batch would go to and the grid it would take,
        and why; enqueues nothing (the same GPU addresses as
        copy_batch_device)."""
        return self._explain(self._lib.p2pt_explain_batch_device, descs, count, max_count,
                             workspace, stream or None)

    def peer_enable(self, dev_a, dev_b):
        check(self._lib.p2pt_peer_enable(self._h, dev_a, dev_b))

    def topology(self):
        t = S.Topology(size=ctypes.sizeof(S.Topology))
        check(self._lib.p2pt_topology(self._h, ctypes.byref(t)))
        n = t.device_count
        links = [[Link(t.link[a][b].can_access, t.link[a][b].perf_rank,
                       t.link[a][b].native_atomics) for b in range(n)] for a in range(n)]
        return Topology(n, t.island_count, list(t.island[:n]), links)

    def properties(self):
        """Every field of p2pt_properties but `size`, strings decoded."""
        p = S.Properties(size=ctypes.sizeof(S.Properties))
        check(self._lib.p2pt_get_properties(self._h, ctypes.byref(p)))
        out = {}
        for name, _ in S.Properties._fields_:
            if name != "size":
                v = getattr(p, name)
                if isinstance(v, ctypes.Array):  # per-engine arrays: a list
                    v = [_text(x) if isinstance(x, bytes) else x for x in v]
                out[name] = _text(v) if isinstance(v, bytes) else v
        return out

    def share_export(self, base, nbytes):
        """Export [base, base + nbytes), device memory this process owns, for
        other processes of the host (p2pt_share_export): a list of blobs,
        each `bytes` of length SHARE_BLOB_BYTES, to carry over the
        framework's own bootstrap unchanged. Valid until share_unexport(base)
        or close()."""
        n = ctypes.c_size_t(0)
        check(self._lib.p2pt_share_export(self._h, base, nbytes, None, ctypes.byref(n)))
        arr = (S.ShareBlob * n.value)()
        check(self._lib.p2pt_share_export(self._h, base, nbytes, arr, ctypes.byref(n)))
        return [bytes(b.bytes) for b in arr[:n.value]]

    def share_unexport(self, base):
        """End the export at `base` (imports already made stay valid)."""
        check(self._lib.p2pt_share_unexport(self._h, base))

    def share_import(self, device, blobs):
        """Import another process's export (its blobs, any order) for
        `device`: (address, import), the address of the exported range here,
        registered as a window of `device`; close it with share_close."""
        blobs = list(blobs)
        arr = (S.ShareBlob * len(blobs))()
        for i, b in enumerate(blobs):
            b = bytes(b)
            if len(b) != S.SHARE_BLOB_BYTES:
                raise ValueError(f"blob {i} has {len(b)} bytes; a p2pt blob has "
                                 f"{S.SHARE_BLOB_BYTES}")
            ctypes.memmove(arr[i].bytes, b, len(b))
        ptr, imp = ctypes.c_void_p(), ctypes.c_void_p()
        check(self._lib.p2pt_share_import(self._h, device, arr, len(blobs), ctypes.byref(ptr),
                                          ctypes.byref(imp)))
        return ptr.value, imp.value

    def share_close(self, imp):
        """Close an import: the last close of a mapping waits for the work
        this handle queued on it, then unmaps it."""
        check(self._lib.p2pt_share_close(self._h, imp))

    def last_error(self):
        return (self._lib.p2pt_last_error(self._h) or b"").decode(errors="replace")
