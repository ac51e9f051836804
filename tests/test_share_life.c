/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory shared between processes, its whole life over the fake driver
 * (tests/fault/fake_cuda.c: device memory is shared memory, so what one
 * process writes another reads). Another process (fork) exports
 * cuMemAlloc, VMM and pool memory; this one imports it for device 0, reads
 * what the exporter wrote at the exported offset, writes, and the exporter
 * finds the bytes. Proven besides: one mapping per export and device,
 * counted, each import needing its close (the properties count them); a
 * close waits for the work queued on the window (events held "running":
 * the close does not return, and does not unmap, until they finish), and
 * for the streams that took work since its import only; no event is
 * recorded while no import is open, nor for captured work; a VMM import
 * keeps the memory after the exporter exits; an import of another GPU's
 * export is a window of another GPU's memory (device batches take the
 * link's grid) and a copy into it a push (out of it a pull), of the same
 * GPU's neither; an import's window is refused by p2pt_window_unregister
 * and removed by the import's close; this process's own blobs are used
 * where their memory is only while their export stands; a legacy handle another
 * context opened is status 5 naming the remedy; memory that cannot be
 * exported is status 6 with the reason; counting, a short array, the same
 * range again, unexport and finalize do what p2pt.h says.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

#include "elsewhere.h"
#include "p2pt_plugin.h"
#include "share_test.h"

#define RANGE 65536u
/* The fake driver's VMM granularity, and a VMM export over three of its
 * allocations. */
#define FAKE_GRANULE ((size_t)2 << 20)
#define VMM_BYTES (2 * FAKE_GRANULE + RANGE)

static unsigned char theirs(size_t i) { return (unsigned char)(i * 13 + 1); }
static unsigned char ours(size_t i) { return (unsigned char)(i * 7 + 3); }

static void fill(CUdeviceptr at, size_t n, unsigned char (*f)(size_t))
{
    unsigned char *h = malloc(n);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++)
        h[i] = f(i);
    GT_CHECK(tcu.cuMemcpyHtoD(at, h, n));
    free(h);
}

static bool holds(CUdeviceptr at, size_t n, unsigned char (*f)(size_t))
{
    unsigned char *h = malloc(n);
    bool ok = h != NULL && tcu.cuMemcpyDtoH(h, at, n) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < n; i++)
        ok = h[i] == f(i);
    free(h);
    return ok;
}

/* ------------------------------------------------------- the exporter */

struct exported {
    size_t n;
    p2pt_share_blob b[4];
};

/* The exporter process: memory of `kind` ('L' cuMemAlloc, 'V' three VMM
 * allocations, 'P' a shareable pool) on `device`, RANGE bytes of it filled
 * with theirs() and exported; then, for each byte from the parent: 'c'
 * answers whether the range holds ours(), 'r' ends the export and exports
 * the range again (its new blobs sent), 'x' exits at once (its handle
 * finalized). No Criterion assertions: a forked
 * child answers through the pipe. */
static int exporter(char kind, int device, int out, int in)
{
    CUdevice dev;
    CUcontext ctx;
    if (tcu.cuDeviceGet(&dev, device) || tcu.cuDevicePrimaryCtxRetain(&ctx, dev) ||
        tcu.cuCtxSetCurrent(ctx))
        return 3;
    p2pt_init_args a = {sizeof(a), NULL, "ce", NULL};
    p2pt_handle *h = NULL;
    if (p2pt_init(&a, &h) != P2PT_SUCCESS)
        return 4;
    CUdeviceptr base = 0;
    if (kind == 'L') {
        CUdeviceptr m;
        if (tcu.cuMemAlloc(&m, 1 << 20))
            return 5;
        base = m + 4096;
    } else if (kind == 'V') {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        size_t g = 0;
        CUdeviceptr va;
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if (tcu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ||
            tcu.cuMemAddressReserve(&va, 3 * g, 0, 0, 0))
            return 5;
        for (int k = 0; k < 3; k++) {
            CUmemGenericAllocationHandle ph;
            if (tcu.cuMemCreate(&ph, g, &prop, 0) || tcu.cuMemMap(va + k * g, g, 0, ph, 0) ||
                tcu.cuMemSetAccess(va + k * g, g, &acc, 1) || tcu.cuMemRelease(ph))
                return 5;
        }
        /* From 4 KiB into the first allocation to past the start of the
         * third: three blobs. */
        base = va + 4096;
        struct exported e = {4, {{{0}}}};
        unsigned char *h2 = malloc(VMM_BYTES);
        for (size_t i = 0; h2 != NULL && i < VMM_BYTES; i++)
            h2[i] = theirs(i);
        if (g != FAKE_GRANULE || h2 == NULL || tcu.cuMemcpyHtoD(base, h2, VMM_BYTES) ||
            p2pt_share_export(h, (void *)base, VMM_BYTES, e.b, &e.n) ||
            !st_write(out, &e, sizeof(e)))
            return 6;
        free(h2);
        goto serve;
    } else {
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = device;
        CUmemoryPool pool;
        if (tcu.cuMemPoolCreate(&pool, &pp) ||
            tcu.cuMemAllocFromPoolAsync(&base, RANGE, pool, NULL) ||
            tcu.cuStreamSynchronize(NULL))
            return 5;
    }
    unsigned char *h1 = malloc(RANGE);
    for (size_t i = 0; h1 != NULL && i < RANGE; i++)
        h1[i] = theirs(i);
    struct exported e = {4, {{{0}}}};
    if (h1 == NULL || tcu.cuMemcpyHtoD(base, h1, RANGE) ||
        p2pt_share_export(h, (void *)base, RANGE, e.b, &e.n) || !st_write(out, &e, sizeof(e)))
        return 6;
    free(h1);
serve:;
    char c;
    while (read(in, &c, 1) == 1) {
        if (c == 'c') {
            char v = holds(base, RANGE, ours) ? 'y' : 'n';
            if (write(out, &v, 1) != 1)
                return 7;
        } else if (c == 'r') {
            struct exported again = {4, {{{0}}}};
            if (p2pt_share_unexport(h, (void *)base) ||
                p2pt_share_export(h, (void *)base, kind == 'V' ? VMM_BYTES : RANGE, again.b,
                                  &again.n) ||
                !st_write(out, &again, sizeof(again)))
                return 8;
        } else if (c == 'x') {
            p2pt_finalize(h);
            return 0;
        }
    }
    p2pt_finalize(h);
    return 0;
}

