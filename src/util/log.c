/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging. A framework hands p2pt its own logger (NCCL's ncclDebugLogger_t
 * signature) and filters itself; without one, p2pt writes to stderr at or
 * above the level P2P_TRANSPORT_LOG sets.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static const char *level_name(p2pt_log_level lvl)
{
    switch (lvl) {
    case P2PT_LOG_NONE:
        return "NONE";
    case P2PT_LOG_VERSION:
        return "VERSION";
    case P2PT_LOG_WARN:
        return "WARN";
    case P2PT_LOG_INFO:
        return "INFO";
    case P2PT_LOG_ABORT:
        return "ABORT";
    case P2PT_LOG_TRACE:
        return "TRACE";
    }
    return "?";
}

void p2pt__log(const struct p2pt_logger *lg, p2pt_log_level lvl,
               const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (lg != NULL && lg->fn != NULL) {
        /* The framework's logger is printf-like: never pass our text as its
         * format string. */
        lg->fn(lvl, 0, file, line, "%s", msg);
        return;
    }
    int threshold = lg != NULL ? lg->level : P2PT_LOG_WARN;
    /* ABORT (4) sorts between INFO and TRACE in NCCL's numbering but is the
     * most severe: treat it like WARN for filtering. */
    int eff = lvl == P2PT_LOG_ABORT ? P2PT_LOG_WARN : (int)lvl;
    if (eff > threshold || threshold == P2PT_LOG_NONE)
        return;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "p2pt %s %s:%d %s\n", level_name(lvl), base ? base + 1 : file,
            line, msg);
}
