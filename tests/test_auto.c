/* SPDX-License-Identifier: Apache-2.0 */
/*
 * P2P_TRANSPORT=auto. On the CPU: the name is accepted and listed, a bad
 * table file fails p2pt_init with the file and line before any driver is
 * looked for, and the choice API checks its arguments. On a GPU: with a
 * table file whose bands are known, every copy and batch goes where the
 * table says (asked through p2pt_explain_*, then checked through the
 * per-engine counters), byte-exact with guards on random data; graph bands
 * apply only while the stream captures; a table for another architecture
 * fails p2pt_init; the tables in use are logged once; prepare covers both
 * engines.
 */
#include <stdarg.h>

#include "auto_test.h"

Test(auto_cpu, a_bad_table_fails_init_with_file_and_line_before_the_driver)
{
    char path[64];
    table_file(path, "p2pt-auto 1\narch sm_90\ncopy local 0 tma\ncopy local 1M dma\n");
    /* No driver at this path: the table must be reported first. */
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    const char *msg = init_refused(path);
    char where[80];
    snprintf(where, sizeof(where), "%s:4", path);
    cr_assert(strstr(msg, where) && strstr(msg, "dma"), "%s", msg);
    unlink(path);
    /* A file that is not there is named too. */
    msg = init_refused("/nonexistent/p2pt.table");
    cr_assert(strstr(msg, "/nonexistent/p2pt.table"), "%s", msg);
    unsetenv("P2P_CUDA_LIBRARY");
}

Test(auto_cpu, a_missing_table_names_the_variable_that_pointed_at_it)
{
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    const char *msg = init_refused("/nonexistent/p2pt.table");
    const char *want = "P2P_TRANSPORT_AUTO_TABLE=/nonexistent/p2pt.table: cannot open";
    cr_assert(strncmp(msg, want, strlen(want)) == 0, "expected \"%s...\", got \"%s\"", want,
              msg);
    cr_assert(strstr(msg, "No such file") != NULL, "the reason is kept: %s", msg);
    unsetenv("P2P_CUDA_LIBRARY");
}

Test(auto_cpu, auto_is_a_transport_name_and_listed_in_messages)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "AUTO"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "auto");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "car"), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "ce, tma, auto"), "%s", p2pt_last_error(NULL));
}

Test(auto_cpu, explain_checks_its_arguments_before_any_cuda_call)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "auto"), P2PT_SUCCESS);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt__handle_new(&cfg, NULL, &h), P2PT_SUCCESS);
    char buf[64];
    p2pt_choice c = {sizeof(c)};
    cr_assert_eq(p2pt_explain_copy(h, buf, buf + 32, 16, NULL, NULL), P2PT_INVALID_ARGUMENT);
    p2pt_choice small = {4};
    cr_assert_eq(p2pt_explain_copy(h, buf, buf + 32, 16, NULL, &small), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "sizeof(p2pt_choice)"), "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_explain_copy(h, buf, buf + 8, 16, NULL, &c), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "overlapping"), "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_explain_copy(h, buf, buf + 32, 0, NULL, &c), P2PT_SUCCESS);
    cr_assert_str_eq(c.transport, "none");
    cr_assert_eq(p2pt_explain_batch(h, NULL, 3, NULL, &c), P2PT_INVALID_ARGUMENT);
    cr_assert(p2pt__handle_free(h));
    cr_assert_eq(p2pt_explain_copy(h, buf, buf + 32, 16, NULL, &c), P2PT_INVALID_USAGE);
}

/* ----------------------------------------------------------------- GPU */

static void require_hopper(void)
{
    gt_require_gpus(1);
    if (device_cc(0) < 90)
        cr_skip_test("needs sm_90 or newer: device 0 is sm_%d (auto's tma bands)", device_cc(0));
}

/* Local copies below 1 MiB to tma, from 1 MiB to ce; captured copies all
 * to ce; batches with pieces of 256 KiB or more on average to ce. */
static p2pt_handle *known_table(char path[64])
{
    char text[512];
    snprintf(text, sizeof(text),
             "p2pt-auto 1\narch sm_%d\ncopy local 0 tma\ncopy local 1M ce\n"
             "graph local 0 ce\ncopy push 0 ce\ncopy pull 0 tma\nbatch 0 tma\nbatch 256K ce\n",
             device_cc(0));
    table_file(path, text);
    p2pt_handle *h = NULL;
    GT_OK(init_auto(path, NULL, &h));
    GT_OK(p2pt_prepare(h, 0));
    return h;
}

