/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Handles and the registry of live ones.
 *
 * Every entry point asks the registry whether a handle is live before it
 * reads through the pointer, so a handle used after p2pt_finalize gets
 * status 5 and its freed memory is never read. The registry is a fixed
 * array of slots scanned up to its high-water mark: lock-free for the
 * check (a few atomic loads with the usual one or two handles), a mutex
 * only to add and remove.
 */
#include <stdlib.h>
#include <string.h>

#include "handles.h"
#include "policy.h"
#include "router.h"
#include "share.h"
#include "transport.h"

/* Its imports closed and exports ended, each engine's fini hook on what
 * its init made, then the rest of `h`. */
static void free_parts(struct p2pt_handle *h)
{
    p2pt__share_free(h);
    for (int i = 0; i < P2PT_MAX_TRANSPORTS; i++)
        if (h->engine_state[i].engine != NULL && h->engine_state[i].engine->fini != NULL &&
            h->engine_state[i].state != NULL)
            h->engine_state[i].engine->fini(h->engine_state[i].state);
    p2pt__windows_free(&h->windows);
    if (h->policy != NULL && h->policy->fini != NULL && h->policy_state != NULL)
        h->policy->fini(h->policy_state);
    free(h);
}

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct p2pt_handle *_Atomic live[P2PT_MAX_HANDLES];
static _Atomic int high; /* slots [0, high) may be in use */

p2pt_status p2pt__handle_new(const struct p2pt_config *cfg, p2pt_logger_t logger,
                             struct p2pt_handle **out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_handle *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a p2pt handle");
    h->cfg = *cfg;
    p2pt__windows_init(&h->windows);
    h->log.fn = logger;
    h->log.level = cfg->log_level;
    h->policy = p2pt__policy_find(cfg->transport);
    if (h->policy == NULL)
        st = p2pt__fail(P2PT_INTERNAL_ERROR, "transport \"%s\" vanished", cfg->transport);
    if (st == P2PT_SUCCESS && h->policy->init != NULL)
        st = h->policy->init(h, &h->policy_state);
    for (int i = 0; st == P2PT_SUCCESS && p2pt__transport_at(i) != NULL; i++) {
        const struct p2pt_transport *e = p2pt__transport_at(i);
        if (e->init != NULL) {
            st = e->init(h, &h->engine_state[i].state);
            h->engine_state[i].engine = e;
        }
    }
    if (st != P2PT_SUCCESS) {
        free_parts(h);
        return st;
    }
    pthread_mutex_lock(&registry_lock);
    int slot = -1;
    for (int i = 0; i < P2PT_MAX_HANDLES && slot < 0; i++)
        if (atomic_load(&live[i]) == NULL)
            slot = i;
    if (slot < 0) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "p2pt_init: %d handles are live, the most one process may hold; "
                        "finalize one first (one handle serves any number of threads)",
                        P2PT_MAX_HANDLES);
    } else {
        atomic_store(&live[slot], h);
        if (slot >= atomic_load(&high))
            atomic_store(&high, slot + 1);
    }
    pthread_mutex_unlock(&registry_lock);
    if (st != P2PT_SUCCESS) {
        free_parts(h);
        return st;
    }
    *out = h;
    return P2PT_SUCCESS;
}

bool p2pt__handle_free(struct p2pt_handle *h)
{
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    int n = atomic_load(&high);
    for (int i = 0; i < n && !found; i++) {
        if (atomic_load(&live[i]) == h) {
            atomic_store(&live[i], NULL);
            found = true;
        }
    }
    while (n > 0 && atomic_load(&live[n - 1]) == NULL)
        n--;
    atomic_store(&high, n);
    pthread_mutex_unlock(&registry_lock);
    if (found)
        free_parts(h);
    return found;
}

p2pt_status p2pt__check_handle(const p2pt_handle *h, const char *fn)
{
    if (h == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: handle is NULL", fn);
    int n = atomic_load_explicit(&high, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&live[i], memory_order_acquire) == h)
            return P2PT_SUCCESS;
    return p2pt__fail(P2PT_INVALID_USAGE,
                      "%s: %p is not a live p2pt handle (never initialized, or already "
                      "finalized)",
                      fn, (const void *)h);
}
