/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one exported symbol: the plugin table, ABI version 1. Nothing else
 * lives here; every slot points at the public API (api.c, status.c).
 * Slots are cast-free adapters where the ABI uses `void *ctx`.
 */
#include "handle.h"
#include "p2pt_plugin.h"

static p2pt_status plugin_init(const p2pt_init_args *args, void **ctx)
{
    if (ctx == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "init: ctx is NULL");
    p2pt_handle *h = NULL;
    p2pt_status st = p2pt_init(args, &h);
    *ctx = h;
    return st;
}

static p2pt_status plugin_finalize(void *ctx) { return p2pt_finalize(ctx); }

static p2pt_status plugin_get_properties(void *ctx, p2pt_properties *props)
{
    return p2pt_get_properties(ctx, props);
}

static p2pt_status plugin_prepare(void *ctx, int device) { return p2pt_prepare(ctx, device); }

static p2pt_status plugin_copy_async(void *ctx, void *dst, const void *src, size_t bytes,
                                     void *stream)
{
    return p2pt_copy_async(ctx, dst, src, bytes, stream);
}

static const char *plugin_last_error(void *ctx) { return p2pt_last_error(ctx); }

static p2pt_status plugin_peer_enable(void *ctx, int dev_a, int dev_b)
{
    return p2pt_peer_enable(ctx, dev_a, dev_b);
}

static p2pt_status plugin_topology(void *ctx, p2pt_topology_t *topo)
{
    return p2pt_topology(ctx, topo);
}

static p2pt_status plugin_copy_batch_async(void *ctx, const p2pt_copy_desc *descs, size_t count,
                                           void *stream)
{
    return p2pt_copy_batch_async(ctx, descs, count, stream);
}

static p2pt_status plugin_copy_batch_device_async(void *ctx, const p2pt_copy_desc *descs,
                                                  const uint32_t *count, uint32_t max_count,
                                                  void *workspace, void *stream)
{
    return p2pt_copy_batch_device_async(ctx, descs, count, max_count, workspace, stream);
}

static p2pt_status plugin_window_register(void *ctx, int device, const void *base, size_t bytes)
{
    return p2pt_window_register(ctx, device, base, bytes);
}

static p2pt_status plugin_window_unregister(void *ctx, int device, const void *base)
{
    return p2pt_window_unregister(ctx, device, base);
}

static p2pt_status plugin_explain_copy(void *ctx, const void *dst, const void *src,
                                       size_t bytes, void *stream, p2pt_choice *choice)
{
    return p2pt_explain_copy(ctx, dst, src, bytes, stream, choice);
}

static p2pt_status plugin_explain_batch(void *ctx, const p2pt_copy_desc *descs, size_t count,
                                        void *stream, p2pt_choice *choice)
{
    return p2pt_explain_batch(ctx, descs, count, stream, choice);
}

static p2pt_status plugin_copy_blocks_async(void *ctx, const p2pt_block_layer *layers,
                                            size_t n_layers, const int64_t *mapping,
                                            size_t pairs, void *stream)
{
    return p2pt_copy_blocks_async(ctx, layers, n_layers, mapping, pairs, stream);
}

static p2pt_status plugin_explain_blocks(void *ctx, const p2pt_block_layer *layers,
                                         size_t n_layers, const int64_t *mapping, size_t pairs,
                                         void *stream, p2pt_choice *choice)
{
    return p2pt_explain_blocks(ctx, layers, n_layers, mapping, pairs, stream, choice);
}

static p2pt_status plugin_copy_blocks_device_async(void *ctx, const p2pt_block_layer *layers,
                                                   size_t n_layers, const int64_t *mapping,
                                                   uint32_t pairs, void *workspace,
                                                   void *stream)
{
    return p2pt_copy_blocks_device_async(ctx, layers, n_layers, mapping, pairs, workspace,
                                         stream);
}

static p2pt_status plugin_explain_batch_device(void *ctx, const p2pt_copy_desc *descs,
                                               const uint32_t *count, uint32_t max_count,
                                               void *workspace, void *stream,
                                               p2pt_choice *choice)
{
    return p2pt_explain_batch_device(ctx, descs, count, max_count, workspace, stream, choice);
}

static p2pt_status plugin_block_layout_swap(void *ctx, p2pt_block_layout *layout,
                                            const int64_t *block_mapping, size_t rows,
                                            unsigned flags, void *record_or_workspace,
                                            void *stream)
{
    return p2pt_block_layout_swap(ctx, layout, block_mapping, rows, flags, record_or_workspace,
                                  stream);
}

static p2pt_status plugin_signal_async(void *ctx, void *sem, void *stream)
{
    return p2pt_signal_async(ctx, sem, stream);
}

static p2pt_status plugin_wait_async(void *ctx, void *sem, uint32_t count, void *stream)
{
    return p2pt_wait_async(ctx, sem, count, stream);
}

