/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One pass over every public entry point of p2pt, for the fault-injection
 * loop (fault_loop.c): init with each transport, properties, topology, peer
 * enable, prepare, single copies on the local, push, pull and host paths,
 * host and device batches (one from pinned host memory), blocks by a
 * mapping in GPU memory, a block layout swapped from host and GPU memory,
 * windows, explain,
 * finalize; `auto` with a table file that has every list, the pinned host
 * memory ones included, so that its routing makes every driver call it can
 * (the pointer queries of a host batch among them); then the same steps
 * again on the same handles, which must work once an injected fault has
 * cleared; then copies and batches captured into a CUDA graph, and on a
 * fresh handle a capture before prepare. Memory shared between processes:
 * a forked exporter (another process, as another rank would be) exports
 * cuMemAlloc, VMM and pool memory; each pass exports this process's own,
 * imports both (the VMM descriptors crossing by the exporter's socket),
 * copies into and out of the imports, closes and unexports them. Signals:
 * to a semaphore on device 0 and to one on the peer, a device batch that
 * ends with both, and waits for device 0's (each for the signals whose
 * calls succeeded, so that a failed signal cannot leave a wait hanging on a
 * GPU), in each pass and in the captured graph. Every call prints one line:
 *
 *   CALL <step> <status> <context-kept 0|1> <last error, newlines as " | ">
 *
 * and the pass ends with "END". The buffers, streams and contexts it needs
 * it makes itself through the driver that P2P_CUDA_LIBRARY names (the fake
 * driver on a CPU, the fault shim or libcuda.so.1 on a GPU), with the fault
 * schedule paused, so only p2pt's own driver calls are counted and failed.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "p2pt.h"

#define BIG (1u << 20)

static void (*pause_faults)(int);
static PFN_cuCtxGetCurrent_v4000 get_current;
static CUcontext ctx0;
static int steps;
static int buffered; /* output held in memory while files are size-limited */

static void paused(int on)
{
    if (pause_faults != NULL)
        pause_faults(on);
}

static void report(const char *step, p2pt_status st, CUcontext before)
{
    CUcontext after = NULL;
    paused(1);
    get_current(&after);
    paused(0);
    char text[2048];
    snprintf(text, sizeof(text), "%s", p2pt_last_error(NULL));
    for (char *c = text; *c != '\0'; c++)
        if (*c == '\n')
            *c = '|';
    printf("CALL %s %d %d %s\n", step, (int)st, after == before, st == P2PT_SUCCESS ? "" : text);
    if (!buffered)
        fflush(stdout);
    steps++;
}

/* The call `expr`, reported as `step`; its status lands in `*out`. */
#define CALL_TO(out, step, expr)                                               \
    do {                                                                       \
        CUcontext before_ = NULL;                                              \
        paused(1);                                                             \
        get_current(&before_);                                                 \
        paused(0);                                                             \
        p2pt_status st_ = (expr);                                              \
        report(step, st_, before_);                                            \
        *(out) = st_;                                                          \
    } while (0)
#define CALL(step, expr)                                                       \
    do {                                                                       \
        p2pt_status ignored_;                                                  \
        CALL_TO(&ignored_, step, expr);                                        \
    } while (0)

static void quiet_logger(p2pt_log_level level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    (void)level, (void)flags, (void)file, (void)line;
}

#define SETUP(call)                                                            \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            fprintf(stderr, "workload: %s failed: %d\n", #call, (int)r_);      \
            return 2;                                                          \
        }                                                                      \
    } while (0)

struct bufs {
    char *d0a, *d0b, *d1, *pinned, *pageable;
    p2pt_copy_desc *ddescs;
    uint32_t *dcount;
    void *ws;
    int64_t *bmap; /* blocks by a mapping in GPU memory: 2 rows */
    void *bws;
    void *sem0, *sem1; /* semaphores on device 0 and on the peer device */
};

/* Blobs of one process's three exports. */
struct exports {
    size_t n_legacy, n_vmm, n_pool;
    p2pt_share_blob legacy[1], vmm[4], pool[1];
};

/* The exporter process's blobs (zero counts if it failed), and this
 * process's own shareable memory: a VMM range of two allocations side by
 * side, and pool memory. */
