/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registered windows (windows.c): ranges a framework promises stay mapped on
 * one device, so a batch's pieces inside them need no per-piece lookup.
 * Readers take a snapshot without a lock; writers hold the set's lock.
 */
#ifndef P2PT_WINDOWS_H
#define P2PT_WINDOWS_H

#include "common.h"
#include "p2pt_kernel_abi.h"

#define P2PT_MAX_DEVICES 64

/* Windows registered for one device: an immutable snapshot, sorted by base.
 * Registering makes a new snapshot; old ones stay allocated until the
 * handle is finalized, so a reader never needs a lock. */
struct p2pt_window_set {
    int n;
    struct p2pt_batch_window w[P2PT_BATCH_MAX_WINDOWS];
    bool host[P2PT_BATCH_MAX_WINDOWS]; /* w[i] is pinned host memory (a piece
                                          inside it crosses the host link) */
    bool peer[P2PT_BATCH_MAX_WINDOWS]; /* w[i] is another GPU's memory (a piece
                                          inside it crosses a peer link) */
    int n_peer;                        /* how many w[i] are */
    struct p2pt_window_set *retired; /* the snapshot this one replaced */
};

/* One handle's windows, per device. */
struct p2pt_windows {
    pthread_mutex_t lock;
    struct p2pt_window_set *_Atomic set[P2PT_MAX_DEVICES];
};

P2PT_INTERNAL void p2pt__windows_init(struct p2pt_windows *w);
/* Free every snapshot (at finalize). */
P2PT_INTERNAL void p2pt__windows_free(struct p2pt_windows *w);
/* The windows registered for `device` (NULL when none). Lock-free. */
P2PT_INTERNAL const struct p2pt_window_set *p2pt__windows(const struct p2pt_windows *w,
                                                          int device);
/* The window of `ws` holding [a, a + n), found by a search (-1: none). */
P2PT_INTERNAL int p2pt__window_search(const struct p2pt_window_set *ws, uint64_t a, uint64_t n);
/* Is [a, a + n) inside one window of `ws`? `*hint` remembers the last hit
 * (start with -1): batches tend to stay in one window, so the hint's window
 * is tried inline, per piece of a host batch, before any search. */
static inline bool p2pt__window_holds(const struct p2pt_window_set *ws, uint64_t a, uint64_t n,
                                      int *hint)
{
    if (ws == NULL || ws->n == 0)
        return false;
    if (*hint >= 0 && *hint < ws->n && a >= ws->w[*hint].base && a + n <= ws->w[*hint].end)
        return true;
    int i = p2pt__window_search(ws, a, n);
    if (i < 0)
        return false;
    *hint = i;
    return true;
}
/* p2pt_window_register / _unregister once the handle is known live. A
 * window's memory is another GPU's where the driver says so, or where
 * `other_gpu` does: an import's bytes live on the exporter's GPU though
 * the driver names the importing device (a legacy IPC handle opened in its
 * context: docs/IMPORTED_MEMORY.md). */
P2PT_INTERNAL p2pt_status p2pt__window_add(struct p2pt_windows *w, int device, const void *base,
                                           size_t bytes, bool other_gpu);
P2PT_INTERNAL p2pt_status p2pt__window_remove(struct p2pt_windows *w, int device,
                                              const void *base);

#endif /* P2PT_WINDOWS_H */
