/*
 * Transports and the router (router.c). A transport describes itself: its
 * name, what it can do, whether it can run one request and why not, and its
 * steps. Adding one is its own file, its kernel, and one registry line.
 */
#ifndef P2PT_TRANSPORT_H
#define P2PT_TRANSPORT_H

#include "batch.h"
#include "config.h"

struct p2pt_handle;
struct p2pt_kernel;

/* What a transport can do (p2pt_transport.caps). */
#define P2PT_CAP_LOCAL (1u << 0)   /* both sides on the stream's device */
#define P2PT_CAP_PEER (1u << 1)    /* push and pull through a peer mapping */
#define P2PT_CAP_STAGED (1u << 2)  /* memory the stream's device cannot map
                                      (pageable host, unmapped peer memory),
                                      staged by the driver */
#define P2PT_CAP_ANY_ALIGN (1u << 3) /* dst and src need not be co-aligned */
#define P2PT_CAP_CAPTURE (1u << 4) /* capturable into a CUDA graph (after prepare) */
#define P2PT_CAP_BATCH (1u << 5)   /* a host batch in one operation (copy_batch) */
#define P2PT_CAP_DEVICE_BATCH (1u << 6) /* descriptors read from GPU memory */

struct p2pt_transport {
    const char *name;
    unsigned caps;
    int min_cc; /* lowest compute capability (major * 10 + minor); 0 = any */
    /* Can this transport run `r`? When not, *why says why (static text).
     * Pure: no driver call, no side effect. */
    bool (*can_copy)(const struct p2pt_handle *h, const struct p2pt_request *r,
                     const char **why);
    /* One-time work for `device` in the current/primary context. May JIT;
     * never called during stream capture. */
    p2pt_status (*prepare)(struct p2pt_handle *h, int device);
    /* Enqueue `r`, resolved, routed and validated. */
    p2pt_status (*copy)(struct p2pt_handle *h, const struct p2pt_request *r);
    /* Enqueue a host batch, every piece checked. NULL: the entry point
     * loops over copy, one resolved request per piece. */
    p2pt_status (*copy_batch)(struct p2pt_handle *h, const struct p2pt_batch *b);
    /* Enqueue a device-descriptor batch. NULL: not supported (status 6). */
    p2pt_status (*copy_batch_device)(struct p2pt_handle *h, const struct p2pt_device_batch *b);
    /* The kernels it compiles at run time, NULL-ended (prepare loads them
     * all; each is described beside the code that launches it). */
    const struct p2pt_kernel *kernels[4];
};

P2PT_INTERNAL extern const struct p2pt_transport p2pt__transport_ce;
P2PT_INTERNAL extern const struct p2pt_transport p2pt__transport_tma;

/* Registered transports, at most; the copy engine is the first. */
#define P2PT_MAX_TRANSPORTS 4

/* How many kernels transport `t` compiles. */
P2PT_INTERNAL int p2pt__kernel_count(const struct p2pt_transport *t);
/* Case-insensitive lookup in the registry; NULL when unknown. */
P2PT_INTERNAL const struct p2pt_transport *p2pt__transport_find(const char *name);
/* The registry's i-th transport (0: the copy engine), NULL past the end. */
P2PT_INTERNAL const struct p2pt_transport *p2pt__transport_at(int i);
/* The registry's names in order, at most `max` of them; returns how many
 * (an engine's index in a crossover table is its registry position). */
P2PT_INTERNAL int p2pt__engine_names(const char **names, int max);
/* Its position in the registry (the index of per-engine counters). */
P2PT_INTERNAL int p2pt__transport_index(const struct p2pt_transport *t);
/* The handle's transport name: a registered one, or "auto". */
P2PT_INTERNAL const char *p2pt__handle_transport_name(const struct p2pt_handle *h);

/*
 * The transport that runs `r` for handle `h` (*t): with a fixed transport,
 * the handle's own when its can_copy says yes, else the copy engine
 * (counted in ce_fallbacks, logged once per handle with the reason); with
 * auto, the table's choice (route_auto.c). When `why` is not NULL it gets
 * the reason in words (p2pt_explain_copy); the copy path passes NULL.
 */
P2PT_INTERNAL p2pt_status p2pt__route(struct p2pt_handle *h, const struct p2pt_request *r,
                                      const struct p2pt_transport **t, char *why, size_t len);
/* The same for a host batch (b->pieces > 0, stream resolved). */
P2PT_INTERNAL p2pt_status p2pt__route_batch(struct p2pt_handle *h, const struct p2pt_batch *b,
                                            const struct p2pt_transport **t, char *why,
                                            size_t len);

/* ---- auto (route_auto.c) ---- */
struct p2pt_auto;
/* The built-in tables and, when cfg names one, the table file, parsed and
 * checked against the registry (CUDA-free: p2pt_init calls it before it
 * loads the driver, so a bad file is reported on any machine). */
P2PT_INTERNAL p2pt_status p2pt__auto_load(const struct p2pt_config *cfg, struct p2pt_auto **out);
P2PT_INTERNAL void p2pt__auto_free(struct p2pt_auto *a);
/* After the driver is loaded: a table file must match the architecture of
 * a visible GPU; logs the tables in use (INFO). */
P2PT_INTERNAL p2pt_status p2pt__auto_check_machine(struct p2pt_handle *h);
P2PT_INTERNAL p2pt_status p2pt__auto_copy(struct p2pt_handle *h, const struct p2pt_request *r,
                                          const struct p2pt_transport **t, char *why,
                                          size_t len);
P2PT_INTERNAL p2pt_status p2pt__auto_batch(struct p2pt_handle *h, const struct p2pt_batch *b,
                                           const struct p2pt_transport **t, char *why,
                                           size_t len);
/* prepare() of every engine the device's table may choose. */
P2PT_INTERNAL p2pt_status p2pt__auto_prepare(struct p2pt_handle *h, int device);

#endif /* P2PT_TRANSPORT_H */
