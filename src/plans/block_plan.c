/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt__block_plan: a block mapping and a cache's layers as one host
 * batch's pieces. The checks cost what the mapping costs, not what the
 * pieces cost, where they can: when no layer's blocks overlap another
 * layer's (separate tensors, the common case), a block is written twice
 * exactly when a dst id repeats, which the ids alone tell. Layers that
 * share bytes (views that interleave, one tensor as both sides) are
 * checked piece by piece, by address.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_plan.h"

/* Above this many layers the layers are not compared pairwise: their pieces are. */
#define PAIRWISE_LAYERS_MAX 256

struct span {
    uint64_t lo, hi;
};

static bool meet(struct span a, struct span b)
{
    return a.lo < b.hi && b.lo < a.hi;
}

/* The bytes of `blocks` blocks of `bb` from `base`, or a refusal. */
static p2pt_status layer_span(const char *fn, size_t l, const char *side, const void *base,
                              uint64_t blocks, uint64_t bb, struct span *out)
{
    uint64_t len;
    const uint64_t lo = (uint64_t)(uintptr_t)base;
    if (__builtin_mul_overflow(blocks, bb, &len) || lo + len < lo)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layer %zu: %llu %s blocks of %llu bytes from %p run past the end "
                          "of the address space",
                          fn, l, (unsigned long long)blocks, side, (unsigned long long)bb, base);
    if (base == NULL && len != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: layer %zu: %s is NULL with %llu blocks",
                          fn, l, side, (unsigned long long)blocks);
    out->lo = lo;
    out->hi = lo + len;
    return P2PT_SUCCESS;
}

/* The size of layer 0's record (`size`, read once) as the stride of `n`
 * records: a later p2pt's record is longer and read at its own size; a size
 * that is not a record's (misaligned, or past any p2pt's) would read the
 * array at the wrong places or past it. */
static p2pt_status record_stride(const char *fn, size_t size, size_t n)
{
    if (size < sizeof(p2pt_block_layer) || size % _Alignof(p2pt_block_layer) != 0 ||
        size > P2PT_BLOCK_LAYER_MAX_SIZE || n > SIZE_MAX / size)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layers[0].size is %zu; set each layer's size to "
                          "sizeof(p2pt_block_layer) (%zu in this build)",
                          fn, size, sizeof(p2pt_block_layer));
    return P2PT_SUCCESS;
}

static p2pt_status record_size(const char *fn, size_t l, size_t size, size_t stride)
{
    if (size != stride)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layer %zu: size %zu, layer 0's is %zu: every layer record is "
                          "sizeof(p2pt_block_layer)",
                          fn, l, size, stride);
    return P2PT_SUCCESS;
}

p2pt_status p2pt__block_layers_check(const char *fn, const p2pt_block_layer *layers, size_t n,
                                     size_t *stride)
{
    p2pt_status st = P2PT_SUCCESS;
    struct span d, s;
    const size_t size = layers[0].size;
    P2PT_TRY(record_stride(fn, size, n));
    *stride = size;
    for (size_t l = 0; l < n; l++) {
        const p2pt_block_layer *L = p2pt__layer_record(layers, size, l);
        P2PT_TRY(record_size(fn, l, L->size, size));
        P2PT_TRY(layer_span(fn, l, "dst", L->dst, L->dst_blocks, L->block_bytes, &d));
        P2PT_TRY(layer_span(fn, l, "src", L->src, L->src_blocks, L->block_bytes, &s));
    }
out:
    return st;
}

p2pt_status p2pt__block_layers_copy(const char *fn, const p2pt_block_layer *layers, size_t n,
                                    p2pt_block_layer *to)
{
    p2pt_status st = P2PT_SUCCESS;
    const size_t size = layers[0].size;
    P2PT_TRY(record_stride(fn, size, n));
    /* Records of a newer caller may be longer: the fields this build knows. */
    for (size_t l = 0; l < n; l++) {
        memcpy(&to[l], p2pt__layer_record(layers, size, l), sizeof(p2pt_block_layer));
        P2PT_TRY(record_size(fn, l, to[l].size, size));
        to[l].size = sizeof(p2pt_block_layer);
    }
out:
    return st;
}

/* The layers' records checked (p2pt__block_layers_check), then the facts
 * the mapping's checks need: the fewest blocks of a layer with bytes, and
 * whether the layers are apart. */