static struct exports theirs;
static char *own_vmm, *own_pool;
static size_t granularity;

/* Signals that reached device 0's semaphore through calls that succeeded,
 * not yet waited for: the count the next wait asks. */
static uint32_t pending;

/* A signal (or a batch that ends with one to sem0): counted once its call
 * succeeds. */
static void signalled(p2pt_status st)
{
    if (st == P2PT_SUCCESS)
        pending++;
}

/* A wait for every counted signal. With none counted (an injected fault
 * failed the signal) it asks for 0, which p2pt refuses before enqueuing
 * anything: the call is still made, as the loop compares every run's calls
 * with the baseline's, and no wait on a GPU waits for a signal that was
 * never sent. */
static void wait_pending(p2pt_handle *h, const char *step, void *sem, CUstream s)
{
    p2pt_status st;
    CALL_TO(&st, step, p2pt_wait_async(h, sem, pending, s));
    if (st == P2PT_SUCCESS)
        pending = 0;
}

/* Everything the steps use, on one handle: `tag` names the transport and the
 * pass in each step's name. */
/* The second device of the peer steps: 1, or 0 where there is one GPU. */
static int peer_device = 1;

static void steps_on(p2pt_handle *h, const char *tag, struct bufs *b, CUstream s)
{
    char name[96];
#define STEP(what) (snprintf(name, sizeof(name), "%s/%s", tag, what), name)
    p2pt_properties props;
    memset(&props, 0, sizeof(props));
    props.size = sizeof(props);
    CALL(STEP("properties"), p2pt_get_properties(h, &props));
    p2pt_topology_t *topo = calloc(1, sizeof(*topo));
    if (topo != NULL) {
        topo->size = sizeof(*topo);
        CALL(STEP("topology"), p2pt_topology(h, topo));
        free(topo);
    }
    CALL(STEP("peer_enable"), p2pt_peer_enable(h, 0, peer_device));
    CALL(STEP("prepare0"), p2pt_prepare(h, 0));
    CALL(STEP("prepare1"), p2pt_prepare(h, peer_device));
    CALL(STEP("copy_local"), p2pt_copy_async(h, b->d0b, b->d0a, 4096, s));
    CALL(STEP("copy_local_big"), p2pt_copy_async(h, b->d0b, b->d0a, BIG, s));
    CALL(STEP("copy_local_misaligned"), p2pt_copy_async(h, b->d0b + 1, b->d0a, 8192, s));
    CALL(STEP("copy_push"), p2pt_copy_async(h, b->d1, b->d0a, 65536, s));
    CALL(STEP("copy_pull"), p2pt_copy_async(h, b->d0b, b->d1, 65536, s));
    CALL(STEP("copy_pinned"), p2pt_copy_async(h, b->d0b, b->pinned, 4096, s));
    CALL(STEP("copy_to_pinned"), p2pt_copy_async(h, b->pinned, b->d0a, 4096, s));
    CALL(STEP("copy_pageable"), p2pt_copy_async(h, b->d0b, b->pageable, 4096, s));
    CALL(STEP("copy_legacy_stream"), p2pt_copy_async(h, b->d0b, b->d0a, 4096, NULL));
    p2pt_copy_desc descs[3] = {{b->d0b, b->d0a, 4096},
                               {b->d1 + 8192, b->d0a + 8192, 4096},
                               {b->d0b + 65536, b->d1 + 65536, 1000}};
    CALL(STEP("batch"), p2pt_copy_batch_async(h, descs, 3, s));
    p2pt_copy_desc from_host[2] = {{b->d0b, b->d0a, 0}, {b->d0b + 4096, b->pinned, 2048}};
    CALL(STEP("batch_pinned"), p2pt_copy_batch_async(h, from_host, 2, s));
    p2pt_choice choice;
    memset(&choice, 0, sizeof(choice));
    choice.size = sizeof(choice);
    CALL(STEP("explain_copy"), p2pt_explain_copy(h, b->d1, b->d0a, 65536, s, &choice));
    CALL(STEP("explain_batch"), p2pt_explain_batch(h, descs, 3, s, &choice));
    CALL(STEP("window_d0a"), p2pt_window_register(h, 0, b->d0a, BIG));
    CALL(STEP("window_d0b"), p2pt_window_register(h, 0, b->d0b, BIG));
    CALL(STEP("batch_in_windows"), p2pt_copy_batch_async(h, descs, 1, s));
    /* More pieces than the kernel parameters carry in one small launch: tma
     * stages them through its ring (pinned memory, a copy, events). */
    static p2pt_copy_desc many[200];
    for (int i = 0; i < 200; i++)
        many[i] = (p2pt_copy_desc){b->d0b + 128 * i, b->d0a + 128 * i, 64};
    CALL(STEP("batch_ring"), p2pt_copy_batch_async(h, many, 200, s));
    CALL(STEP("batch_device"),
         p2pt_copy_batch_device_async(h, b->ddescs, b->dcount, 4, b->ws, s));
    p2pt_block_layer layers[2] = {{sizeof(layers[0]), b->d0b, b->d0a, 4096, 16, 16},
                                  {sizeof(layers[0]), b->d0b + 65536, b->d0a + 65536, 100, 8, 8}};
    p2pt_status st;
    CALL(STEP("explain_signal"), p2pt_explain_signal(h, b->sem1, s, &choice));
    CALL_TO(&st, STEP("signal"), p2pt_signal_async(h, b->sem0, s));
    signalled(st);
    CALL(STEP("signal_peer"), p2pt_signal_async(h, b->sem1, s));
    CALL(STEP("explain_wait"), p2pt_explain_wait(h, b->sem0, 1, s, &choice));
    wait_pending(h, STEP("wait"), b->sem0, s);
    void *const both[2] = {b->sem0, b->sem1};
    CALL_TO(&st, STEP("batch_device_signal"),
            p2pt_copy_batch_device_signal_async(h, b->ddescs, b->dcount, 4, b->ws, both, 2, s));
    signalled(st);
    wait_pending(h, STEP("wait_batch"), b->sem0, s);
    CALL(STEP("blocks_device"),
         p2pt_copy_blocks_device_async(h, layers, 2, b->bmap, 2, b->bws, s));
    /* The same layers as a layout, swapped with the same rows from host
     * and from GPU memory (the second locates the layers once). */
    p2pt_block_layout *lay = NULL;
    CALL(STEP("block_layout_create"), p2pt_block_layout_create(layers, 2, &lay));
    const int64_t rows[4] = {0, 3, 5, 7};
    p2pt_batch_status rec;
    CALL(STEP("block_layout_swap_host"), p2pt_block_layout_swap(h, lay, rows, 2, 0, &rec, s));
    CALL(STEP("block_layout_swap_gpu"), p2pt_block_layout_swap(h, lay, b->bmap, 2,
                                                               P2PT_BLOCK_MAPPING_ON_GPU,
                                                               b->bws, s));
    CALL(STEP("block_layout_destroy"), p2pt_block_layout_destroy(lay));
    CALL(STEP("unwindow_d0a"), p2pt_window_unregister(h, 0, b->d0a));
    CALL(STEP("unwindow_d0b"), p2pt_window_unregister(h, 0, b->d0b));

    /* Memory shared between processes: this process's exports, its own and
     * the exporter's imported for device 0, work on the windows (so that a
     * close waits for it), the closes and unexports. A failed import leaves
     * its pointer NULL: the steps that use it then fail too, in this pass. */
    struct exports own;
    void *p_vmm = NULL, *p_legacy = NULL, *p_their_vmm = NULL, *p_again = NULL,
         *p_their_legacy = NULL, *p_their_pool = NULL;
    p2pt_share_import_t *i_vmm = NULL, *i_legacy = NULL, *i_their_vmm = NULL, *i_again = NULL,
                        *i_their_legacy = NULL, *i_their_pool = NULL;
    memset(&own, 0, sizeof(own));
    CALL(STEP("share_count"), p2pt_share_export(h, own_vmm, granularity, NULL, &own.n_vmm));
    own.n_legacy = 1;
    CALL(STEP("share_export_legacy"),
         p2pt_share_export(h, b->d0a + 4096, 8192, own.legacy, &own.n_legacy));
    own.n_vmm = 4;
    CALL(STEP("share_export_vmm"),
         p2pt_share_export(h, own_vmm + granularity / 2, granularity, own.vmm, &own.n_vmm));
    own.n_pool = 1;
    CALL(STEP("share_export_pool"), p2pt_share_export(h, own_pool, 65536, own.pool, &own.n_pool));
    CALL(STEP("share_import_own_vmm"),
         p2pt_share_import(h, 0, own.vmm, own.n_vmm, &p_vmm, &i_vmm));
    CALL(STEP("share_import_own_legacy"),
         p2pt_share_import(h, 0, own.legacy, 1, &p_legacy, &i_legacy));
    CALL(STEP("share_import_vmm"),
         p2pt_share_import(h, 0, theirs.vmm, theirs.n_vmm, &p_their_vmm, &i_their_vmm));
    CALL(STEP("share_import_vmm_again"),
         p2pt_share_import(h, 0, theirs.vmm, theirs.n_vmm, &p_again, &i_again));
    CALL(STEP("share_import_legacy"),
         p2pt_share_import(h, 0, theirs.legacy, theirs.n_legacy, &p_their_legacy,
                           &i_their_legacy));
    CALL(STEP("share_import_pool"),
         p2pt_share_import(h, 0, theirs.pool, theirs.n_pool, &p_their_pool, &i_their_pool));
    CALL(STEP("share_put"), p2pt_copy_async(h, p_their_vmm, b->d0a, 4096, s));
    p2pt_copy_desc put[3] = {{p_their_legacy, b->d0a, 1000},
                             {p_their_pool, b->d0a + 4096, 1000},
                             {p_vmm, b->d0a + 8192, 1000}};
    CALL(STEP("share_put_batch"), p2pt_copy_batch_async(h, put, 3, s));
    CALL(STEP("share_get"), p2pt_copy_async(h, b->d0b, p_their_vmm, 4096, s));
    CALL(STEP("share_close_vmm_again"), p2pt_share_close(h, i_again));
    CALL(STEP("share_close_vmm"), p2pt_share_close(h, i_their_vmm));
    CALL(STEP("share_close_legacy"), p2pt_share_close(h, i_their_legacy));
    CALL(STEP("share_close_pool"), p2pt_share_close(h, i_their_pool));
    CALL(STEP("share_close_own_legacy"), p2pt_share_close(h, i_legacy));
    CALL(STEP("share_close_own_vmm"), p2pt_share_close(h, i_vmm));
    CALL(STEP("share_close_twice"), p2pt_share_close(h, i_vmm));
    CALL(STEP("share_unexport_legacy"), p2pt_share_unexport(h, b->d0a + 4096));
    CALL(STEP("share_unexport_vmm"), p2pt_share_unexport(h, own_vmm + granularity / 2));
    CALL(STEP("share_unexport_pool"), p2pt_share_unexport(h, own_pool));
#undef STEP
}

