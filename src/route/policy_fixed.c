/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fixed policy (P2P_TRANSPORT=ce, tma, ...): the handle's one engine
 * for everything; the router sends what its can_copy refuses to the
 * fallback engine.
 */
#include <stdio.h>

#include "handle.h"
#include "policy.h"
#include "transport.h"

static p2pt_status fixed_copy(struct p2pt_handle *h, const struct p2pt_request *r,
                              const struct p2pt_transport **t, char *why, size_t len)
{
    (void)r;
    *t = h->transport;
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every copy it can run", h->transport->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_batch(struct p2pt_handle *h, const struct p2pt_batch *b,
                               const struct p2pt_transport **t, char *why, size_t len)
{
    (void)b;
    *t = h->transport;
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every batch", h->transport->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_device_batch(struct p2pt_handle *h, const struct p2pt_transport **t,
                                      char *why, size_t len)
{
    const struct p2pt_transport *e = h->transport;
    if (!(e->caps & P2PT_CAP_DEVICE_BATCH) || e->copy_batch_device == NULL)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "p2pt_copy_batch_device_async: the %s transport cannot read "
                          "descriptors from GPU memory (only a kernel can); use "
                          "P2P_TRANSPORT=tma",
                          e->name);
    *t = e;
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every device batch", e->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_prepare(struct p2pt_handle *h, int device)
{
    return h->transport->prepare(h, device);
}

const struct p2pt_policy p2pt__policy_fixed = {
    .name = NULL,
    .route_copy = fixed_copy,
    .route_batch = fixed_batch,
    .route_device_batch = fixed_device_batch,
    .prepare = fixed_prepare,
};