p2pt_status p2pt__block_facts(const char *fn, const p2pt_block_layer *layers, size_t n,
                              struct p2pt_block_facts *f)
{
    p2pt_status st = P2PT_SUCCESS;
    memset(f, 0, sizeof(*f));
    P2PT_TRY(p2pt__block_layers_check(fn, layers, n, &f->stride));
    f->layers = layers;
    f->n_layers = n;
    f->min_src = f->min_dst = UINT64_MAX;
    f->min_src_at = f->min_dst_at = 0;
    f->disjoint = n <= PAIRWISE_LAYERS_MAX;
    struct span dst[PAIRWISE_LAYERS_MAX], src[PAIRWISE_LAYERS_MAX];
    for (size_t l = 0; l < n; l++) {
        const p2pt_block_layer *L = p2pt__layer_record(layers, f->stride, l);
        if (L->block_bytes != 0 && L->src_blocks < f->min_src)
            f->min_src = L->src_blocks, f->min_src_at = l;
        if (L->block_bytes != 0 && L->dst_blocks < f->min_dst)
            f->min_dst = L->dst_blocks, f->min_dst_at = l;
        if (f->disjoint) { /* the spans p2pt__block_layers_check has checked */
            P2PT_TRY(layer_span(fn, l, "dst", L->dst, L->dst_blocks, L->block_bytes, &dst[l]));
            P2PT_TRY(layer_span(fn, l, "src", L->src, L->src_blocks, L->block_bytes, &src[l]));
        }
    }
    for (size_t l = 0; f->disjoint && l < n; l++)
        for (size_t m = 0; f->disjoint && m < n; m++)
            f->disjoint = !meet(dst[l], src[m]) && (l == m || !meet(dst[l], dst[m]));
out:
    return st;
}

/* Every id of the mapping inside every layer that has bytes. */
static p2pt_status check_ids(const char *fn, const int64_t *mapping, size_t pairs,
                             const struct p2pt_block_facts *f)
{
    for (size_t r = 0; r < pairs; r++)
        for (int k = 0; k < 2; k++) {
            const int64_t id = mapping[2 * r + k];
            const uint64_t have = k == 0 ? f->min_src : f->min_dst;
            if (id >= 0 && (uint64_t)id < have)
                continue;
            const char *side = k == 0 ? "src" : "dst";
            if (f->by_cell)
                return p2pt__fail(P2PT_INVALID_ARGUMENT,
                                  "%s: block_mapping[%zu, %d] = %lld: %s block ids must be in "
                                  "[0, %llu) (%s[%zu] has %llu blocks)",
                                  fn, r, k, (long long)id, side, (unsigned long long)have, side,
                                  k == 0 ? f->min_src_at : f->min_dst_at,
                                  (unsigned long long)have);
            if (id < 0)
                return p2pt__fail(P2PT_INVALID_ARGUMENT,
                                  "%s: mapping row %zu: %s block %lld: ids start at 0", fn, r,
                                  side, (long long)id);
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "%s: mapping row %zu: %s block %lld, but layer %zu has %llu %s "
                              "blocks (ids 0 to %llu)",
                              fn, r, side, (long long)id, k == 0 ? f->min_src_at : f->min_dst_at,
                              (unsigned long long)have, side, (unsigned long long)have - 1);
        }
    return P2PT_SUCCESS;
}

struct keyed {
    uint64_t key, end;
    size_t at;
};

static int by_key(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : (x->at > y->at) - (x->at < y->at);
}

static p2pt_status repeated(const char *fn, size_t first, size_t again, uint64_t id)
{
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s: mapping rows %zu and %zu both write dst block %llu: each "
                      "destination block may appear once",
                      fn, first, again, (unsigned long long)id);
}

/* Disjoint layers: a destination block is written twice exactly when its
 * id repeats. The ids lie in [0, limit) by now: a bitmap of them where it
 * costs about what the mapping does (a KV pool of thousands of blocks),
 * else the ids sorted. */
