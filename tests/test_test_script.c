/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scripts/test.sh's command line, the part that runs nothing: an unknown
 * argument is refused with exit status 2 and the usage (a mistyped switch
 * used to run nothing and exit 0), and --help prints the usage alone,
 * without the file's SPDX line.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "run_test.h"

/* Run scripts/test.sh with `args`, stdout and stderr into out; its status. */
static int run_script(const char *args, char *out, size_t len)
{
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "'%s/scripts/test.sh' %s 2>&1", P2PT_SOURCE_DIR, args);
    int code = run_cmd(cmd, out, len);
    cr_assert(code >= 0, "test.sh %s did not exit normally: %s", args, out);
    return code;
}

Test(test_script, an_unknown_argument_exits_2_with_the_usage)
{
    char out[16384];
    int code = run_script("--bogus", out, sizeof(out));
    cr_assert_eq(code, 2, "exit %d: %s", code, out);
    cr_assert(strstr(out, "unknown argument '--bogus'") != NULL, "%s", out);
    cr_assert(strstr(out, "scripts/test.sh --help") != NULL, "no usage after the refusal: %s",
              out);
}

Test(test_script, help_prints_the_usage_without_the_spdx_line)
{
    char out[16384];
    int code = run_script("--help", out, sizeof(out));
    cr_assert_eq(code, 0, "exit %d: %s", code, out);
    cr_assert(strncmp(out, "Build p2pt and run its checks", 29) == 0, "%s", out);
    cr_assert(strstr(out, "SPDX") == NULL, "%s", out);
    cr_assert(strstr(out, "set -euo pipefail") == NULL, "%s", out);
}
