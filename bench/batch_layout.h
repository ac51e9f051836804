/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batch shapes and where their pieces lie: shared, as plain C that C++
 * also compiles, by p2pt-bench's batch mode and the CUB comparison in
 * bench/experiments/, so that both measure byte for byte the same layouts.
 *
 * A shape is count x size, count x size with one piece in `every` of
 * another size, or "mixed" (one piece in 32 is 1 MiB, the rest 64 B to
 * 14 KiB). Sources are consecutive rows of the source pool (tokens in
 * order); destinations are scattered over the destination pool in
 * shuffled order with random gaps, each `shift` bytes (mod 16) off
 * co-alignment with its source. Layout `s` of a shape occupies
 * [s * span, (s + 1) * span) of both pools; its destinations stay
 * BATCH_GUARD bytes clear of either end, so a check of the whole span also
 * covers guard bytes before the first and after the last destination.
 * Pool bases must be 16-byte aligned (cuMemAlloc and pinned host
 * allocations are).
 */
#ifndef P2PT_BENCH_BATCH_LAYOUT_H
#define P2PT_BENCH_BATCH_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BATCH_GUARD 4096
#define BATCH_MAX_SETS 16   /* layouts rotated over */
#define BATCH_MAX_SHAPES 16 /* shapes in one --shapes list */

struct batch_shape {
    char name[32];
    size_t count, size; /* size 0: mixed */
    size_t every, big;  /* every > 0: piece i is `big` bytes where i % every == 0 */
};

/* The default shapes, in table order. */
static const char *const batch_default_shapes =
    "1024x14K,4096x7K,256x4K,16384x2K,16384x32K,64x1M,mixed";

static inline size_t batch_piece_size(const struct batch_shape *sh, size_t i)
{
    static const size_t small[] = {64, 1024, 7 * 1024, 14 * 1024};
    if (sh->size != 0)
        return sh->every != 0 && i % sh->every == 0 ? sh->big : sh->size;
    return i % 32 == 0 ? (size_t)1 << 20 : small[i % 4];
}

static inline size_t batch_total(const struct batch_shape *sh)
{
    size_t t = 0;
    for (size_t i = 0; i < sh->count; i++)
        t += batch_piece_size(sh, i);
    return t;
}

/* Bytes of one layout in each pool: pieces, as much again for gaps, up to
 * 15 bytes per piece to reach its alignment, and the guards. */
static inline size_t batch_span(const struct batch_shape *sh)
{
    return 2 * batch_total(sh) + 16 * sh->count + 2 * BATCH_GUARD;
}

/* Digits at *p (up to 2^40), then an optional K, M or G (binary): the
 * value in *v, *p past it. False where no digit starts it. */
static inline int batch_size_parse(const char **p, unsigned long long *v, int suffix)
{
    int digits = 0;
    *v = 0;
    for (; **p >= '0' && **p <= '9' && *v < (1ull << 40); (*p)++, digits++)
        *v = *v * 10 + (unsigned long long)(**p - '0');
    if (digits == 0 || *v >= (1ull << 33))
        return 0;
    if (suffix && (**p == 'K' || **p == 'k'))
        *v <<= 10, (*p)++;
    else if (suffix && (**p == 'M' || **p == 'm'))
        *v <<= 20, (*p)++;
    else if (suffix && (**p == 'G' || **p == 'g'))
        *v <<= 30, (*p)++;
    return 1;
}

/* "mixed", COUNTxSIZE, or COUNTxSIZE/EVERY=BIG (piece i of BIG bytes where
 * i % EVERY == 0, the rest SIZE: where the large pieces fall, for the link
 * kernel's dealing), sizes in bytes or K/M/G (binary). False, with `why`
 * saying what was expected, for anything else or a zero count, size or
 * EVERY, a count above 1M pieces or a batch above 4G bytes. */
