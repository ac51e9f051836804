/*
 * The registry of transports (curl's available_backends[] pattern) and the
 * router that picks one for each request. Adding a transport is its own
 * file (with the descriptor of its kernel), its kernel in kernels/, and one
 * line in `transports`. `auto` (route_auto.c) chooses among them per
 * request.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "handle.h"

/* NULL-terminated. The first is the fallback: it must run any request. */
static const struct p2pt_transport *const transports[] = {
    &p2pt__transport_ce,
    &p2pt__transport_tma,
    NULL,
};

const struct p2pt_transport *p2pt__transport_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; transports[i] != NULL; i++)
        if (strcasecmp(name, transports[i]->name) == 0)
            return transports[i];
    return NULL;
}

int p2pt__kernel_count(const struct p2pt_transport *t)
{
    int n = 0;
    while (n < (int)P2PT_ARRAY_LEN(t->kernels) && t->kernels[n] != NULL)
        n++;
    return n;
}

const char *p2pt__transport_canonical(const char *name)
{
    if (name != NULL && strcasecmp(name, P2PT_AUTO_NAME) == 0)
        return P2PT_AUTO_NAME;
    const struct p2pt_transport *t = p2pt__transport_find(name);
    return t ? t->name : NULL;
}

const char *p2pt__transport_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; transports[i] != NULL && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", transports[i]->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used < len)
        snprintf(buf + used, len - used, ", %s", P2PT_AUTO_NAME);
    return buf;
}

const struct p2pt_transport *p2pt__transport_at(int i)
{
    return i >= 0 && i < (int)P2PT_ARRAY_LEN(transports) ? transports[i] : NULL;
}

int p2pt__engine_names(const char **names, int max)
{
    int n = 0;
    while (n < max && transports[n] != NULL) {
        names[n] = transports[n]->name;
        n++;
    }
    return n;
}

int p2pt__transport_index(const struct p2pt_transport *t)
{
    int i = 0;
    while (transports[i] != NULL && transports[i] != t)
        i++;
    return i;
}

const char *p2pt__handle_transport_name(const struct p2pt_handle *h)
{
    return h->transport != NULL ? h->transport->name : P2PT_AUTO_NAME;
}

p2pt_status p2pt__route(struct p2pt_handle *h, const struct p2pt_request *r,
                        const struct p2pt_transport **t, char *why, size_t len)
{
    const char *no = NULL;
    if (h->transport == NULL)
        return p2pt__auto_copy(h, r, t, why, len);
    if (h->transport->can_copy(h, r, &no)) {
        *t = h->transport;
        if (why)
            snprintf(why, len, "P2P_TRANSPORT=%s: every copy it can run", h->transport->name);
        return P2PT_SUCCESS;
    }
    const struct p2pt_transport *fallback = transports[0];
    *t = fallback;
    if (why) {
        snprintf(why, len, "P2P_TRANSPORT=%s, which cannot copy this (%s): %s",
                 h->transport->name, no, fallback->name);
        return P2PT_SUCCESS;
    }
    atomic_fetch_add_explicit(&h->stats.ce_fallbacks, 1, memory_order_relaxed);
    if (atomic_exchange(&h->fallback_logged, 1) == 0)
        P2PT_INFO(&h->log,
                  "%s cannot copy %zu bytes from %p to %p (%s); such copies go to %s "
                  "(logged once, counted in ce_fallbacks)",
                  h->transport->name, r->bytes, r->src, r->dst, no, fallback->name);
    return P2PT_SUCCESS;
}

p2pt_status p2pt__route_batch(struct p2pt_handle *h, const struct p2pt_batch *b,
                              const struct p2pt_transport **t, char *why, size_t len)
{
    if (h->transport == NULL)
        return p2pt__auto_batch(h, b, t, why, len);
    *t = h->transport;
    if (why)
        snprintf(why, len, "P2P_TRANSPORT=%s: every batch", h->transport->name);
    return P2PT_SUCCESS;
}
