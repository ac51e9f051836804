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
 * Registering makes a new snapshot; the ones it replaced are freed by the
 * first register or unregister that finds no operation reading (every
 * reader runs inside p2pt__op_run, between p2pt__windows_enter and
 * _leave), else at finalize, so a reader never needs a lock. */
struct p2pt_window_set {
    int n;
    struct p2pt_batch_window w[P2PT_BATCH_MAX_WINDOWS];
    bool host[P2PT_BATCH_MAX_WINDOWS]; /* w[i] is pinned host memory (a piece
                                          inside it crosses the host link) */
    bool peer[P2PT_BATCH_MAX_WINDOWS]; /* w[i] is another GPU's memory (a piece
                                          inside it crosses a peer link) */
    int n_peer;                        /* how many w[i] are */
    bool import[P2PT_BATCH_MAX_WINDOWS]; /* w[i] is an import's (p2pt_share_import),
                                            removed by its close alone */
    struct p2pt_window_set *retired; /* the snapshots this one replaced, not yet freed */
};

/* One handle's windows, per device. */
struct p2pt_windows {
    pthread_mutex_t lock;
    struct p2pt_window_set *_Atomic set[P2PT_MAX_DEVICES];
    atomic_uint readers; /* operations that may hold a snapshot now */
};

P2PT_INTERNAL void p2pt__windows_init(struct p2pt_windows *w);
/* Free every snapshot (at finalize). */
P2PT_INTERNAL void p2pt__windows_free(struct p2pt_windows *w);
/* An operation that may read snapshots begins and ends: no snapshot it
 * reads is freed before its end. */
P2PT_INTERNAL void p2pt__windows_enter(struct p2pt_windows *w);
P2PT_INTERNAL void p2pt__windows_leave(struct p2pt_windows *w);
/* Snapshots replaced but not yet freed, over every device (for tests). */
P2PT_INTERNAL size_t p2pt__windows_retained(struct p2pt_windows *w);
/* The windows registered for `device` (NULL when none), for an operation
 * between p2pt__windows_enter and _leave. Lock-free. */
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
 * context: docs/IMPORTED_MEMORY.md). An import's window (`import`) is
 * removed by the import's close alone: p2pt_window_unregister refuses it. */
P2PT_INTERNAL p2pt_status p2pt__window_add(struct p2pt_windows *w, int device, const void *base,
                                           size_t bytes, bool other_gpu, bool import);
P2PT_INTERNAL p2pt_status p2pt__window_remove(struct p2pt_windows *w, int device,
                                              const void *base, bool import);

#endif /* P2PT_WINDOWS_H */
