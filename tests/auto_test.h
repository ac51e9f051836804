/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the tests of P2P_TRANSPORT=auto (test_auto.c,
 * test_auto_host.c, and the batch tests that route through a table of
 * their own): a table file holding given text, a handle that reads
 * it, a refused init, a device's architecture, and the properties that
 * count what each engine ran.
 * Static inline so each test file stays self-contained.
 */
#ifndef P2PT_AUTO_TEST_H
#define P2PT_AUTO_TEST_H

#include <unistd.h>

#include "gpu_test.h"

/* A table file in /tmp holding `text`; its path in `path` (unlink after). */
static inline void table_file(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/p2pt-auto-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp");
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
}

/* p2pt_init with transport "auto" and, when `table` is not NULL, that file
 * as P2P_TRANSPORT_AUTO_TABLE. */
static inline p2pt_status init_auto(const char *table, p2pt_logger_t logger, p2pt_handle **h)
{
    char options[128];
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", table ? table : "");
    p2pt_init_args a = {sizeof(a), logger, "auto", table ? options : NULL};
    return p2pt_init(&a, h);
}

/* p2pt_init with `table` must fail with status 4 and no handle; its text. */
static inline const char *init_refused(const char *table)
{
    p2pt_handle *h = NULL;
    p2pt_status st = init_auto(table, NULL, &h);
    const char *msg = p2pt_last_error(NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, msg);
    cr_assert_null(h);
    return msg;
}

/* The device's architecture, as a table names it (major * 10 + minor). */
static inline int device_cc(int ordinal)
{
    CUdevice d;
    int major = 0, minor = 0;
    GT_CHECK(tcu.cuDeviceGet(&d, ordinal));
    GT_CHECK(tcu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
    GT_CHECK(tcu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
    return major * 10 + minor;
}

#endif /* P2PT_AUTO_TEST_H */
