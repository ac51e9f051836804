/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The staging ring for TMA host batches: the host writes each batch's
 * descriptors once, into pinned host memory, in the same pass that checks
 * them (the pipeline's, src/transfer/batch_scan.c, with a slot as this
 * engine's sink), and kernels/batch_copy.cu's ring entry
 * reads them there, over the bus, each block of descriptors once (the
 * first CTA serving it copies it to the ring's GPU memory for the others).
 * With P2P_TRANSPORT_BATCH_STAGING=gpu, one copy on the stream moves them
 * to GPU memory first. Against descriptors in the kernel parameters (up to
 * 1344 per launch, 32 KiB that the driver copies at every launch), the host
 * pays a memcpy and two small calls per batch of any size, and a batch of
 * 100,000 pieces is one launch.
 *
 * One ring per CUDA context, shared by every handle and thread (like the
 * modules in jit.c, kept for the life of the process): RING_BYTES of pinned
 * host memory and as much GPU memory, carved into slots in FIFO order. A
 * slot is free again once the event recorded after its kernel has
 * completed: the copy out of it and the kernel reading it are both done.
 * When the ring is full a batch takes the parameters path, as a captured
 * one does: no call waits for the GPU here (one that did could hold its
 * thread behind a stream wait that only its own later calls release), and
 * a host far ahead of the GPU is held back by the driver's launch queue.
 *
 * Not used while the stream captures a graph (a replay would read a slot
 * long since reused: captured batches keep their descriptors in the
 * kernel parameters), nor when the driver lacks an entry it needs or the
 * ring cannot be allocated (the parameters path then serves every batch,
 * logged once).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "batch_plan.h"
#include "tma.h"

#define RING_BYTES (8u << 20) /* 349,525 descriptors in flight */
#define RING_SLOTS 64         /* batches in flight per context */
/* P2P_TRANSPORT_BATCH_STAGING=auto reads the pinned ring in place at
 * every size: with each block of descriptors crossing the bus once, it
 * costs the GPU no more than the copy it saves costs the host
 * (bench/results/batches.md). */

struct slot {
    size_t start;  /* where it begins: the free bytes end at the oldest slot's start */
    CUevent done;  /* recorded after the kernel that reads it */
};

struct ring {
    CUcontext ctx;
    unsigned long long ctx_id;
    pthread_mutex_t lock;
    _Atomic bool usable; /* allocated, and no launch from it failed; false:
                            the parameters path serves this context */
    char *host;
    CUdeviceptr dev;
    size_t head;             /* where the next slot starts */
    unsigned first, n_slots; /* the busy slots, oldest first, circularly */
    struct slot slot[RING_SLOTS];
    struct ring *next;
};

static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring *rings;

/* The ready value of a launch that reads the ring in place
 * (p2pt_kernel_abi.h): one count for the whole process, so that no value
 * repeats in any ring's GPU memory, under P2PT_RING_SEQ_TAG. */
static atomic_uint_least64_t ring_seq;

static unsigned long long next_seq(void)
{
    const uint64_t n = atomic_fetch_add_explicit(&ring_seq, 1, memory_order_relaxed) + 1;
    return (unsigned long long)(P2PT_RING_SEQ_TAG << 48 | (n & ((1ull << 48) - 1)));
}

static bool driver_has_ring(void)
{
    const struct p2pt_cuda *c = &p2pt__cu;
    return c->cuMemAllocHost && c->cuMemFreeHost && c->cuMemAlloc && c->cuMemFree &&
           c->cuMemcpyHtoDAsync && c->cuEventCreate && c->cuEventRecord && c->cuEventQuery;
}

/* The ring's own driver calls (its first allocation, its event queries) on
 * streams that do not capture: under the global or thread-local capture
 * mode CUDA forbids them while another stream of the thread (global: of
 * the process) captures, and then fails that capture too. Relaxed for
 * their span, then the thread's mode again. */
static bool relax(CUstreamCaptureMode *mode)
{
    *mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    return p2pt__cu.cuThreadExchangeStreamCaptureMode != NULL &&
           p2pt__cu.cuThreadExchangeStreamCaptureMode(mode) == CUDA_SUCCESS;
}

static void unrelax(bool relaxed, CUstreamCaptureMode mode)
{
    if (relaxed)
        p2pt__cu.cuThreadExchangeStreamCaptureMode(&mode);
}

/* Allocate `r`'s memory and events in its context (current). On failure
 * everything made is released and the ring stays unusable. */
static void ring_alloc(struct ring *r)
{
    if (!driver_has_ring())
        return;
    void *host = NULL;
    CUdeviceptr dev = 0;
    int events = 0;
    CUstreamCaptureMode mode;
    const bool relaxed = relax(&mode);
    if (p2pt__cu.cuMemAllocHost(&host, RING_BYTES) != CUDA_SUCCESS)
        goto fail;
    if (p2pt__cu.cuMemAlloc(&dev, RING_BYTES) != CUDA_SUCCESS)
        goto fail;
    for (; events < RING_SLOTS; events++)
        if (p2pt__cu.cuEventCreate(&r->slot[events].done, CU_EVENT_DISABLE_TIMING) !=
            CUDA_SUCCESS)
            goto fail;
    r->host = host;
    r->dev = dev;
    r->usable = true;
    unrelax(relaxed, mode);
    return;
fail:
    /* The events made so far stay (the library table has no cuEventDestroy;
     * this happens at most once per context). */
    if (dev != 0)
        p2pt__cu.cuMemFree(dev);
    if (host != NULL)
        p2pt__cu.cuMemFreeHost(host);
    unrelax(relaxed, mode);
}

/* The ring of context `ctx` (the stream's, current), made on first use. */
static struct ring *ring_of(CUcontext ctx, bool *made)
{
    unsigned long long id = 0;
    *made = false;
    if (p2pt__cu.cuCtxGetId(ctx, &id) != CUDA_SUCCESS)
        return NULL;
    pthread_mutex_lock(&rings_lock);
    struct ring *r = rings;
    while (r != NULL && !(r->ctx == ctx && r->ctx_id == id))
        r = r->next;
    if (r == NULL && (r = calloc(1, sizeof(*r))) != NULL) {
        r->ctx = ctx;
        r->ctx_id = id;
        pthread_mutex_init(&r->lock, NULL);
        ring_alloc(r);
        r->next = rings;
        rings = r;
        *made = true;
    }
    pthread_mutex_unlock(&rings_lock);
    return r;
}

/* Retire the oldest slot if its launch is done. Returns whether it was. */
static bool retire_oldest(struct ring *r, p2pt_status *st)
{
    struct slot *s = &r->slot[r->first];
    CUresult q = p2pt__cu.cuEventQuery(s->done);
    if (q == CUDA_ERROR_NOT_READY)
        return false;
    if (q != CUDA_SUCCESS) {
        *st = p2pt__cuda_fail(q, "cuEventQuery(staging ring slot)", __FILE__, __LINE__);
        return false;
    }
    r->first = (r->first + 1) % RING_SLOTS;
    r->n_slots--;
    return true;
}

/* Whether [*at, *at + need) of the ring is free (caller holds r->lock). */
static bool fits(struct ring *r, size_t need, size_t *at)
{
    if (r->n_slots == 0)
        r->head = 0;
    if (r->n_slots == RING_SLOTS)
        return false;
    size_t tail = r->n_slots ? r->slot[r->first].start : 0;
    if (r->n_slots == 0 || r->head > tail) {
        /* Free: [head, end) and [0, tail). */
        if (RING_BYTES - r->head >= need) {
            *at = r->head;
            return true;
        }
        if (tail >= need) {
            *at = 0;
            return true;
        }
        return false;
    }
    if (r->head < tail && tail - r->head >= need) {
        *at = r->head;
        return true;
    }
    return false;
}

/* Bytes [*at, *at + need) of the ring, free now (caller holds r->lock;
 * need <= RING_BYTES): *got says whether they were found. Completed slots
 * are retired only when the batch does not fit (their event queries are
 * the ring's only driver calls besides the launch's record); a busy one
 * is never waited for. A host batch is asynchronous: waiting here would
 * hold this thread, and every thread of the context behind the lock, until
 * the GPU reached the oldest slot, which may sit behind a wait that only a
 * later call of this very thread would release. A full ring sends the
 * batch to the parameters path instead. */
static p2pt_status take(struct ring *r, size_t need, size_t *at, bool *got)
{
    p2pt_status st = P2PT_SUCCESS;
    if ((*got = fits(r, need, at)))
        return st;
    CUstreamCaptureMode mode;
    const bool relaxed = relax(&mode);
    while (r->n_slots > 0 && retire_oldest(r, &st))
        ;
    unrelax(relaxed, mode);
    if (st == P2PT_SUCCESS)
        *got = fits(r, need, at);
    return st;
}

/* Whether the kernels make the pieces of `b` from its blocks
 * (P2PT_RING_BLOCKS): blocks of a multiple of 16 bytes in every layer, so
 * that each layer's pieces share their alignment and the pass counts them
 * a layer at once. Then the slot holds the mapping's pairs and a
 * p2pt_ring_layer per layer (*need bytes) instead of a descriptor a piece. */
static bool staged_as_blocks(const struct p2pt_batch *b, size_t *need)
{
    const struct p2pt_blocks *k = b->blocks;
    if (k == NULL)
        return false;
    const size_t layers = b->count / k->rows;
    for (size_t l = 0; l < layers; l++) {
        const uint64_t bb = p2pt__block_layer_at(k, l)->block_bytes;
        if (bb == 0 || bb % 16 != 0)
            return false;
    }
    *need = k->rows * 2 * sizeof(int64_t) + layers * sizeof(struct p2pt_ring_layer);
    return *need <= RING_BYTES;
}

/* After the pairs the pass copied to `at`, the layers' records; returns
 * where the layers start. */
static size_t stage_layers(const struct p2pt_batch *b, char *at)
{
    const struct p2pt_blocks *k = b->blocks;
    const size_t pairs = k->rows * 2 * sizeof(int64_t), layers = b->count / k->rows;
    struct p2pt_ring_layer *out = (struct p2pt_ring_layer *)(void *)(at + pairs);
    for (size_t l = 0; l < layers; l++) {
        const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
        out[l].dst = (unsigned long long)(uintptr_t)L->dst;
        out[l].src = (unsigned long long)(uintptr_t)L->src;
        out[l].bytes = L->block_bytes;
    }
    return pairs;
}

p2pt_status p2pt__tma_ring_open(struct p2pt_handle *h, const struct p2pt_batch *b,
                                struct p2pt_batch_sink *s, struct p2pt_tma_slot *slot, bool *got)
{
    p2pt_status st = P2PT_SUCCESS;
    bool made = false;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    struct ring *r = NULL;
    size_t need = 0, ready_at = 0;

    *got = false;
    const bool blocks = !s->as_descs && staged_as_blocks(b, &need);
    if (!blocks) {
        if (b->count > RING_BYTES / sizeof(struct p2pt_batch_desc))
            return P2PT_SUCCESS;
        /* The slot: room for every descriptor (the pass writes the non-empty
         * ones) and, read in place, a ready word per block of them after them
         * (GPU side; descriptors are 24 bytes, so the words are aligned). */
        _Static_assert(sizeof(struct p2pt_batch_desc) % 8 == 0, "ready words must be aligned");
        ready_at = b->count * sizeof(struct p2pt_batch_desc);
        need = ready_at + 8 * ((b->count + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK);
        if (need > RING_BYTES)
            return P2PT_SUCCESS;
    }
    P2PT_CU(p2pt__cu.cuStreamIsCapturing(b->stream, &cs));
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE)
        goto out;
    r = ring_of(b->ctx, &made);
    if (made && (r == NULL || !r->usable))
        P2PT_INFO(&h->log, "tma: no staging ring for host batches in this context (%s); their "
                           "descriptors travel in the kernel parameters",
                  driver_has_ring() ? "pinned host or GPU memory could not be allocated"
                                    : "the driver lacks an entry it needs");
    if (r == NULL || !r->usable)
        goto out;
    pthread_mutex_lock(&r->lock);
    size_t at = 0;
    bool room = false;
    /* Again under the lock: a launch that failed meanwhile left its slot's
     * bytes to a kernel that may still read them. */
    if (!r->usable || (st = take(r, need, &at, &room)) != P2PT_SUCCESS || !room) {
        pthread_mutex_unlock(&r->lock);
        goto out;
    }
    *slot = (struct p2pt_tma_slot){r, at, need, ready_at, blocks};
    if (blocks)
        s->rows = (int64_t *)(void *)(r->host + at); /* the pass copies the pairs here */
    else
        s->descs = (struct p2pt_batch_desc *)(void *)(r->host + at);
    *got = true;
out:
    return st;
}

void p2pt__tma_ring_close(struct p2pt_tma_slot *slot)
{
    struct ring *r = slot->ring;
    if (r != NULL)
        pthread_mutex_unlock(&r->lock);
    slot->ring = NULL;
}

p2pt_status p2pt__tma_ring_submit(struct p2pt_handle *h, const struct p2pt_batch *b,
                                  struct p2pt_tma_slot *slot, const struct p2pt_module *m,
                                  const struct p2pt_module *lm, const uint64_t *spread,
                                  unsigned most)
{
    p2pt_status st = P2PT_SUCCESS;
    struct ring *r = slot->ring;
    const size_t at = slot->at;
    const bool blocks = slot->blocks;
    size_t layers_at = 0;

    if (blocks)
        layers_at = stage_layers(b, r->host + at);
    const int staging = p2pt__tma_settings(h)->batch_staging;
    const bool in_place = staging != P2PT_STAGING_GPU;
    CUdeviceptr descs = (CUdeviceptr)(uintptr_t)(r->host + at); /* mapped: UVA */
    if (!in_place) {
        descs = r->dev + at;
        P2PT_CU(p2pt__cu.cuMemcpyHtoDAsync(
            descs, r->host + at,
            blocks ? slot->need : b->pieces * sizeof(struct p2pt_batch_desc), b->stream));
    }
    const unsigned flags = (in_place ? P2PT_RING_HOST : 0) | (blocks ? P2PT_RING_BLOCKS : 0);
    const unsigned long long layers = blocks ? (unsigned long long)(descs + layers_at) : 0;
    const unsigned long long rows = blocks ? b->blocks->rows : 0;
    /* Blocks: every piece has bytes, and the kernel counts them all. */
    const unsigned count = (unsigned)(blocks ? b->count : b->pieces);
    /* From here on the stream reads the slot: if anything fails before the
     * slot is recorded as busy, the ring is never used again, so that no
     * later batch writes where a pending copy or kernel may still read. */
    const unsigned link_grid = p2pt__tma_link_kernel_grid(b, most);
    const bool link = lm != NULL && p2pt__tma_link_choice(b, spread, most, NULL) ==
                                        P2PT_LINK_KERNEL;
    most = p2pt__tma_link_grid(b, most);
    const struct p2pt_launch_settings ls = p2pt__tma_batch_launch(h, b);
    if (link) {
        /* The link kernel: a warp a piece, no plan (kernels/link_copy.cu). */
        struct p2pt_link_params lp = {(unsigned long long)descs, count, flags, layers, rows};
        void *lparams[] = {&lp};
        st = p2pt__kernel_launch(h, &ls, lm->fn[P2PT_LINK_ENTRY_COPY], link_grid,
                                 P2PT_LINK_THREADS, 0, b->stream, lparams);
    } else {
        struct p2pt_batch_ring_params p = {(unsigned long long)descs, count, flags, 0, 0, 0,
                                           layers, rows};
        if (in_place && !blocks) { /* the blocks of descriptors shared_block passes on */
            p.shared = (unsigned long long)(r->dev + at);
            p.ready = (unsigned long long)(r->dev + at + slot->ready_at);
            p.seq = next_seq();
        }
        void *params[] = {&p};
        unsigned grid = b->tiles < most ? (unsigned)b->tiles : most;
        st = p2pt__kernel_launch(h, &ls, m->fn[P2PT_BATCH_ENTRY_RING], grid, P2PT_BATCH_THREADS,
                                 0, b->stream, params);
    }
    if (st == P2PT_SUCCESS) {
        struct slot *sl = &r->slot[(r->first + r->n_slots) % RING_SLOTS];
        CUresult rr = p2pt__cu.cuEventRecord(sl->done, b->stream);
        if (rr != CUDA_SUCCESS) {
            st = p2pt__cuda_fail(rr, "cuEventRecord(staging ring slot)", __FILE__, __LINE__);
        } else {
            sl->start = at;
            r->n_slots++;
            r->head = at + slot->need;
            atomic_fetch_add_explicit(&p2pt__tma_counters(h)->batch_launches, 1,
                                      memory_order_relaxed);
        }
    }
    if (st != P2PT_SUCCESS)
        r->usable = false;
out:
    return st;
}
