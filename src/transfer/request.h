/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One copy request and everything p2pt needs to know about it, found once
 * (resolve.c) before the router picks an engine. No later step looks any
 * of it up again.
 */
#ifndef P2PT_REQUEST_H
#define P2PT_REQUEST_H

#include "common.h"

/* The driver's handle types as cuda.h declares them (C11 allows the same
 * typedef twice), so modules that only carry a stream or a context do not
 * compile cuda.h. */
typedef struct CUstream_st *CUstream;
typedef struct CUctx_st *CUcontext;

/* Where the bytes go, seen from the stream's device. */
enum p2pt_path {
    P2PT_PATH_LOCAL, /* both sides on the stream's device */
    P2PT_PATH_PUSH,  /* src local, dst on a peer */
    P2PT_PATH_PULL,  /* dst local, src on a peer */
    P2PT_PATH_OTHER, /* host memory, or both sides elsewhere */
};

/* Can the stream's device reach one side? docs/IMPORTED_MEMORY.md has what
 * the driver answers for each kind of memory and which engine moves it. */
enum p2pt_reach {
    P2PT_REACH_MAPPED,        /* device or pinned host memory mapped here */
    P2PT_REACH_NOT_CUDA,      /* memory CUDA does not know (pageable host) */
    P2PT_REACH_UNMAPPED,      /* another device's memory not mapped here, which
                                 the copy engine still moves (staged through
                                 the host, or through the context that opened
                                 it); a kernel here cannot */
    P2PT_REACH_UNMAPPED_POOL, /* pool memory without an access grant here: no
                                 engine moves it */
    P2PT_REACH_NO_ACCESS,     /* VMM memory without access for this device
                                 (cuMemSetAccess): no engine moves it */
};

/* Reach that only the copy engine has: not memory a kernel on the stream's
 * device can touch, yet memory the driver's copies move. */
static inline bool p2pt__reach_ce_only(enum p2pt_reach r)
{
    return r == P2PT_REACH_NOT_CUDA || r == P2PT_REACH_UNMAPPED;
}

struct p2pt_side {
    int device;            /* ordinal; -1 for host memory or unknown */
    enum p2pt_reach reach;
    bool host;             /* pinned host memory (CUDA knows it as host memory) */
    /* P2PT_REACH_UNMAPPED memory that a CUDA IPC handle opened in another
     * device's context (cuIpcOpenMemHandle there: legacy IPC memory that is
     * not itself exportable): peer access does not map it here. */
    bool opened_elsewhere;
    /* The allocation holding the address, as the driver reports it; size 0
     * for memory CUDA does not know. */
    uint64_t start, size;
};

/* Pinned host memory that the stream's device reaches (mapped in its
 * context): what `auto` calls an h2d or d2h side. Pageable memory is not. */
static inline bool p2pt__side_mapped_host(const struct p2pt_side *s)
{
    return s->host && s->reach == P2PT_REACH_MAPPED;
}

/* The links a piece may cross, whose CTAs the policy caps (the table's
 * `link` lines): the host link each way, and a peer link (NVLink). */
enum { P2PT_LINK_H2D, P2PT_LINK_D2H, P2PT_LINK_PEER, P2PT_LINKS };

/* Which way a piece with these sides crosses the host link of `device`
 * (the stream's): 0 h2d (pinned host memory to the device), 1 d2h, -1
 * neither. auto's h2d and d2h lists and the host-link CTAs both read it. */
static inline int p2pt__link_dir(const struct p2pt_side *dst, const struct p2pt_side *src,
                                 int device)
{
    if (p2pt__side_mapped_host(src) && dst->device == device)
        return P2PT_LINK_H2D;
    if (p2pt__side_mapped_host(dst) && src->device == device)
        return P2PT_LINK_D2H;
    return -1;
}

/* The link a piece with these sides crosses, seen from `device`: the host
 * link's way (p2pt__link_dir), else P2PT_LINK_PEER when a side is device
 * memory of another GPU mapped here, else -1 (a local piece, or memory no
 * kernel reaches). The batch's link caps read it. */
