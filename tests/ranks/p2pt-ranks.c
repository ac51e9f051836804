/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One rank of the GPU tests of memory shared between processes
 * (tests/test_ranks.c starts N of them, one process per GPU as frameworks
 * run): rank r uses GPU r, exports memory it owns, and the ranks trade
 * blobs through the test process, their tiny bootstrap.
 *
 *   p2pt-ranks SCENARIO RANK NRANKS FD [GPUS]
 *
 * GPUS (default NRANKS) spreads the ranks over that many GPUs: rank r uses
 * GPU r % GPUS, so GPUS 1 runs every rank on GPU 0, each its own process
 * and context, as a machine of one GPU can.
 * FD is the rank's socket to the test process. A message is a type byte, a
 * 32-bit length and that many bytes: 'G' gathers (the test answers, once
 * every rank still running has sent one, with every contribution in rank
 * order), 'R' reports the end ("ok", or what failed). A rank stops at its
 * first failure with an 'R' saying what, and its stderr says how far it
 * got. Scenarios (the memory each rank exports):
 *   legacy, vmm1, vmm3, pool   cuMemAlloc memory at an offset in its segment;
 *                 one VMM allocation; a range across three allocations side
 *                 by side; pool memory. Every rank puts into every peer's
 *                 import (a host batch, and a device batch or, under ce,
 *                 single copies) and gets from it, at sizes 1, 15, 4097 and
 *                 65537 and odd offsets, random bytes (an import of a rank
 *                 on this GPU is local memory, one of another GPU's a
 *                 peer's: explain and the batch's grid say which); the owner checks
 *                 every byte of its memory after a barrier (guards and
 *                 untouched regions still poison), the getter every byte
 *                 of its destination. P2P_TRANSPORT picks the engine.
 *   bad_blobs     rank 0 exports; the others import every kind of bad blob
 *                 through real imports: each refused, nothing mapped.
 *   exporter_exits  rank 0 exports VMM memory and exits once rank 1 has
 *                 imported it; rank 1 then reads what rank 0 wrote.
 *   close_waits   rank 1 queues a batch into rank 0's memory behind a
 *                 stream wait on a gate in host memory, closes the import
 *                 from another thread, opens the gate: the close returns
 *                 only after the batch ran, and the bytes land.
 *   handoff       rank 0 makes itself non-dumpable (no ptrace, no
 *                 pidfd_getfd on it without CAP_SYS_PTRACE); rank 1
 *                 imports its VMM memory anyway: the descriptors cross by
 *                 the exporter's socket, not by pidfd_getfd.
 *   signals       two ranks ping-pong through semaphores in each other's
 *                 imported memory: rank 0 sends a round's changing bytes
 *                 into rank 1's buffer by a device batch that signals
 *                 rank 1; rank 1 waits, logs what arrived and signals
 *                 back before rank 0 may send the next. 1,000 rounds, then
 *                 200 replays of a captured graph of each side's part:
 *                 every logged round holds its own bytes, never a stale
 *                 round's, and no wait timed out.
 *   stall         rank 0 sends nothing: the harness's own test that a rank
 *                 that does not answer fails the run in time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "p2pt_internal.h"
#include "test_driver.h"

#define POISON 0xA5
#define REGION ((size_t)256 << 10)
#define PIECES 4
#define MAX_BLOBS 8
#define CHUNK ((size_t)128 << 10)

static const size_t sizes[PIECES] = {1, 15, 4097, 65537};
static const size_t offs[PIECES] = {3, 1029, 8199, 65545};

static int rank, nranks, gpus, sock;
static const char *scenario;

static void send_msg(char type, const void *data, uint32_t len)
{
    char head[5];
    head[0] = type;
    memcpy(head + 1, &len, 4);
    if (write(sock, head, 5) != 5 || (len > 0 && write(sock, data, len) != (ssize_t)len))
        _exit(9);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    char text[2048];
    int n = snprintf(text, sizeof(text), "rank %d (%s): ", rank, scenario);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", text);
    send_msg('R', text, (uint32_t)strlen(text));
    exit(1);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS)                                                \
            fail("%s failed: %s (%d)", #call, p2pt__cuda_error_name(r_), (int)r_); \
    } while (0)

#define OK(expr)                                                               \
    do {                                                                       \
        p2pt_status s_ = (expr);                                               \
        if (s_ != P2PT_SUCCESS)                                                \
            fail("%s -> %d (%s): %s", #expr, (int)s_, p2pt_status_string(s_),  \
                 p2pt_last_error(NULL));                                       \
    } while (0)