struct peer {
    pid_t pid;
    int to, from;
    struct exported e;
};

static struct peer start_exporter(char kind, int device)
{
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    struct peer p;
    p.pid = fork();
    cr_assert(p.pid >= 0);
    if (p.pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(exporter(kind, device, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    p.to = down[1];
    p.from = up[0];
    if (!st_read(p.from, &p.e, sizeof(p.e))) {
        int status = 0;
        waitpid(p.pid, &status, 0);
        cr_assert_fail("the exporter process failed (exit %d)",
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return p;
}

/* Whether the exporter finds ours() in its range. */
static bool exporter_sees_ours(struct peer *p)
{
    char v = 0;
    cr_assert_eq(write(p->to, "c", 1), 1);
    cr_assert(st_read(p->from, &v, 1), "the exporter did not answer");
    return v == 'y';
}

static void end_exporter(struct peer *p)
{
    int status = 0;
    close(p->to);
    cr_assert_eq(waitpid(p->pid, &status, 0), p->pid);
    close(p->from);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the exporter exited %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static p2pt_handle *fake_handle(void)
{
    gt_use_fake_driver();
    return gt_handle("ce");
}

/* Import the peer's export for device 0; the window and counters follow. */
static void *import_theirs(p2pt_handle *h, struct peer *p, p2pt_share_import_t **imp)
{
    void *ptr = NULL;
    int windows = st_windows(h, 0);
    GT_OK(p2pt_share_import(h, 0, p->e.b, p->e.n, &ptr, imp));
    cr_assert_not_null(ptr);
    cr_expect_eq(st_windows(h, 0), windows + 1, "the import is a window of device 0");
    return ptr;
}


/* Every import closed: nothing open, mapped or registered. Then the
 * exporter ends, and the handle. */
static void closed_and_done(p2pt_handle *h, struct peer *p)
{
    p2pt_properties pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 0);
    cr_expect_eq(pr.share_mappings, 0);
    cr_expect_eq(st_windows(h, 0), 0);
    end_exporter(p);
    p2pt_finalize(h);
}

/* The three kinds from another process (its GPU `device`): read what it
 * wrote at the offset, write, and it finds the bytes. The import holds
 * another GPU's memory exactly when `device` is not 0, whatever the driver
 * names for a legacy handle opened in device 0's context. */
static void round_trip(char kind, size_t pieces, int device)
{
    p2pt_handle *h = fake_handle();
    struct peer p = start_exporter(kind, device);
    cr_assert_eq(p.e.n, pieces, "the export has %zu blobs", p.e.n);
    p2pt_share_import_t *imp = NULL;
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)import_theirs(h, &p, &imp);
    cr_expect_eq(st_peer_windows(h, 0), device != 0,
                 "an export of GPU %d imported for GPU 0 %s another GPU's memory", device,
                 device != 0 ? "holds" : "does not hold");
    /* A copy from GPU 0's memory into it pushes to the exporter's GPU, as
     * the same copy does in one process. */
    CUdeviceptr mine;
    GT_CHECK(tcu.cuMemAlloc(&mine, RANGE));
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_copy(h, (void *)(uintptr_t)at, (void *)(uintptr_t)mine, RANGE, NULL, &c));
    cr_expect_str_eq(c.path, device != 0 ? "push" : "local", "%s", c.reason);
    GT_OK(p2pt_explain_copy(h, (void *)(uintptr_t)mine, (void *)(uintptr_t)at, RANGE, NULL, &c));
    cr_expect_str_eq(c.path, device != 0 ? "pull" : "local", "%s", c.reason);
    GT_CHECK(tcu.cuMemFree(mine));
    size_t n = kind == 'V' ? VMM_BYTES : RANGE;
    cr_expect(holds(at, n, theirs), "the import reads what the exporter wrote");
    fill(at, RANGE, ours);
    cr_expect(exporter_sees_ours(&p), "the exporter reads what the import wrote");
    p2pt_properties pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 1);
    cr_expect_eq(pr.share_mappings, 1);
    GT_OK(p2pt_share_close(h, imp));
    cr_expect_eq(p2pt__elsewhere_find((uint64_t)at), -1, "the closed import's range is let go");
    cr_expect_eq(gt_props(h).share_imports_closed, 1);
    closed_and_done(h, &p);
}

Test(share, legacy_memory_of_another_process_is_imported_at_its_offset)
{
    unsigned long opens = 0;
    gt_use_fake_driver();
    opens = gt_fake_calls("cuIpcOpenMemHandle");
    round_trip('L', 1, 1);
    cr_expect_eq(gt_fake_calls("cuIpcOpenMemHandle"), opens + 1);
    cr_expect_eq(gt_fake_calls("cuIpcCloseMemHandle") > 0, 1);
}

Test(share, vmm_memory_of_another_process_crosses_allocation_by_allocation)
{
    gt_use_fake_driver();
    unsigned long maps = gt_fake_calls("cuMemMap");
    round_trip('V', 3, 1);
    cr_expect_eq(gt_fake_calls("cuMemMap"), maps + 3, "one mapping per allocation");
}

Test(share, pool_memory_of_another_process_is_imported)
{
    gt_use_fake_driver();
    unsigned long pools = gt_fake_calls("cuMemPoolImportFromShareableHandle");
    round_trip('P', 1, 1);
    cr_expect_eq(gt_fake_calls("cuMemPoolImportFromShareableHandle"), pools + 1);
}

Test(share, an_export_of_the_importing_gpu_is_not_another_gpus_memory)
{
    round_trip('L', 1, 0); /* two processes on one GPU */
    round_trip('V', 3, 0);
}

/* An exporter that ends its export and exports the range again hands out
 * new blobs (a new token). Imported while the first import is open, the
 * same range of the same legacy or pool allocation shares that import's
 * mapping (the driver would hand out the same addresses, whose window
 * stands); VMM memory is mapped anew. Every import needs its close. */
static void export_again(char kind, const char *opens_with)
{
    p2pt_handle *h = fake_handle();
    struct peer p = start_exporter(kind, 1);
    p2pt_share_import_t *i1 = NULL, *i2 = NULL;
    CUdeviceptr at1 = (CUdeviceptr)(uintptr_t)import_theirs(h, &p, &i1);
    cr_assert_eq(write(p.to, "r", 1), 1);
    struct exported again;
    cr_assert(st_read(p.from, &again, sizeof(again)), "the exporter did not export again");
    cr_assert_eq(again.n, p.e.n);
    cr_assert_neq(memcmp(again.b, p.e.b, sizeof(again.b[0])), 0, "a new export, new blobs");
    unsigned long opens = gt_fake_calls(opens_with);
    void *at2 = NULL;
    GT_OK(p2pt_share_import(h, 0, again.b, again.n, &at2, &i2));
    p2pt_properties pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 2);
    if (kind == 'V') {
        cr_expect_neq((CUdeviceptr)(uintptr_t)at2, at1, "VMM memory is mapped anew");
        cr_expect_eq(pr.share_mappings, 2);
        cr_expect_neq(i2, i1);
    } else {
        cr_expect_eq((CUdeviceptr)(uintptr_t)at2, at1, "the open mapping, shared");
        cr_expect_eq(i2, i1);
        cr_expect_eq(pr.share_mappings, 1);
        cr_expect_eq(gt_fake_calls(opens_with), opens, "%s not called again", opens_with);
    }
    size_t n = kind == 'V' ? VMM_BYTES : RANGE;
    cr_expect(holds((CUdeviceptr)(uintptr_t)at2, n, theirs), "the second import reads theirs");
    GT_OK(p2pt_share_close(h, i1));
    cr_expect(holds((CUdeviceptr)(uintptr_t)at2, n, theirs), "one close leaves the other mapped");
    GT_OK(p2pt_share_close(h, i2));
    closed_and_done(h, &p);
}

Test(share, a_range_exported_again_shares_the_open_legacy_or_pool_mapping_and_vmm_maps_anew)
{
    gt_use_fake_driver();
    export_again('L', "cuIpcOpenMemHandle");
    export_again('P', "cuMemPoolImportPointer");
    export_again('V', "cuMemMap");
}

Test(share, a_vmm_import_keeps_the_memory_after_the_exporter_exits)
{
    p2pt_handle *h = fake_handle(), *h2 = gt_handle("ce");
    struct peer p = start_exporter('V', 1);
    p2pt_share_import_t *imp = NULL, *imp2 = NULL;
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)import_theirs(h, &p, &imp);
    /* A second handle maps the same memory apart: a write through one
     * mapping read through the other shows one memory still shared, where
     * a read through the pointer written would show only that pointer. */
    CUdeviceptr at2 = (CUdeviceptr)(uintptr_t)import_theirs(h2, &p, &imp2);
    cr_assert_neq(at2, at, "each handle's import is a mapping of its own");
    cr_assert_eq(write(p.to, "x", 1), 1);
    int status = 0;
    cr_assert_eq(waitpid(p.pid, &status, 0), p.pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_expect(holds(at, RANGE, theirs), "the bytes are still there after the exporter exited");
    fill(at, RANGE, ours);
    cr_expect(holds(at2, RANGE, ours), "a write through one import is read through the other");
    GT_OK(p2pt_share_close(h, imp));
    GT_OK(p2pt_share_close(h2, imp2));
    close(p.to);
    close(p.from);
    p2pt_finalize(h2);
    p2pt_finalize(h);
}

Test(share, a_legacy_handle_another_context_opened_is_status_5_naming_the_remedy)
{
    p2pt_handle *h = fake_handle();
    struct peer p = start_exporter('L', 1);
    setenv("P2PT_FAKE_IPC_ALREADY_MAPPED", "1", 1);
    void *ptr = NULL;
    p2pt_share_import_t *imp = NULL;
    cr_assert_eq(p2pt_share_import(h, 0, p.e.b, p.e.n, &ptr, &imp), P2PT_INVALID_USAGE);
    cr_expect(strstr(p2pt_last_error(NULL), "CUDA_ERROR_ALREADY_MAPPED") != NULL &&
                  strstr(p2pt_last_error(NULL), "p2pt_window_register") != NULL,
              "%s", p2pt_last_error(NULL));
    cr_expect_null(imp);
    cr_expect_eq(st_windows(h, 0), 0);
    cr_expect_eq(gt_props(h).share_mappings, 0);
    unsetenv("P2PT_FAKE_IPC_ALREADY_MAPPED");
    end_exporter(&p);
    p2pt_finalize(h);
}

/* ---------------------------------------------------- in one process */

Test(share, importing_twice_shares_one_mapping_and_each_import_needs_its_close)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob b[2];
    size_t n = st_export(h, (void *)(uintptr_t)v.va, v.size, b, 2);
    cr_assert_eq(n, 2);
    void *p1 = NULL, *p2 = NULL;
    p2pt_share_import_t *i1 = NULL, *i2 = NULL;
    unsigned long reserves = gt_fake_calls("cuMemAddressReserve");
    GT_OK(p2pt_share_import(h, 0, b, n, &p1, &i1));
    GT_OK(p2pt_share_import(h, 0, b, n, &p2, &i2));
    cr_expect_eq(p1, p2);
    cr_expect_eq(i1, i2);
    cr_expect_eq(gt_fake_calls("cuMemAddressReserve"), reserves + 1, "one mapping");
    cr_expect_neq((uintptr_t)p1, (uintptr_t)v.va, "VMM memory is mapped anew, also here");
    p2pt_properties pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 2);
    cr_expect_eq(pr.share_mappings, 1);
    cr_expect_eq(pr.share_exports, 1);
    unsigned long unmaps = gt_fake_calls("cuMemUnmap");
    GT_OK(p2pt_share_close(h, i1));
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps, "the first close unmaps nothing");
    cr_expect_eq(st_windows(h, 0), 1);
    GT_OK(p2pt_share_close(h, i2));
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps + 2, "the last close unmaps both allocations");
    cr_expect_eq(st_windows(h, 0), 0);
    pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 0);
    cr_expect_eq(pr.share_imports_closed, 2);
    cr_expect_eq(pr.share_mappings, 0);
    cr_assert_eq(p2pt_share_close(h, i1), P2PT_INVALID_ARGUMENT);
    cr_expect(strstr(p2pt_last_error(NULL), "not an open import of this handle") != NULL);
    cr_assert_eq(p2pt_share_close(h, NULL), P2PT_INVALID_ARGUMENT);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