static inline int batch_shape_parse(const char *s, struct batch_shape *out, char *why,
                                    size_t why_len)
{
    memset(out, 0, sizeof(*out));
    if (strcmp(s, "mixed") == 0) {
        snprintf(out->name, sizeof(out->name), "mixed");
        out->count = 1024;
        return 1;
    }
    unsigned long long n = 0, b = 0, every = 0, big = 0;
    const char *p = s;
    int ok = batch_size_parse(&p, &n, 0) && (*p == 'x' || *p == 'X');
    if (ok) {
        p++;
        ok = batch_size_parse(&p, &b, 1);
    }
    if (ok && *p == '/') {
        p++;
        ok = batch_size_parse(&p, &every, 0) && every > 0 && *p == '=';
        if (ok) {
            p++;
            ok = batch_size_parse(&p, &big, 1) && big > 0;
        }
    }
    ok = ok && *p == '\0';
    const unsigned long long most = big > b ? big : b;
    if (!ok || n == 0 || b == 0 || n > (1ull << 20) || most > (4ull << 30) / n ||
        strlen(s) >= sizeof(out->name)) {
        snprintf(why, why_len,
                 "\"%s\": expected mixed, COUNTxSIZE such as 1024x14K, or COUNTxSIZE/EVERY=SIZE "
                 "such as 8192x4K/64=16K (one piece in EVERY of the second size) (count "
                 "1..1048576, sizes with an optional K, M or G, at most 4G in all)",
                 s);
        return 0;
    }
    snprintf(out->name, sizeof(out->name), "%s", s);
    out->count = (size_t)n;
    out->size = (size_t)b;
    out->every = (size_t)every;
    out->big = (size_t)big;
    return 1;
}

/* A comma-separated list of shapes into out[0 .. *n), at most `max`.
 * False, with `why` naming the item and what was expected, on a bad item
 * or more than `max`. (p2pt-bench splits its lists itself; the
 * experiments in bench/experiments/ use this.) */
static inline int batch_shape_list(const char *list, struct batch_shape *out, size_t max,
                                   size_t *n, char *why, size_t why_len)
{
    char item[64];
    *n = 0;
    for (const char *at = list;;) {
        const char *comma = strchr(at, ',');
        size_t len = comma ? (size_t)(comma - at) : strlen(at);
        if (*n == max) {
            snprintf(why, why_len, "\"%s\": at most %zu shapes", list, max);
            return 0;
        }
        if (len >= sizeof(item))
            len = sizeof(item) - 1; /* batch_shape_parse refuses it: too long a name */
        memcpy(item, at, len);
        item[len] = '\0';
        if (!batch_shape_parse(item, &out[*n], why, why_len))
            return 0;
        ++*n;
        if (!comma)
            return 1;
        at = comma + 1;
    }
}

static inline uint64_t batch_rng(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/*
 * Offsets from the pool bases of layout `set`'s pieces: soff[i] (source),
 * doff[i] (destination); `order` is scratch of sh->count entries. Every
 * layout of a shape, shift and set is the same in every process.
 */
static inline void batch_place(const struct batch_shape *sh, size_t shift, int set,
                               size_t *soff, size_t *doff, size_t *order)
{
    size_t total = batch_total(sh), span = batch_span(sh), n = sh->count;
    size_t base = (size_t)set * span, end = base + span - BATCH_GUARD;
    size_t gap = total / n; /* the mean gap: half the room left over */
    uint64_t x = 0x9E3779B97F4A7C15ull ^ n ^ ((uint64_t)sh->size << 20) ^ ((uint64_t)set << 48);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(batch_rng(&x) % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    size_t src_at = base;
    for (size_t i = 0; i < n; i++) {
        soff[i] = src_at;
        src_at += batch_piece_size(sh, i);
    }
    /* `left` reserves each remaining piece its bytes and 16 for alignment,
     * so a gap never takes room a later piece needs. */
    size_t at = base + BATCH_GUARD, left = total + 16 * n;
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k], bytes = batch_piece_size(sh, i);
        size_t slack = end - at - left;
        size_t g = (size_t)(batch_rng(&x) % (2 * gap + 1));
        at += g < slack ? g : slack;
        at += ((soff[i] + shift) - at) & 15; /* dst = src + shift (mod 16) */
        doff[i] = at;
        at += bytes;
        left -= bytes + 16;
    }
}

#endif /* P2PT_BENCH_BATCH_LAYOUT_H */