static bool read_all(void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(sock, c, n);
        if (r <= 0)
            return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

/* Send `mine`; get every running rank's contribution: all[k * len] for rank
 * k, have[k] false for a rank that gave none (it has ended). */
static void gather(const void *mine, uint32_t len, void *all, bool *have)
{
    send_msg('G', mine, len);
    char type;
    if (!read_all(&type, 1) || type != 'G')
        fail("the bootstrap did not answer a gather");
    for (int k = 0; k < nranks; k++) {
        uint32_t got;
        if (!read_all(&got, 4))
            fail("the bootstrap's answer was cut short");
        if (got != 0 && got != len)
            fail("rank %d gave %u bytes to a gather of %u", k, got, len);
        if (have != NULL)
            have[k] = got == len;
        if (got != 0 && !read_all((char *)all + (size_t)k * len, got))
            fail("the bootstrap's answer was cut short");
    }
}

static void barrier(void) { gather(NULL, 0, NULL, NULL); }

static void finish(void)
{
    say("ok");
    send_msg('R', "ok", 2);
    exit(0);
}

static void random_bytes(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}

static uint64_t put_seed(int writer, int owner, int mode, int k)
{
    return 1000003ull * (uint64_t)(writer + 1) + 10007ull * (uint64_t)(owner + 1) +
           101ull * (uint64_t)mode + (uint64_t)k + 1;
}

static uint64_t get_seed(int owner, int k) { return 7777777ull * (uint64_t)(owner + 1) + (uint64_t)k + 1; }

/* ------------------------------------------------------------- memory */

/* Memory this rank owns and exports: [base, base + bytes). */
struct mem {
    char kind; /* 'L' cuMemAlloc, 'V' one VMM allocation, 'W' three, 'P' pool */
    CUdeviceptr base;
    size_t bytes;
    CUdeviceptr seg, va;
    size_t va_size, piece;
    int n;
    CUmemGenericAllocationHandle h[3];
    CUmemoryPool pool;
};

static struct mem mem_make(char kind, int dev, size_t bytes)
{
    struct mem m;
    memset(&m, 0, sizeof(m));
    m.kind = kind;
    m.bytes = bytes;
    if (kind == 'L') {
        /* A tensor inside a caching allocator's segment: an offset in it. */
        CK(tcu.cuMemAlloc(&m.seg, bytes + 3 * 4096));
        m.base = m.seg + 4096;
        return m;
    }
    if (kind == 'P') {
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = dev;
        if (tcu.cuMemPoolCreate == NULL || tcu.cuMemAllocFromPoolAsync == NULL)
            fail("the driver has no memory pools");
        CK(tcu.cuMemPoolCreate(&m.pool, &pp));
        CK(tcu.cuMemAllocFromPoolAsync(&m.seg, bytes + 4096, m.pool, NULL));
        CK(tcu.cuStreamSynchronize(NULL));
        m.base = m.seg + 256;
        return m;
    }
    if (tcu.cuMemCreate == NULL)
        fail("the driver has no virtual memory management");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    CK(tcu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (kind == 'V') {
        m.n = 1;
        m.piece = (bytes + 4096 + g - 1) / g * g;
    } else {
        /* Three allocations; the range starts 4 KiB before the end of the
         * first and ends inside the third, as expandable segments grow: at
         * least one and a half allocations long. */
        if (bytes < g + g / 2)
            m.bytes = bytes = g + g / 2;
        m.n = 3;
        m.piece = (bytes / 2 + g - 1) / g * g;
        if (bytes <= m.piece + 4096)
            fail("%zu bytes do not cross three allocations of %zu", bytes, m.piece);
    }
    m.va_size = (size_t)m.n * m.piece;
    CK(tcu.cuMemAddressReserve(&m.va, m.va_size, 0, 0, 0));
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int k = 0; k < m.n; k++) {
        CK(tcu.cuMemCreate(&m.h[k], m.piece, &prop, 0));
        CK(tcu.cuMemMap(m.va + (size_t)k * m.piece, m.piece, 0, m.h[k], 0));
    }
    CK(tcu.cuMemSetAccess(m.va, m.va_size, &a, 1));
    m.base = kind == 'V' ? m.va + 4096 : m.va + m.piece - 4096;
    return m;
}

static void mem_free(struct mem *m)
{
    if (m->kind == 'L')
        CK(tcu.cuMemFree(m->seg));
    else if (m->kind == 'P') {
        CK(tcu.cuMemFreeAsync(m->seg, NULL));
        CK(tcu.cuStreamSynchronize(NULL));
        CK(tcu.cuMemPoolDestroy(m->pool));
    } else {
        for (int k = 0; k < m->n; k++) {
            CK(tcu.cuMemUnmap(m->va + (size_t)k * m->piece, m->piece));
            CK(tcu.cuMemRelease(m->h[k]));
        }
        CK(tcu.cuMemAddressFree(m->va, m->va_size));
    }
}

/* A rank's blobs as a gather carries them. */
struct blobs {
    uint32_t n;
    p2pt_share_blob b[MAX_BLOBS];
};

static struct blobs export_mem(p2pt_handle *h, const struct mem *m)
{
    struct blobs out;
    memset(&out, 0, sizeof(out));
    size_t n = 0;
    OK(p2pt_share_export(h, (void *)(uintptr_t)m->base, m->bytes, NULL, &n));
    if (n == 0 || n > MAX_BLOBS)
        fail("the export counts %zu blobs", n);
    OK(p2pt_share_export(h, (void *)(uintptr_t)m->base, m->bytes, out.b, &n));
    out.n = (uint32_t)n;
    size_t want = m->kind == 'W' ? 3 : 1;
    if (n != want)
        fail("memory of kind %c exports as %zu blobs, expected %zu", m->kind, n, want);
    return out;
}

static int windows_of(const p2pt_handle *h, int dev)
{
    const struct p2pt_window_set *ws = p2pt__windows(&h->windows, dev);
    return ws != NULL ? ws->n : 0;
}

static int peer_windows_of(const p2pt_handle *h, int dev)
{
    const struct p2pt_window_set *ws = p2pt__windows(&h->windows, dev);
    return ws != NULL ? ws->n_peer : 0;
}

static p2pt_properties props_of(const p2pt_handle *h)
{
    p2pt_properties p;
    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    OK(p2pt_get_properties(h, &p));
    return p;
}

/* Every byte of [at, at + n) against `want` (NULL: poison). */
static void expect_bytes(CUdeviceptr at, size_t n, const unsigned char *want, const char *what)
{
    unsigned char *got = malloc(n);
    if (got == NULL)
        fail("out of host memory");
    CK(tcu.cuMemcpyDtoH(got, at, n));
    for (size_t i = 0; i < n; i++) {
        unsigned char w = want != NULL ? want[i] : POISON;
        if (got[i] != w)
            fail("%s: byte %zu is 0x%02x, expected 0x%02x (%s)", what, i, got[i], w,
                 want != NULL ? "payload" : "a guard or an untouched byte");
    }
    free(got);
}

/* ------------------------------------------------------ put and get */

static void put_get(char kind, p2pt_handle *h, int dev, CUstream s)
{
    const char *transport = props_of(h).transport;
    size_t bytes = (size_t)(2 * nranks + 1) * REGION;
    size_t get_at = (size_t)(2 * nranks) * REGION;
    struct mem m = mem_make(kind, dev, bytes);
    bytes = m.bytes;
    unsigned char *piece = malloc(65537);
    if (piece == NULL)
        fail("out of host memory");
    /* Poison, then the pieces every peer will get from here. */
    CK(tcu.cuMemsetD8(m.base, POISON, bytes));
    for (int k = 0; k < PIECES; k++) {
        random_bytes(piece, sizes[k], get_seed(rank, k));
        CK(tcu.cuMemcpyHtoD(m.base + get_at + offs[k], piece, sizes[k]));
    }
    CK(tcu.cuCtxSynchronize());
    struct blobs mine = export_mem(h, &m);
    struct blobs *all = calloc((size_t)nranks, sizeof(*all));
    gather(&mine, sizeof(mine), all, NULL);
    say("%s memory exported as %u blob(s), %zu bytes", transport, mine.n, bytes);

    void **ptr = calloc((size_t)nranks, sizeof(*ptr));
    p2pt_share_import_t **imp = calloc((size_t)nranks, sizeof(*imp));
    int windows = windows_of(h, dev);
    for (int p = 0; p < nranks; p++)
        if (p != rank)
            OK(p2pt_share_import(h, dev, all[p].b, all[p].n, &ptr[p], &imp[p]));
    if (windows_of(h, dev) != windows + nranks - 1)
        fail("%d windows after %d imports (from %d)", windows_of(h, dev), nranks - 1, windows);
    /* An import of a rank on another GPU is that GPU's memory, whatever
     * the driver names for a legacy handle opened here
     * (docs/IMPORTED_MEMORY.md); one of a rank on this GPU is local. */
    int elsewhere = 0;
    for (int p = 0; p < nranks; p++)
        elsewhere += p % gpus != rank % gpus;
    if (peer_windows_of(h, dev) != elsewhere)
        fail("%d of the %d imports are windows of another GPU's memory, expected %d",
             peer_windows_of(h, dev), nranks - 1, elsewhere);
    if (props_of(h).share_mappings != (uint64_t)(nranks - 1))
        fail("share_mappings is %llu after %d imports",
             (unsigned long long)props_of(h).share_mappings, nranks - 1);

    /* Sources: a chunk per (peer, mode, piece), each at an odd offset, so
     * that no piece is co-aligned with its destination. */
    size_t src_bytes = (size_t)nranks * 2 * PIECES * CHUNK;
    CUdeviceptr src, dst, ddescs, dcount, ws;
    CK(tcu.cuMemAlloc(&src, src_bytes));
    CK(tcu.cuMemAlloc(&dst, (size_t)2 * nranks * REGION));
    for (int p = 0; p < nranks; p++)
        for (int mode = 0; mode < 2; mode++)
            for (int k = 0; k < PIECES; k++) {
                random_bytes(piece, sizes[k], put_seed(rank, p, mode, k));
                CK(tcu.cuMemcpyHtoD(src + ((size_t)(p * 2 + mode) * PIECES + k) * CHUNK + 5,
                                    piece, sizes[k]));
            }
    CK(tcu.cuMemsetD8(dst, POISON, (size_t)2 * nranks * REGION));
    CK(tcu.cuCtxSynchronize());
    /* A copy into an import of another GPU's memory pushes to that GPU and
     * one out of it pulls, as the same copies do in one process; an import
     * of this GPU's memory is a local copy either way. */
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        const bool local = p % gpus == rank % gpus;
        p2pt_choice c = {sizeof(c)};
        OK(p2pt_explain_copy(h, ptr[p], (void *)(uintptr_t)src, CHUNK, s, &c));
        if (strcmp(c.path, local ? "local" : "push") != 0)
            fail("a copy into rank %d's import is %s, not %s: %s", p, c.path,
                 local ? "local" : "a push", c.reason);
        OK(p2pt_explain_copy(h, (void *)(uintptr_t)src, ptr[p], CHUNK, s, &c));
        if (strcmp(c.path, local ? "local" : "pull") != 0)
            fail("a copy out of rank %d's import is %s, not %s: %s", p, c.path,
                 local ? "local" : "a pull", c.reason);
    }
    OK(p2pt_window_register(h, dev, (void *)(uintptr_t)src, src_bytes));
    OK(p2pt_window_register(h, dev, (void *)(uintptr_t)dst, (size_t)2 * nranks * REGION));
    size_t max = (size_t)nranks * PIECES;
    p2pt_copy_desc *d = calloc(max, sizeof(*d));
    CK(tcu.cuMemAlloc(&ddescs, max * sizeof(*d)));
    CK(tcu.cuMemAlloc(&dcount, 16));
    CK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes((uint32_t)max)));
    OK(p2pt_prepare(h, dev));

    for (int phase = 0; phase < 2; phase++) { /* 0: put, 1: get */
        for (int mode = 0; mode < 2; mode++) {
            size_t n = 0;
            for (int p = 0; p < nranks; p++) {
                if (p == rank)
                    continue;
                for (int k = 0; k < PIECES; k++) {
                    CUdeviceptr peer = (CUdeviceptr)(uintptr_t)ptr[p];
                    if (phase == 0) {
                        d[n].dst = (void *)(uintptr_t)(peer + (size_t)(rank * 2 + mode) * REGION +
                                                       offs[k]);
                        d[n].src = (void *)(uintptr_t)(src +
                                                       ((size_t)(p * 2 + mode) * PIECES + k) *
                                                           CHUNK +
                                                       5);
                    } else {
                        d[n].dst = (void *)(uintptr_t)(dst + (size_t)(p * 2 + mode) * REGION +
                                                       offs[k]);
                        d[n].src = (void *)(uintptr_t)(peer + get_at + offs[k]);
                    }
                    d[n].bytes = sizes[k];
                    n++;
                }
            }
            if (mode == 0) {
                OK(p2pt_copy_batch_async(h, d, n, s));
                continue;
            }
            uint32_t count = (uint32_t)n;
            CK(tcu.cuMemcpyHtoD(ddescs, d, n * sizeof(*d)));
            CK(tcu.cuMemcpyHtoD(dcount, &count, sizeof(count)));
            CK(tcu.cuCtxSynchronize());
            p2pt_status st = p2pt_copy_batch_device_async(
                h, (p2pt_copy_desc *)(uintptr_t)ddescs, (uint32_t *)(uintptr_t)dcount,
                (uint32_t)max, (void *)(uintptr_t)ws, s);
            if (strcmp(transport, "ce") == 0) {
                /* The copy engine reads no GPU descriptors: the same pieces
                 * as single copies. */
                if (st != P2PT_NOT_SUPPORTED)
                    fail("a device batch under ce -> %d, expected 6", (int)st);
                for (size_t i = 0; i < n; i++)
                    OK(p2pt_copy_async(h, d[i].dst, d[i].src, d[i].bytes, s));
                continue;
            }
            OK(st);
            /* Pieces that may cross a peer link get the link's grid, said
             * by explain; imports of this GPU's memory alone do not. */
            p2pt_choice c = {sizeof(c)};
            OK(p2pt_explain_batch_device(h, (p2pt_copy_desc *)(uintptr_t)ddescs,
                                         (uint32_t *)(uintptr_t)dcount, (uint32_t)max,
                                         (void *)(uintptr_t)ws, s, &c));
            const bool held = strstr(c.reason, "hold another GPU's memory, so at most") != NULL;
            if (held != (elsewhere > 0))
                fail("a device batch into imports, %d of them another GPU's memory, is%s held "
                     "to the link's CTAs: %s",
                     elsewhere, held ? "" : " not", c.reason);
            CK(tcu.cuStreamSynchronize(s));
            p2pt_batch_status bs;
            CK(tcu.cuMemcpyDtoH(&bs, ws, sizeof(bs)));
            if (bs.copied != count || bs.skipped != 0)
                fail("the %s device batch copied %u of %u, skipped %u (first bad %u, reasons "
                     "0x%x)",
                     phase ? "get" : "put", bs.copied, count, bs.skipped, bs.first_bad,
                     bs.reasons);
        }
        CK(tcu.cuStreamSynchronize(s));
        barrier();
        unsigned char *want = malloc(REGION);
        if (phase == 0) {
            /* Every byte this rank owns, written by its peers. */
            for (int w = 0; w < nranks; w++)
                for (int mode = 0; mode < 2; mode++) {
                    memset(want, POISON, REGION);
                    for (int k = 0; w != rank && k < PIECES; k++)
                        random_bytes(want + offs[k], sizes[k], put_seed(w, rank, mode, k));
                    char what[96];
                    snprintf(what, sizeof(what), "the put of rank %d (%s) into rank %d", w,
                             mode ? "device batch" : "host batch", rank);
                    expect_bytes(m.base + (size_t)(w * 2 + mode) * REGION, REGION, want, what);
                }
            say("every byte the peers put is in place");
        } else {
            for (int p = 0; p < nranks; p++)
                for (int mode = 0; mode < 2; mode++) {
                    memset(want, POISON, REGION);
                    for (int k = 0; p != rank && k < PIECES; k++)
                        random_bytes(want + offs[k], sizes[k], get_seed(p, k));
                    char what[96];
                    snprintf(what, sizeof(what), "the get by rank %d (%s) from rank %d", rank,
                             mode ? "device batch" : "host batch", p);
                    expect_bytes(dst + (size_t)(p * 2 + mode) * REGION, REGION, want, what);
                }
            say("every byte got from the peers is in place");
        }
        free(want);
    }
    barrier(); /* nobody reads or writes a peer's memory any more */
    for (int p = 0; p < nranks; p++)
        if (p != rank)
            OK(p2pt_share_close(h, imp[p]));
    p2pt_properties pr = props_of(h);
    if (pr.share_imports_open != 0 || pr.share_mappings != 0 ||
        pr.share_imports_closed != (uint64_t)(nranks - 1))
        fail("after the closes: %llu imports open, %llu mappings, %llu closed",
             (unsigned long long)pr.share_imports_open, (unsigned long long)pr.share_mappings,
             (unsigned long long)pr.share_imports_closed);
    OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)src));
    OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)dst));
    if (windows_of(h, dev) != windows)
        fail("%d windows after the closes, %d before the imports", windows_of(h, dev), windows);
    barrier(); /* nobody imports this rank's memory any more */
    OK(p2pt_share_unexport(h, (void *)(uintptr_t)m.base));
    CK(tcu.cuMemFree(src));
    CK(tcu.cuMemFree(dst));
    CK(tcu.cuMemFree(ddescs));
    CK(tcu.cuMemFree(dcount));
    CK(tcu.cuMemFree(ws));
    mem_free(&m);
    free(d);
    free(piece);
    free(all);
    free(ptr);
    free(imp);
}