/* An import's window is the import's: p2pt_window_unregister refuses it
 * (status 5 naming p2pt_share_close), and the close still removes it,
 * unmaps, and leaves nothing counted. */
Test(share, an_imports_window_is_refused_by_unregister_and_removed_by_its_close)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob b[2];
    size_t n = st_export(h, (void *)(uintptr_t)v.va, v.size, b, 2);
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(h, 0, b, n, &p, &imp));
    cr_assert_eq(p2pt_window_unregister(h, 0, p), P2PT_INVALID_USAGE);
    cr_expect(strstr(p2pt_last_error(NULL), "is the window of an import of device 0") != NULL,
              "%s", p2pt_last_error(NULL));
    cr_expect(strstr(p2pt_last_error(NULL), "p2pt_share_close") != NULL);
    cr_expect_eq(st_windows(h, 0), 1);
    /* A window of the application's own beside it still comes and goes. */
    struct gt_buf m = gt_alloc(RANGE);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)m.ptr, RANGE));
    GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)m.ptr));
    unsigned long unmaps = gt_fake_calls("cuMemUnmap");
    GT_OK(p2pt_share_close(h, imp));
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps + 2, "the close unmaps both allocations");
    cr_expect_eq(st_windows(h, 0), 0);
    p2pt_properties pr = gt_props(h);
    cr_expect_eq(pr.share_imports_open, 0);
    cr_expect_eq(pr.share_mappings, 0);
    p2pt_finalize(h);
    gt_free(&m);
    st_vmm_free(&v);
}

