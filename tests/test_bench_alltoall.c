/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench --mode alltoall end to end over the fake driver's two GPUs
 * (tests/fault/fake_cuda.c: copies are memcpy, kernels do nothing), so on
 * any machine: the copy-engine ways run, ce_packed's bytes pass its host
 * check, --csv holds exactly the mode's columns and a row per way and row
 * size, and beside another mode those rows go to FILE-alltoall.csv while
 * FILE keeps the common columns; with one GPU (P2PT_FAKE_DEVICES=1) the
 * mode alone exits 1 naming why, and beside another it is skipped. The
 * fake's launches do nothing, so the kernel ways and the compare kernel
 * are left to GPU machines (-c 0 where
 * p2pt's ce row would need the compare kernel; --nccl names no library, so
 * no real NCCL meets fake memory).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_test.h"

#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
#define FAKE_ENV                                                               \
    "P2P_CUDA_LIBRARY='" P2PT_FAKE_CUDA_PATH "' P2P_NVRTC_LIBRARY='" P2PT_FAKE_NVRTC_PATH \
    "' P2P_TRANSPORT_CACHE_DIR=off"
#define SMALL                                                                  \
    "--rows 64 --row-bytes 4K,1K --ref-ctas 0 --budgets default --nccl "       \
    "/nonexistent/libnccl.so.2 -r 3 -w 1"

/* Runs p2pt-bench with `args` over the fake driver; its output in `out`. */
static int run(const char *args, char *out, size_t len)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s '%s' %s 2>&1", FAKE_ENV, P2PT_BENCH_PATH, args);
    return run_cmd(cmd, out, len);
}

static char *slurp(const char *path)
{
    static char buf[16 * 1024];
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s was not written", path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void temp_name(char *buf, size_t len, const char *tail)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/p2pt-a2a-%ld%s", dir && dir[0] ? dir : "/tmp", (long)getpid(), tail);
}
#endif

static void require_fake_bench(void)
{
#if !defined(P2PT_BENCH_PATH) || !defined(P2PT_FAKE_CUDA_PATH)
    cr_skip_test("no p2pt-bench or no fake driver built here");
#endif
}

Test(bench_alltoall, csv_holds_its_columns_and_a_row_per_way_and_row_size)
{
    require_fake_bench();
#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
    static char out[64 * 1024];
    char csv[512], args[1024];
    temp_name(csv, sizeof(csv), ".csv");
    snprintf(args, sizeof(args), "--mode alltoall --transport ce -c 0 " SMALL " --csv '%s'", csv);
    int st = run(args, out, sizeof(out));
    cr_assert_eq(st, 0, "exit %d: %s", st, out);
    cr_expect(strstr(out, "nccl skipped: NCCL could not be loaded from --nccl "
                          "/nonexistent/libnccl.so.2") != NULL,
              "the nccl row says why: %s", out);
    const char *text = slurp(csv);
    const char *want =
        "gpus,rows,row_bytes,frac,way,sm_budget,max_ctas,gbps_per_gpu,vs_ce_packed,vs_nccl\n"
        "2,64,4096,0.5,ce_packed,default,0,";
    cr_expect_eq(strncmp(text, want, strlen(want)), 0, "%s", text);
    const char *rows[] = {"2,64,4096,0.5,ce_packed,default,0,", "2,64,4096,0.5,ce,default,0,",
                          "2,64,1024,0.5,ce_packed,default,0,", "2,64,1024,0.5,ce,default,0,"};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        cr_expect(strstr(text, rows[i]) != NULL, "no row %s in:\n%s", rows[i], text);
    int lines = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    cr_expect_eq(lines, 5, "a header and 4 rows:\n%s", text);
    /* ce_packed is its own yardstick; no nccl row ran: its ratio is empty. */
    cr_expect(strstr(text, ",1.0000,\n") != NULL, "%s", text);
    remove(csv);
#endif
}