static inline int p2pt__piece_link(const struct p2pt_side *dst, const struct p2pt_side *src,
                                   int device)
{
    int dir = p2pt__link_dir(dst, src, device);
    if (dir >= 0)
        return dir;
    const bool mapped = dst->reach == P2PT_REACH_MAPPED && src->reach == P2PT_REACH_MAPPED;
    const bool peer = (dst->device >= 0 && dst->device != device) ||
                      (src->device >= 0 && src->device != device);
    return mapped && peer ? P2PT_LINK_PEER : -1;
}

struct p2pt_request {
    void *dst;
    const void *src;
    size_t bytes;
    CUstream stream;
    CUcontext ctx;  /* the stream's context */
    int device;     /* its device's ordinal */
    struct p2pt_side dst_side, src_side;
    bool coaligned; /* dst == src modulo 16 */
    enum p2pt_path path;
    bool capturing; /* the stream captures into a graph (asked only for a
                       policy that reads it) */
    /* Set by the router for a kernel engine: the most CTAs the launch may
     * use (the host link's CTAs when one side is pinned host memory); 0: no
     * cap beyond the handle's. */
    uint32_t grid_cap;
};

/* Make the stream's context current (pushed when it was not: undo with
 * p2pt__ctx_leave(*pushed)) and find its device's ordinal. Status 5 when
 * the stream has no context. */
P2PT_INTERNAL p2pt_status p2pt__stream_enter(CUstream stream, CUcontext *ctx, int *device,
                                             bool *pushed);
/* Undo p2pt__stream_enter (pop the context it pushed, if any). */
P2PT_INTERNAL void p2pt__stream_leave(bool pushed);
/* Where `p` lives and whether device `stream_dev` reaches it, as the
 * current context (the stream's, made current by the caller) sees it. */
P2PT_INTERNAL p2pt_status p2pt__locate(const void *p, int stream_dev, struct p2pt_side *side);
/* Status 4 for side `s` (at `p`, named `what`), which a kernel on `device`
 * cannot reach, naming why and the remedy; `ce` names the engine that moves
 * it anyway (NULL: say nothing of one). */
P2PT_INTERNAL p2pt_status p2pt__unreachable(const char *what, const void *p,
                                            const struct p2pt_side *s, int device,
                                            const char *ce);
/* [p, p + bytes) must be memory device `device` reaches (its context
 * current) and lie inside one allocation: P2PT_INVALID_ARGUMENT naming
 * `what` otherwise. For ranges a kernel will touch without per-copy checks
 * (windows, a device batch's buffers). *found (when not NULL): the side
 * as located. */
P2PT_INTERNAL p2pt_status p2pt__check_range(const char *what, const void *p, size_t bytes,
                                            int device, struct p2pt_side *found);
/* "local", "push", "pull" or "other". */
P2PT_INTERNAL const char *p2pt__path_name(enum p2pt_path path);
/* Fill r->coaligned and r->path from the sides. */
P2PT_INTERNAL void p2pt__classify(struct p2pt_request *r);
/* Fill everything after `stream` from the driver: the stream's context and
 * device, both sides' devices and reachability, co-alignment, the path. The
 * same lookups whatever P2P_TRANSPORT_VALIDATE says. Enters the stream's
 * context and leaves it again. */
P2PT_INTERNAL p2pt_status p2pt__resolve(struct p2pt_request *r);
/* The same with the stream's context already current and r->ctx and
 * r->device filled (the operation pipeline holds it). */
P2PT_INTERNAL p2pt_status p2pt__resolve_sides(struct p2pt_request *r);
/* The first piece of `b` with bytes, located and classified as a copy
 * would be, into b->first (first.bytes == 0: every piece is empty); the
 * stream's context is current. */
struct p2pt_batch;
P2PT_INTERNAL p2pt_status p2pt__batch_first(struct p2pt_batch *b);
/* Is `stream` capturing into a graph? */
P2PT_INTERNAL p2pt_status p2pt__stream_capturing(CUstream stream, bool *capturing);

#endif /* P2PT_REQUEST_H */