/* explain, copy, check the bytes and that `engine` got the bytes. */
static void copy_through(p2pt_handle *h, CUstream s, size_t n, size_t so, size_t dof,
                         const char *engine, const char *reason_has)
{
    struct gt_buf src = gt_alloc(n + 64), dst = gt_alloc(n + 64);
    gt_fill(&src, n + so);
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_copy(h, (void *)(dst.ptr + dof), (void *)(src.ptr + so), n, s, &c));
    cr_assert_str_eq(c.transport, engine, "%zu bytes +%zu/+%zu: %s", n, so, dof, c.reason);
    cr_assert_str_eq(c.path, "local");
    cr_assert_eq(c.device, 0);
    cr_assert(strstr(c.reason, reason_has), "reason lacks \"%s\": %s", reason_has, c.reason);
    p2pt_properties before = gt_props(h);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + dof), (void *)(src.ptr + so), n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    char what[128];
    snprintf(what, sizeof(what), "auto -> %s, %zu bytes", engine, n);
    gt_expect_range(&dst, dof, &src, so, n, what);
    p2pt_properties after = gt_props(h);
    bool tma = strcmp(engine, "tma") == 0;
    cr_assert_eq(after.tma_bytes - before.tma_bytes, tma ? n : 0, "%s", what);
    cr_assert_eq(after.ce_bytes - before.ce_bytes, tma ? 0 : n, "%s", what);
    cr_assert_eq(after.tma_launches - before.tma_launches, tma ? 1u : 0u, "%s", what);
    gt_free(&src);
    gt_free(&dst);
}

