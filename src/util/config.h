/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The configuration of one handle: every environment variable and
 * init-argument setting, read once per p2pt_init and checked before any CUDA
 * library is touched. CUDA-free (env.md documents each variable).
 */
#ifndef P2PT_CONFIG_H
#define P2PT_CONFIG_H

#include "common.h"
#include "p2pt_kernel_abi.h"

/* Not an engine: the router's per-request choice among them (route_auto.c). */
#define P2PT_AUTO_NAME "auto"

/* Limits that hold on every device; the device's own shared-memory limit is
 * checked again when the kernel is prepared for it. */
#define P2PT_CHUNK_MIN 16u
#define P2PT_CHUNK_MAX (227u * 1024u) /* Hopper's per-block opt-in maximum */
#define P2PT_STAGES_MIN 1
#define P2PT_STAGES_MAX P2PT_MAX_STAGES
#define P2PT_MAX_CTAS_MAX 4096
#define P2PT_PATH_MAX 1024

/* Where the TMA batch kernel reads host batches' descriptors from the
 * staging ring (P2P_TRANSPORT_BATCH_STAGING). */
enum { P2PT_STAGING_AUTO, P2PT_STAGING_GPU, P2PT_STAGING_HOST };

struct p2pt_config {
    char transport[16];           /* lower-case name of a registered transport, or "auto" */
    int log_level;                /* built-in logger threshold */
    size_t chunk_bytes;           /* P2P_TRANSPORT_CHUNK_BYTES */
    int stages;                   /* P2P_TRANSPORT_STAGES */
    int max_ctas;                 /* P2P_TRANSPORT_MAX_CTAS, 0 = auto */
    int sm_budget;                /* P2P_TRANSPORT_SM_BUDGET: -1 = none, 0 = no kernel,
                                     N = at most N CTAs per launch */
    int validate;                 /* P2P_TRANSPORT_VALIDATE, 0 or 1 */
    int l2_evict_first;           /* P2P_TRANSPORT_L2_HINT: 1 = evict_first */
    char cuda_library[P2PT_PATH_MAX];  /* P2P_CUDA_LIBRARY */
    char nvrtc_library[P2PT_PATH_MAX]; /* P2P_NVRTC_LIBRARY, "" = search */
    char cache_dir[P2PT_PATH_MAX];     /* P2P_TRANSPORT_CACHE_DIR, "" = no cache */
    int pdl;                      /* P2P_TRANSPORT_PDL, 0 or 1 */
    char auto_table[P2PT_PATH_MAX];    /* P2P_TRANSPORT_AUTO_TABLE, "" = built-in */
    size_t stream_min;            /* P2P_TRANSPORT_STREAM_MIN, 0 = never */
    int batch_staging;            /* P2P_TRANSPORT_BATCH_STAGING: P2PT_STAGING_* */
};

/*
 * Defaults, then the environment, then `options` (p2pt_init_args.options:
 * "NAME=VALUE" items separated by spaces or commas, NAME one of the
 * variables; NULL for none), then `transport_override`
 * (p2pt_init_args.transport), one of `transports` in any case (the
 * router's p2pt__config_read passes the registry's names and "auto", so this
 * module knows no engine). Fails with P2PT_INVALID_ARGUMENT naming where
 * the value came from, the value and what is accepted. Touches no CUDA
 * library.
 */
P2PT_INTERNAL p2pt_status p2pt__config_parse(struct p2pt_config *cfg, const char *options,
                                             const char *transport_override,
                                             const char *const *transports, int n_transports);
/* WARN, through `log`, about every P2P_* variable of the environment that
 * looks like one of p2pt's but is not (a misspelling), naming the closest. */
P2PT_INTERNAL void p2pt__config_warn_unknown_env(const struct p2pt_logger *log);
/* Every variable p2pt reads (the names `options` takes too), `*n` of them;
 * env.md documents exactly these (tests/test_docs.c). */
P2PT_INTERNAL const char *const *p2pt__config_known_vars(size_t *n);
/* Decimal with an optional binary K/M/G/T suffix; false on junk or overflow. */
P2PT_INTERNAL bool p2pt__parse_size(const char *s, unsigned long long *out);
/* Shared memory one CTA's ring needs for this configuration. */
P2PT_INTERNAL size_t p2pt__config_smem_bytes(const struct p2pt_config *cfg);

#endif /* P2PT_CONFIG_H */
