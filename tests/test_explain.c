/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt_explain_copy and p2pt_explain_batch are the dry run of the real
 * call: they name the engine whose counters the real call moves, and what
 * they refuse the real call refuses with the same status.
 *
 * On a GPU, for each policy (ce, tma, auto through p2pt_init_args.transport):
 * random local copies (sizes, offsets, so co-aligned or not), copies from
 * pageable host memory, random host batches (some with a pageable piece),
 * and device batches (through the pipeline's dry run, p2pt__op_run; a device
 * batch under ce is refused with status 6 both ways). On a CPU: the router
 * with a fake policy sends what the chosen engine cannot run to the
 * fallback engine, counted per engine and logged once; device batches
 * route by capability; the fallback engine is named by its capability.
 */
#include <stdarg.h>

#include "gpu_test.h"

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The engine whose counters moved between `a` and `b` for one copy of `n`
 * bytes ("ce" or "tma"; NULL when neither or both did). */
static const char *copy_engine(const p2pt_properties *a, const p2pt_properties *b, size_t n)
{
    bool ce = b->ce_bytes - a->ce_bytes == n, tma = b->tma_bytes - a->tma_bytes == n;
    if (ce == tma)
        return NULL;
    return ce ? "ce" : "tma";
}

static const char *batch_engine(const p2pt_properties *a, const p2pt_properties *b)
{
    bool ce = b->ce_batches - a->ce_batches == 1, tma = b->tma_batches - a->tma_batches == 1;
    if (ce == tma)
        return NULL;
    return ce ? "ce" : "tma";
}

/* Explain, then the real call, of one copy: they must agree. */
static void agree_copy(p2pt_handle *h, void *dst, const void *src, size_t n, CUstream s,
                       const char *what)
{
    p2pt_choice c = {sizeof(c)};
    p2pt_status ex = p2pt_explain_copy(h, dst, src, n, s, &c);
    char why[1024];
    snprintf(why, sizeof(why), "%s", ex == P2PT_SUCCESS ? c.reason : p2pt_last_error(NULL));
    p2pt_properties a = gt_props(h);
    p2pt_status real = p2pt_copy_async(h, dst, src, n, s);
    p2pt_properties b = gt_props(h);
    cr_assert_eq(real, ex, "%s: explain %d (%s), real call %d (%s)", what, (int)ex, why,
                 (int)real, p2pt_last_error(NULL));
    if (ex != P2PT_SUCCESS) {
        cr_assert_eq(b.rejected - a.rejected, 1, "%s: a refusal is counted", what);
        cr_assert_eq(b.copies, a.copies, "%s", what);
        return;
    }
    const char *moved = copy_engine(&a, &b, n);
    cr_assert(moved != NULL && strcmp(moved, c.transport) == 0,
              "%s: explain names %s (%s), the counters show %s", what, c.transport, why,
              moved ? moved : "neither or both");
    bool fell_back = strstr(c.reason, " cannot (") != NULL;
    cr_assert_eq(b.ce_fallbacks - a.ce_fallbacks, fell_back ? 1u : 0u,
                 "%s: a fallback is counted whatever the policy (%s)", what, c.reason);
}

static void agree_batch(p2pt_handle *h, const p2pt_copy_desc *d, size_t count, CUstream s,
                        const char *what)
{
    p2pt_choice c = {sizeof(c)};
    p2pt_status ex = p2pt_explain_batch(h, d, count, s, &c);
    char why[1024];
    snprintf(why, sizeof(why), "%s", ex == P2PT_SUCCESS ? c.reason : p2pt_last_error(NULL));
    p2pt_properties a = gt_props(h);
    p2pt_status real = p2pt_copy_batch_async(h, d, count, s);
    p2pt_properties b = gt_props(h);
    cr_assert_eq(real, ex, "%s: explain %d (%s), real call %d (%s)", what, (int)ex, why,
                 (int)real, p2pt_last_error(NULL));
    if (ex != P2PT_SUCCESS) {
        cr_assert_eq(b.rejected - a.rejected, 1, "%s", what);
        return;
    }
    const char *moved = batch_engine(&a, &b);
    cr_assert(moved != NULL && strcmp(moved, c.transport) == 0,
              "%s: explain names %s (%s), the counters show %s", what, c.transport, why,
              moved ? moved : "neither or both");
}

