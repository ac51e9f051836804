/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin as a framework sees it: a real dlopen of the built libp2pt.so
 * (RTLD_NOW | RTLD_LOCAL) finds p2pt_plugin_v1 with ABI 1, the right size,
 * name and version and every slot set; init(NULL) either works (GPU machine)
 * or fails with status 7 explained by last_error(NULL); the library exports
 * only p2pt_* names and needs no cu* or nvrtc* symbol at load time; the
 * example consumer runs and reports the same way.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "p2pt_plugin.h"
#include "run_test.h"

static const p2pt_plugin_v1_t *load(void **so)
{
    *so = dlopen(P2PT_SO_PATH, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(*so, "dlopen(%s): %s", P2PT_SO_PATH, dlerror());
    const p2pt_plugin_v1_t *p = dlsym(*so, P2PT_PLUGIN_V1_SYMBOL);
    cr_assert_not_null(p, "no %s in %s", P2PT_PLUGIN_V1_SYMBOL, P2PT_SO_PATH);
    return p;
}

Test(plugin, table_has_abi_1_its_size_and_every_slot)
{
    void *so;
    const p2pt_plugin_v1_t *p = load(&so);
    cr_assert_eq(p->abi_version, 1);
    cr_assert_eq(p->struct_size, sizeof(p2pt_plugin_v1_t));
    cr_assert_str_eq(p->name, "p2pt");
    cr_assert_str_eq(p->version, P2PT_VERSION_STRING);
    cr_assert(p->init && p->finalize && p->get_properties && p->prepare && p->copy_async &&
              p->error_string && p->last_error && p->peer_enable && p->topology);
    cr_assert_eq(p->finalize(NULL), P2PT_SUCCESS);
    cr_assert_str_eq(p->error_string(P2PT_NO_DRIVER), "no usable CUDA driver");
    dlclose(so);
}

Test(plugin, init_with_null_args_works_or_explains_a_missing_driver)
{
    void *so;
    const p2pt_plugin_v1_t *p = load(&so);
    void *ctx = NULL;
    unsetenv("P2P_TRANSPORT"); /* the GPU runs set it; this test is about defaults */
    p2pt_status st = p->init(NULL, &ctx);
    if (st == P2PT_SUCCESS) {
        cr_assert_not_null(ctx);
        p2pt_properties props = {sizeof(props)};
        cr_assert_eq(p->get_properties(ctx, &props), P2PT_SUCCESS);
        cr_assert_str_eq(props.transport, "ce");
        cr_assert_eq(p->finalize(ctx), P2PT_SUCCESS);
        cr_assert_eq(p->finalize(ctx), P2PT_SUCCESS, "finalize is safe twice");
    } else {
        cr_assert_eq(st, P2PT_NO_DRIVER, "init -> %d: %s", (int)st, p->last_error(NULL));
        cr_assert_null(ctx);
        cr_assert(strstr(p->last_error(NULL), "libcuda.so.1") != NULL, "%s", p->last_error(NULL));
    }
    dlclose(so);
}

/* Lines of `nm -D <flags>` on the library, one symbol name each. */
static char **nm_symbols(const char *flags, size_t *n)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "nm -D %s '%s'", flags, P2PT_SO_PATH);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f, "cannot run %s", cmd);
    char line[512];
    char **out = NULL;
    *n = 0;
    while (fgets(line, sizeof(line), f)) {
        char type = 0, name[400] = "";
        /* "<addr> T name@@VER" or "                 U name@GLIBC" */
        if (sscanf(line, "%*s %c %399s", &type, name) != 2 && sscanf(line, " %c %399s", &type, name) != 2)
            continue;
        char *at = strchr(name, '@');
        if (at)
            *at = '\0';
        if (type == 'A') /* the version node (P2PT_1), not a symbol */
            continue;
        out = realloc(out, (*n + 1) * sizeof(*out));
        out[(*n)++] = strdup(name);
    }
    cr_assert_eq(pclose(f), 0, "%s failed", cmd);
    return out;
}

Test(plugin, exports_only_p2pt_names_and_needs_no_cuda_symbol)
{
    size_t n = 0;
    char **defined = nm_symbols("--defined-only", &n);
    cr_assert(n >= 8, "only %zu defined symbols", n);
    bool has_table = false;
    for (size_t i = 0; i < n; i++) {
        cr_expect(strncmp(defined[i], "p2pt_", 5) == 0, "exported non-p2pt symbol %s", defined[i]);
        cr_expect(strncmp(defined[i], "p2pt__", 6) != 0, "exported internal symbol %s", defined[i]);
        has_table |= strcmp(defined[i], "p2pt_plugin_v1") == 0;
        free(defined[i]);
    }
    free(defined);
    cr_assert(has_table, "p2pt_plugin_v1 is not exported");
    char **undefined = nm_symbols("--undefined-only", &n);
    for (size_t i = 0; i < n; i++) {
        cr_expect(strncmp(undefined[i], "cu", 2) != 0 && strncmp(undefined[i], "nvrtc", 5) != 0,
                  "load-time dependency on %s", undefined[i]);
        free(undefined[i]);
    }
    free(undefined);
}

/* Run the example on the built library with `env` before it (a shell
 * prefix, may be ""), collecting its output; returns its exit code. */
static int run_consumer(const char *env, char *out, size_t len)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s '%s' '%s' 2>&1", env, P2PT_CONSUMER_PATH, P2PT_SO_PATH);
    int code = run_cmd(cmd, out, len);
    cr_assert(code >= 0, "consumer did not exit normally: %s", out);
    return code;
}

Test(plugin, the_example_consumer_runs_or_explains)
{
    char out[2048];
    int code = run_consumer("", out, sizeof(out));
    if (code == 0)
        cr_assert(strstr(out, "ok: copied") != NULL, "%s", out);
    else
        cr_assert(code == P2PT_NO_DRIVER &&
                      strstr(out, "p2pt init failed: no usable CUDA driver: ") != NULL &&
                      strstr(out, "libcuda.so.1") != NULL,
                  "exit %d: %s", code, out);
}

Test(plugin, the_example_consumer_finds_the_library_beside_it_from_any_directory)
{
    /* No path given, run from /: a library found reaches init, which
     * refuses the transport (status 4) before it looks for a driver. */
    char cmd[2048], out[2048];
    snprintf(cmd, sizeof(cmd), "cd / && P2P_TRANSPORT=bogus '%s' 2>&1", P2PT_CONSUMER_PATH);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    cr_assert(WIFEXITED(status), "consumer did not exit normally: %s", out);
    cr_assert_eq(WEXITSTATUS(status), P2PT_INVALID_ARGUMENT, "exit %d: %s", WEXITSTATUS(status),
                 out);
}

Test(plugin, the_example_consumer_explains_a_bad_transport_with_status_4)
{
    /* Runs the same everywhere: configuration is checked before the driver. */
    char out[2048];
    int code = run_consumer("P2P_TRANSPORT=bogus", out, sizeof(out));
    cr_assert_eq(code, P2PT_INVALID_ARGUMENT, "exit %d: %s", code, out);
    cr_assert(strstr(out, "p2pt init failed: invalid argument: ") && strstr(out, "bogus"), "%s",
              out);
}
