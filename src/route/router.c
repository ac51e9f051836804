/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The router that picks an engine for each operation, and the registry of
 * policies. The handle's policy (policy_fixed.c, or auto in route_auto.c)
 * chooses from the engines' registry (engines/registry.c); the router
 * applies the engine's can_copy and the fallback, the same for every
 * policy.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "auto.h"
#include "handle.h"
#include "policy.h"
#include "router.h"

/* The policies P2P_TRANSPORT names besides the engines, NULL-terminated;
 * an engine's name selects the fixed policy. */
static const struct p2pt_policy *const policies[] = {&p2pt__policy_auto, NULL};

const struct p2pt_policy *p2pt__policy_find(const char *name)
{
    if (p2pt__transport_find(name) != NULL)
        return &p2pt__policy_fixed;
    for (size_t i = 0; name != NULL && policies[i] != NULL; i++)
        if (strcasecmp(name, policies[i]->name) == 0)
            return policies[i];
    return NULL;
}

const char *p2pt__handle_transport_name(const struct p2pt_handle *h)
{
    return h->policy->transport_name(h);
}

_Static_assert(P2PT_MAX_TRANSPORTS + P2PT_ARRAY_LEN(policies) - 1 <= P2PT_CONFIG_NAMES,
               "config is told every engine's and policy's name: raise P2PT_CONFIG_NAMES");
_Static_assert(P2PT_MAX_TRANSPORTS <= P2PT_SETTINGS_GROUPS,
               "config holds a group of settings per engine: raise P2PT_SETTINGS_GROUPS");

void p2pt__config_known(struct p2pt_config_known *known)
{
    memset(known, 0, sizeof(*known));
    known->n_transports = p2pt__engine_names(known->transports, P2PT_MAX_TRANSPORTS);
    for (size_t i = 0; policies[i] != NULL; i++)
        known->transports[known->n_transports++] = policies[i]->name;
    const struct p2pt_transport *fallback = p2pt__fallback_engine();
    known->fallback = fallback != NULL ? fallback->name : NULL;
    known->n_groups = p2pt__engine_settings(known->groups, P2PT_SETTINGS_GROUPS);
}

p2pt_status p2pt__config_read(struct p2pt_config *cfg, const char *options,
                              const char *transport_override)
{
    struct p2pt_config_known known;
    p2pt__config_known(&known);
    return p2pt__config_parse(cfg, options, transport_override, &known);
}

/* Does engine `t` run kernels (and so hold SMs)? */
static bool runs_kernels(const struct p2pt_transport *t)
{
    return t->kernels[0] != NULL;
}

/* P2P_TRANSPORT_SM_BUDGET=0 allows no kernel at all, whatever the policy
 * chose: such work goes to the engine that runs anything (the copy engine),
 * and a dry run says so after the policy's own reason. */
static const struct p2pt_transport *within_budget(const struct p2pt_handle *h,
                                                  const struct p2pt_transport *t, char *why,
                                                  size_t len)
{
    if (h->cfg.sm_budget != 0 || !runs_kernels(t))
        return t;
    const struct p2pt_transport *fallback = p2pt__fallback_engine();
    if (why) {
        size_t used = strlen(why);
        if (used < len)
            snprintf(why + used, len - used,
                     "; but P2P_TRANSPORT_SM_BUDGET=0 allows no kernel, so %s (no SM used)",
                     fallback->name);
    }
    return fallback;
}

p2pt_status p2pt__route(struct p2pt_handle *h, const struct p2pt_request *r,
                        const struct p2pt_transport **t, char *why, size_t len)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_transport *want = NULL;
    const char *no = NULL;

    P2PT_TRY(h->policy->route_copy(h, r, &want, why, len));
    want = within_budget(h, want, why, len);
    if (want->can_copy(h, r, &no)) {
        *t = want;
        return P2PT_SUCCESS;
    }
    const struct p2pt_transport *fallback = p2pt__fallback_engine();
    *t = fallback;
    if (why) {
        size_t used = strlen(why);
        if (used < len)
            snprintf(why + used, len - used, "; but %s cannot (%s): %s", want->name, no,
                     fallback->name);
        return P2PT_SUCCESS;
    }
    atomic_fetch_add_explicit(&h->stats.engine_fallbacks[p2pt__transport_index(want)], 1,
                              memory_order_relaxed);
    if (atomic_exchange(&h->fallback_logged, 1) == 0)
        P2PT_INFO(&h->log,
                  "%s cannot copy %zu bytes from %p to %p (%s); such copies go to %s "
                  "(logged once, counted in ce_fallbacks)",
                  want->name, r->bytes, r->src, r->dst, no, fallback->name);
