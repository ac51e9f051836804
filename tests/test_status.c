/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Status codes: the numbers the ABI fixes, one distinct non-empty string for
 * each, the same strings through the plugin table, a safe answer for
 * values that are not statuses, and a last-error text kept per thread.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "p2pt_plugin.h"

Test(status, numbers_match_the_abi)
{
    cr_expect_eq(P2PT_SUCCESS, 0);
    cr_expect_eq(P2PT_CUDA_ERROR, 1);
    cr_expect_eq(P2PT_SYSTEM_ERROR, 2);
    cr_expect_eq(P2PT_INTERNAL_ERROR, 3);
    cr_expect_eq(P2PT_INVALID_ARGUMENT, 4);
    cr_expect_eq(P2PT_INVALID_USAGE, 5);
    cr_expect_eq(P2PT_NOT_SUPPORTED, 6);
    cr_expect_eq(P2PT_NO_DRIVER, 7);
    cr_expect_eq(P2PT_COMPILE_ERROR, 8);
}

Test(status, every_code_has_a_distinct_string_also_through_the_plugin)
{
    for (int i = 0; i <= 8; i++) {
        const char *s = p2pt_status_string((p2pt_status)i);
        cr_assert(s != NULL && s[0] != '\0', "status %d has no string", i);
        cr_assert_str_neq(s, "unknown status", "status %d", i);
        cr_assert_str_eq(p2pt_plugin_v1.error_string((p2pt_status)i), s);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(p2pt_status_string((p2pt_status)j), s, "%d and %d share", i, j);
    }
}

Test(status, unknown_values_get_a_safe_string)
{
    const int bad[] = {9, -1, 100, 0x7fffffff};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_str_eq(p2pt_status_string((p2pt_status)bad[i]), "unknown status", "%d", bad[i]);
        cr_assert_str_eq(p2pt_plugin_v1.error_string((p2pt_status)bad[i]), "unknown status",
                         "%d through the plugin", bad[i]);
    }
}

/* The last-error text belongs to the thread that failed: a framework's
 * progress thread never sees (or overwrites) another thread's explanation. */
static char other_before[64], other_after[256];

static void *fail_elsewhere(void *arg)
{
    (void)arg;
    snprintf(other_before, sizeof(other_before), "%s", p2pt_last_error(NULL));
    p2pt_prepare(NULL, 0);
    snprintf(other_after, sizeof(other_after), "%s", p2pt_last_error(NULL));
    return NULL;
}

Test(status, last_error_text_is_per_thread)
{
    char buf[64] = {0};
    cr_assert_eq(p2pt_copy_async(NULL, buf, buf + 32, 8, NULL), P2PT_INVALID_ARGUMENT);
    char mine[256];
    snprintf(mine, sizeof(mine), "%s", p2pt_last_error(NULL));
    cr_assert(mine[0] != '\0', "a failure left no text");
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fail_elsewhere, NULL), 0);
    pthread_join(t, NULL);
    cr_assert_str_eq(other_before, "", "a new thread sees another thread's error");
    cr_assert(other_after[0] != '\0', "the other thread's failure left no text");
    cr_assert_str_neq(other_after, mine);
    cr_assert_str_eq(p2pt_last_error(NULL), mine, "another thread overwrote this one's text");
}
