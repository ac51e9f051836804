/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a framework uses p2pt: load libp2pt.so by path, find the v1 table,
 * check its version, copy a buffer on a stream, check the bytes, explain any
 * failure with the plugin's own error text. Nothing here links p2pt or
 * libcuda: the few driver calls the example itself needs are looked up with
 * dlsym, as a framework that already has CUDA would simply call them.
 *
 *   dlopen_consumer [path/to/libp2pt.so]
 * Without a path it loads the libp2pt.so beside its own executable (where
 * the build puts both), whatever the working directory.
 * Exit status: 0 on success, otherwise the p2pt status code (7 = no driver)
 * or 100+ for a failure of the example's own CUDA calls or a wrong byte.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "p2pt_plugin.h"

/* The driver calls the example itself makes; each returns CUresult (an int). */
typedef int (*init_t)(unsigned flags);
typedef int (*dev_get_t)(int *dev, int ordinal);
typedef int (*retain_t)(void **ctx, int dev);
typedef int (*set_cur_t)(void *ctx);
typedef int (*alloc_t)(unsigned long long *ptr, size_t bytes);
typedef int (*htod_t)(unsigned long long dst, const void *src, size_t bytes);
typedef int (*dtoh_t)(void *dst, unsigned long long src, size_t bytes);
typedef int (*sync_t)(void *stream);
typedef int (*free_t)(unsigned long long ptr);

#define SYM(type, name) (type)(cuda ? dlsym(cuda, name) : NULL)

/* "<this executable's folder>/libp2pt.so"; the bare name (the loader's
 * search path) if Linux's /proc/self/exe cannot be read. A path relative
 * to the working directory would work from one folder only. */
static const char *library_beside_me(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(buf, '/');
    const char name[] = "/libp2pt.so";
    if (slash == NULL || (size_t)(slash - buf) + sizeof(name) > len)
        return "libp2pt.so";
    memcpy(slash, name, sizeof(name));
    return buf;
}

int main(int argc, char **argv)
{
    char here[4096];
    const char *path = argc > 1 ? argv[1] : library_beside_me(here, sizeof(here));
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (so == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return 100;
    }
    const p2pt_plugin_v1_t *p = dlsym(so, P2PT_PLUGIN_V1_SYMBOL);
    if (p == NULL || p->abi_version != 1 ||
        p->struct_size < offsetof(p2pt_plugin_v1_t, last_error) + sizeof(p->last_error)) {
        fprintf(stderr, "%s is not a p2pt v1 plugin\n", path);
        return 101;
    }
    void *ctx = NULL;
    p2pt_status st = p->init(NULL, &ctx);
    if (st != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt init failed: %s: %s\n", p->error_string(st), p->last_error(NULL));
        return (int)st;
    }

    /* The framework's side: a context and two buffers. */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    init_t cu_init = SYM(init_t, "cuInit");
    dev_get_t dev_get = SYM(dev_get_t, "cuDeviceGet");
    retain_t retain = SYM(retain_t, "cuDevicePrimaryCtxRetain");
    set_cur_t set_cur = SYM(set_cur_t, "cuCtxSetCurrent");
    alloc_t alloc = SYM(alloc_t, "cuMemAlloc_v2");
    htod_t htod = SYM(htod_t, "cuMemcpyHtoD_v2");
    dtoh_t dtoh = SYM(dtoh_t, "cuMemcpyDtoH_v2");
    sync_t sync = SYM(sync_t, "cuStreamSynchronize");
    free_t mfree = SYM(free_t, "cuMemFree_v2");
    if (!cu_init || !dev_get || !retain || !set_cur || !alloc || !htod || !dtoh || !sync ||
        !mfree) {
        const char *why = dlerror();
        fprintf(stderr, "example: driver entry points missing: %s\n", why ? why : "?");
        return 102;
    }
    const size_t n = (1u << 20) + 3;
    int dev = 0, rc = 0;
    void *cu_ctx = NULL;
    unsigned long long src = 0, dst = 0;
    unsigned char *in = malloc(n), *out = malloc(n);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; in != NULL && i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        in[i] = (unsigned char)(x >> 32);
    }
    if (!in || !out || cu_init(0) || dev_get(&dev, 0) || retain(&cu_ctx, dev) ||
        set_cur(cu_ctx) || alloc(&src, n) || alloc(&dst, n) || htod(src, in, n)) {
        fprintf(stderr, "example: CUDA setup failed\n");
        rc = 103;
        goto out;
    }
    st = p->copy_async(ctx, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, NULL);
    if (st != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt copy failed: %s: %s\n", p->error_string(st), p->last_error(ctx));
        rc = (int)st;
        goto out;
    }
    if (sync(NULL) || dtoh(out, dst, n) || memcmp(in, out, n) != 0) {
        fprintf(stderr, "example: the copied bytes differ\n");
        rc = 104;
        goto out;
    }
    p2pt_properties props = {sizeof(props)};
    p->get_properties(ctx, &props);
    printf("ok: copied %zu bytes with %s\n", n, props.transport);
out:
    if (src)
        mfree(src);
    if (dst)
        mfree(dst);
    free(in);
    free(out);
    p->finalize(ctx);
    p->finalize(ctx); /* safe twice */
    return rc;
}
