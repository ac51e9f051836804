/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A new engine is one file: `loop`, an engine built only into this test
 * binary, copies host-to-host pieces with a byte loop on the host. It is
 * registered through the registry's hook and nothing else in src/ names
 * it, yet, over the fake driver (tests/fault/fake_cuda.c), P2P_TRANSPORT
 * accepts its name; copies, host batches and blocks moved by a mapping
 * (p2pt_copy_blocks_async, whose pieces the pipeline's pass makes from the
 * blocks: the engine sees descriptors either way) are routed to it,
 * explained and counted in its per-engine slot; a copy it cannot run
 * (device memory) goes to the fallback engine, counted as its fallback; and
 * a device batch is refused with status 6 naming it. The same engine
 * without a batch step gets each piece of a batch through its copy.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "batch_test.h"

/* ------------------------------------------------------------ the engine */

/* Both sides host memory (pageable or pinned): the host can reach both. */
static bool loop_can_copy(const struct p2pt_handle *h, const struct p2pt_request *r,
                          const char **why)
{
    (void)h;
    if (r->dst_side.device < 0 && r->src_side.device < 0)
        return true;
    *why = "a side is device memory, out of the host's reach";
    return false;
}

static p2pt_status loop_prepare(struct p2pt_handle *h, int device)
{
    (void)h;
    (void)device;
    return P2PT_SUCCESS;
}