static void agree_device_batch(p2pt_handle *h, const struct gt_buf *descs, CUdeviceptr count,
                               uint32_t max, CUdeviceptr ws, CUstream s, const char *what)
{
    struct p2pt_op op;
    p2pt__op_device_batch(&op, "p2pt_copy_batch_device_async",
                          (const p2pt_copy_desc *)(uintptr_t)descs->ptr,
                          (const uint32_t *)(uintptr_t)count, max, (void *)(uintptr_t)ws, s);
    p2pt_choice c = {sizeof(c)};
    p2pt_status ex = p2pt__op_run(h, &op, &c);
    p2pt_properties a = gt_props(h);
    p2pt_status real = p2pt_copy_batch_device_async(h, op.device.descs, op.device.count, max,
                                                    op.device.workspace, s);
    p2pt_properties b = gt_props(h);
    cr_assert_eq(real, ex, "%s: dry run %d, real call %d (%s)", what, (int)ex, (int)real,
                 p2pt_last_error(NULL));
    if (ex != P2PT_SUCCESS)
        return;
    const char *moved = batch_engine(&a, &b);
    cr_assert(moved != NULL && strcmp(moved, c.transport) == 0,
              "%s: dry run names %s (%s), the counters show %s", what, c.transport, c.reason,
              moved ? moved : "neither or both");
}

static void policy_agrees(const char *policy, uint64_t seed)
{
    p2pt_handle *h = gt_handle(policy);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t most = 4u << 20;
    struct gt_buf src = gt_alloc(most + 64), dst = gt_alloc(most + 64);
    gt_fill(&src, seed);
    char *host = malloc(1 << 20);
    cr_assert_not_null(host);
    memset(host, 7, 1 << 20);
    uint64_t x = seed;
    char what[128];

    for (int i = 0; i < 40; i++) {
        size_t n = 1 + (size_t)(rnd(&x) % (i % 3 == 0 ? most : 256 * 1024));
        size_t so = (size_t)(rnd(&x) % 64), dof = (size_t)(rnd(&x) % 64);
        if (i % 2 == 0)
            dof = so; /* co-aligned half the time */
        snprintf(what, sizeof(what), "%s: copy %d, %zu bytes +%zu/+%zu", policy, i, n, so, dof);
        agree_copy(h, (void *)(uintptr_t)(dst.ptr + dof), (void *)(uintptr_t)(src.ptr + so), n,
                   s, what);
    }
    for (int i = 0; i < 4; i++) {
        size_t n = 4096u << i;
        snprintf(what, sizeof(what), "%s: %zu bytes from pageable host memory", policy, n);
        agree_copy(h, (void *)(uintptr_t)dst.ptr, host, n, s, what);
    }

    p2pt_copy_desc d[24];
    for (int i = 0; i < 12; i++) {
        size_t count = 1 + (size_t)(rnd(&x) % 24), piece = 1 + (size_t)(rnd(&x) % 65536);
        for (size_t k = 0; k < count; k++) {
            d[k].src = (void *)(uintptr_t)(src.ptr + k * piece % (most - piece));
            d[k].dst = (void *)(uintptr_t)(dst.ptr + k * (piece + 16) % (most - piece));
            d[k].bytes = piece;
        }
        /* No two pieces may write the same bytes: one destination slot each. */
        for (size_t k = 0; k < count; k++)
            d[k].dst = (void *)(uintptr_t)(dst.ptr + k * (most / 24));
        /* A pageable piece where the batch goes to a kernel engine, which
         * cannot read it: explain must refuse it as the real call does. */
        bool pageable = false;
        if (i % 4 == 3) {
            p2pt_choice c = {sizeof(c)};
            GT_OK(p2pt_explain_batch(h, d, count, s, &c));
            pageable = strcmp(c.transport, "tma") == 0;
        }
        if (pageable)
            d[count / 2].src = host;
        snprintf(what, sizeof(what), "%s: batch %d, %zu pieces of %zu bytes%s", policy, i, count,
                 piece, pageable ? ", one from pageable memory" : "");
        agree_batch(h, d, count, s, what);
    }

    uint32_t n = 8;
    struct gt_buf descs = gt_alloc(n * sizeof(p2pt_copy_desc));
    for (uint32_t k = 0; k < n; k++) {
        d[k].src = (void *)(uintptr_t)(src.ptr + k * 4096);
        d[k].dst = (void *)(uintptr_t)(dst.ptr + k * 8192);
        d[k].bytes = 4096;
    }
    GT_CHECK(tcu.cuMemcpyHtoD(descs.ptr, d, n * sizeof(p2pt_copy_desc)));
    CUdeviceptr count, ws;
    GT_CHECK(tcu.cuMemAlloc(&count, sizeof(n)));
    GT_CHECK(tcu.cuMemcpyHtoD(count, &n, sizeof(n)));
    GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(n)));
    snprintf(what, sizeof(what), "%s: device batch of %u", policy, n);
    agree_device_batch(h, &descs, count, n, ws, s, what);

    GT_CHECK(tcu.cuStreamSynchronize(s));
    GT_CHECK(tcu.cuMemFree(count));
    GT_CHECK(tcu.cuMemFree(ws));
    gt_free(&descs);
    free(host);
    gt_free(&src);
    gt_free(&dst);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
}

