/*
 * No usable driver: a missing library, the toolkit's stub library, and (on a
 * machine without a driver) the default libcuda.so.1 each make init return
 * status 7 with a text that names the library and what went wrong; nothing
 * crashes, and the error is explained to a caller that has no handle yet.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
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
    /* A second init gives the same answer (the outcome is kept). */
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER);
    cr_assert(strstr(p2pt_last_error(NULL), "/nonexistent/libcuda.so.1") != NULL);
}

Test(no_driver, the_toolkit_stub_is_status_7_naming_stub_library)
{
    if (access(P2PT_STUB_LIBCUDA, R_OK) != 0)
        cr_skip_test("no stub library at %s", P2PT_STUB_LIBCUDA);
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
        cr_skip_test("a CUDA driver is installed here: the no-driver path needs a machine without one");
    }
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_NO_DRIVER);
    cr_assert(strstr(p2pt_last_error(NULL), "libcuda.so.1") != NULL, "%s", p2pt_last_error(NULL));
}
