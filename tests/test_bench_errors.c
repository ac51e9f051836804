/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench's first line on a machine it cannot run on names the real
 * cause: a bad auto table or a bad P2P_TRANSPORT value (exit 2, what the
 * library says), before "no CUDA device" (exit 1), which only a missing
 * driver gets. --mode overlap without cuBLAS says so in one line (exit 2),
 * on any machine. --mode alltoall's flags out of range are named in one
 * line with what they accept (exit 2) before any driver is looked for;
 * without a driver it says "no CUDA device" like every mode (exit 1); over
 * the fake driver's two GPUs it refuses --gpus 3 (exit 2).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "run_test.h"

#ifdef P2PT_BENCH_PATH
static int bench_args(const char *env, const char *args, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s '%s' %s 2>&1", env, P2PT_BENCH_PATH, args);
    return run_cmd(cmd, out, len);
}

static int bench(const char *env, char *out, size_t len)
{
    return bench_args(env, "", out, len);
}
#endif

static void require_bench(void)
{
#ifndef P2PT_BENCH_PATH
    cr_skip_test("no p2pt-bench: built with -DP2PT_BUILD_BENCH=OFF");
#endif
}

Test(bench_errors, a_missing_auto_table_is_named_not_reported_as_no_device)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    char out[2048];
    int st = bench("P2P_TRANSPORT=auto P2P_TRANSPORT_AUTO_TABLE=/nonexistent/p2pt.table", out,
                   sizeof(out));
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "/nonexistent/p2pt.table") != NULL, "%s", out);
    cr_assert(strstr(out, "no CUDA device") == NULL, "%s", out);
#endif
}

Test(bench_errors, a_bad_transport_is_named_on_any_machine)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    char out[2048];
    int st = bench("P2P_TRANSPORT=bogus", out, sizeof(out));
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "\"bogus\"") != NULL, "%s", out);
#endif
}

Test(bench_errors, the_overlap_mode_without_cublas_says_so_in_one_line)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    char out[2048];
    int st = bench_args("", "--mode overlap --cublas /nonexistent/libcublas.so.13", out,
                        sizeof(out));
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "cuBLAS") && strstr(out, "/nonexistent/libcublas.so.13"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
#endif
}

#ifdef P2PT_BENCH_PATH
/* Exit 2 and one line naming `flag` and containing `accepted`. */
static void refused(const char *args, const char *flag, const char *accepted)
{
    char out[2048];
    int st = bench_args("", args, out, sizeof(out));
    cr_expect_eq(st, 2, "%s: exit %d: %s", args, st, out);
    cr_expect(strstr(out, flag) != NULL, "%s: no %s in: %s", args, flag, out);
    cr_expect(strstr(out, accepted) != NULL, "%s: no \"%s\" in: %s", args, accepted, out);
    cr_expect_eq(strchr(out, '\n'), out + strlen(out) - 1, "%s: one line: %s", args, out);
}
#endif

Test(bench_errors, alltoall_flags_out_of_range_are_named_with_what_they_accept)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    refused("--mode alltoall --gpus 1", "--gpus \"1\"", "from 2 to every visible GPU");
    refused("--mode alltoall --frac 0", "--frac \"0\"", "above 0 and at most 1");
    refused("--mode alltoall --frac 1.5", "--frac \"1.5\"", "above 0 and at most 1");
    refused("--mode alltoall --row-bytes 0", "--row-bytes \"0\"", "a multiple of 16 from 16");
    refused("--mode alltoall --row-bytes 4K,100", "--row-bytes \"100\"", "a multiple of 16");
    refused("--mode alltoall --rows 0", "--rows \"0\"", "from 1 to 16777216");
    refused("--mode alltoall --rows 3 --frac 0.1", "--frac 0.1 of --rows 3", "no row");
    refused("--mode alltoall --order token", "--order \"token\"", "expected row");
#endif
}

Test(bench_errors, the_alltoall_mode_without_a_driver_says_no_cuda_device)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    char out[2048];
    int st = bench_args("P2P_CUDA_LIBRARY=/nonexistent/libcuda.so.1", "--mode alltoall", out,
                        sizeof(out));
    cr_assert_eq(st, 1, "exit %d: %s", st, out);
    cr_assert(strstr(out, "no CUDA device") != NULL, "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
#endif
}

Test(bench_errors, help_lists_the_alltoall_mode_its_flags_and_its_columns)
{
    require_bench();
#ifdef P2PT_BENCH_PATH
    static char out[64 * 1024];
    int st = bench_args("", "--help", out, sizeof(out));
    cr_assert_eq(st, 0, "exit %d", st);
    const char *want[] = {"alltoall",
                          "--gpus N",
                          "--rows N",
                          "--row-bytes LIST",
                          "--frac F",
                          "--order row|dest",
                          "--nccl PATH",
                          "NCCL_NVLS_ENABLE=0",
                          "ce_packed",
                          "plain_kernel",
                          "tma_host",
                          "auto_host",
                          "256 threads",
                          "gpus,rows,row_bytes,frac,way,sm_budget,max_ctas,",
                          "gbps_per_gpu,vs_ce_packed,vs_nccl"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_expect(strstr(out, want[i]) != NULL, "--help does not mention %s", want[i]);
#endif
}

Test(bench_errors, alltoall_refuses_more_gpus_than_are_visible)
{
    require_bench();
#if defined(P2PT_BENCH_PATH) && defined(P2PT_FAKE_CUDA_PATH)
    char out[2048];
    int st = bench_args("P2P_CUDA_LIBRARY='" P2PT_FAKE_CUDA_PATH "'", "--mode alltoall --gpus 3",
                        out, sizeof(out));
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "--gpus 3: only 2 GPUs are visible") != NULL, "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
#else
    cr_skip_test("the fake driver is not built here (tests/fault/)");
#endif
}
