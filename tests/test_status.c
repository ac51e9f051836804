/*
 * Status codes: the numbers DESIGN.md fixes, one distinct non-empty string for
 * each, the same strings through the plugin table, and a safe answer for
 * values that are not statuses.
 */
#include <criterion/criterion.h>
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
    cr_assert_str_eq(p2pt_status_string((p2pt_status)9), "unknown status");
    cr_assert_str_eq(p2pt_status_string((p2pt_status)-1), "unknown status");
}
