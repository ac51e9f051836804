/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt plugin ABI, version 1.
 *
 * A framework loads libp2pt.so with dlopen(path, RTLD_NOW | RTLD_LOCAL),
 * looks up the data symbol P2PT_PLUGIN_V1_SYMBOL ("p2pt_plugin_v1") and
 * checks `abi_version == 1` and `struct_size >= ` the offset of the last
 * slot it calls. Every other symbol of the library is hidden.
 *
 * Rules that keep old frameworks and new plugins working together (NCCL's
 * ncclNetPlugin_vN and SQLite's sqlite3_vfs pattern):
 *  - fields are only ever appended; `struct_size` grows when they are;
 *  - a breaking change is a new table type and a new symbol
 *    (p2pt_plugin_v2) exported beside this one, never an edit of this one;
 *  - `ctx` is the opaque handle returned by `init`.
 */
#ifndef P2PT_PLUGIN_H
#define P2PT_PLUGIN_H

#include "p2pt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define P2PT_PLUGIN_ABI_VERSION 1
#define P2PT_PLUGIN_V1_SYMBOL "p2pt_plugin_v1"

typedef struct p2pt_plugin_v1 {
    /* 1 for this table. Read this first. */
    uint32_t abi_version;
    /* sizeof the table as the plugin was built; slots past it are absent. */
    uint32_t struct_size;
    /* "p2pt". Static string. */
    const char *name;
    /* Library version, "MAJOR.MINOR.PATCH". Static string. */
    const char *version;

    /* Create a context. `args` may be NULL (all defaults). Reads the
     * environment, loads the CUDA driver; on failure *ctx is NULL and
     * last_error(NULL) explains. Thread-safe; may block (driver load). */
    p2pt_status (*init)(const p2pt_init_args *args, void **ctx);

    /* Destroy a context. Safe to call twice and with NULL. Must not race with
     * other calls on the same ctx. Does not wait for enqueued copies. */
    p2pt_status (*finalize)(void *ctx);

    /* Fill `props` (set props->size first). Thread-safe; never blocks. */
    p2pt_status (*get_properties)(void *ctx, p2pt_properties *props);

    /* One-time work for `device` (TMA: NVRTC compile once per process, module
     * load once per context). Call before capturing copies into a CUDA graph.
     * Blocks; thread-safe; cheap when already done. */
    p2pt_status (*prepare)(void *ctx, int device);

    /* Enqueue a copy on `stream` (a CUstream; NULL = legacy default stream).
     * Never blocks on the GPU, never allocates after prepare, thread-safe.
     * bytes == 0 succeeds and enqueues nothing. */
    p2pt_status (*copy_async)(void *ctx, void *dst, const void *src,
                              size_t bytes, void *stream);

    /* Static text for a status code. Never NULL; thread-safe. */
    const char *(*error_string)(p2pt_status status);

    /* Detailed text of the calling thread's last failure ("" if none); `ctx`
     * may be NULL, so a failed init can be explained. Valid until the
     * thread's next call into the plugin. */
    const char *(*last_error)(void *ctx);
    /* ---- end of the first v1 release (struct_size 80 on LP64) ---- */

    /* Enable peer access between two devices' primary contexts, both ways;
     * idempotent; restores the caller's current context. Blocks; thread-safe.
     * Check struct_size > offsetof(p2pt_plugin_v1_t, peer_enable). */
    p2pt_status (*peer_enable)(void *ctx, int dev_a, int dev_b);

    /* Fill the peer topology (set topo->size first). Thread-safe. */
    p2pt_status (*topology)(void *ctx, p2pt_topology_t *topo);
    /* ---- end of the second v1 release (struct_size 96 on LP64) ---- */

    /* Batches (p2pt.h says the contract of each): check
     * struct_size > offsetof(p2pt_plugin_v1_t, copy_batch_async) first.
     * copy_batch_async: host descriptors, one stream-ordered operation;
     * never blocks on the GPU; thread-safe. */
    p2pt_status (*copy_batch_async)(void *ctx, const p2pt_copy_desc *descs, size_t count,
                                    void *stream);
    /* Descriptors and their count in GPU memory, read when the batch runs;
     * checked there against the registered windows; status 6 on "ce". */
    p2pt_status (*copy_batch_device_async)(void *ctx, const p2pt_copy_desc *descs,
                                           const uint32_t *count, uint32_t max_count,
                                           void *workspace, void *stream);
    /* GPU bytes a device batch of max_count descriptors needs as workspace. */
    size_t (*batch_workspace_bytes)(uint32_t max_count);
    /* The memory device batches on `device` may touch. Thread-safe. */
    p2pt_status (*window_register)(void *ctx, int device, const void *base, size_t bytes);
    p2pt_status (*window_unregister)(void *ctx, int device, const void *base);
    /* ---- end of the batch v1 release (struct_size 136 on LP64) ---- */

    /* Which engine a copy or host batch would go to, and why (p2pt.h's
     * p2pt_explain_copy/_batch); check struct_size >
     * offsetof(p2pt_plugin_v1_t, explain_copy). Thread-safe. */
    p2pt_status (*explain_copy)(void *ctx, const void *dst, const void *src, size_t bytes,
                                void *stream, p2pt_choice *choice);
    p2pt_status (*explain_batch)(void *ctx, const p2pt_copy_desc *descs, size_t count,
                                 void *stream, p2pt_choice *choice);
    /* ---- end of the 0.2.0 release (struct_size 152 on LP64) ---- */

    /* Blocks moved by a mapping (p2pt.h's p2pt_copy_blocks_async and
     * p2pt_explain_blocks); check struct_size >
     * offsetof(p2pt_plugin_v1_t, copy_blocks_async). Thread-safe. */
    p2pt_status (*copy_blocks_async)(void *ctx, const p2pt_block_layer *layers, size_t n_layers,
                                     const int64_t *mapping, size_t pairs, void *stream);
    p2pt_status (*explain_blocks)(void *ctx, const p2pt_block_layer *layers, size_t n_layers,
                                  const int64_t *mapping, size_t pairs, void *stream,
                                  p2pt_choice *choice);
    /* Blocks moved by a mapping in GPU memory, as a device batch
     * (p2pt_copy_blocks_device_async; status 6 on "ce") and its workspace
     * size; check struct_size > offsetof(p2pt_plugin_v1_t,
     * copy_blocks_device_async). Thread-safe. */
    p2pt_status (*copy_blocks_device_async)(void *ctx, const p2pt_block_layer *layers,
                                            size_t n_layers, const int64_t *mapping,
                                            uint32_t pairs, void *workspace, void *stream);
    size_t (*blocks_workspace_bytes)(size_t n_layers, uint32_t pairs);

    /* ---- the block layout slots, after 0.2.0 (p2pt.h's p2pt_block_layout_*):
     * check struct_size > offsetof(p2pt_plugin_v1_t, block_layout_swap). ---- */
    /* A cache's layers checked once and kept; needs no ctx and no driver.
     * Thread-safe. */
    p2pt_status (*block_layout_create)(const p2pt_block_layer *layers, size_t n_layers,
                                       p2pt_block_layout **out);
    /* Free a layout; NULL succeeds. Must not race with its use. */
    p2pt_status (*block_layout_destroy)(p2pt_block_layout *layout);
    /* A host mapping's checks against a layout, nothing enqueued; needs no
     * ctx and no driver. Thread-safe. */
    p2pt_status (*block_layout_check)(const p2pt_block_layout *layout,
                                      const int64_t *block_mapping, size_t rows,
                                      p2pt_batch_status *record);
    /* Swap a host or GPU mapping on a layout as one batch, writing its
     * status record; never blocks on the GPU; thread-safe; capturable after
     * prepare. */
    p2pt_status (*block_layout_swap)(void *ctx, p2pt_block_layout *layout,
                                     const int64_t *block_mapping, size_t rows, unsigned flags,
                                     void *record_or_workspace, void *stream);
    /* A device batch's dry run (p2pt_explain_batch_device); check
     * struct_size > offsetof(p2pt_plugin_v1_t, explain_batch_device).
     * Thread-safe. */
    p2pt_status (*explain_batch_device)(void *ctx, const p2pt_copy_desc *descs,
                                        const uint32_t *count, uint32_t max_count,
                                        void *workspace, void *stream, p2pt_choice *choice);
    /* Signals (p2pt.h's p2pt_signal_async, p2pt_wait_async,
     * p2pt_copy_batch_device_signal_async and their dry runs); check
     * struct_size > offsetof(p2pt_plugin_v1_t, explain_wait). Thread-safe;
     * capturable after prepare. */
    p2pt_status (*signal_async)(void *ctx, void *sem, void *stream);
    p2pt_status (*wait_async)(void *ctx, void *sem, uint32_t count, void *stream);
    p2pt_status (*copy_batch_device_signal_async)(void *ctx, const p2pt_copy_desc *descs,
                                                  const uint32_t *count, uint32_t max_count,
                                                  void *workspace, void *const *signals,
                                                  uint32_t n_signals, void *stream);
    p2pt_status (*explain_signal)(void *ctx, void *sem, void *stream, p2pt_choice *choice);
    p2pt_status (*explain_wait)(void *ctx, void *sem, uint32_t count, void *stream,
                                p2pt_choice *choice);

    /* Memory shared between processes (p2pt.h's p2pt_share_export,
     * _unexport, _import, _close say the contract of each); check
     * struct_size > offsetof(p2pt_plugin_v1_t, share_close). Thread-safe;
     * export and import may block for a few seconds at most (the driver,
     * the descriptor hand-off); close waits for the work queued on the
     * window. */
    p2pt_status (*share_export)(void *ctx, const void *base, size_t bytes,
                                p2pt_share_blob *blobs, size_t *n_blobs);
    p2pt_status (*share_unexport)(void *ctx, const void *base);
    p2pt_status (*share_import)(void *ctx, int device, const p2pt_share_blob *blobs,
                                size_t n_blobs, void **ptr, p2pt_share_import_t **imp);
    p2pt_status (*share_close)(void *ctx, p2pt_share_import_t *imp);
    /* A device batch in parts that signal apart (p2pt.h's
     * p2pt_copy_batch_device_marks_async); check struct_size >
     * offsetof(p2pt_plugin_v1_t, copy_batch_device_marks_async).
     * Thread-safe; capturable after prepare. */
    p2pt_status (*copy_batch_device_marks_async)(void *ctx, const p2pt_copy_desc *descs,
                                                 const uint32_t *count, uint32_t max_count,
                                                 void *workspace, void *const *signals,
                                                 uint32_t n_signals, uint32_t n_marks,
                                                 void *stream);
    /* The count exchange of an alltoallv (p2pt.h's p2pt_count_rows_async
     * and its dry run); check struct_size > offsetof(p2pt_plugin_v1_t,
     * explain_count_rows). Thread-safe; capturable after prepare. */
    p2pt_status (*count_rows_async)(void *ctx, const void *routing, uint32_t rows, uint32_t cols,
                                    int64_t *upto, void *const *puts, uint32_t n_puts,
                                    void *const *signals, uint32_t n_signals, void *stream);
    p2pt_status (*explain_count_rows)(void *ctx, const void *routing, uint32_t rows,
                                      uint32_t cols, int64_t *upto, void *const *puts,
                                      uint32_t n_puts, void *const *signals, uint32_t n_signals,
                                      void *stream, p2pt_choice *choice);
    /* ---- append below ---- */
} p2pt_plugin_v1_t;

/* The one exported data symbol. */
P2PT_API extern const p2pt_plugin_v1_t p2pt_plugin_v1;

#ifdef __cplusplus
}
#endif

#endif /* P2PT_PLUGIN_H */