Test(explain, names_the_engine_the_counters_show_under_ce)
{
    gt_require_gpus(1);
    gt_use_device(0);
    policy_agrees("ce", 11);
}

Test(explain, names_the_engine_the_counters_show_under_tma)
{
    gt_require_gpus(1);
    gt_use_device(0);
    policy_agrees("tma", 12);
}

Test(explain, names_the_engine_the_counters_show_under_auto)
{
    gt_require_gpus(1);
    gt_use_device(0);
    policy_agrees("auto", 13);
}

/* ------------------------------------------------- no GPU needed for these */

static p2pt_handle *cpu_handle(const char *transport, p2pt_logger_t logger)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, transport), P2PT_SUCCESS);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt__handle_new(&cfg, logger, &h), P2PT_SUCCESS);
    return h;
}

static _Atomic int fallback_lines;

static void count_fallback_lines(p2pt_log_level level, unsigned long flags, const char *file,
                                 int line, const char *fmt, ...)
{
    (void)level;
    (void)flags;
    (void)file;
    (void)line;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (strstr(msg, "cannot copy") != NULL)
        atomic_fetch_add(&fallback_lines, 1);
}

/* A policy that always wants tma. */
static p2pt_status want_tma(struct p2pt_handle *h, const struct p2pt_request *r,
                            const struct p2pt_transport **t, char *why, size_t len)
{
    (void)h;
    (void)r;
    *t = &p2pt__transport_tma;
    if (why)
        snprintf(why, len, "fake: tma");
    return P2PT_SUCCESS;
}

Test(router, what_the_chosen_engine_cannot_copy_goes_to_the_fallback_counted_and_logged_once)
{
    p2pt_handle *h = cpu_handle("tma", count_fallback_lines);
    struct p2pt_policy fake = p2pt__policy_fixed;
    fake.route_copy = want_tma;
    h->policy = &fake;
    struct p2pt_request r;
    memset(&r, 0, sizeof(r));
    r.dst = (void *)0x1001;
    r.src = (void *)0x2002;
    r.bytes = 100;
    r.coaligned = false;
    const struct p2pt_transport *t = NULL;
    char why[256];
    cr_assert_eq(p2pt__route(h, &r, &t, why, sizeof(why)), P2PT_SUCCESS);
    cr_assert_eq(t, p2pt__fallback_engine());
    cr_assert_str_eq(why, "fake: tma; but tma cannot (dst and src differ modulo 16, so no bulk "
                          "copy can align both): ce");
    cr_assert_eq(atomic_load(&h->stats.engine_fallbacks[p2pt__transport_index(
                     &p2pt__transport_tma)]),
                 0, "a dry run counts nothing");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(p2pt__route(h, &r, &t, NULL, 0), P2PT_SUCCESS);
        cr_assert_eq(t, p2pt__fallback_engine());
    }
    cr_assert_eq(atomic_load(&h->stats.engine_fallbacks[p2pt__transport_index(
                     &p2pt__transport_tma)]),
                 3);
    cr_assert_eq(atomic_load(&fallback_lines), 1, "logged once per handle");
    r.coaligned = true;
    cr_assert_eq(p2pt__route(h, &r, &t, NULL, 0), P2PT_SUCCESS);
    cr_assert_eq(t, &p2pt__transport_tma);
    p2pt_finalize(h);
}

