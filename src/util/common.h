/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every module of p2pt shares and nothing of CUDA: visibility and
 * printf attributes, the per-thread last error (status.c), the load-once
 * helper, the logger (log.c), a 64-bit FNV-1a hash. Modules that need no CUDA (config, chunk
 * planning, the cubin cache) include this and nothing that pulls cuda.h.
 * Names: `p2pt__` for internal functions and data, `static` for file-local.
 */
#ifndef P2PT_COMMON_H
#define P2PT_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "p2pt.h"

#define P2PT_INTERNAL __attribute__((visibility("hidden")))
#define P2PT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define P2PT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* A macro's value as a string literal. */
#define P2PT_STR_(x) #x
#define P2PT_XSTR(x) P2PT_STR_(x)

/* FNV-1a, 64-bit, over `len` bytes, continuing from `h` (P2PT_FNV1A_START
 * to begin): not cryptographic, for names and versions kept apart. */
#define P2PT_FNV1A_START 0xcbf29ce484222325ull
static inline uint64_t p2pt__fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ------------------------------------------------------------------ status.c */

/* Record `fmt` as the calling thread's last error and return `st`. */
P2PT_INTERNAL p2pt_status p2pt__fail(p2pt_status st, const char *fmt, ...)
    P2PT_PRINTF(2, 3);
P2PT_INTERNAL void p2pt__clear_error(void);
P2PT_INTERNAL const char *p2pt__last_error_text(void);

/* Propagate a p2pt_status (the callee has already recorded the text). Needs
 * `p2pt_status st` and a label `out` in scope. */
#define P2PT_TRY(expr)                                                         \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != P2PT_SUCCESS)                                                \
            goto out;                                                          \
    } while (0)

/*
 * A step done once per process whose outcome every later caller gets again,
 * status and last-error text (the driver and NVRTC loads): the first caller
 * runs `fn(arg)` under pthread_once, the others wait for it.
 */
struct p2pt_once {
    pthread_once_t once;
    p2pt_status status;
    char text[2048];
};
#define P2PT_ONCE_INIT {PTHREAD_ONCE_INIT, P2PT_SUCCESS, ""}
P2PT_INTERNAL p2pt_status p2pt__once(struct p2pt_once *o, p2pt_status (*fn)(const char *),
                                     const char *arg);

/* --------------------------------------------------------------------- log.c */

struct p2pt_logger {
    p2pt_logger_t fn; /* NULL: built-in stderr logger */
    int level;        /* threshold for the built-in logger */
};

P2PT_INTERNAL void p2pt__log(const struct p2pt_logger *lg, p2pt_log_level lvl,
                             const char *file, int line, const char *fmt, ...)
    P2PT_PRINTF(5, 6);
#define P2PT_LOG(lg, lvl, ...) p2pt__log((lg), (lvl), __FILE__, __LINE__, __VA_ARGS__)
#define P2PT_WARN(lg, ...) P2PT_LOG(lg, P2PT_LOG_WARN, __VA_ARGS__)
#define P2PT_INFO(lg, ...) P2PT_LOG(lg, P2PT_LOG_INFO, __VA_ARGS__)

#endif /* P2PT_COMMON_H */
