/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handle: a configuration, a logger, the routing policy and its
 * opaque state, each engine's private state and the counters: what the
 * pipeline and the engines both read. Making, freeing
 * and checking handles is core's (handles.h).
 */
#ifndef P2PT_HANDLE_H
#define P2PT_HANDLE_H

#include "config.h"
#include "engine_limits.h"
#include "windows.h"

struct p2pt_policy;
struct p2pt_share;
struct p2pt_transport;

struct p2pt_stats {
    _Atomic uint64_t copies, bytes, rejected;
    _Atomic uint64_t batches, batch_pieces, device_batches;
    _Atomic uint64_t signals, waits, count_exchanges;
    /* Every kernel engine's launches, counted where they are made (launch.c);
     * what only one engine counts lives in its state (its report hook). */
    _Atomic uint64_t kernel_launches;
    _Atomic uint32_t max_grid;
    /* Per engine, by registry index: single copies' bytes, batches (host and
     * device), and copies that engine was chosen for but could not run
     * (they went to the fallback engine). */
    _Atomic uint64_t engine_bytes[P2PT_MAX_TRANSPORTS], engine_batches[P2PT_MAX_TRANSPORTS],
        engine_fallbacks[P2PT_MAX_TRANSPORTS];
};

/* Live handles a process may hold at once (p2pt_init refuses more). */
#define P2PT_MAX_HANDLES 256

struct p2pt_handle {
    struct p2pt_config cfg;
    struct p2pt_logger log;
    const struct p2pt_policy *policy; /* auto, or a fixed engine */
    void *policy_state;               /* what the policy's init made */
    int driver_version;
    struct p2pt_stats stats;
    _Atomic int fallback_logged;
    /* Per engine: what its init hook made (p2pt__engine_state). */
    struct {
        const struct p2pt_transport *engine;
        void *state;
    } engine_state[P2PT_MAX_TRANSPORTS];
    struct p2pt_windows windows;
    /* Memory shared between processes (share/): made on the first export
     * or import, NULL until then. */
    struct p2pt_share *_Atomic share;
};

/* Engine `t`'s private state in handle `h` (what its init hook made; NULL
 * for an engine without one). Inline, so an engine reads its state without
 * calling into the module that made the handle. */
static inline void *p2pt__engine_state(const struct p2pt_handle *h,
                                       const struct p2pt_transport *t)
{
    for (int i = 0; i < P2PT_MAX_TRANSPORTS; i++)
        if (h->engine_state[i].engine == t)
            return h->engine_state[i].state;
    return NULL;
}

#endif /* P2PT_HANDLE_H */