/* ------------------------------------------------------- bad blobs */

static void refused(p2pt_handle *h, int dev, const p2pt_share_blob *b, size_t n, p2pt_status want,
                    const char *needle, const char *what)
{
    int windows = windows_of(h, dev);
    void *p = (void *)1;
    p2pt_share_import_t *imp = (p2pt_share_import_t *)1;
    p2pt_status st = p2pt_share_import(h, dev, b, n, &p, &imp);
    if (st != want || strstr(p2pt_last_error(NULL), needle) == NULL)
        fail("%s: import -> %d (%s), expected %d and \"%s\"", what, (int)st,
             p2pt_last_error(NULL), (int)want, needle);
    if (p != NULL || imp != NULL || windows_of(h, dev) != windows ||
        props_of(h).share_mappings != 0)
        fail("%s: refused, yet something was mapped or registered", what);
    say("refused: %s", what);
}

static void edit(p2pt_share_blob *b, size_t n, void (*change)(struct p2pt_share_desc *))
{
    for (size_t i = 0; i < n; i++) {
        struct p2pt_share_desc d;
        if (p2pt__share_blob_read(&b[i], i, &d) != P2PT_SUCCESS)
            fail("a good blob does not read: %s", p2pt_last_error(NULL));
        change(&d);
        p2pt__share_blob_write(&d, &b[i]);
    }
}

