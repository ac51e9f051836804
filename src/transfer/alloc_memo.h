/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the driver said about the allocations one batch touches
 * (alloc_memo.c). A pointer query costs about 300 ns; a KV-cache offload of
 * 8,192 pieces touches two allocations. Each answer carries its
 * allocation's range (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR and
 * RANGE_SIZE), so later pieces inside it ask nothing. A memo lives on the
 * stack of one operation and is never trusted across calls: memory freed
 * between two batches is asked about again.
 */
#ifndef P2PT_ALLOC_MEMO_H
#define P2PT_ALLOC_MEMO_H

#include "request.h"

#define P2PT_MEMO_SLOTS 16 /* allocations remembered; more replace the oldest */

struct p2pt_alloc_memo {
    int device; /* the stream's device, as p2pt__locate needs it */
    int n, next;
    struct p2pt_side e[P2PT_MEMO_SLOTS];
};

static inline void p2pt__memo_init(struct p2pt_alloc_memo *m, int device)
{
    m->device = device;
    m->n = m->next = 0;
}

/* The remembered allocation holding `a`, trying slot *hint first (a batch's
 * destinations and sources each tend to stay in one allocation, so each
 * side keeps a hint of its own; start with -1); NULL when none holds it. */
static inline const struct p2pt_side *p2pt__memo_find(const struct p2pt_alloc_memo *m,
                                                      uint64_t a, int *hint)
{
    if (*hint >= 0 && a - m->e[*hint].start < m->e[*hint].size)
        return &m->e[*hint];
    for (int i = 0; i < m->n; i++)
        if (a - m->e[i].start < m->e[i].size) {
            *hint = i;
            return &m->e[i];
        }
    return NULL;
}

/* Where `a` lives: a remembered allocation holding it, else one driver query
 * (the stream's context current), remembered when the driver knows the
 * allocation. Memory CUDA does not know is asked about every time. */
P2PT_INTERNAL p2pt_status p2pt__memo_side(struct p2pt_alloc_memo *m, uint64_t a, int *hint,
                                          struct p2pt_side *out);

/* Remember what the driver already said of an allocation in this
 * operation (a batch's first piece, resolved for routing). */
P2PT_INTERNAL void p2pt__memo_seed(struct p2pt_alloc_memo *m, const struct p2pt_side *s);

/* Does [a, a + n) run past the end of the allocation `s` describes? (Never
 * for memory whose range the driver does not report.) */
static inline bool p2pt__side_straddles(const struct p2pt_side *s, uint64_t a, uint64_t n)
{
    return s->size != 0 && n > s->start + s->size - a;
}

#endif /* P2PT_ALLOC_MEMO_H */
