/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory shared between processes: this process's device memory exported
 * as blobs, other processes' exports imported as windows, and the wait that
 * keeps a close from unmapping under queued work. A module below the API
 * and core, beside windows: it uses cuda/, util/ and transfer's windows and
 * handle; nothing below it includes this header.
 *
 *   share.c         a handle's sharing state, made on first use; the refusal
 *                   when the driver lacks an entry point sharing needs
 *   share_handle.c  its end at finalize (imports closed, exports ended) and
 *                   its counters in the handle's properties
 *   share_blob.c    the blob: its layout and checksum, the checks of one blob
 *                   and of a set; this host's name and boot id (CUDA-free)
 *   share_fd.c      the descriptor server and its client: an abstract Unix
 *                   socket, SCM_RIGHTS, SO_PEERCRED, a timeout on every step
 *                   (CUDA-free)
 *   share_export.c  exports: which kind of memory, its blobs, unexport
 *   share_import.c  imports: the mapping, its window, sharing it, the close
 *   share_marks.c   one event per stream of a device with imports open
 */
#ifndef P2PT_SHARE_H
#define P2PT_SHARE_H

#include "common.h"
#include "windows.h"

/* The driver's handle types as cuda.h declares them (C11 allows the same
 * typedef twice), so that core, which calls the hook below, compiles no
 * cuda.h. */
typedef struct CUstream_st *CUstream;
typedef struct CUctx_st *CUcontext;
typedef struct CUevent_st *CUevent;

struct p2pt_handle;

/* ------------------------------------------------------------- share_blob.c */

#define P2PT_SHARE_VERSION 1
#define P2PT_SHARE_TOKEN_BYTES 16
#define P2PT_SHARE_PAYLOAD_BYTES 64 /* a CUipcMemHandle, a CUmemPoolPtrExportData */
#define P2PT_SHARE_HOST_CHARS 32    /* the host's name as a message shows it */
/* Physical allocations one export may span (PyTorch's expandable segments
 * map 20 MiB pieces: 4096 of them are 80 GiB). */
#define P2PT_SHARE_MAX_PIECES 4096

enum p2pt_share_kind {
    P2PT_SHARE_LEGACY = 1, /* cuMemAlloc memory: a legacy IPC handle */
    P2PT_SHARE_VMM = 2,    /* cuMemCreate memory: a descriptor per allocation */
    P2PT_SHARE_POOL = 3,   /* pool memory: the pool's descriptor, the pointer's data */
};

/* One blob, decoded. Every blob of an export carries the same fields but
 * index, piece_offset and piece_size. The importer makes one mapping of
 * `span` bytes: piece i at piece_offset; the exported range at `offset`. */
struct p2pt_share_desc {
    uint16_t version;
    uint8_t kind;
    uint16_t index, count;
    uint32_t pid;                               /* the exporting process */
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];      /* names the export */
    uint8_t boot_id[16];                        /* the exporting host's boot */
    uint8_t gpu_uuid[16];                       /* the exporting GPU */
    uint64_t host_hash;                         /* of the exporting host's name */
    uint64_t server;                            /* the descriptor server's random name */
    uint64_t span, offset, bytes;
    uint64_t piece_offset, piece_size;
    uint64_t exporter_va;                       /* the span's start in the exporter */
    uint8_t payload[P2PT_SHARE_PAYLOAD_BYTES];
    char host[P2PT_SHARE_HOST_CHARS];           /* NUL-terminated, maybe cut short */
};

/* This host: its boot id, its name (hashed whole, kept cut short). */
struct p2pt_share_host {
    uint8_t boot_id[16];
    uint64_t host_hash;
    char host[P2PT_SHARE_HOST_CHARS];
};

/* Encode `d` into `b`, checksum included. */
P2PT_INTERNAL void p2pt__share_blob_write(const struct p2pt_share_desc *d, p2pt_share_blob *b);
/* Recompute the checksum of `b` in place (for tests that change a field). */
P2PT_INTERNAL void p2pt__share_blob_seal(p2pt_share_blob *b);
/* Decode and check blob `b`, the caller's blob `i` (for messages): status 4
 * naming what is wrong, 6 for a newer version. */