static void other_boot(struct p2pt_share_desc *d) { d->boot_id[0] ^= 1; }
static void other_host(struct p2pt_share_desc *d)
{
    d->host_hash ^= 1;
    snprintf(d->host, sizeof(d->host), "another-node");
}
static void other_gpu(struct p2pt_share_desc *d) { memset(d->gpu_uuid, 0x42, 16); }
static void past_end(struct p2pt_share_desc *d) { d->bytes = d->span - d->offset + 1; }

static void bad_blobs(p2pt_handle *h, int dev)
{
    struct blobs mine[2], all[2 * 8];
    memset(mine, 0, sizeof(mine));
    struct mem m[2];
    memset(m, 0, sizeof(m));
    if (rank == 0) {
        m[0] = mem_make('W', dev, (size_t)5 << 20);
        m[1] = mem_make('V', dev, (size_t)1 << 20);
        mine[0] = export_mem(h, &m[0]);
        mine[1] = export_mem(h, &m[1]);
    }
    if (nranks > 8)
        fail("at most 8 ranks");
    gather(mine, sizeof(mine), all, NULL);
    if (rank != 0) {
        const struct blobs *g = &all[0];
        p2pt_share_blob b[MAX_BLOBS];
        size_t n = g->n;
        memcpy(b, g->b, sizeof(b));
        b[0].bytes[1] = 'X';
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "is not a p2pt share blob", "not a blob");
        memcpy(b, g->b, sizeof(b));
        b[1].bytes[130] ^= 0x40;
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "is corrupted", "a corrupted checksum");
        memcpy(b, g->b, sizeof(b));
        b[2].bytes[4] = 9;
        p2pt__share_blob_seal(&b[2]);
        refused(h, dev, b, n, P2PT_NOT_SUPPORTED, "newer than the version", "a newer version");
        refused(h, dev, g->b, n - 1, P2PT_INVALID_ARGUMENT, "is missing", "an index missing");
        memcpy(b, g->b, sizeof(b));
        b[1] = b[0];
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "repeats index", "an index repeated");
        memcpy(b, g->b, sizeof(b));
        b[1] = all[1].b[0];
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "blobs of two exports",
                "blobs of two exports mixed");
        memcpy(b, g->b, sizeof(b));
        edit(b, n, other_boot);
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "another boot", "another boot");
        memcpy(b, g->b, sizeof(b));
        edit(b, n, other_host);
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "another-node", "another host");
        memcpy(b, g->b, sizeof(b));
        edit(b, n, other_gpu);
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "does not have", "an unknown GPU");
        memcpy(b, g->b, sizeof(b));
        edit(b, n, past_end);
        refused(h, dev, b, n, P2PT_INVALID_ARGUMENT, "runs past its allocation",
                "a range past the allocation");
        void *p = NULL;
        p2pt_share_import_t *imp = NULL;
        OK(p2pt_share_import(h, dev, g->b, n, &p, &imp));
        OK(p2pt_share_close(h, imp));
    }
    barrier();
    if (rank == 0) {
        for (int k = 0; k < 2; k++) {
            OK(p2pt_share_unexport(h, (void *)(uintptr_t)m[k].base));
            mem_free(&m[k]);
        }
    }
}

