/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-batch memo of pointer queries (alloc_memo.h).
 */
#include "alloc_memo.h"

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
    int slot = m->n < P2PT_MEMO_SLOTS ? m->n++ : m->next;
    if (m->n == P2PT_MEMO_SLOTS && slot == m->next)
        m->next = (m->next + 1) % P2PT_MEMO_SLOTS;
    m->e[slot] = *out;
    *hint = slot;
    return P2PT_SUCCESS;
}