struct closer {
    p2pt_handle *h;
    p2pt_share_import_t *imp;
    p2pt_status st;
    _Atomic int done;
};

static void *close_in_thread(void *arg)
{
    struct closer *c = arg;
    c->st = p2pt_share_close(c->h, c->imp);
    atomic_store(&c->done, 1);
    return NULL;
}

static CUstream new_stream(void)
{
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

Test(share, a_close_waits_for_the_work_queued_on_the_window)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    struct gt_buf src = gt_alloc(4096);
    p2pt_share_blob b[1];
    st_export(h, (void *)(uintptr_t)v.va, v.size, b, 1);
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(h, 0, b, 1, &p, &imp));
    CUstream s = new_stream();
    /* Work on the window that has not finished: the fake driver's events
     * stay unfinished while held. */
    st_hold(1);
    GT_OK(p2pt_copy_async(h, p, (void *)(uintptr_t)src.ptr, 4096, s));
    p2pt_copy_desc d = {(char *)p + 4096, (void *)(uintptr_t)src.ptr, 100};
    GT_OK(p2pt_copy_batch_async(h, &d, 1, s));
    unsigned long unmaps = gt_fake_calls("cuMemUnmap");
    struct closer c = {h, imp, P2PT_INTERNAL_ERROR, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, close_in_thread, &c), 0);
    for (int i = 0; i < 200 && st_held() == 0; i++)
        usleep(5000);
    cr_expect_eq(st_held(), 1, "the close waits on the stream's event");
    usleep(100000);
    cr_expect_eq(atomic_load(&c.done), 0, "the close returned while the work was running");
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps, "the close unmapped under running work");
    cr_expect_eq(st_windows(h, 0), 0, "the window is gone first: no new work reaches it");
    st_hold(0);
    pthread_join(t, NULL);
    cr_expect_eq(c.st, P2PT_SUCCESS, "%d", (int)c.st);
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps + 1);
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