/* ------------------------------------------------- exporter exits */

static void exporter_exits(p2pt_handle *h, int dev)
{
    size_t bytes = (size_t)3 << 20;
    struct blobs mine, all[8];
    memset(&mine, 0, sizeof(mine));
    unsigned char *want = malloc(bytes);
    random_bytes(want, bytes, 4242);
    if (rank == 0) {
        struct mem m = mem_make('W', dev, bytes);
        CK(tcu.cuMemcpyHtoD(m.base, want, bytes));
        CK(tcu.cuCtxSynchronize());
        mine = export_mem(h, &m);
    }
    gather(&mine, sizeof(mine), all, NULL);
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    if (rank != 0)
        OK(p2pt_share_import(h, dev, all[0].b, all[0].n, &p, &imp));
    barrier(); /* every import made */
    if (rank == 0) {
        /* Gone without closing anything: the test reaps this process before
         * it answers the others' next gather. */
        say("exiting with its memory imported elsewhere");
        send_msg('R', "ok", 2);
        _exit(0);
    }
    barrier(); /* rank 0 has exited */
    expect_bytes((CUdeviceptr)(uintptr_t)p, bytes, want,
                 "the import after its exporter exited");
    memset(want, POISON, bytes);
    CK(tcu.cuMemsetD8((CUdeviceptr)(uintptr_t)p, POISON, bytes));
    CK(tcu.cuCtxSynchronize());
    expect_bytes((CUdeviceptr)(uintptr_t)p, bytes, want, "a write after its exporter exited");
    OK(p2pt_share_close(h, imp));
    say("the memory lived on until the close");
    free(want);
}

/* --------------------------------------------------- close waits */

struct closer {
    p2pt_handle *h;
    p2pt_share_import_t *imp;
    p2pt_status st;
    _Atomic int done;
};

static void *close_it(void *arg)
{
    struct closer *c = arg;
    c->st = p2pt_share_close(c->h, c->imp);
    atomic_store(&c->done, 1);
    return NULL;
}

