/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA engine's settings (tma_settings.c declares them, config reads
 * them, the engine keeps its copy per handle): the chunk and ring of the
 * bulk-copy kernels, the grid cap, PDL, the L2 hint, where the streaming
 * kernel takes over, where host batches' descriptors are read from.
 */
#ifndef P2PT_TMA_SETTINGS_H
#define P2PT_TMA_SETTINGS_H

#include "launch.h"
#include "p2pt_kernel_abi.h"

/* Limits that hold on every device; the device's own shared-memory limit is
 * checked again when the kernel is prepared for it. */
#define P2PT_CHUNK_MIN 16u
#define P2PT_CHUNK_MAX (227u * 1024u) /* Hopper's per-block opt-in maximum */
#define P2PT_STAGES_MIN 1
#define P2PT_STAGES_MAX P2PT_MAX_STAGES
#define P2PT_MAX_CTAS_MAX 4096

/* Where the TMA batch kernel reads host batches' descriptors from the
 * staging ring (P2P_TRANSPORT_BATCH_STAGING). */
enum { P2PT_STAGING_AUTO, P2PT_STAGING_GPU, P2PT_STAGING_HOST };

struct p2pt_tma_settings {
    /* P2P_TRANSPORT_MAX_CTAS (0 = auto) and P2P_TRANSPORT_PDL, which the
     * shared launch helpers take from their caller. */
    struct p2pt_launch_settings launch;
    size_t chunk_bytes; /* P2P_TRANSPORT_CHUNK_BYTES */
    int stages;         /* P2P_TRANSPORT_STAGES */
    int l2_evict_first; /* P2P_TRANSPORT_L2_HINT: 1 = evict_first */
    size_t stream_min;  /* P2P_TRANSPORT_STREAM_MIN, 0 = never */
    int batch_staging;  /* P2P_TRANSPORT_BATCH_STAGING: P2PT_STAGING_* */
    int wait_timeout_ms; /* P2P_TRANSPORT_WAIT_TIMEOUT_MS, 0 = never */
};

/* The declarations (p2pt__transport_tma.settings). */
P2PT_INTERNAL extern const struct p2pt_settings p2pt__tma_settings_decl;
/* The engine's copy in handle `h`, made at init (writable: the tests set a
 * cap on a live handle). */
P2PT_INTERNAL struct p2pt_tma_settings *p2pt__tma_settings(const struct p2pt_handle *h);
/* The settings as `cfg` read them, before any handle. */
P2PT_INTERNAL const struct p2pt_tma_settings *p2pt__tma_settings_in(const struct p2pt_config *cfg);

/* Shared memory one CTA's ring needs under `s`. */
static inline size_t p2pt__tma_smem_bytes(const struct p2pt_tma_settings *s)
{
    return s->chunk_bytes * (size_t)s->stages;
}

#endif /* P2PT_TMA_SETTINGS_H */
