/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Misspelt variables: a P2P_TRANSPORT* name p2pt does not read, or a P2P_*
 * name close to one it does, gets a WARN at init naming it and the closest
 * known name (before the driver is looked for, so on any machine); names
 * p2pt reads, and P2P_* names nothing like them, get none.
 * Criterion runs each test in its own process, so setenv is local to it.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt.h"

static char warnings[4096];

static void capture(p2pt_log_level level, unsigned long flags, const char *file, int line,
                    const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    if (level != P2PT_LOG_WARN)
        return;
    size_t used = strlen(warnings);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warnings + used, sizeof(warnings) - used, fmt, ap);
    va_end(ap);
    strncat(warnings, "\n", sizeof(warnings) - strlen(warnings) - 1);
}

/* init with the capturing logger; the driver's absence does not matter. */
static void init_once(void)
{
    warnings[0] = '\0';
    p2pt_init_args args = {.size = sizeof(args), .logger = capture};
    p2pt_handle *h = NULL;
    p2pt_status st = p2pt_init(&args, &h);
    cr_assert(st == P2PT_SUCCESS || st == P2PT_NO_DRIVER, "init: %d %s", (int)st,
              p2pt_last_error(NULL));
    p2pt_finalize(h);
}

Test(env_names, a_misspelt_transport_variable_is_warned_about_with_the_closest_name)
{
    setenv("P2P_TRANSPORT_CHUNK", "abc", 1);
    init_once();
    cr_assert(strstr(warnings, "P2P_TRANSPORT_CHUNK is set") != NULL &&
                  strstr(warnings, "did you mean P2P_TRANSPORT_CHUNK_BYTES?") != NULL,
              "%s", warnings);
}

Test(env_names, a_p2p_name_close_to_a_known_one_is_warned_about)
{
    setenv("P2P_CUDA_LIBARY", "/x/libcuda.so.1", 1);
    setenv("P2P_NVRTC_LIB", "/x/libnvrtc.so", 1);
    init_once();
    cr_assert(strstr(warnings, "P2P_CUDA_LIBARY is set") &&
                  strstr(warnings, "did you mean P2P_CUDA_LIBRARY?"), "%s", warnings);
    cr_assert(strstr(warnings, "P2P_NVRTC_LIB is set") &&
                  strstr(warnings, "did you mean P2P_NVRTC_LIBRARY?"), "%s", warnings);
}

Test(env_names, known_names_and_unrelated_p2p_names_are_not_warned_about)
{
    setenv("P2P_TRANSPORT_STAGES", "2", 1);
    setenv("P2P_SOMETHING_ELSE_ENTIRELY", "1", 1);
    init_once();
    cr_assert(strstr(warnings, "P2P_TRANSPORT_STAGES") == NULL, "%s", warnings);
    cr_assert(strstr(warnings, "P2P_SOMETHING_ELSE_ENTIRELY") == NULL, "%s", warnings);
}