/* Stream order: what the stream holds finishes first. */
static void loop_bytes(CUstream stream, void *dst, const void *src, size_t n)
{
    tcu.cuStreamSynchronize(stream);
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

static p2pt_status loop_copy(struct p2pt_handle *h, const struct p2pt_request *r)
{
    (void)h;
    loop_bytes(r->stream, r->dst, r->src, r->bytes);
    return P2PT_SUCCESS;
}

/* Where its host batches' pieces go: descriptors on the heap, which the
 * pipeline's pass fills (from the caller's descriptors or from blocks
 * alike) after checking every piece. */
static p2pt_status loop_batch_sink(struct p2pt_handle *h, const struct p2pt_batch *b,
                                   struct p2pt_batch_sink *s)
{
    (void)h;
    s->descs = malloc(b->count * sizeof(*s->descs));
    if (s->descs == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "loop: out of host memory");
    s->own = s->descs;
    return P2PT_SUCCESS;
}

/* Every piece has passed: copy the b->pieces the sink holds. */
static p2pt_status loop_batch_submit(struct p2pt_handle *h, const struct p2pt_batch *b,
                                     struct p2pt_batch_sink *s)
{
    (void)h;
    for (size_t i = 0; i < b->pieces; i++)
        loop_bytes(b->stream, (void *)(uintptr_t)s->descs[i].dst,
                   (const void *)(uintptr_t)s->descs[i].src, (size_t)s->descs[i].bytes);
    return P2PT_SUCCESS;
}

static void loop_batch_release(struct p2pt_handle *h, struct p2pt_batch_sink *s)
{
    (void)h;
    free(s->own);
}

static const struct p2pt_transport loop_engine = {
    .name = "loop",
    .caps = P2PT_CAP_STAGED,
    .can_copy = loop_can_copy,
    .prepare = loop_prepare,
    .copy = loop_copy,
    .batch_sink = loop_batch_sink,
    .batch_submit = loop_batch_submit,
    .batch_release = loop_batch_release,
};

/* The same engine without a batch step: the pipeline sends each piece of
 * a batch through its `copy`. */
static const struct p2pt_transport each_engine = {
    .name = "each",
    .caps = P2PT_CAP_STAGED,
    .can_copy = loop_can_copy,
    .prepare = loop_prepare,
    .copy = loop_copy,
};

/* ------------------------------------------------------------- the tests */

#ifdef P2PT_FAKE_CUDA_PATH
static p2pt_handle *engine_handle(const struct p2pt_transport *t)
{
    gt_use_fake_driver();
    cr_assert_eq(p2pt__engine_register(t), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    p2pt_init_args a = {sizeof(a), NULL, t->name};
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(&a, &h), P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    return h;
}

static p2pt_handle *loop_handle(void)
{
    return engine_handle(&loop_engine);
}

static int engine_index(const p2pt_properties *p, const char *name)
{
    for (int e = 0; e < P2PT_PROPERTIES_ENGINES; e++)
        if (p->engine_name[e] != NULL && strcmp(p->engine_name[e], name) == 0)
            return e;
    cr_assert_fail("no engine named %s in p2pt_properties", name);
    return -1;
}

static int loop_index(const p2pt_properties *p)
{
    return engine_index(p, "loop");
}
#endif

static void require_fake_driver(void)
{
#ifndef P2PT_FAKE_CUDA_PATH
    cr_skip_test("the fake driver is not built here (tests/fault/)");
#endif
}

Test(engine_loop, is_chosen_by_name_runs_host_copies_and_counts_them)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    p2pt_handle *h = loop_handle();
    p2pt_properties p = gt_props(h);
    cr_expect_str_eq(p.transport, "loop");
    int e = loop_index(&p);
    char src[300], dst[300];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (char)(i * 7 + 1);
    memset(dst, 0, sizeof(dst));

    p2pt_choice c = {sizeof(c)};
    cr_assert_eq(p2pt_explain_copy(h, dst, src, 100, NULL, &c), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_str_eq(c.transport, "loop");
    cr_expect(strstr(c.reason, "P2P_TRANSPORT=loop") != NULL, "%s", c.reason);
    cr_assert_eq(p2pt_copy_async(h, dst, src, 100, NULL), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_eq(memcmp(dst, src, 100), 0);

    p2pt_copy_desc d[2] = {{dst + 100, src + 100, 150}, {dst + 250, src + 250, 50}};
    cr_assert_eq(p2pt_explain_batch(h, d, 2, NULL, &c), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_str_eq(c.transport, "loop");
    cr_assert_eq(p2pt_copy_batch_async(h, d, 2, NULL), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_eq(memcmp(dst, src, sizeof(src)), 0);

    p = gt_props(h);
    cr_expect_eq(p.engine_bytes[e], 100);
    cr_expect_eq(p.engine_batches[e], 1);
    cr_expect_eq(p.batch_pieces, 2);
    cr_expect_eq(p.ce_bytes + p.tma_bytes + p.ce_batches + p.tma_batches, 0);
    p2pt_finalize(h);
#endif
}

Test(engine_loop, takes_blocks_moved_by_a_mapping_as_it_takes_descriptors)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    p2pt_handle *h = loop_handle();
    enum { LAYERS = 3, BLOCKS = 6, BB = 40 };
    static unsigned char src[LAYERS][BLOCKS][BB], dst[LAYERS][BLOCKS][BB];
    for (size_t l = 0; l < LAYERS; l++)
        for (size_t k = 0; k < BLOCKS; k++)
            for (size_t i = 0; i < BB; i++)
                src[l][k][i] = (unsigned char)(l * 71 + k * 13 + i + 1);
    memset(dst, 0, sizeof(dst));
    p2pt_block_layer layers[LAYERS];
    for (size_t l = 0; l < LAYERS; l++)
        layers[l] = (p2pt_block_layer){sizeof(layers[l]), dst[l], src[l], BB, BLOCKS, BLOCKS};
    /* (src block, dst block) rows: 0 -> 3, 5 -> 1, 2 -> 0. */
    const int64_t map[] = {0, 3, 5, 1, 2, 0};
    p2pt_choice c = {sizeof(c)};
    cr_assert_eq(p2pt_explain_blocks(h, layers, LAYERS, map, 3, NULL, &c), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_str_eq(c.transport, "loop");
    cr_expect_str_eq(c.path, "batch");
    cr_assert_eq(p2pt_copy_blocks_async(h, layers, LAYERS, map, 3, NULL), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    for (size_t l = 0; l < LAYERS; l++)
        for (size_t k = 0; k < BLOCKS; k++) {
            int from = k == 3 ? 0 : k == 1 ? 5 : k == 0 ? 2 : -1;
            for (size_t i = 0; i < BB; i++)
                cr_assert_eq(dst[l][k][i], from < 0 ? 0 : src[l][from][i],
                             "layer %zu, dst block %zu, byte %zu", l, k, i);
        }
    p2pt_properties p = gt_props(h);
    int e = loop_index(&p);
    cr_expect_eq(p.engine_batches[e], 1);
    cr_expect_eq(p.batch_pieces, LAYERS * 3);
    cr_expect_eq(p.ce_batches + p.tma_batches, 0);
    p2pt_finalize(h);
#endif
}

Test(engine_loop, what_it_cannot_run_goes_to_the_fallback_and_is_counted_as_its_fallback)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    p2pt_handle *h = loop_handle();
    struct gt_buf dev = gt_alloc(64);
    char host[64] = {0};
    p2pt_choice c = {sizeof(c)};
    cr_assert_eq(p2pt_explain_copy(h, host, (void *)(uintptr_t)dev.ptr, 64, NULL, &c),
                 P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    cr_expect_str_eq(c.transport, "ce");
    cr_expect(strstr(c.reason, "but loop cannot") != NULL, "%s", c.reason);
    cr_assert_eq(p2pt_copy_async(h, host, (void *)(uintptr_t)dev.ptr, 64, NULL), P2PT_SUCCESS,
                 "%s", p2pt_last_error(NULL));
    p2pt_properties p = gt_props(h);
    int e = loop_index(&p);
    cr_expect_eq(p.engine_fallbacks[e], 1);
    cr_expect_eq(p.ce_fallbacks, 1);
    cr_expect_eq(p.ce_bytes, 64);
    cr_expect_eq(p.engine_bytes[e], 0);
    p2pt_finalize(h);
#endif
}

Test(engine_loop, a_device_batch_is_refused_naming_it)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    p2pt_handle *h = loop_handle();
    struct gt_buf descs = gt_alloc(64), count = gt_alloc(16), ws = gt_alloc(256);
    p2pt_status st = p2pt_copy_batch_device_async(
        h, (const p2pt_copy_desc *)(uintptr_t)descs.ptr, (const uint32_t *)(uintptr_t)count.ptr,
        4, (void *)(uintptr_t)ws.ptr, NULL);
    cr_expect_eq(st, P2PT_NOT_SUPPORTED);
    cr_expect(strstr(p2pt_last_error(NULL), "loop") != NULL, "%s", p2pt_last_error(NULL));
    p2pt_finalize(h);
#endif
}

Test(engine_loop, without_a_batch_step_each_piece_is_a_copy_of_its_own)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    p2pt_handle *h = engine_handle(&each_engine);
    char src[200], dst[200 + 2 * GT_GUARD];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (char)(i * 5 + 3);
    memset(dst, GT_POISON, sizeof(dst));
    char *out = dst + GT_GUARD;
    /* An empty piece among them, and pieces out of order. */
    p2pt_copy_desc d[4] = {{out + 120, src + 120, 80},
                           {out + 7, src + 7, 0},
                           {out, src, 70},
                           {out + 70, src + 70, 50}};
    p2pt_choice c = {sizeof(c)};
    cr_assert_eq(p2pt_explain_batch(h, d, 4, NULL, &c), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_str_eq(c.transport, "each", "%s", c.reason);
    cr_expect_str_eq(c.path, "batch");
    p2pt_properties p = gt_props(h);
    const int e = engine_index(&p, "each");
    cr_expect_eq(p.engine_bytes[e], 0, "a dry run copies nothing");
    cr_assert_eq(p2pt_copy_batch_async(h, d, 4, NULL), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_expect_eq(memcmp(out, src, sizeof(src)), 0);
    for (size_t i = 0; i < GT_GUARD; i++) {
        cr_assert_eq((unsigned char)dst[i], GT_POISON, "guard byte %zu before", i);
        cr_assert_eq((unsigned char)out[sizeof(src) + i], GT_POISON, "guard byte %zu after", i);
    }
    p = gt_props(h);
    cr_expect_eq(p.engine_bytes[e], sizeof(src), "every piece through the engine's copy");
    cr_expect_eq(p.engine_batches[e], 1);
    cr_expect_eq(p.batch_pieces, 3);
    cr_expect_eq(p.ce_bytes + p.tma_bytes + p.ce_batches + p.tma_batches, 0);
    p2pt_finalize(h);
#endif
}