Test(router, device_batches_route_by_capability_under_every_policy)
{
    const char *const policies[] = {"auto", "tma", "ce"};
    for (int i = 0; i < 3; i++) {
        p2pt_handle *h = cpu_handle(policies[i], NULL);
        const struct p2pt_transport *t = NULL;
        char why[256] = "";
        p2pt_status st = p2pt__route_device_batch(h, "p2pt_copy_batch_device_async", &t, why,
                                                  sizeof(why));
        if (strcmp(policies[i], "ce") == 0) {
            cr_assert_eq(st, P2PT_NOT_SUPPORTED);
            cr_assert(strstr(p2pt_last_error(NULL), "cannot read descriptors from GPU memory"),
                      "%s", p2pt_last_error(NULL));
        } else {
            cr_assert_eq(st, P2PT_SUCCESS, "%s: %s", policies[i], p2pt_last_error(NULL));
            cr_assert_eq(t, p2pt__engine_with(P2PT_CAP_DEVICE_BATCH), "%s", policies[i]);
            cr_assert(t->copy_batch_device != NULL);
        }
        p2pt_finalize(h);
    }
}

Test(router, exactly_one_engine_is_the_fallback_and_it_runs_any_request)
{
    int fallbacks = 0;
    for (int i = 0; p2pt__transport_at(i) != NULL; i++)
        fallbacks += (p2pt__transport_at(i)->caps & P2PT_CAP_FALLBACK) != 0;
    cr_assert_eq(fallbacks, 1);
    const struct p2pt_transport *f = p2pt__fallback_engine();
    cr_assert_not_null(f);
    cr_assert(f->caps & P2PT_CAP_STAGED, "the fallback stages what a GPU cannot map");
    struct p2pt_request r;
    memset(&r, 0, sizeof(r));
    r.path = P2PT_PATH_OTHER;
    const char *no = NULL;
    cr_assert(f->can_copy(NULL, &r, &no), "%s", no ? no : "");
}

Test(router, properties_list_every_engine_with_its_counters)
{
    p2pt_handle *h = cpu_handle("auto", NULL);
    int tma = p2pt__transport_index(&p2pt__transport_tma);
    int ce = p2pt__transport_index(&p2pt__transport_ce);
    atomic_store(&h->stats.engine_bytes[tma], 5);
    atomic_store(&h->stats.engine_batches[ce], 2);
    atomic_store(&h->stats.engine_fallbacks[tma], 3);
    p2pt_properties p;
    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    cr_assert_eq(p2pt_get_properties(h, &p), P2PT_SUCCESS);
    int n = 0;
    while (p2pt__transport_at(n) != NULL) {
        cr_assert_str_eq(p.engine_name[n], p2pt__transport_at(n)->name);
        n++;
    }
    for (int e = n; e < P2PT_PROPERTIES_ENGINES; e++)
        cr_assert_null(p.engine_name[e]);
    cr_assert_eq(p.tma_bytes, 5);
    cr_assert_eq(p.engine_bytes[tma], 5);
    cr_assert_eq(p.ce_batches, 2);
    cr_assert_eq(p.engine_batches[ce], 2);
    cr_assert_eq(p.engine_fallbacks[tma], 3);
    cr_assert_eq(p.ce_fallbacks, 3, "the sum over engines");
    p2pt_finalize(h);
}