/* The exporter: another process, forked before this one touches the driver,
 * whose driver calls are not counted. It exports cuMemAlloc memory, a VMM
 * range of two allocations and pool memory (on device 1 where there is one),
 * writes the blobs to `out` and serves the VMM and pool descriptors until
 * `in` closes. */
static void exporter(int out, int in)
{
    struct exports e;
    memset(&e, 0, sizeof(e));
    const char *path = getenv("P2P_CUDA_LIBRARY");
    void *lib = dlopen(path != NULL ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        _exit(3);
    void (*pause_them)(int) = (void (*)(int))dlsym(lib, "p2pt_fault_pause");
    if (pause_them != NULL)
        pause_them(1);
    PFN_cuGetProcAddress_v12000 gpa =
        (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
    if (gpa == NULL)
        _exit(3);
#define GET(fn, ver)                                                           \
    PFN_##fn##_v##ver fn##_;                                                   \
    if (gpa(#fn, (void **)&fn##_, ver, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS) \
        _exit(3)
    GET(cuInit, 2000);
    GET(cuDeviceGet, 2000);
    GET(cuDevicePrimaryCtxRetain, 7000);
    GET(cuCtxSetCurrent, 4000);
    GET(cuMemAlloc, 3020);
    GET(cuMemCreate, 10020);
    GET(cuMemAddressReserve, 10020);
    GET(cuMemMap, 10020);
    GET(cuMemSetAccess, 10020);
    GET(cuMemGetAllocationGranularity, 10020);
    GET(cuMemPoolCreate, 11020);
    GET(cuMemAllocFromPoolAsync, 11020);
    GET(cuStreamSynchronize, 2000);
#undef GET
    CUdevice dev;
    CUcontext ctx;
    int ord = 1;
    if (cuInit_(0) != CUDA_SUCCESS)
        _exit(3);
    if (cuDeviceGet_(&dev, 1) != CUDA_SUCCESS) {
        ord = 0;
        if (cuDeviceGet_(&dev, 0) != CUDA_SUCCESS)
            _exit(3);
    }
    if (cuDevicePrimaryCtxRetain_(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent_(ctx) != CUDA_SUCCESS)
        _exit(3);
    p2pt_init_args args;
    memset(&args, 0, sizeof(args));
    args.size = sizeof(args);
    args.logger = quiet_logger;
    args.transport = "ce";
    p2pt_handle *h = NULL;
    CUdeviceptr mem, va, pool_mem;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ord;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    CUmemGenericAllocationHandle a[2];
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, ord},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location = prop.location;
    CUmemoryPool pool;
    if (p2pt_init(&args, &h) != P2PT_SUCCESS || cuMemAlloc_(&mem, 1 << 20) != CUDA_SUCCESS ||
        cuMemGetAllocationGranularity_(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ||
        cuMemAddressReserve_(&va, 2 * g, 0, 0, 0) || cuMemCreate_(&a[0], g, &prop, 0) ||
        cuMemCreate_(&a[1], g, &prop, 0) || cuMemMap_(va, g, 0, a[0], 0) ||
        cuMemMap_(va + g, g, 0, a[1], 0) || cuMemSetAccess_(va, 2 * g, &access, 1) ||
        cuMemPoolCreate_(&pool, &pp) || cuMemAllocFromPoolAsync_(&pool_mem, 1 << 20, pool, NULL) ||
        cuStreamSynchronize_(NULL))
        _exit(4);
    e.n_legacy = 1;
    e.n_vmm = 4;
    e.n_pool = 1;
    if (p2pt_share_export(h, (void *)(mem + 4096), 65536, e.legacy, &e.n_legacy) ||
        p2pt_share_export(h, (void *)(va + g / 2), g, e.vmm, &e.n_vmm) ||
        p2pt_share_export(h, (void *)pool_mem, 65536, e.pool, &e.n_pool))
        memset(&e, 0, sizeof(e));
    if (write(out, &e, sizeof(e)) != (ssize_t)sizeof(e))
        _exit(5);
    char c;
    while (read(in, &c, 1) > 0)
        ;
    p2pt_finalize(h);
    /* No exit handlers: they belong to the process this one was forked from
     * (the fault census among them). */
    _exit(0);
}

/* Fork the exporter and read its blobs; it serves until *done closes. */
static void start_exporter(int *done, pid_t *pid)
{
    int to_us[2], to_it[2];
    *done = -1;
    *pid = -1;
    if (pipe(to_us) != 0 || pipe(to_it) != 0)
        return;
    fflush(stdout);
    *pid = fork();
    if (*pid == 0) {
        close(to_us[0]);
        close(to_it[1]);
        exporter(to_us[1], to_it[0]);
    }
    close(to_us[1]);
    close(to_it[0]);
    if (*pid < 0 || read(to_us[0], &theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs))
        memset(&theirs, 0, sizeof(theirs));
    close(to_us[0]);
    *done = to_it[1];
}

/* P2PT_WORKLOAD_FSIZE=<bytes>: a full disk for the cubin cache. Files may
 * not grow past that many bytes (the signal is ignored, so writes fail with
 * EFBIG as on a full disk) until the pass is over; this program's output
 * waits in memory meanwhile. */
static void limit_files(void)
{
    const char *fsize = getenv("P2PT_WORKLOAD_FSIZE");
    if (fsize == NULL)
        return;
    static char out[1 << 20];
    setvbuf(stdout, out, _IOFBF, sizeof(out));
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = (rlim_t)strtoull(fsize, NULL, 10);
    setrlimit(RLIMIT_FSIZE, &rl);
    buffered = 1;
}

static void unlimit_files(void)
{
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_FSIZE, &rl);
}

static PFN_cuStreamBeginCapture_v10010 begin_capture;
static PFN_cuStreamEndCapture_v10000 end_capture;
static PFN_cuGraphInstantiateWithFlags_v11040 instantiate;
static PFN_cuGraphLaunch_v10000 graph_launch;
static PFN_cuGraphExecDestroy_v10000 exec_destroy;
static PFN_cuGraphDestroy_v10000 graph_destroy;

/* A copy and a batch captured into a graph on `s`, which is replayed. */
static int capture_steps(p2pt_handle *h, const char *tag, struct bufs *b, CUstream s)
{
    char step[96];
    CUgraph g = NULL;
    CUgraphExec ge = NULL;
    p2pt_copy_desc one = {b->d0b, b->d0a, 4096};
    paused(1);
    SETUP(begin_capture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    paused(0);
    snprintf(step, sizeof(step), "capture-%s/copy", tag);
    CALL(step, p2pt_copy_async(h, b->d0b, b->d0a, 4096, s));
    snprintf(step, sizeof(step), "capture-%s/batch", tag);
    CALL(step, p2pt_copy_batch_async(h, &one, 1, s));
    p2pt_status st;
    snprintf(step, sizeof(step), "capture-%s/signal", tag);
    CALL_TO(&st, step, p2pt_signal_async(h, b->sem0, s));
    signalled(st);
    snprintf(step, sizeof(step), "capture-%s/wait", tag);
    wait_pending(h, step, b->sem0, s);
    paused(1);
    SETUP(end_capture(s, &g));
    SETUP(instantiate(&ge, g, 0));
    SETUP(graph_launch(ge, s));
    SETUP(exec_destroy(ge));
    SETUP(graph_destroy(g));
    paused(0);
    return 0;
}

int main(void)
{
    /* Before this process touches the driver: a child of a process that
     * initialised CUDA cannot use it. */
    int exporter_done;
    pid_t exporter_pid;
    start_exporter(&exporter_done, &exporter_pid);
    const char *path = getenv("P2P_CUDA_LIBRARY");
    void *lib = dlopen(path != NULL ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "workload: %s\n", dlerror());
        return 2;
    }
    pause_faults = (void (*)(int))dlsym(lib, "p2pt_fault_pause");
    PFN_cuGetProcAddress_v12000 gpa =
        (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        fprintf(stderr, "workload: %s has no cuGetProcAddress_v2\n", path);
        return 2;
    }
#define GET(fn, ver)                                                           \
    PFN_##fn##_v##ver fn##_;                                                   \
    SETUP(gpa(#fn, (void **)&fn##_, ver, CU_GET_PROC_ADDRESS_DEFAULT, NULL))
    paused(1);
    GET(cuInit, 2000);
    GET(cuDeviceGet, 2000);
    GET(cuDeviceGetAttribute, 2000);
    GET(cuDevicePrimaryCtxRetain, 7000);
    GET(cuCtxSetCurrent, 4000);
    GET(cuCtxGetCurrent, 4000);
    GET(cuStreamCreate, 2000);
    GET(cuStreamSynchronize, 2000);
    GET(cuStreamDestroy, 4000);
    GET(cuMemAlloc, 3020);
    GET(cuMemFree, 3020);
    GET(cuMemAllocHost, 3020);
    GET(cuMemFreeHost, 2000);
    GET(cuMemcpyHtoD, 3020);
    GET(cuStreamBeginCapture, 10010);
    GET(cuStreamEndCapture, 10000);
    GET(cuGraphInstantiateWithFlags, 11040);
    GET(cuGraphLaunch, 10000);
    GET(cuGraphExecDestroy, 10000);
    GET(cuGraphDestroy, 10000);
    GET(cuMemCreate, 10020);
    GET(cuMemRelease, 10020);
    GET(cuMemAddressReserve, 10020);
    GET(cuMemAddressFree, 10020);
    GET(cuMemMap, 10020);
    GET(cuMemUnmap, 10020);
    GET(cuMemSetAccess, 10020);
    GET(cuMemGetAllocationGranularity, 10020);
    GET(cuMemPoolCreate, 11020);
    GET(cuMemPoolDestroy, 11020);
    GET(cuMemAllocFromPoolAsync, 11020);
    GET(cuMemFreeAsync, 11020);
#undef GET
    get_current = cuCtxGetCurrent_;
    begin_capture = cuStreamBeginCapture_;
    end_capture = cuStreamEndCapture_;
    instantiate = cuGraphInstantiateWithFlags_;
    graph_launch = cuGraphLaunch_;
    exec_destroy = cuGraphExecDestroy_;
    graph_destroy = cuGraphDestroy_;
    CUdevice dev0, dev1;
    CUcontext ctx1;
    struct bufs b;
    CUdeviceptr p;
    CUstream s;
    SETUP(cuInit_(0));
    SETUP(cuDeviceGet_(&dev0, 0));
    /* With one GPU (a lone GPU machine under the shim), the "peer" side is
     * device 0 again: every step still runs, the peer ones as local ones. */
    if (cuDeviceGet_(&dev1, 1) != CUDA_SUCCESS) {
        peer_device = 0;
        SETUP(cuDeviceGet_(&dev1, 0));
    }
    SETUP(cuDevicePrimaryCtxRetain_(&ctx0, dev0));
    SETUP(cuDevicePrimaryCtxRetain_(&ctx1, dev1));
    SETUP(cuCtxSetCurrent_(ctx1));
    SETUP(cuMemAlloc_(&p, BIG));
    b.d1 = (char *)(uintptr_t)p;
    static const char zeros[P2PT_SEMAPHORE_BYTES];
    SETUP(cuMemAlloc_(&p, P2PT_SEMAPHORE_BYTES));
    SETUP(cuMemcpyHtoD_(p, zeros, sizeof(zeros)));
    b.sem1 = (void *)(uintptr_t)p;
    SETUP(cuCtxSetCurrent_(ctx0));
    SETUP(cuMemAlloc_(&p, P2PT_SEMAPHORE_BYTES));
    SETUP(cuMemcpyHtoD_(p, zeros, sizeof(zeros)));
    b.sem0 = (void *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, BIG));
    b.d0a = (char *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, BIG + 64));
    b.d0b = (char *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, 4 * sizeof(p2pt_copy_desc)));
    b.ddescs = (p2pt_copy_desc *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, 16));
    b.dcount = (uint32_t *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, p2pt_batch_workspace_bytes(4)));
    b.ws = (void *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, 4 * sizeof(int64_t)));
    b.bmap = (int64_t *)(uintptr_t)p;
    SETUP(cuMemAlloc_(&p, p2pt_blocks_workspace_bytes(2, 2)));
    b.bws = (void *)(uintptr_t)p;
    SETUP(cuMemAllocHost_((void **)&b.pinned, 4096));
    b.pageable = calloc(1, 4096);
    p2pt_copy_desc hd[2] = {{b.d0b, b.d0a, 4096}, {b.d0b + 8192, b.d0a + 8192, 100}};
    uint32_t n = 2;
    SETUP(cuMemcpyHtoD_((CUdeviceptr)(uintptr_t)b.ddescs, hd, sizeof(hd)));
    SETUP(cuMemcpyHtoD_((CUdeviceptr)(uintptr_t)b.dcount, &n, sizeof(n)));
    const int64_t rows[4] = {0, 3, 5, 7};
    SETUP(cuMemcpyHtoD_((CUdeviceptr)(uintptr_t)b.bmap, rows, sizeof(rows)));
    SETUP(cuStreamCreate_(&s, 0));
    /* This process's shareable memory on device 0: a VMM range of two
     * allocations side by side, and memory of a pool made shareable. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle vmm[2];
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr va, pool_mem;
    SETUP(cuMemGetAllocationGranularity_(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    SETUP(cuMemAddressReserve_(&va, 2 * granularity, 0, 0, 0));
    for (int k = 0; k < 2; k++) {
        SETUP(cuMemCreate_(&vmm[k], granularity, &prop, 0));
        SETUP(cuMemMap_(va + k * granularity, granularity, 0, vmm[k], 0));
    }
    SETUP(cuMemSetAccess_(va, 2 * granularity, &access, 1));
    own_vmm = (char *)(uintptr_t)va;
    CUmemPoolProps pool_props;
    memset(&pool_props, 0, sizeof(pool_props));
    pool_props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool_props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pool_props.location = prop.location;
    CUmemoryPool pool;
    SETUP(cuMemPoolCreate_(&pool, &pool_props));
    SETUP(cuMemAllocFromPoolAsync_(&pool_mem, 1 << 20, pool, s));
    SETUP(cuStreamSynchronize_(s));
    own_pool = (char *)(uintptr_t)pool_mem;
    /* After the setup: its memory files are not the cache's to be denied. */
    limit_files();
    paused(0);

    /* Before anything is prepared, a TMA copy under capture is refused
     * (status 5) and the capture stays valid. */
    p2pt_handle *early = NULL;
    p2pt_init_args early_args;
    memset(&early_args, 0, sizeof(early_args));
    early_args.size = sizeof(early_args);
    early_args.logger = quiet_logger;
    early_args.transport = "tma";
    CALL("capture-unprepared/init", p2pt_init(&early_args, &early));
    if (capture_steps(early, "unprepared", &b, s) != 0)
        return 2;
    CALL("capture-unprepared/finalize", p2pt_finalize(early));

    /* auto's table: device 0's architecture, every list. */
    int major = 0, minor = 0;
    char table[] = "/tmp/p2pt-fault-auto-XXXXXX", options[96];
    paused(1);
    SETUP(cuDeviceGetAttribute_(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev0));
    SETUP(cuDeviceGetAttribute_(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev0));
    int fd = mkstemp(table);
    FILE *tf = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (tf == NULL) {
        fprintf(stderr, "workload: cannot write %s\n", table);
        return 2;
    }
    fprintf(tf, "p2pt-auto 1\narch sm_%d\ncopy local 0 tma\ncopy push 0 ce\ncopy pull 0 tma\n"
                "copy h2d 0 tma\ncopy d2h 0 ce\ngraph d2h 0 tma\nbatch 0 tma\n"
                "batch h2d 0 tma\nbatch d2h 0 ce\n",
            major * 10 + minor);
    fclose(tf);
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", table);
    paused(0);

    static const char *const transports[] = {"ce", "tma", "auto"};
    p2pt_handle *h[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++) {
        p2pt_init_args args;
        memset(&args, 0, sizeof(args));
        args.size = sizeof(args);
        args.logger = quiet_logger;
        args.transport = transports[t];
        args.options = t == 2 ? options : NULL;
        char step[64];
        snprintf(step, sizeof(step), "%s/init", transports[t]);
        CALL(step, p2pt_init(&args, &h[t]));
        steps_on(h[t], transports[t], &b, s);
    }
    /* The fault was one-shot: the same handles again. */
    for (int t = 0; t < 3; t++) {
        char tag[64];
        snprintf(tag, sizeof(tag), "again-%s", transports[t]);
        steps_on(h[t], tag, &b, s);
    }
    /* Graph capture, after prepare: the copies are captured. */
    for (int t = 0; t < 3; t++)
        if (capture_steps(h[t], transports[t], &b, s) != 0)
            return 2;
    for (int t = 0; t < 3; t++) {
        char step[64];
        snprintf(step, sizeof(step), "%s/finalize", transports[t]);
        CALL(step, p2pt_finalize(h[t]));
        CALL(step, p2pt_finalize(h[t]));
    }

    paused(1);
    SETUP(cuStreamSynchronize_(s));
    SETUP(cuStreamDestroy_(s));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.ws));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.bmap));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.bws));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.dcount));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.ddescs));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.d0b));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.d0a));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.d1));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.sem0));
    SETUP(cuMemFree_((CUdeviceptr)(uintptr_t)b.sem1));
    SETUP(cuMemFreeHost_(b.pinned));
    SETUP(cuMemFreeAsync_(pool_mem, NULL));
    SETUP(cuStreamSynchronize_(NULL));
    SETUP(cuMemPoolDestroy_(pool));
    for (int k = 0; k < 2; k++) {
        SETUP(cuMemUnmap_(va + k * granularity, granularity));
        SETUP(cuMemRelease_(vmm[k]));
    }
    SETUP(cuMemAddressFree_(va, 2 * granularity));
    free(b.pageable);
    if (exporter_done >= 0)
        close(exporter_done);
    if (exporter_pid > 0)
        waitpid(exporter_pid, NULL, 0);
    unlink(table);
    unlimit_files();
    printf("END %d\n", steps);
    return 0;
}
