# SPDX-License-Identifier: Apache-2.0
"""The ctypes twins of the public structs of p2pt.h and p2pt_plugin.h.

Fields are only ever appended in C; each one appended there is appended here
(tests/python/test_struct_layout.py compares both layouts and field names).
"""
import ctypes

_P = ctypes.c_void_p
_U32, _U64, _I32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
_SZ, _STR, _INT = ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int

TOPOLOGY_MAX_DEVICES = 32
PROPERTIES_ENGINES = 4  # P2PT_PROPERTIES_ENGINES


class InitArgs(ctypes.Structure):
    _fields_ = [("size", _SZ), ("logger", _P), ("transport", _STR), ("options", _STR)]


class Properties(ctypes.Structure):
    _fields_ = [
        ("size", _SZ), ("transport", _STR), ("version", _STR), ("abi_version", _U32),
        ("driver_version", _INT), ("chunk_bytes", _SZ), ("stages", _INT), ("max_ctas", _INT),
        ("validate", _INT), ("copies", _U64), ("bytes", _U64), ("tma_launches", _U64),
        ("ce_copies", _U64), ("ce_fallbacks", _U64), ("compilations", _U64),
        ("module_loads", _U64), ("rejected", _U64), ("cubin_cache_hits", _U64), ("pdl", _INT),
        # end of the first release
        ("batch_per_launch", _U32), ("max_windows", _U32), ("device_batch_max", _U32),
        ("reserved0", _U32), ("batches", _U64), ("batch_pieces", _U64),
        ("device_batches", _U64), ("batch_launches", _U64),
        # end of the batch release
        ("auto_table", _STR), ("ce_bytes", _U64), ("tma_bytes", _U64), ("ce_batches", _U64),
        ("tma_batches", _U64),
        # end of the auto release
        ("stream_launches", _U64),
        ("engine_name", _STR * PROPERTIES_ENGINES),
        ("engine_bytes", _U64 * PROPERTIES_ENGINES),
        ("engine_batches", _U64 * PROPERTIES_ENGINES),
        ("engine_fallbacks", _U64 * PROPERTIES_ENGINES),
        # end of the 0.2 release
        ("sm_budget", ctypes.c_int32),
        ("max_grid", ctypes.c_uint32),
        ("kernel_launches", _U64),
        ("ce_operations", _U64),
        ("signals", _U64),
        ("waits", _U64),
        # memory shared between processes
        ("share_exports", _U64), ("share_imports_open", _U64),
        ("share_imports_closed", _U64), ("share_mappings", _U64),
        ("count_exchanges", _U64),
    ]


class CopyDesc(ctypes.Structure):
    """One piece of a batch: three 64-bit words, dst, src, bytes."""
    _fields_ = [("dst", _P), ("src", _P), ("bytes", _U64)]


class BlockLayer(ctypes.Structure):
    """One layer of a block-structured cache (p2pt_copy_blocks_async)."""
    _fields_ = [("size", _SZ), ("dst", _P), ("src", _P), ("block_bytes", _U64),
                ("dst_blocks", _U64), ("src_blocks", _U64)]


class BatchStatus(ctypes.Structure):
    """What a device batch leaves at the start of its workspace."""
    _fields_ = [("count", _U32), ("copied", _U32), ("skipped", _U32), ("first_bad", _U32),
                ("reasons", _U32), ("reserved", _U32 * 3)]


class Choice(ctypes.Structure):
    _fields_ = [("size", _SZ), ("transport", _STR), ("path", _STR), ("device", _I32),
                ("reserved", _I32), ("reason", ctypes.c_char * 512)]


SHARE_BLOB_BYTES = 256  # P2PT_SHARE_BLOB_BYTES


class ShareBlob(ctypes.Structure):
    """One blob of an export (p2pt_share_export): opaque bytes to carry to
    another process of the host unchanged."""
    _fields_ = [("bytes", ctypes.c_ubyte * SHARE_BLOB_BYTES)]


class PeerLink(ctypes.Structure):
    _fields_ = [("can_access", _I32), ("perf_rank", _I32), ("native_atomics", _I32),
                ("reserved", _I32)]


class Topology(ctypes.Structure):
    _fields_ = [("size", _SZ), ("device_count", _I32), ("island_count", _I32),
                ("island", _I32 * TOPOLOGY_MAX_DEVICES),
                ("link", (PeerLink * TOPOLOGY_MAX_DEVICES) * TOPOLOGY_MAX_DEVICES)]


class PluginV1(ctypes.Structure):
    """The exported table; only read here (its version needs no driver)."""
    _fields_ = [("abi_version", _U32), ("struct_size", _U32), ("name", _STR), ("version", _STR)] + \
        [(slot, _P) for slot in (
            "init", "finalize", "get_properties", "prepare", "copy_async", "error_string",
            "last_error",
            # end of the first v1 release
            "peer_enable", "topology",
            # end of the second v1 release
            "copy_batch_async", "copy_batch_device_async", "batch_workspace_bytes",
            "window_register", "window_unregister",
            # end of the batch v1 release
            "explain_copy", "explain_batch",
            # end of the 0.2.0 release
            "copy_blocks_async", "explain_blocks", "copy_blocks_device_async",
            "blocks_workspace_bytes",
            # the block layout slots, after 0.2.0
            "block_layout_create", "block_layout_destroy", "block_layout_check",
            "block_layout_swap", "explain_batch_device",
            # signals
            "signal_async", "wait_async", "copy_batch_device_signal_async", "explain_signal",
            "explain_wait",
            # memory shared between processes
            "share_export", "share_unexport", "share_import", "share_close",
            # a device batch in parts that signal apart
            "copy_batch_device_marks_async",
            # the count exchange of an alltoallv
            "count_rows_async", "explain_count_rows")]


# C name of each structure, for the layout test.
C_NAMES = {
    "p2pt_init_args": InitArgs, "p2pt_properties": Properties, "p2pt_copy_desc": CopyDesc,
    "p2pt_batch_status": BatchStatus, "p2pt_choice": Choice, "p2pt_peer_link": PeerLink,
    "p2pt_topology_t": Topology, "p2pt_plugin_v1_t": PluginV1, "p2pt_block_layer": BlockLayer,
    "p2pt_share_blob": ShareBlob,
}