P2PT_INTERNAL p2pt_status p2pt__share_blob_read(const p2pt_share_blob *b, size_t i,
                                                struct p2pt_share_desc *d);
/* Check that `n` blobs form one whole export made on this host in this boot,
 * and decode them into out[0..n) in index order. Status 4 (6: a newer
 * version) naming the blob and what is wrong. */
P2PT_INTERNAL p2pt_status p2pt__share_blobs_check(const p2pt_share_blob *blobs, size_t n,
                                                  struct p2pt_share_desc *out);
/* This host, read once. */
P2PT_INTERNAL const struct p2pt_share_host *p2pt__share_host(void);
/* `n` random bytes (getrandom, else /dev/urandom): status 2 when neither
 * gives them. */
P2PT_INTERNAL p2pt_status p2pt__share_random(void *out, size_t n);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL). */
P2PT_INTERNAL void p2pt__share_uuid_text(const uint8_t uuid[16], const char *prefix, char *out,
                                         size_t len);

/* --------------------------------------------------------------- share_fd.c */

struct p2pt_share_server;

/* Serve descriptors on a new abstract socket named by this process's pid and
 * a random part (*name), from a thread of its own. Status 2 naming the
 * failed step. */
P2PT_INTERNAL p2pt_status p2pt__share_server_start(struct p2pt_share_server **out,
                                                   uint64_t *name);
/* Serve fds[0..n) as pieces 0..n-1 of export `token`; the server owns them
 * from now on (closed on remove or stop), also when this fails. */
P2PT_INTERNAL p2pt_status p2pt__share_server_add(struct p2pt_share_server *s,
                                                 const uint8_t *token, int *fds, size_t n);
/* Stop serving export `token` and close its descriptors. */
P2PT_INTERNAL void p2pt__share_server_remove(struct p2pt_share_server *s, const uint8_t *token);
/* Whether the server serves no export. */
P2PT_INTERNAL bool p2pt__share_server_idle(struct p2pt_share_server *s);
/* Stop the thread, close the socket and every descriptor, free `s`. */
P2PT_INTERNAL void p2pt__share_server_stop(struct p2pt_share_server *s);
/* Fetch pieces 0..n-1 of export `token` from process `pid`'s server `name`
 * into fds[] (all -1 on failure). Status 2 naming the step that failed or
 * timed out, 5 when the server has no such export, 4 for a piece it does
 * not have. */
P2PT_INTERNAL p2pt_status p2pt__share_fetch(uint32_t pid, uint64_t name, const uint8_t *token,
                                            size_t n, int *fds);
/* The abstract socket's name (without the leading NUL) of `pid`'s server
 * `name`. */
P2PT_INTERNAL void p2pt__share_socket_name(uint32_t pid, uint64_t name, char *out, size_t len);
/* How long each socket step may wait (default 5000 ms); tests shorten it. */
P2PT_INTERNAL void p2pt__share_set_timeout_ms(int ms);

/* ------------------------------------------------------------------ share.c */

struct p2pt_share_export;
struct p2pt_share_import;

/* A stream that took work from this handle while its device had imports
 * open, and the event last recorded on it. */
struct p2pt_share_mark {
    CUcontext ctx;
    CUstream stream;
    pthread_t thread; /* the per-thread default stream is one per thread */
    int device;
    CUevent event;    /* NULL: none could be made; wait for the context */
    bool wait_ctx;    /* the last record failed: wait for the context */
    uint64_t seq;     /* when it last took work (0: not since the drop) */
};

#define P2PT_SHARE_MARKS 128

struct p2pt_share {
    pthread_mutex_t lock;     /* the lists, the server */
    pthread_mutex_t map_lock; /* one import or close (or the end) at a time */
    struct p2pt_share_export *exports;
    struct p2pt_share_import *imports;
    struct p2pt_share_server *server;
    uint64_t server_name;
    /* Mappings open per device: while not 0, the device's streams are
     * marked (share_marks.c). */
    _Atomic int open[P2PT_MAX_DEVICES];
    pthread_mutex_t marks_lock;
    uint64_t seq;
    int n_marks;
    struct p2pt_share_mark marks[P2PT_SHARE_MARKS];
    /* The last mark the table had no room for, per device: a close after
     * it waits for the device's primary context. */
    uint64_t overflow_seq[P2PT_MAX_DEVICES];
    _Atomic uint64_t exports_live, imports_open, imports_closed, mappings;
};