static void close_waits(p2pt_handle *h, int dev, CUstream s)
{
    const size_t bytes = (size_t)64 << 20, piece = 4096;
    struct blobs mine, all[8];
    memset(&mine, 0, sizeof(mine));
    struct mem m;
    memset(&m, 0, sizeof(m));
    if (rank == 0) {
        m = mem_make('V', dev, bytes);
        CK(tcu.cuMemsetD8(m.base, POISON, bytes));
        CK(tcu.cuCtxSynchronize());
        mine = export_mem(h, &m);
    }
    gather(&mine, sizeof(mine), all, NULL);
    if (rank == 1) {
        if (tcu.cuStreamWaitValue32 == NULL)
            fail("the driver has no cuStreamWaitValue32 to hold the batch behind a gate");
        void *p = NULL;
        p2pt_share_import_t *imp = NULL;
        OK(p2pt_share_import(h, dev, all[0].b, all[0].n, &p, &imp));
        OK(p2pt_prepare(h, dev));
        volatile uint32_t *gate = NULL;
        CK(tcu.cuMemAllocHost((void **)&gate, 64));
        *gate = 0;
        CUdeviceptr src;
        CK(tcu.cuMemAlloc(&src, bytes));
        unsigned char *fill = malloc(bytes);
        random_bytes(fill, bytes, 99);
        CK(tcu.cuMemcpyHtoD(src, fill, bytes));
        CK(tcu.cuCtxSynchronize());
        /* The batch waits behind the gate, on the stream the close waits for. */
        CK(tcu.cuStreamWaitValue32(s, (CUdeviceptr)(uintptr_t)gate, 1, CU_STREAM_WAIT_VALUE_GEQ));
        size_t n = bytes / piece;
        p2pt_copy_desc *d = calloc(n, sizeof(*d));
        for (size_t i = 0; i < n; i++)
            d[i] = (p2pt_copy_desc){(char *)p + i * piece, (void *)(uintptr_t)(src + i * piece),
                                    piece};
        OK(p2pt_copy_batch_async(h, d, n, s));
        struct closer c = {h, imp, P2PT_INTERNAL_ERROR, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, close_it, &c) != 0)
            fail("pthread_create failed");
        struct timespec pause = {0, 300 * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (atomic_load(&c.done))
            fail("the close returned (%d: %s) while its batch was still queued behind the gate",
                 (int)c.st, p2pt_last_error(NULL));
        say("the close is waiting; opening the gate");
        *gate = 1;
        __sync_synchronize();
        pthread_join(t, NULL);
        if (c.st != P2PT_SUCCESS)
            fail("the close -> %d", (int)c.st);
        CK(tcu.cuStreamSynchronize(s));
        CK(tcu.cuCtxSynchronize()); /* no fault */
        say("the close returned after the batch ran");
        CK(tcu.cuMemFree(src));
        CK(tcu.cuMemFreeHost((void *)gate));
        free(fill);
        free(d);
    }
    barrier(); /* the batch has run */
    if (rank == 0) {
        unsigned char *want = malloc(bytes);
        random_bytes(want, bytes, 99);
        expect_bytes(m.base, bytes, want, "the batch queued before the close");
        free(want);
        say("every byte of the queued batch landed");
        OK(p2pt_share_unexport(h, (void *)(uintptr_t)m.base));
        mem_free(&m);
    }
}

/* --------------------------------------------------------- handoff */

