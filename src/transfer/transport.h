/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engines (transports). An engine describes itself: its name, what it can
 * do, whether it can run one request and why not, its private state and its
 * steps. Adding one is its own file, its kernel, and one registry line
 * (engines/registry.c).
 *
 * A host batch reaches an engine after the pipeline's one pass over its
 * pieces (transfer/batch_scan.c), which reads each piece once, checks it and
 * sums what routing needs. The engine takes no part in that pass but to say
 * where its pieces go (batch_sink) and, once every piece has passed, to
 * enqueue what it was given (batch_submit). The pieces a batch holds are
 * descriptors (b->descs) or blocks (b->blocks, descs NULL) made as the pass
 * reads them: an engine reads neither, only its sink and the pass's sums
 * (struct p2pt_batch, batch.h).
 */
#ifndef P2PT_TRANSPORT_H
#define P2PT_TRANSPORT_H

#include "batch.h"
#include "config.h"
#include "signal_op.h"
#include "engine_limits.h"

struct p2pt_handle;
struct p2pt_kernel;

/* What a transport can do that the pipeline and the policies ask about
 * (p2pt_transport.caps); what every engine does (local and peer copies,
 * capture after prepare) and what its hooks say (batch_sink, can_copy's
 * alignment test) needs no bit. */
#define P2PT_CAP_STAGED (1u << 2)  /* memory the stream's device cannot map
                                      (pageable host, unmapped peer memory),
                                      staged by the driver */
#define P2PT_CAP_DEVICE_BATCH (1u << 6) /* descriptors read from GPU memory */
#define P2PT_CAP_FALLBACK (1u << 7) /* runs any request: where a copy goes when
                                       the chosen engine's can_copy says no */
#define P2PT_CAP_SIGNAL (1u << 9) /* signal and wait (kernels: epochs advance in
                                     device memory) */

struct p2pt_transport {
    const char *name;
    unsigned caps;
    int min_cc; /* lowest compute capability (major * 10 + minor); 0 = any */
    /* The variables it reads (NULL: none): config reads them into the
     * engine's slot of the handle's configuration (p2pt__engine_settings_in),
     * and its init hook keeps its own copy. */
    const struct p2pt_settings *settings;
    /* Can this transport run `r`? When not, *why says why (static text).
     * Pure: no driver call, no side effect. */
    bool (*can_copy)(const struct p2pt_handle *h, const struct p2pt_request *r,
                     const char **why);
    /* Per-handle private state, made at p2pt_init (NULL hook: none) and
     * freed at p2pt_finalize. */
    p2pt_status (*init)(const struct p2pt_handle *h, void **state);
    void (*fini)(void *state);
    /* Fill the p2pt_properties fields it owns (NULL: none): the counters
     * it keeps in its state, and its share of the handle's per-engine
     * counters (`e`: its registry index) under its own names. */
    void (*report)(const struct p2pt_handle *h, int e, const void *state, p2pt_properties *p);
    /* One-time work for `device` in the current/primary context. May JIT;
     * never called during stream capture. */
    p2pt_status (*prepare)(struct p2pt_handle *h, int device);
    /* Enqueue `r`, resolved, routed and validated. */
    p2pt_status (*copy)(struct p2pt_handle *h, const struct p2pt_request *r);
    /*
     * Host batches, in the order the pipeline calls them (NULL batch_sink:
     * after the pass, each of the caller's pieces, empty ones included, goes
     * through `copy` as a request of its own):
     *
     * batch_sink: where the pass puts the pieces of `b` (batch.h, struct
     * p2pt_batch_sink; s->dry and s->as_descs are set, the rest zero). The
     * batch's count, kind (descriptors or blocks), stream, context, link
     * caps and, for blocks, `mapped` are known; no piece has been read.
     * With as_descs the sink must hold descriptors, in memory the host
     * reads: the pass writes those alone (another engine may take them),
     * and whatever else the sink holds (groups) the pipeline fills from
     * them before submit. On failure it holds nothing. Nothing is enqueued
     * here.
     *
     * batch_submit: every piece has passed (b->passed, b->pieces > 0), and
     * the sink holds them as the engine asked (with as_descs, groups filled
     * from the descriptors by the pipeline): enqueue them. Not called in a
     * dry run.
     *
     * batch_describe: a dry run's words on what submit would do, appended
     * to why[0, len) (NULL: none).
     *
     * batch_release: give back what batch_sink took, whether the sink was
     * submitted, described, or dropped (a refused piece, nothing to do, or a
     * route that chose another engine). NULL: nothing to give back.
     */
    p2pt_status (*batch_sink)(struct p2pt_handle *h, const struct p2pt_batch *b,
                              struct p2pt_batch_sink *s);
    p2pt_status (*batch_submit)(struct p2pt_handle *h, const struct p2pt_batch *b,
                                struct p2pt_batch_sink *s);
    void (*batch_describe)(const struct p2pt_handle *h, const struct p2pt_batch *b,
                           const struct p2pt_batch_sink *s, char *why, size_t len);
    void (*batch_release)(struct p2pt_handle *h, struct p2pt_batch_sink *s);
    /* Enqueue a device-descriptor batch (and its signals, b->n_signals).
     * NULL: not supported (status 6). */
    p2pt_status (*copy_batch_device)(struct p2pt_handle *h, const struct p2pt_device_batch *b);
    /* Enqueue a signal or a wait (P2PT_CAP_SIGNAL), its semaphore checked.
     * NULL: not supported. */
    p2pt_status (*signal)(struct p2pt_handle *h, const struct p2pt_signal *s);
    /* The kernels it compiles at run time, NULL-ended (prepare loads them
     * all; each is described beside the code that launches it). */
    const struct p2pt_kernel *kernels[6];
};

/* How many kernels transport `t` compiles. */
static inline int p2pt__kernel_count(const struct p2pt_transport *t)
{
    int n = 0;
    while (n < (int)P2PT_ARRAY_LEN(t->kernels) && t->kernels[n] != NULL)
        n++;
    return n;
}

#endif /* P2PT_TRANSPORT_H */
