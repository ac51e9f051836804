/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk cubin cache (cubin_cache.c): files only, CUDA-free.
 */
#ifndef P2PT_CUBIN_CACHE_H
#define P2PT_CUBIN_CACHE_H

#include "common.h"

enum p2pt_cache_result {
    P2PT_CACHE_HIT,      /* *cubin holds a complete cubin (malloc'd) */
    P2PT_CACHE_MISS,     /* no file (or the cache is off) */
    P2PT_CACHE_UNUSABLE, /* a file or directory that must not be used; `why` says */
};

/* The cache file name for kernel `kernel` built from `source` (all the text
 * NVRTC sees, headers included) with `options` for sm_<arch> by this p2pt
 * version: "<kernel>-sm_90-<16 hex digits>.cubin". */
P2PT_INTERNAL void p2pt__cubin_cache_name(char *out, size_t len, const char *kernel,
                                          const char *source, const char *options, int arch);
/* Read `dir`/`name` ("" dir = cache off). `why` gets the path on a hit and
 * the reason otherwise. Never fails a copy. */
P2PT_INTERNAL enum p2pt_cache_result p2pt__cubin_cache_read(const char *dir, const char *name,
                                                            void **cubin, size_t *size,
                                                            char *why, size_t why_len);
/* Write atomically (temporary file + rename), creating `dir` (mode 0700)
 * if needed. False, with the reason in `why`, when it could not. */
P2PT_INTERNAL bool p2pt__cubin_cache_write(const char *dir, const char *name,
                                           const void *cubin, size_t size, char *why,
                                           size_t why_len);
/* A complete little-endian ELF64 image (header tables inside `size`). */
P2PT_INTERNAL bool p2pt__cubin_complete(const void *buf, size_t size);

#endif /* P2PT_CUBIN_CACHE_H */
