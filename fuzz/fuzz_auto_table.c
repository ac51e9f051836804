/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness: the `auto` crossover table text. Whatever the bytes,
 * the parse either succeeds with a table the router can use (every list it
 * must have, each starting at 0 and rising, engines in range, pick() and
 * band_of() agreeing; a host path's graph list only beside its copy list)
 * whose formatted text parses back to the same table,
 * or fails with P2PT_INVALID_ARGUMENT and a non-empty message. Never crash,
 * never read past the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auto_table.h"

static const char *const engines[] = {"ce", "tma"};

static int list_ok(const struct p2pt_auto_list *l, int required)
{
    if (l->n > P2PT_AUTO_MAX_BANDS || (required && l->n == 0))
        return 0;
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->band[i].engine >= 2 || (i == 0 ? l->band[i].from != 0
                                              : l->band[i].from <= l->band[i - 1].from))
            return 0;
        if (p2pt__auto_band_of(l, l->band[i].from) != i ||
            p2pt__auto_pick(l, l->band[i].from) != l->band[i].engine)
            return 0;
    }
    return 1;
}

static int same_list(const struct p2pt_auto_list *a, const struct p2pt_auto_list *b)
{
    if (a->n != b->n)
        return 0;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->band[i].from != b->band[i].from || a->band[i].engine != b->band[i].engine)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that ASan sees any read past the end. */
    char *text = malloc(size ? size : 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    struct p2pt_auto_table t, back;
    p2pt_status st = p2pt__auto_table_parse(text, size, "fuzz", engines, 2, &t);
    free(text);
    if (st != P2PT_SUCCESS) {
        if (st != P2PT_INVALID_ARGUMENT || p2pt__last_error_text()[0] == '\0')
            abort();
        return 0;
    }
    for (int p = 0; p < P2PT_AUTO_PATHS; p++)
        if (!list_ok(&t.copy[p], p < P2PT_AUTO_GPU_PATHS) || !list_ok(&t.graph[p], 0) ||
            (t.graph[p].n != 0 && t.copy[p].n == 0))
            abort();
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        if (!list_ok(&t.host_batch[i], 0))
            abort();
    if (!list_ok(&t.batch, 1) || t.cc < 10 || t.cc > 999 || strlen(t.device) > 95)
        abort();

    static char out[16384];
    size_t n = p2pt__auto_table_format(&t, engines, out, sizeof(out));
    if (n >= sizeof(out) || strlen(out) != n)
        abort();
    if (p2pt__auto_table_parse(out, n, "formatted", engines, 2, &back) != P2PT_SUCCESS ||
        back.cc != t.cc || strcmp(back.device, t.device) != 0 || !same_list(&back.batch, &t.batch))
        abort();
    for (int p = 0; p < P2PT_AUTO_PATHS; p++)
        if (!same_list(&back.copy[p], &t.copy[p]) || !same_list(&back.graph[p], &t.graph[p]))
            abort();
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        if (!same_list(&back.host_batch[i], &t.host_batch[i]))
            abort();
    return 0;
}