out:
    return st;
}

p2pt_status p2pt__route_batch(struct p2pt_handle *h, struct p2pt_batch *b,
                              const struct p2pt_transport **t, char *why, size_t len)
{
    b->route_later = false;
    p2pt_status st = h->policy->route_batch(h, b, t, why, len);
    if (st == P2PT_SUCCESS) {
        const struct p2pt_transport *chosen = *t;
        *t = within_budget(h, *t, why, len);
        if (*t != chosen)
            b->route_later = false; /* the budget chose, whatever the pass finds */
    }
    return st;
}

p2pt_status p2pt__route_link(struct p2pt_handle *h, const struct p2pt_transport *t, int device,
                             uint32_t link[P2PT_LINKS])
{
    for (int i = 0; i < P2PT_LINKS; i++)
        link[i] = 0;
    if (!runs_kernels(t) || h->policy->link_ctas == NULL)
        return P2PT_SUCCESS;
    p2pt_status st = h->policy->link_ctas(h, device, link);
    /* A framework that can spare the SMs widens the peer grid: at 32 CTAs
     * a peer batch is bound by each SM's NVLink writes (bench/results/peer.md
     * 5t: 64 take 38-56 us off a four-rank MoE combine). */
    if (st == P2PT_SUCCESS && h->cfg.link_peer > 0)
        link[P2PT_LINK_PEER] = (uint32_t)h->cfg.link_peer;
    return st;
}

p2pt_status p2pt__route_signal(struct p2pt_handle *h, const char *fn,
                               const struct p2pt_transport **t, char *why, size_t len)
{
    /* A semaphore's epochs advance in GPU memory, which only a kernel
     * writes: whatever P2P_TRANSPORT says, signals take the engine with
     * kernels that can, and a budget of no kernel refuses them. */
    if (h->cfg.sm_budget == 0)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "%s: P2P_TRANSPORT_SM_BUDGET=0, and a signal or a wait is a "
                          "one-thread kernel (the semaphore's count advances in GPU memory, "
                          "which a graph replays; docs/SIGNALS.md); use a budget of 1 or more",
                          fn);
    *t = p2pt__engine_with(P2PT_CAP_SIGNAL);
    if (*t == NULL || (*t)->signal == NULL)
        return p2pt__fail(P2PT_NOT_SUPPORTED, "%s: no registered transport signals", fn);
    if (why)
        snprintf(why, len, "a one-thread kernel of %s (a signal's or wait's count advances in "
                           "GPU memory), whatever P2P_TRANSPORT says",
                 (*t)->name);
    return P2PT_SUCCESS;
}

p2pt_status p2pt__route_device_batch(struct p2pt_handle *h, const char *fn,
                                     const struct p2pt_transport **t, char *why, size_t len)
{
    /* Only a kernel reads descriptors from GPU memory, and its CTA 0
     * checks every descriptor for the status record before it copies
     * anything: on one CTA that pass would stand in front of every byte, so
     * a device batch takes two or more (docs/USAGE.md, the SM budget). */
    if (h->cfg.sm_budget == 0 || h->cfg.sm_budget == 1)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "%s: P2P_TRANSPORT_SM_BUDGET=%d, and a "
                          "device batch needs a kernel of at least 2 CTAs (one writes the "
                          "status record); use a host batch, or a budget of 2 or more",
                          fn, h->cfg.sm_budget);
    return h->policy->route_device_batch(h, fn, t, why, len);
}
