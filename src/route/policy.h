/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Routing policies: how a handle picks an engine for each operation. A fixed
 * transport (policy_fixed.c) and `auto` (route_auto.c) are the two; the
 * router (router.c) asks the handle's policy, then applies what every
 * policy shares (the engine's can_copy, the fallback, its count and log).
 * A policy writes its reason in words into `why` when it is not NULL (a
 * dry run: p2pt_explain_*).
 */
#ifndef P2PT_POLICY_H
#define P2PT_POLICY_H

#include "batch.h"

struct p2pt_handle;
struct p2pt_transport;

struct p2pt_policy {
    const char *name; /* NULL: the fixed engine's own name */
    /* The policy's per-handle state, made before the driver is loaded
     * (CUDA-free) and freed at finalize; NULL hooks: none. */
    p2pt_status (*init)(struct p2pt_handle *h);
    void (*fini)(struct p2pt_handle *h);
    /* The engine the policy wants for a resolved copy. */
    p2pt_status (*route_copy)(struct p2pt_handle *h, const struct p2pt_request *r,
                              const struct p2pt_transport **t, char *why, size_t len);
    /* route_batch reads b->pieces and b->bytes: the pipeline passes over the
     * descriptors before routing. Otherwise they are unknown then. */
    bool batch_sums;
    /* The engine for a host batch (stream resolved; with batch_sums,
     * b->pieces > 0). */
    p2pt_status (*route_batch)(struct p2pt_handle *h, const struct p2pt_batch *b,
                               const struct p2pt_transport **t, char *why, size_t len);
    /* The engine for a device batch: one with P2PT_CAP_DEVICE_BATCH, or
     * status 6 saying why there is none. Depends on no fact of the batch. */
    p2pt_status (*route_device_batch)(struct p2pt_handle *h, const struct p2pt_transport **t,
                                      char *why, size_t len);
    /* p2pt_prepare: every engine this policy may choose on `device`. */
    p2pt_status (*prepare)(struct p2pt_handle *h, int device);
};

P2PT_INTERNAL extern const struct p2pt_policy p2pt__policy_fixed;

#endif /* P2PT_POLICY_H */