static p2pt_status check_repeats(const char *fn, const int64_t *mapping, size_t pairs,
                                 uint64_t limit)
{
    if (limit <= 64 * (uint64_t)pairs + 65536) {
        uint64_t *seen = calloc((size_t)(limit + 63) / 64, sizeof(*seen));
        if (seen == NULL)
            return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for %llu ids", fn,
                              (unsigned long long)limit);
        p2pt_status st = P2PT_SUCCESS;
        for (size_t r = 0; r < pairs && st == P2PT_SUCCESS; r++) {
            const uint64_t id = (uint64_t)mapping[2 * r + 1], bit = 1ull << (id % 64);
            if ((seen[id / 64] & bit) == 0) {
                seen[id / 64] |= bit;
                continue;
            }
            size_t q = 0; /* the earlier row with this id, for the message */
            while ((uint64_t)mapping[2 * q + 1] != id)
                q++;
            st = repeated(fn, q, r, id);
        }
        free(seen);
        return st;
    }
    struct keyed *ids = malloc(pairs * sizeof(*ids));
    if (ids == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for %zu ids", fn, pairs);
    for (size_t r = 0; r < pairs; r++)
        ids[r] = (struct keyed){(uint64_t)mapping[2 * r + 1], 0, r};
    qsort(ids, pairs, sizeof(*ids), by_key);
    p2pt_status st = P2PT_SUCCESS;
    for (size_t i = 1; i < pairs && st == P2PT_SUCCESS; i++)
        if (ids[i].key == ids[i - 1].key)
            st = repeated(fn, ids[i - 1].at, ids[i].at, ids[i].key);
    free(ids);
    return st;
}

/* Layers that share bytes: the pieces' ranges by address. Any two
 * destinations that meet, sorted by start, include two neighbours that
 * meet; a destination meets a source when a source that starts before the
 * destination ends reaches past its start (the prefix maximum of ends). */
static p2pt_status check_addresses(const char *fn, const p2pt_copy_desc *descs, size_t count,
                                   size_t pairs)
{
    p2pt_status st = P2PT_SUCCESS;
    size_t n = 0;
    struct keyed *dst = malloc(count * sizeof(*dst)), *src = malloc(count * sizeof(*src));
    if (dst == NULL || src == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory to check %zu pieces", fn, count);
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const uint64_t b = descs[i].bytes;
        if (b == 0)
            continue;
        dst[n] = (struct keyed){(uint64_t)(uintptr_t)descs[i].dst, 0, i};
        dst[n].end = dst[n].key + b;
        src[n] = (struct keyed){(uint64_t)(uintptr_t)descs[i].src, 0, i};
        src[n].end = src[n].key + b;
        n++;
    }
    qsort(dst, n, sizeof(*dst), by_key);
    qsort(src, n, sizeof(*src), by_key);
    for (size_t i = 1; i < n; i++)
        if (dst[i].key < dst[i - 1].end) {
            const size_t a = dst[i - 1].at, b = dst[i].at;
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s: layer %zu, row %zu and layer %zu, row %zu: pieces write the "
                            "same bytes",
                            fn, a / pairs, a % pairs, b / pairs, b % pairs);
            goto out;
        }
    /* src[i].end becomes the largest end of src[0 .. i], src[i].at the piece that has it. */
    for (size_t i = 1; i < n; i++)
        if (src[i - 1].end > src[i].end)
            src[i].end = src[i - 1].end, src[i].at = src[i - 1].at;
    for (size_t i = 0; i < n; i++) {
        size_t lo = 0, hi = n; /* sources that start before this destination ends: [0, lo) */
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (src[mid].key < dst[i].end)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0 && src[lo - 1].end > dst[i].key) {
            const size_t a = dst[i].at, b = src[lo - 1].at;
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s: layer %zu, row %zu writes bytes that layer %zu, row %zu reads: "
                            "a block may not be both a source and a destination",
                            fn, a / pairs, a % pairs, b / pairs, b % pairs);
            goto out;
        }
    }
out:
    free(dst);
    free(src);
    return st;
}

/* The mapping's arrays, and how many pieces: status 4 for a NULL array
 * with a count, or more pieces than memory can describe; *n the pieces. */
