/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fixed policy (P2P_TRANSPORT=ce, tma, ...): the handle's one engine
 * for everything; the router sends what its can_copy refuses to the
 * fallback engine.
 */
#include <stdio.h>

#include "auto.h"
#include "handle.h"
#include "policy.h"
#include "registry.h"

/* The state is the engine itself. */
static const struct p2pt_transport *engine(const struct p2pt_handle *h)
{
    return h->policy_state;
}

static p2pt_status fixed_init(const struct p2pt_handle *h, void **state)
{
    const struct p2pt_transport *e = p2pt__transport_find(h->cfg.transport);
    if (e == NULL)
        return p2pt__fail(P2PT_INTERNAL_ERROR, "transport \"%s\" vanished", h->cfg.transport);
    *state = (void *)(uintptr_t)e;
    return P2PT_SUCCESS;
}

static const char *fixed_name(const struct p2pt_handle *h)
{
    return engine(h)->name;
}

static p2pt_status fixed_copy(struct p2pt_handle *h, const struct p2pt_request *r,
                              const struct p2pt_transport **t, char *why, size_t len)
{
    (void)r;
    *t = engine(h);
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every copy it can run", engine(h)->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_batch(struct p2pt_handle *h, struct p2pt_batch *b,
                               const struct p2pt_transport **t, char *why, size_t len)
{
    (void)b;
    *t = engine(h);
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every batch", engine(h)->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_device_batch(struct p2pt_handle *h, const char *fn,
                                      const struct p2pt_transport **t, char *why, size_t len)
{
    const struct p2pt_transport *e = engine(h);
    const struct p2pt_transport *k = p2pt__engine_with(P2PT_CAP_DEVICE_BATCH);
    if (!(e->caps & P2PT_CAP_DEVICE_BATCH) || e->copy_batch_device == NULL)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "%s: the %s transport cannot read "
                          "descriptors from GPU memory (only a kernel can); use "
                          "P2P_TRANSPORT=%s",
                          fn, e->name, k != NULL ? k->name : "auto");
    *t = e;
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every device batch", e->name);
    return P2PT_SUCCESS;
}

static p2pt_status fixed_link_ctas(struct p2pt_handle *h, int device, uint32_t out[P2PT_LINKS])
{
    (void)h;
    return p2pt__auto_builtin_link_ctas(device, out);
}

static p2pt_status fixed_prepare(struct p2pt_handle *h, int device)
{
    return engine(h)->prepare(h, device);
}

const struct p2pt_policy p2pt__policy_fixed = {
    .name = NULL,
    .init = fixed_init,
    .transport_name = fixed_name,
    .route_copy = fixed_copy,
    .route_batch = fixed_batch,
    .route_device_batch = fixed_device_batch,
    .link_ctas = fixed_link_ctas,
    .prepare = fixed_prepare,
};
