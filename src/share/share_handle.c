/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the handle asks of its sharing state: the end at p2pt_finalize,
 * which closes every import as a close would (waiting for the work queued
 * on it) before it ends the exports, and the counters of
 * p2pt_get_properties. Above exports and imports, so that they, which
 * make the state (share.c), never call back up into its end.
 */
#include <stdlib.h>

#include "handle.h"
#include "share.h"

void p2pt__share_free(struct p2pt_handle *h)
{
    struct p2pt_share *sh = atomic_load(&h->share);
    if (sh == NULL)
        return;
    p2pt__share_imports_end(h, sh);
    p2pt__share_exports_end(sh);
    p2pt__share_marks_drop(sh, -1);
    pthread_mutex_destroy(&sh->lock);
    pthread_mutex_destroy(&sh->map_lock);
    pthread_mutex_destroy(&sh->marks_lock);
    free(sh);
    atomic_store(&h->share, NULL);
}

void p2pt__share_report(const struct p2pt_handle *h, p2pt_properties *p)
{
    struct p2pt_share *sh = atomic_load(&((struct p2pt_handle *)h)->share);
    if (sh == NULL)
        return;
    p->share_exports = atomic_load(&sh->exports_live);
    p->share_imports_open = atomic_load(&sh->imports_open);
    p->share_imports_closed = atomic_load(&sh->imports_closed);
    p->share_mappings = atomic_load(&sh->mappings);
}