Test(share, a_close_waits_for_the_streams_that_took_work_since_its_import)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    struct gt_buf src = gt_alloc(4096);
    p2pt_share_blob a[1], b[1];
    st_export(h, (void *)(uintptr_t)v.va, v.piece, a, 1);
    st_export(h, (void *)(uintptr_t)(v.va + v.piece), v.piece, b, 1);
    void *pa = NULL, *pb = NULL;
    p2pt_share_import_t *ia = NULL, *ib = NULL;
    CUstream s1 = new_stream(), s2 = new_stream(), s3 = new_stream();
    GT_OK(p2pt_share_import(h, 0, a, 1, &pa, &ia));
    /* s1 takes work before b's import, s2 and s3 after. */
    GT_OK(p2pt_copy_async(h, pa, (void *)(uintptr_t)src.ptr, 64, s1));
    GT_OK(p2pt_share_import(h, 0, b, 1, &pb, &ib));
    GT_OK(p2pt_copy_async(h, pb, (void *)(uintptr_t)src.ptr, 64, s2));
    GT_OK(p2pt_copy_async(h, pb, (void *)(uintptr_t)src.ptr, 64, s3));
    GT_OK(p2pt_copy_async(h, pb, (void *)(uintptr_t)src.ptr, 64, s3));
    unsigned long syncs = gt_fake_calls("cuEventSynchronize");
    GT_OK(p2pt_share_close(h, ib));
    cr_expect_eq(gt_fake_calls("cuEventSynchronize"), syncs + 2, "b's close waits for s2 and s3");
    syncs = gt_fake_calls("cuEventSynchronize");
    GT_OK(p2pt_share_close(h, ia));
    cr_expect_eq(gt_fake_calls("cuEventSynchronize"), syncs + 3, "a's close waits for all three");
    tcu.cuStreamDestroy(s1);
    tcu.cuStreamDestroy(s2);
    tcu.cuStreamDestroy(s3);
    gt_free(&src);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

