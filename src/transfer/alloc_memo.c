/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-batch memo of pointer queries (alloc_memo.h).
 */
#include "alloc_memo.h"

static int remember(struct p2pt_alloc_memo *m, const struct p2pt_side *s)
{
    int slot = m->n < P2PT_MEMO_SLOTS ? m->n++ : m->next;
    if (m->n == P2PT_MEMO_SLOTS && slot == m->next)
        m->next = (m->next + 1) % P2PT_MEMO_SLOTS;
    m->e[slot] = *s;
    return slot;
}

p2pt_status p2pt__memo_side(struct p2pt_alloc_memo *m, uint64_t a, int *hint,
                            struct p2pt_side *out)
{
    const struct p2pt_side *known = p2pt__memo_find(m, a, hint);
    if (known != NULL) {
        *out = *known;
        return P2PT_SUCCESS;
    }
    p2pt_status st = p2pt__locate((const void *)(uintptr_t)a, m->device, out);
    if (st != P2PT_SUCCESS || out->size == 0)
        return st;
    *hint = remember(m, out);
    return P2PT_SUCCESS;
}

void p2pt__memo_seed(struct p2pt_alloc_memo *m, const struct p2pt_side *s)
{
    int hint = -1;
    if (s->size != 0 && p2pt__memo_find(m, s->start, &hint) == NULL)
        remember(m, s);
}
