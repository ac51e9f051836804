/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA engine's settings, declared in one place: each variable, its
 * default, what it accepts and where it goes in struct p2pt_tma_settings.
 * Config reads them (util/settings.h) with the shared ones, the same way;
 * the check below is what no single value shows.
 */
#include "registry.h"
#include "tma_settings.h"

/*
 * Defaults, from the chunk x stages x CTA-cap sweep
 * (bench/results/copies.md): chunk and ring depth barely matter at one CTA
 * per SM, so the chunk stays at the 48 KiB the design names and the ring at
 * the deepest that fits it (4 stages), which also loses least when CTAs are
 * capped. max_ctas stays 0 (one CTA per SM, or two when the ring fits
 * twice): every cap tried lost bandwidth.
 */
#define DEFAULT_CHUNK_BYTES (48u * 1024u)
#define DEFAULT_STAGES 4
#define DEFAULT_MAX_CTAS 0
/* Local TMA copies from this size on take the streaming kernel: from here
 * up it beat the bulk-copy ring on every GPU measured, below it neither won
 * everywhere (bench/results/copies.md, "the driver's shape"). */
#define DEFAULT_STREAM_MIN (8u << 20)

/* Item indexes, for the check's `from`. */
enum { CHUNK, STAGES };

static const struct p2pt_setting_word l2_hints[] = {
    {"none", 0}, {"evict_first", 1}, {NULL, 0}};
static const struct p2pt_setting_word stagings[] = {
    {"auto", P2PT_STAGING_AUTO}, {"gpu", P2PT_STAGING_GPU}, {"host", P2PT_STAGING_HOST},
    {NULL, 0}};

#define AT(field) offsetof(struct p2pt_tma_settings, field)

static const struct p2pt_setting items[] = {
    [CHUNK] = {.name = "P2P_TRANSPORT_CHUNK_BYTES",
               .kind = P2PT_SETTING_SIZE,
               .offset = AT(chunk_bytes),
               .def = DEFAULT_CHUNK_BYTES,
               .min = P2PT_CHUNK_MIN,
               .max = P2PT_CHUNK_MAX,
               .multiple = P2PT_ALIGN,
               .multiple_why = "cp.async.bulk moves 16-byte units",
               .accepted = "a multiple of 16 from 16 to 232448 bytes (227K); e.g. 49152 or 48K"},
    [STAGES] = {.name = "P2P_TRANSPORT_STAGES",
                .kind = P2PT_SETTING_INT,
                .offset = AT(stages),
                .def = DEFAULT_STAGES,
                .min = P2PT_STAGES_MIN,
                .max = P2PT_STAGES_MAX,
                .accepted = "an integer from 1 to 16"},
    {.name = "P2P_TRANSPORT_MAX_CTAS",
     .kind = P2PT_SETTING_INT,
     .offset = AT(launch.max_ctas),
     .def = DEFAULT_MAX_CTAS,
     .min = 0,
     .max = P2PT_MAX_CTAS_MAX,
     .accepted = "an integer from 0 (auto: from the SM count) to 4096"},
    {.name = "P2P_TRANSPORT_PDL",
     .kind = P2PT_SETTING_BOOL,
     .offset = AT(launch.pdl),
     .def = 1,
     .accepted = "0 or 1"},
    {.name = "P2P_TRANSPORT_STREAM_MIN",
     .kind = P2PT_SETTING_SIZE,
     .offset = AT(stream_min),
     .def = DEFAULT_STREAM_MIN,
     .min = 0,
     .max = 1ull << 40,
     .accepted = "a size from 0 (never) to 1T bytes, e.g. 16M"},
    {.name = "P2P_TRANSPORT_BATCH_STAGING",
     .kind = P2PT_SETTING_WORD,
     .offset = AT(batch_staging),
     .def = P2PT_STAGING_AUTO,
     .words = stagings,
     .accepted = "auto, gpu or host (any case)"},
    {.name = "P2P_TRANSPORT_WAIT_TIMEOUT_MS",
     .kind = P2PT_SETTING_INT,
     .offset = AT(wait_timeout_ms),
     .def = 0,
     .min = 0,
     .max = 86400000,
     .accepted = "milliseconds from 0 (wait for ever) to 86400000 (a day)"},
    {.name = "P2P_TRANSPORT_L2_HINT",
     .kind = P2PT_SETTING_WORD,
     .offset = AT(l2_evict_first),
     .def = 0,
     .words = l2_hints,
     .accepted = "none or evict_first (any case)"},
};

/* The ring must fit in one CTA's shared memory on any Hopper part; the
 * device's own limit is checked again when the kernel is prepared. */
static p2pt_status check_ring(const void *values, const char *const *from)
{
    const struct p2pt_tma_settings *s = values;
    if (p2pt__tma_smem_bytes(s) <= P2PT_CHUNK_MAX)
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s=%zu x %s=%d = %zu bytes of shared memory per CTA, over the limit "
                      "of %u bytes (227K); lower one of them",
                      from[CHUNK], s->chunk_bytes, from[STAGES], s->stages,
                      p2pt__tma_smem_bytes(s), P2PT_CHUNK_MAX);
}

const struct p2pt_settings p2pt__tma_settings_decl = {
    .owner = "tma",
    .items = items,
    .n = (int)P2PT_ARRAY_LEN(items),
    .size = sizeof(struct p2pt_tma_settings),
    .check = check_ring,
};
_Static_assert(sizeof(struct p2pt_tma_settings) <= P2PT_SETTINGS_BYTES &&
                   P2PT_ARRAY_LEN(items) <= P2PT_SETTINGS_ITEMS,
               "the TMA settings outgrow a group: raise P2PT_SETTINGS_BYTES or _ITEMS");

const struct p2pt_tma_settings *p2pt__tma_settings_in(const struct p2pt_config *cfg)
{
    return p2pt__engine_settings_in(cfg, &p2pt__transport_tma);
}
