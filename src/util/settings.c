/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading one declared setting (settings.h): the text of a variable or an
 * options item into its owner's struct, or a refusal that names where the
 * value came from, the value and what is accepted.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "settings.h"

/* A non-negative decimal integer with an optional binary K, M, G or T suffix
 * (every suffix a message prints is one a value may carry).
 * Rejects signs, junk, empty strings and overflow. Shared with p2pt-bench. */
bool p2pt__parse_size(const char *s, unsigned long long *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned long long mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1ull << 10; end++; break;
    case 'M': case 'm': mul = 1ull << 20; end++; break;
    case 'G': case 'g': mul = 1ull << 30; end++; break;
    case 'T': case 't': mul = 1ull << 40; end++; break;
    default: break;
    }
    if (*end != '\0' || v > ~0ull / mul)
        return false;
    *out = v * mul;
    return true;
}

static void store(const struct p2pt_setting *s, void *values, unsigned long long v)
{
    char *at = (char *)values + s->offset;
    if (s->kind == P2PT_SETTING_SIZE) {
        size_t z = (size_t)v;
        memcpy(at, &z, sizeof(z));
    } else {
        int i = (int)v;
        memcpy(at, &i, sizeof(i));
    }
}

void p2pt__settings_defaults(const struct p2pt_settings *g, void *values)
{
    for (int i = 0; i < g->n; i++)
        store(&g->items[i], values, g->items[i].def);
}

/* A WORD setting: one of its words, any case. */
static p2pt_status read_word(const struct p2pt_setting *s, void *values, const char *label,
                             const char *v)
{
    for (const struct p2pt_setting_word *w = s->words; w != NULL && w->word != NULL; w++) {
        if (strcasecmp(v, w->word) == 0) {
            store(s, values, (unsigned long long)w->value);
            return P2PT_SUCCESS;
        }
    }
    return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s=\"%s\" is not valid: expected %s", label, v,
                      s->accepted);
}

p2pt_status p2pt__setting_read(const struct p2pt_setting *s, void *values, const char *label,
                               const char *v)
{
    if (s->kind == P2PT_SETTING_WORD)
        return read_word(s, values, label, v);
    unsigned long long n, lo = s->min, hi = s->max;
    if (s->kind == P2PT_SETTING_BOOL)
        lo = 0, hi = 1;
    if (!p2pt__parse_size(v, &n) || n < lo || n > hi)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s=\"%s\" is not valid: expected %s", label,
                          v, s->accepted);
    if (s->multiple != 0 && n % s->multiple != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s=\"%s\" is not valid: %llu is not a multiple of %u (%s)", label, v,
                          n, s->multiple, s->multiple_why);
    store(s, values, n);
    return P2PT_SUCCESS;
}