static void handoff(p2pt_handle *h, int dev)
{
    size_t bytes = (size_t)5 << 20;
    struct blobs mine, all[8];
    memset(&mine, 0, sizeof(mine));
    unsigned char *want = malloc(bytes);
    random_bytes(want, bytes, 777);
    struct mem m;
    memset(&m, 0, sizeof(m));
    if (rank == 0) {
        /* No ptrace and no pidfd_getfd on this process now, except by a
         * process with CAP_SYS_PTRACE: the descriptors must come from the
         * exporter's own server. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
            fail("prctl(PR_SET_DUMPABLE, 0): %s", strerror(errno));
        m = mem_make('W', dev, bytes);
        CK(tcu.cuMemcpyHtoD(m.base, want, bytes));
        CK(tcu.cuCtxSynchronize());
        mine = export_mem(h, &m);
    }
    gather(&mine, sizeof(mine), all, NULL);
    if (rank != 0) {
        FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
        int scope = -1;
        if (f != NULL) {
            if (fscanf(f, "%d", &scope) != 1)
                scope = -1;
            fclose(f);
        }
        say("Yama ptrace_scope %d; uid %u; the exporter is not dumpable", scope,
            (unsigned)geteuid());
        void *p = NULL;
        p2pt_share_import_t *imp = NULL;
        OK(p2pt_share_import(h, dev, all[0].b, all[0].n, &p, &imp));
        expect_bytes((CUdeviceptr)(uintptr_t)p, bytes, want, "the handed-off VMM memory");
        OK(p2pt_share_close(h, imp));
    }
    barrier();
    if (rank == 0) {
        OK(p2pt_share_unexport(h, (void *)(uintptr_t)m.base));
        mem_free(&m);
    }
    free(want);
}

/* ------------------------------------------------------------ signals */

#define ROUNDS 1000
#define REPLAYS 200
#define SLOT ((size_t)4096 + 33)
#define SEM_AREA ((size_t)4096)

/* Round r's bytes (the graph's replays reuse rounds 0..REPLAYS-1). */
static void round_bytes(unsigned char *p, int r) { random_bytes(p, SLOT, 31337ull + (uint64_t)r); }

/* Every logged round against its own bytes; a stale round named. */
static void expect_rounds(CUdeviceptr log, int n, const char *what)
{
    unsigned char *got = malloc((size_t)n * SLOT), *want = malloc(SLOT), *prev = malloc(SLOT);
    if (got == NULL || want == NULL || prev == NULL)
        fail("out of host memory");
    CK(tcu.cuMemcpyDtoH(got, log, (size_t)n * SLOT));
    for (int r = 0; r < n; r++) {
        round_bytes(want, r);
        if (memcmp(got + (size_t)r * SLOT, want, SLOT) == 0)
            continue;
        bool stale = false;
        if (r > 0) {
            round_bytes(prev, r - 1);
            stale = memcmp(got + (size_t)r * SLOT, prev, SLOT) == 0;
        }
        size_t first = 0, poison = 0;
        while (got[(size_t)r * SLOT + first] == want[first])
            first++;
        for (size_t i = 0; i < SLOT; i++)
            poison += got[(size_t)r * SLOT + i] == POISON;
        fail("%s: round %d's slot does not hold its bytes%s (first wrong byte %zu of %zu; %zu "
             "bytes read as poison)",
             what, r, stale ? ": it holds round r-1's (a stale read)" : "", first, SLOT, poison);
    }
    free(got);
    free(want);
    free(prev);
}

/* The batch status a workspace holds: its one piece copied. */
static void expect_sent(CUdeviceptr ws, const char *what)
{
    p2pt_batch_status bs;
    CK(tcu.cuMemcpyDtoH(&bs, ws, sizeof(bs)));
    if (bs.copied != 1 || bs.skipped != 0)
        fail("the last batch of the %s copied %u of 1, skipped %u (reasons 0x%x)", what,
             bs.copied, bs.skipped, bs.reasons);
}

/* Once `s` is done: the sender's last batch copied its piece, and every
 * one of the receiver's `n` logged rounds holds its own bytes. */
static void settled(CUstream s, CUdeviceptr ws, CUdeviceptr log, int n, const char *what)
{
    CK(tcu.cuStreamSynchronize(s));
    if (rank == 0)
        expect_sent(ws, what);
    else {
        expect_rounds(log, n, what);
        say("%d %s, each its own bytes", n, what);
    }
}

static void signals(p2pt_handle *h, int dev, CUstream s)
{
    if (nranks != 2)
        fail("the signals scenario takes 2 ranks, not %d", nranks);
    if (tcu.cuStreamBeginCapture == NULL)
        fail("the driver has no stream capture");
    /* Each rank's exported region: its semaphore, then a landing slot. */
    struct mem m = mem_make('L', dev, SEM_AREA + SLOT);
    CK(tcu.cuMemsetD8(m.base, 0, SEM_AREA));
    CK(tcu.cuMemsetD8(m.base + SEM_AREA, POISON, SLOT));
    CK(tcu.cuCtxSynchronize());
    struct blobs mine = export_mem(h, &m), all[2];
    gather(&mine, sizeof(mine), all, NULL);
    const int peer = 1 - rank;
    void *p = NULL;
    p2pt_share_import_t *imp = NULL;
    OK(p2pt_share_import(h, dev, all[peer].b, all[peer].n, &p, &imp));
    OK(p2pt_prepare(h, dev));
    void *const own_sem = (void *)(uintptr_t)m.base;
    void *const peer_sem = p;
    void *const peer_slot = (char *)p + SEM_AREA;
    CUgraph g;
    CUgraphExec x;
    CUdeviceptr src = 0, descs = 0, count = 0, ws = 0, stage = 0, log = 0, log2 = 0;
    if (rank == 0) {
        /* The sender: every round's bytes on the GPU, a descriptor a round
         * into the peer's slot. */
        unsigned char *host = malloc((size_t)ROUNDS * SLOT);
        p2pt_copy_desc *d = malloc(ROUNDS * sizeof(*d));
        if (host == NULL || d == NULL)
            fail("out of host memory");
        for (int r = 0; r < ROUNDS; r++)
            round_bytes(host + (size_t)r * SLOT, r);
        CK(tcu.cuMemAlloc(&src, (size_t)ROUNDS * SLOT));
        CK(tcu.cuMemAlloc(&stage, SLOT));
        CK(tcu.cuMemAlloc(&descs, (ROUNDS + 1) * sizeof(*d)));
        CK(tcu.cuMemAlloc(&count, 4));
        CK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(1)));
        CK(tcu.cuMemcpyHtoD(src, host, (size_t)ROUNDS * SLOT));
        for (int r = 0; r < ROUNDS; r++)
            d[r] = (p2pt_copy_desc){peer_slot, (void *)(uintptr_t)(src + (size_t)r * SLOT), SLOT};
        CK(tcu.cuMemcpyHtoD(descs, d, ROUNDS * sizeof(*d)));
        p2pt_copy_desc from_stage = {peer_slot, (void *)(uintptr_t)stage, SLOT};
        CK(tcu.cuMemcpyHtoD(descs + ROUNDS * sizeof(*d), &from_stage, sizeof(from_stage)));
        uint32_t one = 1;
        CK(tcu.cuMemcpyHtoD(count, &one, 4));
        CK(tcu.cuCtxSynchronize());
        free(host);
        free(d);
        /* A device batch copies only pieces inside windows: the sources'. */
        OK(p2pt_window_register(h, dev, (void *)(uintptr_t)src, (size_t)ROUNDS * SLOT));
        OK(p2pt_window_register(h, dev, (void *)(uintptr_t)stage, SLOT));
        /* Its graph: wait until the receiver took the last round, send the
         * staged bytes, signal. */
        CK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        OK(p2pt_wait_async(h, own_sem, 1, s));
        OK(p2pt_copy_batch_device_signal_async(
            h, (const p2pt_copy_desc *)(uintptr_t)(descs + ROUNDS * sizeof(p2pt_copy_desc)),
            (const uint32_t *)(uintptr_t)count, 1, (void *)(uintptr_t)ws, &peer_sem, 1, s));
        CK(tcu.cuStreamEndCapture(s, &g));
    } else {
        CK(tcu.cuMemAlloc(&log, (size_t)ROUNDS * SLOT));
        CK(tcu.cuMemAlloc(&log2, (size_t)REPLAYS * SLOT));
        CK(tcu.cuMemAlloc(&stage, SLOT));
        CK(tcu.cuMemsetD8(log, POISON, (size_t)ROUNDS * SLOT));
        CK(tcu.cuMemsetD8(log2, POISON, (size_t)REPLAYS * SLOT));
        CK(tcu.cuCtxSynchronize());
        /* Its graph: wait for a round, take it, signal the sender back. */
        CK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        OK(p2pt_wait_async(h, own_sem, 1, s));
        OK(p2pt_copy_async(h, (void *)(uintptr_t)stage, (char *)own_sem + SEM_AREA, SLOT, s));
        OK(p2pt_signal_async(h, peer_sem, s));
        CK(tcu.cuStreamEndCapture(s, &g));
    }
    CK(tcu.cuGraphInstantiateWithFlags(&x, g, 0));
    barrier(); /* both sides ready; nothing sent yet */

    /* The rounds, enqueued at once on both sides: only the semaphores
     * order them. */
    for (int r = 0; r < ROUNDS; r++) {
        if (rank == 0) {
            if (r > 0)
                OK(p2pt_wait_async(h, own_sem, 1, s)); /* the receiver took round r-1 */
            OK(p2pt_copy_batch_device_signal_async(
                h, (const p2pt_copy_desc *)(uintptr_t)(descs + (size_t)r * sizeof(p2pt_copy_desc)),
                (const uint32_t *)(uintptr_t)count, 1, (void *)(uintptr_t)ws, &peer_sem, 1, s));
        } else {
            OK(p2pt_wait_async(h, own_sem, 1, s));
            OK(p2pt_copy_async(h, (void *)(uintptr_t)(log + (size_t)r * SLOT),
                               (char *)own_sem + SEM_AREA, SLOT, s));
            OK(p2pt_signal_async(h, peer_sem, s));
        }
    }
    settled(s, ws, log, ROUNDS, "eager rounds");
    /* The replays: the sender stages round k's bytes before replay k, the
     * receiver logs what replay k took. The sender's first replay waits
     * for the receiver's signal of the last eager round. */
    for (int k = 0; k < REPLAYS; k++) {
        if (rank == 0) {
            CK(tcu.cuMemcpyAsync(stage, src + (size_t)k * SLOT, SLOT, s));
            CK(tcu.cuGraphLaunch(x, s));
        } else {
            CK(tcu.cuGraphLaunch(x, s));
            CK(tcu.cuMemcpyAsync(log2 + (size_t)k * SLOT, stage, SLOT, s));
        }
    }
    settled(s, ws, log2, REPLAYS, "graph replays");
    barrier(); /* both streams done: every signal sent has arrived */
    uint64_t v[4];
    CK(tcu.cuMemcpyDtoH(v, m.base, sizeof(v)));
    /* Signals and waits count in the high halves (docs/SIGNALS.md). */
    const uint64_t want = (uint64_t)(ROUNDS + REPLAYS) << 32;
    if (v[0] != want || v[1] != (rank == 1 ? want : want - (1ull << 32)) || v[2] != 0)
        fail("the semaphore reads value 0x%llx, expected 0x%llx, timeouts %llu",
             (unsigned long long)v[0], (unsigned long long)want, (unsigned long long)v[2]);
    barrier(); /* neither side touches the other's memory any more */
    CK(tcu.cuGraphExecDestroy(x));
    CK(tcu.cuGraphDestroy(g));
    OK(p2pt_share_close(h, imp));
    barrier();
    OK(p2pt_share_unexport(h, (void *)(uintptr_t)m.base));
    mem_free(&m);
    if (rank == 0) {
        OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)src));
        OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)stage));
    }
    CUdeviceptr bufs[] = {src, descs, count, ws, stage, log, log2};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(bufs); i++)
        if (bufs[i] != 0)
            CK(tcu.cuMemFree(bufs[i]));
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s SCENARIO RANK NRANKS FD [GPUS]\n", argv[0]);
        return 2;
    }
    scenario = argv[1];
    rank = atoi(argv[2]);
    nranks = atoi(argv[3]);
    sock = atoi(argv[4]);
    gpus = argc == 6 ? atoi(argv[5]) : nranks;
    if (gpus < 1 || gpus > nranks)
        fail("GPUS %d: expected 1 to NRANKS (%d)", gpus, nranks);
    /* P2P_CUDA_LIBRARY, as the library reads it: the fake driver runs the
     * scenarios that need no kernel on a CPU. */
    if (p2pt_test_driver_load(getenv("P2P_CUDA_LIBRARY")) != P2PT_SUCCESS)
        fail("no CUDA driver: %s", p2pt__last_error_text());
    int count = 0;
    CK(tcu.cuDeviceGetCount(&count));
    if (count < gpus)
        fail("ranks over %d GPUs, %d visible: rank r uses GPU r %% %d", gpus, count, gpus);
    CUdevice dev;
    CUcontext ctx;
    CK(tcu.cuDeviceGet(&dev, rank % gpus));
    CK(tcu.cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(tcu.cuCtxSetCurrent(ctx));
    p2pt_handle *h = NULL;
    OK(p2pt_init(NULL, &h));
    CUstream s;
    CK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const int gpu = (int)dev; /* the device the scenarios map and copy for */
    if (strcmp(scenario, "legacy") == 0)
        put_get('L', h, gpu, s);
    else if (strcmp(scenario, "vmm1") == 0)
        put_get('V', h, gpu, s);
    else if (strcmp(scenario, "vmm3") == 0)
        put_get('W', h, gpu, s);
    else if (strcmp(scenario, "pool") == 0)
        put_get('P', h, gpu, s);
    else if (strcmp(scenario, "bad_blobs") == 0)
        bad_blobs(h, gpu);
    else if (strcmp(scenario, "exporter_exits") == 0)
        exporter_exits(h, gpu);
    else if (strcmp(scenario, "close_waits") == 0)
        close_waits(h, gpu, s);
    else if (strcmp(scenario, "handoff") == 0)
        handoff(h, gpu);
    else if (strcmp(scenario, "signals") == 0)
        signals(h, gpu, s);
    else if (strcmp(scenario, "stall") == 0 && rank == 0)
        pause();
    else if (strcmp(scenario, "stall") == 0)
        barrier();
    else
        fail("no scenario \"%s\"", scenario);
    CK(tcu.cuStreamDestroy(s));
    OK(p2pt_finalize(h));
    finish();
}