Test(share, no_event_is_recorded_without_an_open_import_nor_for_captured_work)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    struct gt_buf src = gt_alloc(4096), dst = gt_alloc(4096);
    CUstream s = new_stream();
    unsigned long records = gt_fake_calls("cuEventRecord");
    GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)dst.ptr, (void *)(uintptr_t)src.ptr, 64, s));
    p2pt_share_blob b[1];
    st_export(h, (void *)(uintptr_t)v.va, v.size, b, 1);
    GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)dst.ptr, (void *)(uintptr_t)src.ptr, 64, s));
    cr_expect_eq(gt_fake_calls("cuEventRecord"), records, "an export alone marks nothing");
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(h, 0, b, 1, &p, &imp));
    GT_OK(p2pt_copy_async(h, p, (void *)(uintptr_t)src.ptr, 64, s));
    cr_expect_eq(gt_fake_calls("cuEventRecord"), records + 1, "one event per operation");
    /* Device 1's streams are not marked: the import is device 0's. */
    gt_use_device(1);
    CUstream s1 = new_stream();
    struct gt_buf src1 = gt_alloc(4096), dst1 = gt_alloc(4096);
    GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)dst1.ptr, (void *)(uintptr_t)src1.ptr, 64, s1));
    cr_expect_eq(gt_fake_calls("cuEventRecord"), records + 1);
    tcu.cuStreamDestroy(s1);
    gt_free(&src1);
    gt_free(&dst1);
    gt_use_device(0);
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GT_OK(p2pt_copy_async(h, p, (void *)(uintptr_t)src.ptr, 64, s));
    CUgraph g;
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    tcu.cuGraphDestroy(g);
    cr_expect_eq(gt_fake_calls("cuEventRecord"), records + 1, "captured work is not marked");
    GT_OK(p2pt_share_close(h, imp));
    GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)dst.ptr, (void *)(uintptr_t)src.ptr, 64, s));
    cr_expect_eq(gt_fake_calls("cuEventRecord"), records + 1, "nothing after the last close");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    gt_free(&dst);
    st_vmm_free(&v);
}

Test(share, memory_that_cannot_be_exported_is_status_6_with_the_reason)
{
    p2pt_handle *h = fake_handle();
    p2pt_share_blob b[4];
    size_t n = 4;
    struct st_case {
        const void *p;
        const char *why;
    };
    struct gt_buf pinned = gt_alloc_host(4096);
    static char pageable[4096];
    struct st_pool dflt = st_pool_make(0, 65536, 0);
    struct st_vmm plain = st_vmm_make(0, 1, CU_MEM_HANDLE_TYPE_NONE);
    struct st_vmm fdable = st_vmm_make(0, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob fb[1];
    st_export(h, (void *)(uintptr_t)fdable.va, fdable.size, fb, 1);
    void *imported = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(h, 0, fb, 1, &imported, &imp));
    const struct st_case cases[] = {
        {(void *)(uintptr_t)pinned.ptr, "pinned host memory"},
        {pageable, "not memory CUDA knows"},
        {(void *)(uintptr_t)dflt.p, "pool without a shareable handle type"},
        {(void *)(uintptr_t)plain.va, "without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"},
        {imported, "imported from process"},
    };
    int k = (int)P2PT_ARRAY_LEN(cases);
    for (int i = 0; i < k; i++) {
        n = 4;
        p2pt_status st = p2pt_share_export(h, cases[i].p, 4096, b, &n);
        cr_expect_eq(st, P2PT_NOT_SUPPORTED, "case %d (%s) -> %d: %s", i, cases[i].why, (int)st,
                     p2pt_last_error(NULL));
        cr_expect(strstr(p2pt_last_error(NULL), cases[i].why) != NULL, "case %d: %s", i,
                  p2pt_last_error(NULL));
        /* Counting says the same. */
        cr_expect_eq(p2pt_share_export(h, cases[i].p, 4096, NULL, &n),
                     P2PT_NOT_SUPPORTED, "case %d counted", i);
    }
    cr_expect_eq(gt_props(h).share_exports, 1, "only the shareable range is exported");
    GT_OK(p2pt_share_close(h, imp));
    p2pt_finalize(h);
    st_vmm_free(&plain);
    st_vmm_free(&fdable);
    st_pool_free(&dflt);
    gt_free(&pinned);
}

