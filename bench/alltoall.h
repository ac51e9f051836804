/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the alltoall mode's files share: the GPUs of the run and one
 * round of a way (alltoall_rounds.c), one shape's buffers
 * (alltoall_buffers.c), the check (alltoall_check.c), and the rows, the
 * table and the order of a run (mode_alltoall.c).
 *
 * A shape: every GPU holds `rows` source rows of `row_bytes`; to every
 * peer it sends k = frac x rows of them, picked at random and sent in row
 * order (a token's row goes to an expert's GPU in token order). GPU d's
 * receive buffer holds one region per source GPU s, in GPU order: the k
 * rows from s, then A2A_GUARD guard bytes that nothing may write. The
 * packed send buffer of s holds, per destination in GPU order, the k rows
 * already gathered: what ce_packed and NCCL send. ce_packed receives into
 * `ref`, laid out as `recv`; every other way into `recv`, which is then
 * compared with `ref` byte for byte, guards included.
 */
#ifndef P2PT_BENCH_ALLTOALL_H
#define P2PT_BENCH_ALLTOALL_H

#include "bench.h"
#include "nccl.h"

#define A2A_MAX_GPUS 32   /* P2PT_TOPOLOGY_MAX_DEVICES */
#define A2A_GUARD 4096    /* bytes after each source's region of a receive buffer */

/* The ways a round can be run, in the order of a shape's table. */
enum a2a_way {
    A2A_CE_PACKED, /* packed rows, one cuMemcpyAsync per GPU pair */
    A2A_NCCL,      /* ncclSend/ncclRecv of the packed rows */
    A2A_PLAIN,     /* ref_kernel.c's warp per row on the device descriptors */
    A2A_CE,        /* from here on: p2pt, a batch per source GPU; host batches */
    A2A_TMA_HOST,
    A2A_TMA,       /* device batch */
    A2A_AUTO_HOST,
    A2A_AUTO,      /* device batch */
    A2A_N_WAYS
};

enum a2a_res { A2A_OK, A2A_UNSUPPORTED, A2A_FAILED };

struct a2a_gpu {
    struct bench_gpu g;             /* its primary context retained */
    CUstream main;                  /* every way's stream but ce_packed's */
    CUstream pair[A2A_MAX_GPUS];    /* ce_packed: one stream per destination */
    CUevent go, done;               /* fork and join of a round on main */
    CUevent pair_done[A2A_MAX_GPUS];
    unsigned char *pattern;         /* one period of the source rows' pattern:
                                       source byte o is pattern[o % BENCH_PATTERN_PERIOD] */
    CUmodule diff_mod;              /* the compare kernel (alltoall_check.c) */
    CUfunction diff_fn;
    CUdeviceptr diff_first;         /* its answer: the first 16-byte unit that differs */
    /* One shape's buffers, 0 outside a shape. */
    CUdeviceptr src;                /* rows x row_bytes */
    CUdeviceptr packed;             /* (n - 1) x k rows, by destination */
    CUdeviceptr recv, ref;          /* (n - 1) regions of k rows + A2A_GUARD */
    CUdeviceptr descs, count;       /* the device batch: descriptors and their count */
    CUdeviceptr workspace;          /* the device batch's status record */
    p2pt_copy_desc *hdescs;         /* the same descriptors on the host */
};

struct a2a {
    int n;                          /* GPUs 0 .. n - 1 */
    size_t rows, row_bytes, k;      /* k: rows each GPU sends each peer */
    double frac;
    bool by_dest;                   /* the batches' order: by destination, else by row */
    size_t count;                   /* pieces one GPU sends: (n - 1) x k */
    size_t region;                  /* k x row_bytes + A2A_GUARD */
    size_t recv_bytes;              /* (n - 1) x region */
    uint32_t *pick;                 /* [s][d][0 .. k): source rows, ascending */
    struct a2a_gpu gpu[A2A_MAX_GPUS];
    struct bench_nccl *nccl;        /* rank g is GPU g; NULL: no NCCL */
    struct bench_ref plain[A2A_MAX_GPUS]; /* the plain kernel on every GPU */
    int plain_ctas;
    CUevent *starts, *ends;         /* on GPU 0, one pair per timed round */
    int rounds;
};

