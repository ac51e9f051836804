/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prints the layout of every public struct of p2pt.h and p2pt_plugin.h, one
 * line per field ("struct field offset size") and one per struct ("struct
 * sizeof N"), for test_struct_layout.py to compare with the ctypes
 * structures of the Python package.
 */
#include <stddef.h>
#include <stdio.h>

#include "p2pt_plugin.h"

#define FIELD(type, field)                                                     \
    printf("%s %s %zu %zu\n", #type, #field, offsetof(type, field),           \
           sizeof(((type *)0)->field))
#define SIZE(type) printf("%s sizeof %zu\n", #type, sizeof(type))

int main(void)
{
    SIZE(p2pt_init_args);
    FIELD(p2pt_init_args, size);
    FIELD(p2pt_init_args, logger);
    FIELD(p2pt_init_args, transport);
    FIELD(p2pt_init_args, options);

    SIZE(p2pt_properties);
    FIELD(p2pt_properties, size);
    FIELD(p2pt_properties, transport);
    FIELD(p2pt_properties, version);
    FIELD(p2pt_properties, abi_version);
    FIELD(p2pt_properties, driver_version);
    FIELD(p2pt_properties, chunk_bytes);
    FIELD(p2pt_properties, stages);
    FIELD(p2pt_properties, max_ctas);
    FIELD(p2pt_properties, validate);
    FIELD(p2pt_properties, copies);
    FIELD(p2pt_properties, bytes);
    FIELD(p2pt_properties, tma_launches);
    FIELD(p2pt_properties, ce_copies);
    FIELD(p2pt_properties, ce_fallbacks);
    FIELD(p2pt_properties, compilations);
    FIELD(p2pt_properties, module_loads);
    FIELD(p2pt_properties, rejected);
    FIELD(p2pt_properties, cubin_cache_hits);
    FIELD(p2pt_properties, pdl);
    FIELD(p2pt_properties, batch_per_launch);
    FIELD(p2pt_properties, max_windows);
    FIELD(p2pt_properties, device_batch_max);
    FIELD(p2pt_properties, reserved0);
    FIELD(p2pt_properties, batches);
    FIELD(p2pt_properties, batch_pieces);
    FIELD(p2pt_properties, device_batches);
    FIELD(p2pt_properties, batch_launches);
    FIELD(p2pt_properties, auto_table);
    FIELD(p2pt_properties, ce_bytes);
    FIELD(p2pt_properties, tma_bytes);
    FIELD(p2pt_properties, ce_batches);
    FIELD(p2pt_properties, tma_batches);
    FIELD(p2pt_properties, stream_launches);
    FIELD(p2pt_properties, engine_name);
    FIELD(p2pt_properties, engine_bytes);
    FIELD(p2pt_properties, engine_batches);
    FIELD(p2pt_properties, engine_fallbacks);
    FIELD(p2pt_properties, sm_budget);
    FIELD(p2pt_properties, max_grid);
    FIELD(p2pt_properties, kernel_launches);
    FIELD(p2pt_properties, ce_operations);
    FIELD(p2pt_properties, signals);
    FIELD(p2pt_properties, waits);
    FIELD(p2pt_properties, share_exports);
    FIELD(p2pt_properties, share_imports_open);
    FIELD(p2pt_properties, share_imports_closed);
    FIELD(p2pt_properties, share_mappings);
    FIELD(p2pt_properties, count_exchanges);

    SIZE(p2pt_copy_desc);
    FIELD(p2pt_copy_desc, dst);
    FIELD(p2pt_copy_desc, src);
    FIELD(p2pt_copy_desc, bytes);

    SIZE(p2pt_batch_status);
    FIELD(p2pt_batch_status, count);
    FIELD(p2pt_batch_status, copied);
    FIELD(p2pt_batch_status, skipped);
    FIELD(p2pt_batch_status, first_bad);
    FIELD(p2pt_batch_status, reasons);
    FIELD(p2pt_batch_status, reserved);

    SIZE(p2pt_choice);
    FIELD(p2pt_choice, size);
    FIELD(p2pt_choice, transport);
    FIELD(p2pt_choice, path);
    FIELD(p2pt_choice, device);
    FIELD(p2pt_choice, reserved);
    FIELD(p2pt_choice, reason);

    SIZE(p2pt_peer_link);
    FIELD(p2pt_peer_link, can_access);
    FIELD(p2pt_peer_link, perf_rank);
    FIELD(p2pt_peer_link, native_atomics);
    FIELD(p2pt_peer_link, reserved);

    SIZE(p2pt_topology_t);
    FIELD(p2pt_topology_t, size);
    FIELD(p2pt_topology_t, device_count);
    FIELD(p2pt_topology_t, island_count);
    FIELD(p2pt_topology_t, island);
    FIELD(p2pt_topology_t, link);

    SIZE(p2pt_plugin_v1_t);
    FIELD(p2pt_plugin_v1_t, abi_version);
    FIELD(p2pt_plugin_v1_t, struct_size);
    FIELD(p2pt_plugin_v1_t, name);
    FIELD(p2pt_plugin_v1_t, version);
    FIELD(p2pt_plugin_v1_t, init);
    FIELD(p2pt_plugin_v1_t, finalize);
    FIELD(p2pt_plugin_v1_t, get_properties);
    FIELD(p2pt_plugin_v1_t, prepare);
    FIELD(p2pt_plugin_v1_t, copy_async);
    FIELD(p2pt_plugin_v1_t, error_string);
    FIELD(p2pt_plugin_v1_t, last_error);
    FIELD(p2pt_plugin_v1_t, peer_enable);
    FIELD(p2pt_plugin_v1_t, topology);
    FIELD(p2pt_plugin_v1_t, copy_batch_async);
    FIELD(p2pt_plugin_v1_t, copy_batch_device_async);
    FIELD(p2pt_plugin_v1_t, batch_workspace_bytes);
    FIELD(p2pt_plugin_v1_t, window_register);
    FIELD(p2pt_plugin_v1_t, window_unregister);
    FIELD(p2pt_plugin_v1_t, explain_copy);
    FIELD(p2pt_plugin_v1_t, explain_batch);
    FIELD(p2pt_plugin_v1_t, copy_blocks_async);
    FIELD(p2pt_plugin_v1_t, explain_blocks);
    FIELD(p2pt_plugin_v1_t, copy_blocks_device_async);
    FIELD(p2pt_plugin_v1_t, blocks_workspace_bytes);
    FIELD(p2pt_plugin_v1_t, block_layout_create);
    FIELD(p2pt_plugin_v1_t, block_layout_destroy);
    FIELD(p2pt_plugin_v1_t, block_layout_check);
    FIELD(p2pt_plugin_v1_t, block_layout_swap);
    FIELD(p2pt_plugin_v1_t, explain_batch_device);
    FIELD(p2pt_plugin_v1_t, share_export);
    FIELD(p2pt_plugin_v1_t, share_unexport);
    FIELD(p2pt_plugin_v1_t, share_import);
    FIELD(p2pt_plugin_v1_t, share_close);
    FIELD(p2pt_plugin_v1_t, copy_batch_device_marks_async);
    FIELD(p2pt_plugin_v1_t, count_rows_async);
    FIELD(p2pt_plugin_v1_t, explain_count_rows);

    SIZE(p2pt_share_blob);
    FIELD(p2pt_share_blob, bytes);
    FIELD(p2pt_plugin_v1_t, signal_async);
    FIELD(p2pt_plugin_v1_t, wait_async);
    FIELD(p2pt_plugin_v1_t, copy_batch_device_signal_async);
    FIELD(p2pt_plugin_v1_t, explain_signal);
    FIELD(p2pt_plugin_v1_t, explain_wait);

    SIZE(p2pt_block_layer);
    FIELD(p2pt_block_layer, size);
    FIELD(p2pt_block_layer, dst);
    FIELD(p2pt_block_layer, src);
    FIELD(p2pt_block_layer, block_bytes);
    FIELD(p2pt_block_layer, dst_blocks);
    FIELD(p2pt_block_layer, src_blocks);
    return 0;
}
