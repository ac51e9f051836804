/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What `cmake --install` puts where README says: the benchmark in bin/
 * (README tells users to run `p2pt-bench --mode calibrate`), runnable from
 * there, beside the library and headers. The install goes to a fresh
 * prefix under the build directory; a build without the benchmark skips.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_test.h"

/* Whether this build has the benchmark (CMake defines its path when so). */
#ifdef P2PT_BENCH_PATH
#define BENCH_BUILT true
#else
#define BENCH_BUILT false
#endif

Test(install, the_benchmark_lands_in_bin_and_runs_from_there)
{
    if (!BENCH_BUILT)
        cr_skip_test("needs the benchmark: this build has none (-DP2PT_BUILD_BENCH=OFF)");
    char out[8192], cmd[3072], prefix[1100], bench[1200];
    if (run_cmd("cmake --version >/dev/null 2>&1", out, sizeof(out)) != 0)
        cr_skip_test("needs cmake: none on the PATH");
    /* Per process, so that two runs of the suite never share a prefix. */
    snprintf(prefix, sizeof(prefix), "%s/test-install-%ld", P2PT_BINARY_DIR, (long)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cmake --install '%s' --prefix '%s' 2>&1", prefix,
             P2PT_BINARY_DIR, prefix);
    int rc = run_cmd(cmd, out, sizeof(out));
    cr_assert_eq(rc, 0, "cmake --install failed (%d): %s", rc, out);
    snprintf(bench, sizeof(bench), "%s/bin/p2pt-bench", prefix);
    struct stat st;
    cr_expect(stat(bench, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR),
              "cmake --install put no executable p2pt-bench at %s: %s", bench, out);
    snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", bench);
    rc = run_cmd(cmd, out, sizeof(out));
    cr_expect_eq(rc, 0, "%s --help exited %d: %s", bench, rc, out);
    cr_expect(strstr(out, "usage: p2pt-bench") != NULL, "%s --help: %s", bench, out);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", prefix);
    run_cmd(cmd, out, sizeof(out));
}