/* Where `other` sits among `self`'s peers (GPU order, self left out). */
static inline int a2a_peer_index(int self, int other) { return other < self ? other : other - 1; }

/* The k rows source `s` sends to `d`. */
static inline const uint32_t *a2a_pick(const struct a2a *A, int s, int d)
{
    return A->pick + ((size_t)s * (size_t)A->n + (size_t)d) * A->k;
}

/* Offset of source `s`'s region in `d`'s receive buffer. */
static inline size_t a2a_recv_offset(const struct a2a *A, int s, int d)
{
    return (size_t)a2a_peer_index(d, s) * A->region;
}

/* Offset of destination `d`'s rows in `s`'s packed send buffer. */
static inline size_t a2a_packed_offset(const struct a2a *A, int s, int d)
{
    return (size_t)a2a_peer_index(s, d) * A->k * A->row_bytes;
}

/* -------------------------------------------------- alltoall_rounds.c */

/* GPUs 0 .. n - 1: contexts, streams, events, and `rounds` pairs of timing
 * events on GPU 0. Close also after a partial open. */
bool a2a_gpus_open(struct a2a *A, int n, int rounds);
void a2a_gpus_close(struct a2a *A);
/* Peer access between every two GPUs (p2pt_peer_enable), and the largest
 * device batch p2pt takes. */
bool a2a_peers_enable(struct a2a *A, uint32_t *batch_max);
/* One round of `way` (`h`: its p2pt handle) on every GPU between `start`
 * and `end`, GPU 0's events; *enq_us, when not NULL, the host's time to
 * enqueue it. A2A_UNSUPPORTED (bench_err says why) where p2pt refuses
 * the batch with status 6; a2a_drain then lets what did go in finish. */
enum a2a_res a2a_round(struct a2a *A, int way, p2pt_handle *h, CUevent start, CUevent end,
                       double *enq_us);
/* Waits for `end`; polls NCCL's rounds for errors and hangs. */
bool a2a_round_wait(struct a2a *A, int way, CUevent end);
bool a2a_drain(struct a2a *A);

/* ------------------------------------------------- alltoall_buffers.c */

/* Each GPU's source pattern on the host (once per run). */
bool a2a_patterns(struct a2a *A);
/* GPU memory one shape needs on each GPU. */
size_t a2a_shape_bytes(const struct a2a *A);
/* The picks, the buffers (sources filled, rows packed), the descriptors
 * on the host and on every GPU. False with bench_err saying why. */
bool a2a_shape_open(struct a2a *A);
/* Frees everything a shape holds (also after a partial open). */
void a2a_shape_close(struct a2a *A);

/* --------------------------------------------------- alltoall_check.c */

/* The compare kernel, compiled with NVRTC and loaded on every GPU. */
bool a2a_check_load(struct a2a *A);
void a2a_check_unload(struct a2a *A);
/* Every GPU's recv (or ref) poisoned; device batches' status records set
 * to all ones, so a batch that never ran cannot read as done. */
bool a2a_poison(struct a2a *A, bool ref);
/* ce_packed's bytes: every region of every ref against the source rows
 * (host copies of the patterns), every guard still poison. `*ok` false,
 * with the difference reported after the row, when one is not. */
bool a2a_verify_reference(struct a2a *A, const char *label, bool *ok);
/* Once per shape, on a poisoned recv and ce_packed's ref: the compare
 * kernel must see them differ at the very first byte, or its later "no
 * difference" would prove nothing. */
bool a2a_compare_can_fail(struct a2a *A, const char *label, bool *ok);
/* After it: every GPU's recv equals its ref, guards included. */
bool a2a_compare_reference(struct a2a *A, const char *label, bool *ok);
/* After a device batch's checked round: every GPU's status record says
 * every descriptor was copied and none skipped. */
bool a2a_check_batch_status(struct a2a *A, const char *label, bool *ok);

#endif /* P2PT_BENCH_ALLTOALL_H */
