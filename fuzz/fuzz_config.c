/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness: configuration parsing. The input is split at NUL bytes
 * into values for the variables the configuration reads; whatever they hold, the
 * parse must either succeed with values inside the documented limits or fail
 * with P2PT_INVALID_ARGUMENT and a non-empty message. Never crash, never
 * read past a value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

static const char *const vars[] = {
    "P2P_TRANSPORT", "P2P_TRANSPORT_LOG", "P2P_TRANSPORT_CHUNK_BYTES",
    "P2P_TRANSPORT_STAGES", "P2P_TRANSPORT_MAX_CTAS", "P2P_TRANSPORT_VALIDATE",
    "P2P_TRANSPORT_L2_HINT", "P2P_CUDA_LIBRARY", "P2P_NVRTC_LIBRARY",
    "P2P_TRANSPORT_AUTO_TABLE", "P2P_TRANSPORT_STREAM_MIN",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    /* The first byte chooses which variables are set at all. */
    unsigned mask = size ? (unsigned)(uint8_t)buf[0] | ((unsigned)(uint8_t)buf[0] << 8) : 0;
    const char *p = size ? buf + 1 : buf;
    const char *end = buf + size;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if ((mask >> i) & 1u && p <= end) {
            setenv(vars[i], p, 1);
            p += strlen(p) + 1;
        } else {
            unsetenv(vars[i]);
        }
    }
    struct p2pt_config cfg;
    p2pt_status st = p2pt__config_read(&cfg, NULL, NULL);
    if (st == P2PT_SUCCESS) {
        const struct p2pt_tma_settings *t = p2pt__tma_settings_in(&cfg);
        if (t->chunk_bytes < P2PT_CHUNK_MIN || t->chunk_bytes > P2PT_CHUNK_MAX ||
            t->chunk_bytes % 16 != 0 || t->stages < P2PT_STAGES_MIN ||
            t->stages > P2PT_STAGES_MAX || t->launch.max_ctas < 0 ||
            t->launch.max_ctas > P2PT_MAX_CTAS_MAX || p2pt__tma_smem_bytes(t) > P2PT_CHUNK_MAX ||
            (cfg.validate != 0 && cfg.validate != 1) ||
            (p2pt__transport_find(cfg.transport) == NULL &&
             strcmp(cfg.transport, P2PT_AUTO_NAME) != 0))
            abort();
    } else if (st != P2PT_INVALID_ARGUMENT || p2pt__last_error_text()[0] == '\0') {
        abort();
    }
    free(buf);
    return 0;
}
