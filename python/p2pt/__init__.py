# SPDX-License-Identifier: Apache-2.0
"""p2pt from Python: ctypes bindings of the whole C API, no dependency.

    import p2pt
    h = p2pt.Handle(transport="tma")            # p2pt_init
    h.prepare(0)                                # compile and load before capture
    h.copy(dst_ptr, src_ptr, nbytes, stream)    # p2pt_copy_async
    h.copy_batch([(dst, src, nbytes), ...], stream)
    h.explain_copy(dst_ptr, src_ptr, nbytes)    # which engine, and why
    lay = p2pt.BlockLayout([(dst, src, block_bytes, dst_blocks, src_blocks), ...])
    h.block_layout_swap(lay, mapping_ptr, rows, 0, record_ptr, stream)
    h.properties()["stream_launches"]           # every counter

Pointers and streams are plain integers. Every failure raises p2pt.Error
(status, status_name, text). For PyTorch tensors, see p2pt.torch.

The library is the one shipped in this package, else P2PT_LIBRARY (a path),
else libp2pt.so.0 / libp2pt.so on the loader's path (p2pt._lib says more).
"""
from ._handle import (BATCH_SIGNALS_MAX, BATCH_SKIPPED_OVER_MAX, BATCH_SKIPPED_OVERLAP,
                      BATCH_SKIPPED_TOO_LARGE, BATCH_SKIPPED_WINDOW, BLOCK_MAPPING_ON_GPU,
                      SEMAPHORE_BYTES, SEMAPHORE_TIMEOUTS, BatchStatus, BlockLayout,
                      Choice, Handle, Link, Topology, Window, descs_array, layers_array,
                      read_batch_status, workspace_bytes)
from ._lib import Error, Status, last_error, library_path, load, plugin_table, status_string
from ._structs import TOPOLOGY_MAX_DEVICES, BlockLayer, CopyDesc
from ._version import __version__

__all__ = [
    "Error", "Status", "Handle", "Window", "Choice", "Link", "Topology", "BatchStatus", "CopyDesc",
    "BlockLayer", "BlockLayout", "layers_array", "BLOCK_MAPPING_ON_GPU",
    "load", "library_path", "plugin_table", "last_error", "status_string", "workspace_bytes",
    "descs_array", "read_batch_status", "TOPOLOGY_MAX_DEVICES", "BATCH_SKIPPED_WINDOW",
    "BATCH_SKIPPED_OVER_MAX", "BATCH_SKIPPED_OVERLAP", "BATCH_SKIPPED_TOO_LARGE",
    "SEMAPHORE_BYTES", "SEMAPHORE_TIMEOUTS", "BATCH_SIGNALS_MAX", "__version__",
]
