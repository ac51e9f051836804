/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running a command from a test (test_bench_alltoall.c, test_bench_errors.c,
 * test_install.c, test_plugin.c, test_python.c, test_test_script.c): its
 * output and its exit status. Static inline so each test file stays
 * self-contained.
 */
#ifndef P2PT_RUN_TEST_H
#define P2PT_RUN_TEST_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/wait.h>

/* Run `cmd` through the shell; the start of its output (up to `len`) in
 * `out`, and its exit status, -1 when it did not exit normally. The rest
 * is read and dropped, so that a long output does not die of SIGPIPE when
 * the pipe closes. */
static inline int run_cmd(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f, "popen %s", cmd);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    char rest[4096];
    while (fread(rest, 1, sizeof(rest), f) > 0)
        ;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