Test(bench_alltoall, ce_packed_passes_its_check_against_the_source_rows)
{
    require_fake_bench();
#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
    static char out[64 * 1024];
    /* The compare kernel cannot run on the fake: the rows after the
     * yardsticks are reported unchecked, and that is counted as a failure
     * (exit 1); ce_packed's own check is on the host and must pass. */
    int st = run("--mode alltoall --transport ce " SMALL, out, sizeof(out));
    cr_expect_eq(st, 1, "exit %d: %s", st, out);
    const char *row = strstr(out, "     ce_packed ");
    cr_assert_not_null(row, "%s", out);
    const char *end = strchr(row, '\n');
    cr_assert_not_null(end);
    cr_expect(end - row > 4 && strncmp(end - 4, "  ok", 4) == 0, "ce_packed's row: %.*s",
              (int)(end - row), row);
    cr_expect(strstr(out, "the compare kernel saw no difference") != NULL, "%s", out);
#endif
}

Test(bench_alltoall, beside_another_mode_its_rows_go_to_a_file_of_their_own)
{
    require_fake_bench();
#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
    static char out[64 * 1024];
    char csv[512], beside[512], args[1024];
    temp_name(csv, sizeof(csv), ".csv");
    temp_name(beside, sizeof(beside), "-alltoall.csv");
    snprintf(args, sizeof(args),
             "--mode table,alltoall -b 4K -e 4K -n 1 --transport ce -c 0 " SMALL " --csv '%s'",
             csv);
    int st = run(args, out, sizeof(out));
    cr_assert_eq(st, 0, "exit %d: %s", st, out);
    const char *common = slurp(csv);
    cr_expect_eq(strncmp(common, "mode,path,transport,bytes,", 26), 0, "%s", common);
    cr_expect(strstr(common, "table,local,ce,4096,") != NULL, "%s", common);
    cr_expect(strstr(common, "alltoall") == NULL, "%s", common);
    const char *own = slurp(beside);
    cr_expect_eq(strncmp(own, "gpus,rows,row_bytes,frac,way,", 29), 0, "%s", own);
    cr_expect(strstr(own, "2,64,1024,0.5,ce,default,0,") != NULL, "%s", own);
    cr_expect(strstr(out, beside) != NULL, "the run names %s: %s", beside, out);
    remove(csv);
    remove(beside);
#endif
}

Test(bench_alltoall, one_gpu_stops_it_alone_and_leaves_the_other_modes_beside_it)
{
    require_fake_bench();
#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
    static char out[64 * 1024];
    char csv[512], beside[512], args[1024];
    temp_name(csv, sizeof(csv), "-one.csv");
    temp_name(beside, sizeof(beside), "-one-alltoall.csv");
    setenv("P2PT_FAKE_DEVICES", "1", 1); /* the fake driver counts one GPU */
    int st = run("--mode alltoall " SMALL, out, sizeof(out));
    cr_expect_eq(st, 1, "alone on one GPU: exit %d: %s", st, out);
    cr_expect(strstr(out, "--mode alltoall: needs 2 GPUs, found 1") != NULL, "%s", out);
    snprintf(args, sizeof(args),
             "--mode table,alltoall -b 4K -e 4K -n 1 --transport ce -c 0 " SMALL " --csv '%s'",
             csv);
    st = run(args, out, sizeof(out));
    unsetenv("P2PT_FAKE_DEVICES");
    cr_expect_eq(st, 0, "beside the table on one GPU: exit %d: %s", st, out);
    cr_expect(strstr(out, "skipping alltoall: needs 2 GPUs, found 1") != NULL, "%s", out);
    cr_expect(strstr(slurp(csv), "table,local,ce,4096,") != NULL, "the table ran");
    cr_expect(access(beside, F_OK) != 0, "no %s without the mode", beside);
    remove(csv);
    remove(beside);
#endif
}
