/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A handle's sharing state, made on its first export or import (a handle
 * that shares nothing carries a NULL pointer and its operations one load).
 * share_handle.c ends it. Also the one wording of an entry point the driver
 * lacks, for exports, imports and closes alike.
 */
#include <stdlib.h>

#include "handle.h"
#include "share.h"

static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

p2pt_status p2pt__share_get(struct p2pt_handle *h, struct p2pt_share **out)
{
    struct p2pt_share *sh = atomic_load_explicit(&h->share, memory_order_acquire);
    if (sh != NULL) {
        *out = sh;
        return P2PT_SUCCESS;
    }
    pthread_mutex_lock(&make_lock);
    sh = atomic_load(&h->share);
    if (sh == NULL && (sh = calloc(1, sizeof(*sh))) != NULL) {
        pthread_mutex_init(&sh->lock, NULL);
        pthread_mutex_init(&sh->map_lock, NULL);
        pthread_mutex_init(&sh->marks_lock, NULL);
        for (int d = 0; d < P2PT_MAX_DEVICES; d++)
            atomic_init(&sh->open[d], 0);
        atomic_store_explicit(&h->share, sh, memory_order_release);
    }
    pthread_mutex_unlock(&make_lock);
    if (sh == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a handle's sharing state");
    *out = sh;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__share_needs(const void *entry, const char *call, const char *name,
                              const char *why)
{
    if (entry != NULL)
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_NOT_SUPPORTED,
                      "%s: the CUDA driver has no %s (cuGetProcAddress_v2 did not give it), %s",
                      call, name, why);
}