Test(auto_gpu, copies_go_where_the_table_says_byte_exact)
{
    require_hopper();
    gt_use_device(0);
    char path[64];
    p2pt_handle *h = known_table(path);
    p2pt_properties p = gt_props(h);
    cr_assert_str_eq(p.transport, "auto");
    cr_assert_str_eq(p.auto_table, path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    copy_through(h, s, 4096 + 3, 3, 3, "tma", "'copy local' band from 0 to 1M: tma");
    copy_through(h, s, 1024 * 1024 - 1, 16, 48, "tma", "tma");
    copy_through(h, s, 1024 * 1024, 5, 5, "ce", "'copy local' band from 1M: ce");
    copy_through(h, s, 3 * 1024 * 1024 + 7, 0, 0, "ce", "ce");
    /* Not co-aligned: the table says tma, which cannot, so ce, and why. */
    copy_through(h, s, 64 * 1024 + 1, 1, 2, "ce", "differ modulo 16");
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

/* A batch of `count` pieces of `piece` bytes each, to scattered slots. */
static void batch_through(p2pt_handle *h, CUstream s, size_t count, size_t piece,
                          const char *engine, bool device_descs)
{
    size_t slot = piece + 48;
    struct gt_buf src = gt_alloc(count * piece), dst = gt_alloc(count * slot);
    gt_fill(&src, count * 7 + piece);
    gt_poison(&dst);
    p2pt_copy_desc *d = calloc(count, sizeof(*d));
    cr_assert_not_null(d);
    for (size_t i = 0; i < count; i++) {
        d[i].src = (void *)(src.ptr + i * piece);
        d[i].dst = (void *)(dst.ptr + (count - 1 - i) * slot + 16);
        d[i].bytes = piece;
    }
    p2pt_properties before = gt_props(h);
    if (device_descs) {
        CUdeviceptr dd, dc, ws;
        uint32_t c32 = (uint32_t)count;
        GT_CHECK(tcu.cuMemAlloc(&dd, count * sizeof(*d)));
        GT_CHECK(tcu.cuMemAlloc(&dc, sizeof(c32)));
        GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(c32)));
        GT_CHECK(tcu.cuMemcpyHtoD(dd, d, count * sizeof(*d)));
        GT_CHECK(tcu.cuMemcpyHtoD(dc, &c32, sizeof(c32)));
        GT_OK(p2pt_window_register(h, 0, (void *)src.ptr, src.n));
        GT_OK(p2pt_window_register(h, 0, (void *)dst.ptr, dst.n));
        GT_OK(p2pt_copy_batch_device_async(h, (void *)dd, (void *)dc, c32, (void *)ws, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        GT_OK(p2pt_window_unregister(h, 0, (void *)src.ptr));
        GT_OK(p2pt_window_unregister(h, 0, (void *)dst.ptr));
        tcu.cuMemFree(dd);
        tcu.cuMemFree(dc);
        tcu.cuMemFree(ws);
    } else {
        p2pt_choice c = {sizeof(c)};
        GT_OK(p2pt_explain_batch(h, d, count, s, &c));
        cr_assert_str_eq(c.transport, engine, "%zu x %zu: %s", count, piece, c.reason);
        cr_assert_str_eq(c.path, "batch");
        cr_assert(strstr(c.reason, "'batch' band"), "%s", c.reason);
        GT_OK(p2pt_copy_batch_async(h, d, count, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
    }
    /* Every piece in its slot, the gaps between slots still poison. */
    unsigned char *want = malloc(src.n), *got = malloc(dst.n);
    cr_assert(want && got);
    GT_CHECK(tcu.cuMemcpyDtoH(want, src.ptr, src.n));
    GT_CHECK(tcu.cuMemcpyDtoH(got, dst.ptr, dst.n));
    for (size_t i = 0; i < count; i++) {
        size_t at = (count - 1 - i) * slot;
        for (size_t k = 0; k < slot; k++) {
            unsigned char w = (k >= 16 && k < 16 + piece) ? want[i * piece + k - 16] : GT_POISON;
            if (got[at + k] != w)
                cr_assert_fail("auto batch (%s) %zu x %zu: piece %zu byte %zu is 0x%02x, "
                               "expected 0x%02x",
                               engine, count, piece, i, k, got[at + k], w);
        }
    }
    free(want);
    free(got);
    free(d);
    p2pt_properties after = gt_props(h);
    bool tma = strcmp(engine, "tma") == 0;
    cr_assert_eq(after.tma_batches - before.tma_batches, tma ? 1u : 0u);
    cr_assert_eq(after.ce_batches - before.ce_batches, tma ? 0u : 1u);
    gt_free(&src);
    gt_free(&dst);
}

Test(auto_gpu, batches_go_where_the_table_says_and_device_batches_to_the_kernel)
{
    require_hopper();
    gt_use_device(0);
    char path[64];
    p2pt_handle *h = known_table(path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    batch_through(h, s, 300, 14 * 1024 + 5, "tma", false);
    batch_through(h, s, 6, 256 * 1024, "ce", false);
    batch_through(h, s, 40, 300 * 1024 + 16, "tma", true);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_gpu, graph_bands_apply_only_while_capturing)
{
    require_hopper();
    gt_use_device(0);
    char path[64];
    p2pt_handle *h = known_table(path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t n = 100 * 1024 + 3;
    struct gt_buf src = gt_alloc(n), dst = gt_alloc(n);
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_copy(h, (void *)dst.ptr, (void *)src.ptr, n, s, &c));
    cr_assert_str_eq(c.transport, "tma", "%s", c.reason);
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GT_OK(p2pt_explain_copy(h, (void *)dst.ptr, (void *)src.ptr, n, s, &c));
    cr_assert_str_eq(c.transport, "ce", "%s", c.reason);
    cr_assert(strstr(c.reason, "graph being captured") && strstr(c.reason, "'graph local'"),
              "%s", c.reason);
    GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, n, s));
    CUgraph g;
    CUgraphExec ge;
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
    for (int r = 0; r < 3; r++) {
        gt_fill(&src, 40 + (uint64_t)r);
        gt_poison(&dst);
        GT_CHECK(tcu.cuGraphLaunch(ge, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        gt_expect_range(&dst, 0, &src, 0, n, "auto, captured (graph band: ce)");
    }
    p2pt_properties p = gt_props(h);
    cr_assert_eq(p.tma_launches, 0, "the captured copy went to tma");
    cr_assert_eq(p.ce_bytes, n);
    tcu.cuGraphExecDestroy(ge);
    tcu.cuGraphDestroy(g);
    gt_free(&src);
    gt_free(&dst);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_gpu, a_table_for_another_architecture_fails_init)
{
    gt_require_gpus(1);
    char path[64];
    int other = device_cc(0) == 100 ? 90 : 100;
    char text[256];
    snprintf(text, sizeof(text),
             "p2pt-auto 1\narch sm_%d\ncopy local 0 ce\ncopy push 0 ce\ncopy pull 0 ce\n"
             "batch 0 ce\n",
             other);
    table_file(path, text);
    const char *msg = init_refused(path);
    char arch[16];
    snprintf(arch, sizeof(arch), "sm_%d", other);
    cr_assert(strstr(msg, path) && strstr(msg, arch) && strstr(msg, "calibrate"), "%s", msg);
    unlink(path);
}

static int table_lines;
/* p2pt hands a framework's logger "%s" and the message. */
static void count_tables(p2pt_log_level level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    va_list ap;
    va_start(ap, fmt);
    const char *msg = strcmp(fmt, "%s") == 0 ? va_arg(ap, const char *) : fmt;
    va_end(ap);
    if (level == P2PT_LOG_INFO && strncmp(msg, "auto: ", 6) == 0)
        table_lines++;
}

Test(auto_gpu, the_tables_are_logged_once_at_init_and_prepare_covers_both_engines)
{
    require_hopper();
    gt_use_device(0);
    p2pt_handle *h = NULL;
    p2pt_init_args a = {sizeof(a), count_tables, "auto"};
    GT_OK(p2pt_init(&a, &h));
    int at_init = table_lines;
    cr_assert_geq(at_init, 1, "the built-in tables were not logged");
    GT_OK(p2pt_prepare(h, 0));
    GT_OK(p2pt_prepare(h, 0));
    p2pt_properties p = gt_props(h);
    cr_assert_str_eq(p.auto_table, "built-in");
    cr_assert_geq(p.module_loads, 1, "prepare did not load the tma kernels");
    /* Capture right after prepare: whatever the built-in table picks for
     * each size, the copy needs no compile or load. */
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct gt_buf src = gt_alloc(1 << 20), dst = gt_alloc(1 << 20);
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (size_t n = 4096; n <= (1 << 20); n *= 4)
        GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, n, s));
    CUgraph g;
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    tcu.cuGraphDestroy(g);
    /* The per-device table is logged when first used, once. */
    int after_use = table_lines;
    GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, 4096, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    cr_assert_eq(table_lines, after_use, "logged again on a later copy");
    gt_free(&src);
    gt_free(&dst);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
}