Test(share, export_counts_first_and_a_short_array_is_status_4_naming_the_count)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    size_t n = 0;
    unsigned long exports = gt_fake_calls("cuMemExportToShareableHandle");
    GT_OK(p2pt_share_export(h, (void *)(uintptr_t)(v.va + 100), v.size - 200, NULL, &n));
    cr_expect_eq(n, 3);
    cr_expect_eq(gt_fake_calls("cuMemExportToShareableHandle"), exports, "counting exports nothing");
    cr_expect_eq(gt_props(h).share_exports, 0);
    p2pt_share_blob b[3];
    n = 2;
    cr_assert_eq(p2pt_share_export(h, (void *)(uintptr_t)(v.va + 100), v.size - 200, b, &n),
                 P2PT_INVALID_ARGUMENT);
    cr_expect_eq(n, 3, "the count needed comes back");
    cr_expect(strstr(p2pt_last_error(NULL), "needs 3 blobs") != NULL, "%s", p2pt_last_error(NULL));
    cr_expect_eq(gt_props(h).share_exports, 0);
    cr_assert_eq(p2pt_share_export(h, (void *)(uintptr_t)v.va, 100, b, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_share_export(h, NULL, 100, b, &n), P2PT_INVALID_ARGUMENT);
    n = 3;
    cr_assert_eq(p2pt_share_export(h, (void *)(uintptr_t)v.va, 0, b, &n), P2PT_INVALID_ARGUMENT);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

Test(share, a_range_past_its_allocation_is_refused_at_export)
{
    p2pt_handle *h = fake_handle();
    struct gt_buf m = gt_alloc(RANGE);
    p2pt_share_blob b[1];
    size_t n = 1;
    cr_assert_eq(p2pt_share_export(h, (void *)(uintptr_t)m.ptr, RANGE + GT_GUARD + 1, b, &n),
                 P2PT_INVALID_ARGUMENT);
    cr_expect(strstr(p2pt_last_error(NULL), "runs past the end of its allocation") != NULL, "%s",
              p2pt_last_error(NULL));
    p2pt_finalize(h);
    gt_free(&m);
}

Test(share, the_same_range_exported_again_gives_the_same_blobs)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob a[2], b[2];
    st_export(h, (void *)(uintptr_t)v.va, v.size, a, 2);
    st_export(h, (void *)(uintptr_t)v.va, v.size, b, 2);
    cr_expect_eq(memcmp(a, b, sizeof(a)), 0);
    cr_expect_eq(gt_props(h).share_exports, 1);
    size_t n = 2;
    cr_assert_eq(p2pt_share_export(h, (void *)(uintptr_t)v.va, v.piece, b, &n),
                 P2PT_INVALID_USAGE);
    cr_expect(strstr(p2pt_last_error(NULL), "unexport it first") != NULL);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

Test(share, unexport_ends_the_export_and_the_last_one_stops_the_server)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob a[1], b[1];
    st_export(h, (void *)(uintptr_t)v.va, v.piece, a, 1);
    st_export(h, (void *)(uintptr_t)(v.va + v.piece), v.piece, b, 1);
    GT_OK(p2pt_share_unexport(h, (void *)(uintptr_t)v.va));
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    cr_assert_eq(p2pt_share_import(h, 0, a, 1, &p, &imp), P2PT_INVALID_USAGE);
    cr_expect(strstr(p2pt_last_error(NULL), "has no such export") != NULL, "%s",
              p2pt_last_error(NULL));
    GT_OK(p2pt_share_import(h, 0, b, 1, &p, &imp));
    GT_OK(p2pt_share_unexport(h, (void *)(uintptr_t)(v.va + v.piece)));
    cr_expect_eq(gt_props(h).share_exports, 0);
    /* The import made before stays valid. */
    fill((CUdeviceptr)(uintptr_t)p, 4096, ours);
    cr_expect(holds(v.va + v.piece, 4096, ours));
    void *q = NULL;
    p2pt_share_import_t *again = NULL;
    GT_OK(p2pt_share_close(h, imp));
    cr_assert_eq(p2pt_share_import(h, 0, b, 1, &q, &again), P2PT_SYSTEM_ERROR);
    cr_expect(strstr(p2pt_last_error(NULL), "no descriptor server answers") != NULL, "%s",
              p2pt_last_error(NULL));
    cr_assert_eq(p2pt_share_unexport(h, (void *)(uintptr_t)v.va), P2PT_INVALID_ARGUMENT);
    p2pt_finalize(h);
    st_vmm_free(&v);
}

Test(share, finalize_closes_every_import_and_ends_every_export)
{
    p2pt_handle *h = fake_handle();
    struct st_vmm v = st_vmm_make(0, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob b[2];
    st_export(h, (void *)(uintptr_t)v.va, v.size, b, 2);
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(h, 0, b, 2, &p, &imp));
    GT_OK(p2pt_share_import(h, 0, b, 2, &p, &imp));
    unsigned long unmaps = gt_fake_calls("cuMemUnmap"), frees = gt_fake_calls("cuMemAddressFree");
    GT_OK(p2pt_finalize(h));
    cr_expect_eq(gt_fake_calls("cuMemUnmap"), unmaps + 2);
    cr_expect_eq(gt_fake_calls("cuMemAddressFree"), frees + 1);
    cr_assert_eq(p2pt_share_close(h, imp), P2PT_INVALID_USAGE, "a finalized handle");
    p2pt_handle *h2 = gt_handle("ce");
    cr_assert_eq(p2pt_share_import(h2, 0, b, 2, &p, &imp), P2PT_SYSTEM_ERROR,
                 "the finalized handle's server is gone: %s", p2pt_last_error(NULL));
    p2pt_finalize(h2);
    st_vmm_free(&v);
}

