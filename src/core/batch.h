/*
 * Batches as they travel from the entry points (batch.c) to a transport,
 * and the registered windows (windows.c).
 */
#ifndef P2PT_BATCH_H
#define P2PT_BATCH_H

#include "p2pt_kernel_abi.h"
#include "request.h"

struct p2pt_handle;

/* A host-descriptor batch, checked and resolved once. */
struct p2pt_batch {
    const p2pt_copy_desc *descs;
    size_t count;
    size_t pieces; /* those with bytes > 0 */
    uint64_t bytes; /* their payload */
    CUstream stream;
    CUcontext ctx;
    int device; /* the stream's device */
};

/* Windows registered for one device: an immutable snapshot, sorted by base.
 * Registering makes a new snapshot; old ones stay allocated until the
 * handle is finalized, so a reader never needs a lock. */
struct p2pt_window_set {
    int n;
    struct p2pt_batch_window w[P2PT_BATCH_MAX_WINDOWS];
    struct p2pt_window_set *retired; /* the snapshot this one replaced */
};

/* A device-descriptor batch. */
struct p2pt_device_batch {
    const p2pt_copy_desc *descs;
    const uint32_t *count;
    uint32_t max_count;
    void *workspace;
    CUstream stream;
    CUcontext ctx;
    int device;
    const struct p2pt_window_set *windows; /* for `device`; NULL: none */
};

/* Check every piece of a host batch (`fn` names the entry point in
 * messages: NULL descs, size_t overflow, each piece's arguments) and fill
 * *b's descs, count, stream, pieces and bytes. */
P2PT_INTERNAL p2pt_status p2pt__batch_check(const char *fn, const p2pt_copy_desc *descs,
                                            size_t count, void *stream, struct p2pt_batch *b);

/* Most descriptors one device batch may declare (max_count). */
#define P2PT_DEVICE_BATCH_MAX (1u << 24)

/* The windows registered for `device` (NULL when none). Lock-free. */
P2PT_INTERNAL const struct p2pt_window_set *p2pt__windows(const struct p2pt_handle *h,
                                                          int device);
/* Is [a, a + n) inside one window of `ws`? `*hint` remembers the last hit
 * (start with -1): batches tend to stay in one window. */
P2PT_INTERNAL bool p2pt__window_holds(const struct p2pt_window_set *ws, uint64_t a, uint64_t n,
                                      int *hint);
/* Free every window snapshot of `h` (at finalize). */
P2PT_INTERNAL void p2pt__windows_free(struct p2pt_handle *h);

#endif /* P2PT_BATCH_H */