/* The handle's sharing state, made on first use. */
P2PT_INTERNAL p2pt_status p2pt__share_get(struct p2pt_handle *h, struct p2pt_share **out);
/* Status 6 when the driver did not give entry point `name` (`entry` NULL):
 * "<call>: the CUDA driver has no <name> (...), <why>". */
P2PT_INTERNAL p2pt_status p2pt__share_needs(const void *entry, const char *call,
                                            const char *name, const char *why);

/* ----------------------------------------------------------- share_handle.c */

/* At finalize: close every import (waiting as a close does), end every
 * export, stop the server, free the state. */
P2PT_INTERNAL void p2pt__share_free(struct p2pt_handle *h);
/* The share_* fields of p2pt_properties. */
P2PT_INTERNAL void p2pt__share_report(const struct p2pt_handle *h, p2pt_properties *p);

/* ----------------------------------------------------------- share_export.c */

/* p2pt_share_export / _unexport once the handle is known live. */
P2PT_INTERNAL p2pt_status p2pt__share_export(struct p2pt_handle *h, const void *base,
                                             size_t bytes, p2pt_share_blob *blobs,
                                             size_t *n_blobs);
P2PT_INTERNAL p2pt_status p2pt__share_unexport(struct p2pt_handle *h, const void *base);
/* Whether export `token` of this process lives, under any handle: only then
 * is memory a blob of this process names still what was exported. */
P2PT_INTERNAL bool p2pt__share_export_live(const uint8_t token[P2PT_SHARE_TOKEN_BYTES]);
/* End every export of `sh` and stop its server (finalize). */
P2PT_INTERNAL void p2pt__share_exports_end(struct p2pt_share *sh);

/* ----------------------------------------------------------- share_import.c */

P2PT_INTERNAL p2pt_status p2pt__share_import(struct p2pt_handle *h, int device,
                                             const p2pt_share_blob *blobs, size_t n_blobs,
                                             void **ptr, p2pt_share_import_t **imp);
P2PT_INTERNAL p2pt_status p2pt__share_close(struct p2pt_handle *h, p2pt_share_import_t *imp);
/* Close every import of `sh`, whatever its count (finalize). */
P2PT_INTERNAL void p2pt__share_imports_end(struct p2pt_handle *h, struct p2pt_share *sh);
/* The exporting process of an import of `sh` that holds [p, p + n), or 0. */
P2PT_INTERNAL uint32_t p2pt__share_imported_from(struct p2pt_share *sh, uintptr_t p, size_t n);

/* ------------------------------------------------------------ share_marks.c */

/*
 * The hook of every operation the handle enqueues (core/operation.c, at
 * dispatch; `ctx`, the stream's context, current): while `device` has
 * imports open, record the stream's event. Never fails: a stream whose event cannot
 * be made or recorded is waited for as its whole context instead. Work
 * captured into a graph is not marked (its replay is the caller's to
 * finish).
 */
P2PT_INTERNAL void p2pt__share_mark(struct p2pt_handle *h, CUstream stream, CUcontext ctx,
                                    int device);
/* The current mark count: a close waits for the marks after it. */
P2PT_INTERNAL uint64_t p2pt__share_marks_now(struct p2pt_share *sh);
/* Wait for the work of every stream of `device` marked after `since`. */
P2PT_INTERNAL p2pt_status p2pt__share_marks_wait(struct p2pt_share *sh, int device,
                                                 uint64_t since);
/* Forget the marks of `device` (no import open there any more), their
 * events destroyed; every device's with `device` -1 (finalize). */
P2PT_INTERNAL void p2pt__share_marks_drop(struct p2pt_share *sh, int device);

#endif /* P2PT_SHARE_H */