static p2pt_status count_pieces(const char *fn, const p2pt_block_layer *layers, size_t n_layers,
                                const int64_t *mapping, size_t pairs, size_t *n)
{
    size_t bytes;
    if ((layers == NULL && n_layers != 0) || (mapping == NULL && pairs != 0))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layers %p with n_layers %zu, mapping %p with %zu pairs: expected "
                          "non-NULL arrays where the count is not 0",
                          fn, (const void *)layers, n_layers, (const void *)mapping, pairs);
    if (__builtin_mul_overflow(n_layers, pairs, n) ||
        __builtin_mul_overflow(*n, sizeof(p2pt_copy_desc), &bytes))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %zu layers x %zu pairs: more pieces than memory can describe", fn,
                          n_layers, pairs);
    return P2PT_SUCCESS;
}

void p2pt__block_pieces_free(struct p2pt_block_pieces *p)
{
    free(p->descs);
    free(p->own_mapping);
    free(p->own_layers);
    memset(p, 0, sizeof(*p));
}

p2pt_status p2pt__block_plan_with(const char *fn, const struct p2pt_block_facts *f,
                                  const int64_t *caller_mapping, size_t pairs,
                                  struct p2pt_block_pieces *out)
{
    p2pt_status st = P2PT_SUCCESS;
    const size_t n_layers = f->n_layers;
    size_t n = 0;
    memset(out, 0, sizeof(*out));
    out->sums_known = true;
    P2PT_TRY(count_pieces(fn, f->layers, n_layers, caller_mapping, pairs, &n));
    if (n == 0)
        return P2PT_SUCCESS;
    /* The mapping read once: what is checked below is what the pieces
     * are made of, whatever the caller's array holds meanwhile. (pairs
     * pieces of 24 bytes fit in memory, so 16 bytes a row do.) */
    if ((out->own_mapping = malloc(pairs * 2 * sizeof(int64_t))) == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for a mapping of %zu rows", fn, pairs);
        goto out;
    }
    memcpy(out->own_mapping, caller_mapping, pairs * 2 * sizeof(int64_t));
    const int64_t *mapping = out->own_mapping;
    P2PT_TRY(check_ids(fn, mapping, pairs, f));
    if (f->disjoint)
        P2PT_TRY(check_repeats(fn, mapping, pairs, f->min_dst));
    for (size_t l = 0; l < n_layers; l++) {
        const uint64_t bb = p2pt__layer_record(f->layers, f->stride, l)->block_bytes;
        uint64_t layer_bytes;
        if (bb != 0)
            out->pieces += pairs;
        if (__builtin_mul_overflow((uint64_t)pairs, bb, &layer_bytes) ||
            __builtin_add_overflow(out->bytes, layer_bytes, &out->bytes))
            out->sums_known = false;
    }
    out->blocks = (struct p2pt_blocks){f->layers, f->stride, mapping, pairs};
    out->count = n;
    out->rows = pairs;
    if (f->disjoint)
        return P2PT_SUCCESS;
    /* Layers that share bytes: the pieces by address, written out. */
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    if (d == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for %zu pieces", fn, n);
        goto out;
    }
    out->descs = d;
    for (size_t i = 0; i < n; i++)
        d[i] = p2pt__block_piece(&out->blocks, i);
    st = check_addresses(fn, d, n, pairs);
out:
    if (st != P2PT_SUCCESS)
        p2pt__block_pieces_free(out);
    return st;
}

p2pt_status p2pt__block_plan(const char *fn, const p2pt_block_layer *layers, size_t n_layers,
                             const int64_t *mapping, size_t pairs, struct p2pt_block_pieces *out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_block_facts f;
    size_t n = 0;
    memset(out, 0, sizeof(*out));
    out->sums_known = true;
    P2PT_TRY(count_pieces(fn, layers, n_layers, mapping, pairs, &n));
    if (n == 0)
        return P2PT_SUCCESS;
    /* The layers read once, as the mapping is: the facts and the pieces
     * come from the copy. */
    p2pt_block_layer *own = calloc(n_layers, sizeof(*own));
    if (own == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for %zu layers", fn, n_layers);
        goto out;
    }
    if ((st = p2pt__block_layers_copy(fn, layers, n_layers, own)) != P2PT_SUCCESS ||
        (st = p2pt__block_facts(fn, own, n_layers, &f)) != P2PT_SUCCESS ||
        (st = p2pt__block_plan_with(fn, &f, mapping, pairs, out)) != P2PT_SUCCESS) {
        free(own);
        goto out;
    }
    out->own_layers = own;
out:
    return st;
}
