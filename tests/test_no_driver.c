/* SPDX-License-Identifier: Apache-2.0 */
/*
 * No usable driver: a missing library, the toolkit's stub library, a library
 * that is not a CUDA driver at all, and (on a machine without a driver) the
 * default libcuda.so.1 each make init return status 7 with a text that names
 * the library and what went wrong; nothing crashes, and the error is
 * explained to a caller that has no handle yet. p2pt_init_args.options are
 * checked before the driver is looked for, and then used to find it.
 * Criterion runs each test in its own process: the driver load is once per
 * process, so every test here starts with none attempted.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "p2pt_plugin.h"

Test(no_driver, missing_library_is_status_7_naming_it)
{
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER);
    cr_assert_null(h);
    cr_assert(strstr(p2pt_last_error(NULL), "/nonexistent/libcuda.so.1") != NULL, "%s",
              p2pt_last_error(NULL));
    /* The hint is about the setting that named the path, not the driver. */
    cr_assert(strstr(p2pt_last_error(NULL), "P2P_CUDA_LIBRARY names this path") != NULL &&
                  strstr(p2pt_last_error(NULL), "is the NVIDIA driver installed") == NULL,
              "%s", p2pt_last_error(NULL));
    /* A second init gives the same answer (the outcome is kept). */
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER);
    cr_assert(strstr(p2pt_last_error(NULL), "/nonexistent/libcuda.so.1") != NULL);
}

Test(no_driver, the_toolkit_stub_is_status_7_naming_stub_library)
{
    if (access(P2PT_STUB_LIBCUDA, R_OK) != 0)
        cr_skip_test("no stub libcuda: none at %s", P2PT_STUB_LIBCUDA);
    setenv("P2P_CUDA_LIBRARY", P2PT_STUB_LIBCUDA, 1);
    void *ctx = NULL;
    cr_assert_eq(p2pt_plugin_v1.init(NULL, &ctx), P2PT_NO_DRIVER);
    cr_assert_null(ctx);
    const char *msg = p2pt_plugin_v1.last_error(NULL);
    cr_assert(strstr(msg, "CUDA_ERROR_STUB_LIBRARY") != NULL, "%s", msg);
}

Test(no_driver, default_library_missing_is_status_7_naming_libcuda)
{
    void *probe = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (probe != NULL) {
        dlclose(probe);
        cr_skip_test("needs no CUDA driver: one is installed here");
    }
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER);
    cr_assert(strstr(p2pt_last_error(NULL), "libcuda.so.1") != NULL, "%s", p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "is the NVIDIA driver installed? P2P_CUDA_LIBRARY "
                                            "can name another path") != NULL,
              "%s", p2pt_last_error(NULL));
}

Test(no_driver, a_library_that_is_not_a_driver_is_status_7_saying_so)
{
    /* libm is on every glibc system and exports neither cuInit nor
     * cuGetProcAddress_v2. */
    setenv("P2P_CUDA_LIBRARY", "libm.so.6", 1);
    p2pt_handle *h = (p2pt_handle *)0x1;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER, "%s", p2pt_last_error(NULL));
    cr_assert_null(h);
    const char *msg = p2pt_last_error(NULL);
    cr_assert(strstr(msg, "libm.so.6 is not a CUDA driver library") != NULL &&
                  strstr(msg, "no cuInit") != NULL && strstr(msg, "P2P_CUDA_LIBRARY") != NULL,
              "%s", msg);
    /* The plugin table explains it the same way to a caller without a ctx. */
    void *ctx = NULL;
    cr_assert_eq(p2pt_plugin_v1.init(NULL, &ctx), P2PT_NO_DRIVER);
    cr_assert_null(ctx);
    cr_assert(strstr(p2pt_plugin_v1.last_error(NULL), "is not a CUDA driver library") != NULL,
              "%s", p2pt_plugin_v1.last_error(NULL));
}

Test(no_driver, init_checks_options_before_the_driver_then_loads_the_library_they_name)
{
    /* Any machine, GPU or not: the options name a driver that cannot load. */
    unsetenv("P2P_CUDA_LIBRARY");
    unsetenv("P2P_TRANSPORT");
    p2pt_handle *h = (p2pt_handle *)0x1;
    p2pt_init_args a = {sizeof(a), NULL, NULL,
                        "P2P_CUDA_LIBRARY=/nonexistent/options/libcuda.so.1 "
                        "P2P_TRANSPORT_STAGES=99"};
    /* 1. A bad option: status 4 naming it, before any driver is looked for. */
    cr_assert_eq(p2pt_init(&a, &h), P2PT_INVALID_ARGUMENT, "%s", p2pt_last_error(NULL));
    cr_assert_null(h);
    const char *msg = p2pt_last_error(NULL);
    cr_assert(strstr(msg, "p2pt_init_args.options P2P_TRANSPORT_STAGES") && strstr(msg, "99"),
              "%s", msg);
    a.options = "P2P_CUDA_LIBRARY=/nonexistent/options/libcuda.so.1 BOGUS_NAME=1";
    cr_assert_eq(p2pt_init(&a, &h), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "BOGUS_NAME") != NULL, "%s", p2pt_last_error(NULL));
    /* 2. Good options: accepted, and the driver load uses the library they
     * name (status 7 naming it). The load happens once per process, so this
     * also shows the two failed calls above never tried to load a driver:
     * had they loaded libcuda.so.1 on a GPU machine, this call would succeed. */
    a.options = "P2P_CUDA_LIBRARY=/nonexistent/options/libcuda.so.1,P2P_TRANSPORT_STAGES=2";
    cr_assert_eq(p2pt_init(&a, &h), P2PT_NO_DRIVER, "%s", p2pt_last_error(NULL));
    cr_assert_null(h);
    cr_assert(strstr(p2pt_last_error(NULL), "/nonexistent/options/libcuda.so.1") != NULL, "%s",
              p2pt_last_error(NULL));
    /* 3. The same through the plugin table. */
    void *ctx = NULL;
    cr_assert_eq(p2pt_plugin_v1.init(&a, &ctx), P2PT_NO_DRIVER);
    cr_assert_null(ctx);
    cr_assert(strstr(p2pt_plugin_v1.last_error(NULL), "/nonexistent/options/libcuda.so.1") != NULL,
              "%s", p2pt_plugin_v1.last_error(NULL));
}

Test(no_driver, options_from_a_caller_built_before_the_field_are_not_read)
{
    /* A framework compiled against the first release passes a smaller struct:
     * whatever follows it in memory is not options. */
    p2pt_init_args old;
    memset(&old, 0, sizeof(old));
    old.size = offsetof(p2pt_init_args, options);
    old.options = "BOGUS_NAME=1"; /* beyond `size`: must be ignored */
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(&old, &h), P2PT_NO_DRIVER, "%s", p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "/nonexistent/libcuda.so.1") != NULL, "%s",
              p2pt_last_error(NULL));
}
