/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench's first line on a machine it cannot run on names the real
 * cause: a bad auto table or a bad P2P_TRANSPORT value (exit 2, what the
 * library says), before "no CUDA device" (exit 1), which only a missing
 * driver gets. --mode overlap without cuBLAS says so in one line (exit 2),
 * on any machine.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#ifdef P2PT_BENCH_PATH
static int bench_args(const char *env, const char *args, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s '%s' %s 2>&1", env, P2PT_BENCH_PATH, args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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
