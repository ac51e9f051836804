/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of engines (curl's available_backends[] pattern): which
 * engines exist, in the order auto's tables number them. Adding an engine
 * is its own file (with the descriptor of its kernel), its kernel in
 * kernels/, and its name in P2PT_ENGINES.
 */
#include <strings.h>

#include "registry.h"

/* Each is p2pt__transport_<name>, defined in its own file. One engine has
 * P2PT_CAP_FALLBACK: it runs any request. */
#define P2PT_ENGINES(X) X(ce) X(tma)

#define P2PT_ENGINE_EXTERN(n) P2PT_INTERNAL extern const struct p2pt_transport p2pt__transport_##n;
#define P2PT_ENGINE_ENTRY(n) &p2pt__transport_##n,
P2PT_ENGINES(P2PT_ENGINE_EXTERN)

#define P2PT_ENGINE_ONE(n) +1

/* NULL-terminated, with room for engines registered at run time. */
static const struct p2pt_transport *transports[P2PT_MAX_TRANSPORTS + 1] = {
    P2PT_ENGINES(P2PT_ENGINE_ENTRY) NULL};
_Static_assert(0 P2PT_ENGINES(P2PT_ENGINE_ONE) <= P2PT_MAX_TRANSPORTS,
               "more engines than P2PT_MAX_TRANSPORTS: raise it in engine_limits.h");

p2pt_status p2pt__engine_register(const struct p2pt_transport *t)
{
    int n = 0;
    while (transports[n] != NULL && transports[n] != t)
        n++;
    if (transports[n] == t)
        return P2PT_SUCCESS;
    if (n == P2PT_MAX_TRANSPORTS)
        return p2pt__fail(P2PT_INVALID_USAGE,
                          "engine %s: %d engines are registered, the most p2pt holds", t->name,
                          P2PT_MAX_TRANSPORTS);
    transports[n] = t;
    return P2PT_SUCCESS;
}

const struct p2pt_transport *p2pt__transport_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; transports[i] != NULL; i++)
        if (strcasecmp(name, transports[i]->name) == 0)
            return transports[i];
    return NULL;
}

const struct p2pt_transport *p2pt__transport_at(int i)
{
    return i >= 0 && i <= P2PT_MAX_TRANSPORTS ? transports[i] : NULL;
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

const struct p2pt_transport *p2pt__fallback_engine(void)
{
    return p2pt__engine_with(P2PT_CAP_FALLBACK);
}

const struct p2pt_transport *p2pt__engine_with(unsigned caps)
{
    for (size_t i = 0; transports[i] != NULL; i++)
        if ((transports[i]->caps & caps) == caps)
            return transports[i];
    return NULL;
}

int p2pt__engine_settings(const struct p2pt_settings **groups, int max)
{
    int n = 0;
    for (; n < max && transports[n] != NULL; n++)
        groups[n] = transports[n]->settings;
    return n;
}

const void *p2pt__engine_settings_in(const struct p2pt_config *cfg,
                                     const struct p2pt_transport *t)
{
    int i = p2pt__transport_index(t);
    if (transports[i] == NULL || i >= P2PT_SETTINGS_GROUPS)
        return NULL;
    return cfg->settings[i].bytes;
}
