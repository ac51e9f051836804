/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the tests of memory shared between processes (test_share_*.c
 * over the fake driver, test_ranks.c): the fake driver's hold on events
 * (work "still running"), a handle's windows, shareable memory made through
 * the tests' driver table (a VMM range of allocations side by side, pool
 * memory), an export that must succeed, the check of the last error's
 * text, and whole reads and writes of a pipe or socket (how a forked child
 * reports). Static inline so each test file stays self-contained.
 */
#ifndef P2PT_SHARE_TEST_H
#define P2PT_SHARE_TEST_H

#include <unistd.h>

#include "gpu_test.h"

/* While on, every event of the fake driver is "not done": synchronizing one
 * (or a context) waits until it is turned off. */
static inline void st_hold(int on)
{
    void (*f)(int) = (void (*)(int))gt_fake_sym("p2pt_fake_hold_events");
    f(on);
}

/* Calls waiting behind the hold now. */
static inline unsigned long st_held(void)
{
    unsigned long (*f)(void) = (unsigned long (*)(void))gt_fake_sym("p2pt_fake_held_waiters");
    return f();
}

/* Windows registered on `h` for `device`. */
static inline int st_windows(const p2pt_handle *h, int device)
{
    const struct p2pt_window_set *ws = p2pt__windows(&h->windows, device);
    return ws != NULL ? ws->n : 0;
}

/* How many of them hold another GPU's memory (a device batch then takes at
 * most the policy's `link peer` CTAs). */
static inline int st_peer_windows(const p2pt_handle *h, int device)
{
    const struct p2pt_window_set *ws = p2pt__windows(&h->windows, device);
    return ws != NULL ? ws->n_peer : 0;
}

/* n allocations of the granularity each, side by side in one reservation on
 * `device`, readable and writable there, made with handle types `types`. */
struct st_vmm {
    CUdeviceptr va;
    size_t size, piece;
    int n;
    CUmemGenericAllocationHandle h[8];
};

static inline struct st_vmm st_vmm_make(int device, int n, unsigned types)
{
    struct st_vmm v;
    memset(&v, 0, sizeof(v));
    cr_assert(n >= 1 && n <= 8);
    cr_assert_not_null(tcu.cuMemCreate, "the driver has no virtual memory management");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = (CUmemAllocationHandleType)types;
    GT_CHECK(tcu.cuMemGetAllocationGranularity(&v.piece, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    v.n = n;
    v.size = (size_t)n * v.piece;
    GT_CHECK(tcu.cuMemAddressReserve(&v.va, v.size, 0, 0, 0));
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int k = 0; k < n; k++) {
        GT_CHECK(tcu.cuMemCreate(&v.h[k], v.piece, &prop, 0));
        GT_CHECK(tcu.cuMemMap(v.va + (size_t)k * v.piece, v.piece, 0, v.h[k], 0));
        GT_CHECK(tcu.cuMemSetAccess(v.va + (size_t)k * v.piece, v.piece, &a, 1));
    }
    return v;
}

static inline void st_vmm_free(struct st_vmm *v)
{
    for (int k = 0; k < v->n; k++) {
        tcu.cuMemUnmap(v->va + (size_t)k * v->piece, v->piece);
        tcu.cuMemRelease(v->h[k]);
    }
    if (v->va)
        tcu.cuMemAddressFree(v->va, v->size);
    memset(v, 0, sizeof(*v));
}

/* `bytes` of pool memory on `device`: from a pool made with `types`, or the
 * device's default pool with types 0. */
struct st_pool {
    CUmemoryPool pool;
    bool own;
    CUdeviceptr p;
};

static inline struct st_pool st_pool_make(int device, size_t bytes, unsigned types)
{
    struct st_pool p;
    memset(&p, 0, sizeof(p));
    cr_assert_not_null(tcu.cuMemAllocFromPoolAsync, "the driver has no memory pools");
    if (types == 0) {
        CUdevice dev;
        GT_CHECK(tcu.cuDeviceGet(&dev, device));
        GT_CHECK(tcu.cuDeviceGetDefaultMemPool(&p.pool, dev));
    } else {
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = (CUmemAllocationHandleType)types;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = device;
        GT_CHECK(tcu.cuMemPoolCreate(&p.pool, &props));
        p.own = true;
    }
    GT_CHECK(tcu.cuMemAllocFromPoolAsync(&p.p, bytes, p.pool, NULL));
    GT_CHECK(tcu.cuStreamSynchronize(NULL));
    return p;
}

static inline void st_pool_free(struct st_pool *p)
{
    if (p->p)
        tcu.cuMemFreeAsync(p->p, NULL);
    tcu.cuStreamSynchronize(NULL);
    if (p->own)
        tcu.cuMemPoolDestroy(p->pool);
    memset(p, 0, sizeof(*p));
}

/* Export [base, base + bytes) into blobs[0..cap), which must succeed; the
 * count. */
static inline size_t st_export(p2pt_handle *h, const void *base, size_t bytes,
                               p2pt_share_blob *blobs, size_t cap)
{
    size_t n = cap;
    GT_OK(p2pt_share_export(h, base, bytes, blobs, &n));
    return n;
}

/* The last error's text holds `needle`. */
static inline void st_expect_text(const char *needle)
{
    cr_expect(strstr(p2pt__last_error_text(), needle) != NULL, "\"%s\" not in: %s", needle,
              p2pt__last_error_text());
}

/* Write all of `len` bytes, or read them: false on a short count. */
static inline bool st_write(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t w = write(fd, c, len);
        if (w <= 0)
            return false;
        c += w;
        len -= (size_t)w;
    }
    return true;
}

static inline bool st_read(int fd, void *p, size_t len)
{
    char *c = p;
    while (len > 0) {
        ssize_t r = read(fd, c, len);
        if (r <= 0)
            return false;
        c += r;
        len -= (size_t)r;
    }
    return true;
}

#endif /* P2PT_SHARE_TEST_H */
