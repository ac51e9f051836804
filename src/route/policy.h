/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Routing policies: how a handle picks an engine for each operation. A fixed
 * transport (policy_fixed.c) and `auto` (route_auto.c) are the two, listed
 * in the router's registry (router.c); the rest of the library sees a
 * policy only through this table and its opaque state. The router asks the
 * handle's policy, then applies what every policy shares (the engine's
 * can_copy, the fallback, its count and log).
 * A policy writes its reason in words into `why` when it is not NULL (a
 * dry run: p2pt_explain_*).
 */
#ifndef P2PT_POLICY_H
#define P2PT_POLICY_H

#include "batch.h"

struct p2pt_handle;
struct p2pt_transport;

/* Facts a policy reads that the pipeline gathers only for the policies
 * that ask (p2pt_policy.needs), so that routing itself asks the driver
 * nothing. */
#define P2PT_NEEDS_CAPTURE (1u << 1)     /* a copy's r->capturing */
#define P2PT_NEEDS_FIRST_PIECE (1u << 2) /* a host batch's b->first */

struct p2pt_policy {
    /* The P2P_TRANSPORT value that selects it; NULL: every engine's own
     * name (the fixed policy). */
    const char *name;
    unsigned needs; /* P2PT_NEEDS_* */
    /* The policy's per-handle state (h->policy_state), made before the
     * driver is loaded (CUDA-free) and freed at finalize; NULL hooks: none. */
    p2pt_status (*init)(const struct p2pt_handle *h, void **state);
    void (*fini)(void *state);
    /* p2pt_init, once the driver is loaded: checks that need the machine
     * (NULL: none). */
    p2pt_status (*after_driver)(struct p2pt_handle *h);
    /* What p2pt_properties.transport says for this handle. */
    const char *(*transport_name)(const struct p2pt_handle *h);
    /* Fill the properties the policy owns (NULL: none). */
    void (*report)(const struct p2pt_handle *h, p2pt_properties *p);
    /* The engine the policy wants for a resolved copy. */
    p2pt_status (*route_copy)(struct p2pt_handle *h, const struct p2pt_request *r,
                              const struct p2pt_transport **t, char *why, size_t len);
    /* The engine for a host batch (stream resolved), asked before the pass
     * over its pieces with what is known then: b->first (for a policy that
     * needs it), the sums of blocks (b->sums_known) and whether their every
     * piece is mapped memory (b->mapped). Where the choice depends on what
     * only the pass finds (the mean piece size of descriptors, or a piece
     * only the copy engine moves: b->ce_only, b->unmapped), the policy sets
     * b->route_later and names the likely engine: the pass then leaves the
     * pieces where any engine can take them, and the pipeline asks once
     * more, after the pass (b->passed), for the choice. */
    p2pt_status (*route_batch)(struct p2pt_handle *h, struct p2pt_batch *b,
                               const struct p2pt_transport **t, char *why, size_t len);
    /* The engine for a device batch: one with P2PT_CAP_DEVICE_BATCH, or
     * status 6 saying why there is none (the message names entry point
     * `fn`). Depends on no fact of the batch. */
    p2pt_status (*route_device_batch)(struct p2pt_handle *h, const char *fn,
                                      const struct p2pt_transport **t, char *why, size_t len);
    /* The CTAs that saturate the host link of `device` in each direction
     * ({h2d, d2h}; 0: no cap): the router hands them to kernel engines for
     * work that crosses that link. */
    p2pt_status (*link_ctas)(struct p2pt_handle *h, int device, uint32_t out[P2PT_LINKS]);
    /* p2pt_prepare: every engine this policy may choose on `device`. */
    p2pt_status (*prepare)(struct p2pt_handle *h, int device);
};

P2PT_INTERNAL extern const struct p2pt_policy p2pt__policy_fixed;

#endif /* P2PT_POLICY_H */