static p2pt_status plugin_copy_batch_device_signal_async(void *ctx, const p2pt_copy_desc *descs,
                                                         const uint32_t *count,
                                                         uint32_t max_count, void *workspace,
                                                         void *const *signals,
                                                         uint32_t n_signals, void *stream)
{
    return p2pt_copy_batch_device_signal_async(ctx, descs, count, max_count, workspace, signals,
                                               n_signals, stream);
}

static p2pt_status plugin_copy_batch_device_marks_async(void *ctx, const p2pt_copy_desc *descs,
                                                        const uint32_t *count, uint32_t max_count,
                                                        void *workspace, void *const *signals,
                                                        uint32_t n_signals, uint32_t n_marks,
                                                        void *stream)
{
    return p2pt_copy_batch_device_marks_async(ctx, descs, count, max_count, workspace, signals,
                                              n_signals, n_marks, stream);
}

static p2pt_status plugin_explain_signal(void *ctx, void *sem, void *stream, p2pt_choice *choice)
{
    return p2pt_explain_signal(ctx, sem, stream, choice);
}

static p2pt_status plugin_explain_wait(void *ctx, void *sem, uint32_t count, void *stream,
                                       p2pt_choice *choice)
{
    return p2pt_explain_wait(ctx, sem, count, stream, choice);
}

static p2pt_status plugin_count_rows_async(void *ctx, const void *routing, uint32_t rows,
                                           uint32_t cols, int64_t *upto, void *const *puts,
                                           uint32_t n_puts, void *const *signals,
                                           uint32_t n_signals, void *stream)
{
    return p2pt_count_rows_async(ctx, routing, rows, cols, upto, puts, n_puts, signals,
                                 n_signals, stream);
}

static p2pt_status plugin_explain_count_rows(void *ctx, const void *routing, uint32_t rows,
                                             uint32_t cols, int64_t *upto, void *const *puts,
                                             uint32_t n_puts, void *const *signals,
                                             uint32_t n_signals, void *stream,
                                             p2pt_choice *choice)
{
    return p2pt_explain_count_rows(ctx, routing, rows, cols, upto, puts, n_puts, signals,
                                   n_signals, stream, choice);
}

static p2pt_status plugin_share_export(void *ctx, const void *base, size_t bytes,
                                       p2pt_share_blob *blobs, size_t *n_blobs)
{
    return p2pt_share_export(ctx, base, bytes, blobs, n_blobs);
}

static p2pt_status plugin_share_unexport(void *ctx, const void *base)
{
    return p2pt_share_unexport(ctx, base);
}

static p2pt_status plugin_share_import(void *ctx, int device, const p2pt_share_blob *blobs,
                                       size_t n_blobs, void **ptr, p2pt_share_import_t **imp)
{
    return p2pt_share_import(ctx, device, blobs, n_blobs, ptr, imp);
}

static p2pt_status plugin_share_close(void *ctx, p2pt_share_import_t *imp)
{
    return p2pt_share_close(ctx, imp);
}

const p2pt_plugin_v1_t p2pt_plugin_v1 = {
    .abi_version = P2PT_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(p2pt_plugin_v1_t),
    .name = "p2pt",
    .version = P2PT_VERSION_STRING,
    .init = plugin_init,
    .finalize = plugin_finalize,
    .get_properties = plugin_get_properties,
    .prepare = plugin_prepare,
    .copy_async = plugin_copy_async,
    .error_string = p2pt_status_string,
    .last_error = plugin_last_error,
    .peer_enable = plugin_peer_enable,
    .topology = plugin_topology,
    .copy_batch_async = plugin_copy_batch_async,
    .copy_batch_device_async = plugin_copy_batch_device_async,
    .batch_workspace_bytes = p2pt_batch_workspace_bytes,
    .window_register = plugin_window_register,
    .window_unregister = plugin_window_unregister,
    .explain_copy = plugin_explain_copy,
    .explain_batch = plugin_explain_batch,
    .copy_blocks_async = plugin_copy_blocks_async,
    .explain_blocks = plugin_explain_blocks,
    .copy_blocks_device_async = plugin_copy_blocks_device_async,
    .blocks_workspace_bytes = p2pt_blocks_workspace_bytes,
    /* the block layout slots, after 0.2.0 */
    .block_layout_create = p2pt_block_layout_create,
    .block_layout_destroy = p2pt_block_layout_destroy,
    .block_layout_check = p2pt_block_layout_check,
    .block_layout_swap = plugin_block_layout_swap,
    .explain_batch_device = plugin_explain_batch_device,
    .signal_async = plugin_signal_async,
    .wait_async = plugin_wait_async,
    .copy_batch_device_signal_async = plugin_copy_batch_device_signal_async,
    .explain_signal = plugin_explain_signal,
    .explain_wait = plugin_explain_wait,
    .share_export = plugin_share_export,
    .share_unexport = plugin_share_unexport,
    .share_import = plugin_share_import,
    .share_close = plugin_share_close,
    .copy_batch_device_marks_async = plugin_copy_batch_device_marks_async,
    .count_rows_async = plugin_count_rows_async,
    .explain_count_rows = plugin_explain_count_rows,
};
