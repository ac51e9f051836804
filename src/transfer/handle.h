/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handle: a configuration, a logger, the routing policy (and the
 * fixed engine, when there is one), each engine's private state and the
 * counters. handle.c keeps the registry of live handles; api.c the entry
 * points.
 */
#ifndef P2PT_HANDLE_H
#define P2PT_HANDLE_H

#include "config.h"
#include "engine_limits.h"
#include "windows.h"

struct p2pt_policy;
struct p2pt_transport;
struct p2pt_auto;

struct p2pt_stats {
    _Atomic uint64_t copies, bytes, tma_launches, stream_launches, ce_copies, rejected;
    _Atomic uint64_t batches, batch_pieces, device_batches, batch_launches;
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
    const struct p2pt_policy *policy;       /* auto, or a fixed engine */
    const struct p2pt_transport *transport; /* the fixed engine; NULL under auto */
    struct p2pt_auto *autos;                /* auto's tables; NULL for a fixed transport */
    int driver_version;
    struct p2pt_stats stats;
    _Atomic int fallback_logged;
    /* Per engine: what its init hook made (p2pt__engine_state). */
    struct {
        const struct p2pt_transport *engine;
        void *state;
    } engine_state[P2PT_MAX_TRANSPORTS];
    struct p2pt_windows windows;
};

/*
 * A new handle for `cfg`, registered as live (no driver needed: tests make
 * handles without one; for auto it parses the crossover tables, so a bad
 * table file fails here, before p2pt_init loads the driver).
 * P2PT_INVALID_USAGE past P2PT_MAX_HANDLES live handles.
 */
P2PT_INTERNAL p2pt_status p2pt__handle_new(const struct p2pt_config *cfg,
                                           p2pt_logger_t logger, struct p2pt_handle **out);
/* Unregister and free; false when `h` was not live (nothing is touched). */
P2PT_INTERNAL bool p2pt__handle_free(struct p2pt_handle *h);
/*
 * NULL: P2PT_INVALID_ARGUMENT; not a live handle (never initialized or
 * finalized): P2PT_INVALID_USAGE. Decided from the registry without reading
 * through `h`, so a finalized handle's freed memory is never touched. `fn`
 * names the caller in the message.
 */
P2PT_INTERNAL p2pt_status p2pt__check_handle(const p2pt_handle *h, const char *fn);
/* Engine `t`'s private state in handle `h` (what its init hook made; NULL
 * for an engine without one). */
P2PT_INTERNAL void *p2pt__engine_state(const struct p2pt_handle *h,
                                       const struct p2pt_transport *t);

#endif /* P2PT_HANDLE_H */