Test(share, this_process_own_legacy_and_pool_memory_is_used_where_it_is)
{
    p2pt_handle *h = fake_handle();
    struct gt_buf m = gt_alloc(RANGE);
    struct st_pool pool = st_pool_make(0, RANGE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob lb[1], pb[1];
    st_export(h, (void *)(uintptr_t)(m.ptr + 16), 1000, lb, 1);
    st_export(h, (void *)(uintptr_t)(pool.p + 32), 1000, pb, 1);
    void *lp = NULL, *pp = NULL;
    p2pt_share_import_t *li = NULL, *pi = NULL;
    unsigned long opens = gt_fake_calls("cuIpcOpenMemHandle"),
                  pools = gt_fake_calls("cuMemPoolImportFromShareableHandle");
    GT_OK(p2pt_share_import(h, 0, lb, 1, &lp, &li));
    GT_OK(p2pt_share_import(h, 0, pb, 1, &pp, &pi));
    cr_expect_eq(lp, (void *)(uintptr_t)(m.ptr + 16));
    cr_expect_eq(pp, (void *)(uintptr_t)(pool.p + 32));
    cr_expect_eq(gt_fake_calls("cuIpcOpenMemHandle"), opens);
    cr_expect_eq(gt_fake_calls("cuMemPoolImportFromShareableHandle"), pools);
    cr_expect_eq(st_windows(h, 0), 2);
    GT_OK(p2pt_share_close(h, li));
    GT_OK(p2pt_share_close(h, pi));
    cr_expect_eq(st_windows(h, 0), 0);
    p2pt_finalize(h);
    st_pool_free(&pool);
    gt_free(&m);
}

/* Blobs of this process name memory used where it is, so only while their
 * export stands: another handle of the process uses them the same way, and
 * once the export ended (the memory freed, another allocation perhaps in
 * its place) an import is status 5 and maps nothing. */
Test(share, this_process_own_blobs_are_used_only_while_their_export_stands)
{
    p2pt_handle *h = fake_handle(), *other = gt_handle("ce");
    struct gt_buf m = gt_alloc(RANGE);
    struct st_pool pool = st_pool_make(0, RANGE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    p2pt_share_blob lb[1], pb[1];
    st_export(h, (void *)(uintptr_t)(m.ptr + 16), 1000, lb, 1);
    st_export(h, (void *)(uintptr_t)(pool.p + 32), 1000, pb, 1);
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(other, 0, lb, 1, &p, &imp));
    cr_expect_eq(p, (void *)(uintptr_t)(m.ptr + 16), "another handle of this process");
    GT_OK(p2pt_share_close(other, imp));
    GT_OK(p2pt_share_unexport(h, (void *)(uintptr_t)(m.ptr + 16)));
    GT_OK(p2pt_share_unexport(h, (void *)(uintptr_t)(pool.p + 32)));
    unsigned long opens = gt_fake_calls("cuIpcOpenMemHandle");
    const p2pt_share_blob *ended[] = {lb, pb};
    const char *kinds[] = {"cuMemAlloc memory", "pool memory"};
    for (int k = 0; k < 2; k++) {
        p = (void *)1;
        imp = (p2pt_share_import_t *)1;
        cr_assert_eq(p2pt_share_import(other, 0, ended[k], 1, &p, &imp), P2PT_INVALID_USAGE,
                     "%s", p2pt_last_error(NULL));
        cr_expect(strstr(p2pt_last_error(NULL), kinds[k]) != NULL, "%s", p2pt_last_error(NULL));
        cr_expect(strstr(p2pt_last_error(NULL), "that export has ended") != NULL);
        cr_expect_null(p);
        cr_expect_null(imp);
    }
    cr_expect_eq(gt_fake_calls("cuIpcOpenMemHandle"), opens);
    cr_expect_eq(st_windows(other, 0), 0);
    p2pt_properties pr = gt_props(other);
    cr_expect_eq(pr.share_imports_open, 0);
    cr_expect_eq(pr.share_mappings, 0);
    p2pt_finalize(other);
    p2pt_finalize(h);
    st_pool_free(&pool);
    gt_free(&m);
}

Test(share, the_plugin_table_carries_the_share_calls)
{
    const p2pt_plugin_v1_t *t = &p2pt_plugin_v1;
    cr_assert(t->struct_size > offsetof(p2pt_plugin_v1_t, share_close));
    cr_assert(t->share_export && t->share_unexport && t->share_import && t->share_close);
    size_t n = 0;
    cr_expect_eq(t->share_export(NULL, (void *)16, 16, NULL, &n), P2PT_INVALID_ARGUMENT);
    cr_expect_eq(t->share_close(NULL, NULL), P2PT_INVALID_ARGUMENT);
}
