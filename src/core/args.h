/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument checks, the first step of every operation (args.c): what can be
 * refused from the arguments alone, before any driver call.
 */
#ifndef P2PT_ARGS_H
#define P2PT_ARGS_H

#include "batch.h"

/* NULL, wrap-around, overlap: refused before anything else, no CUDA call.
 * bytes == 0 is accepted whatever the pointers. */
P2PT_INTERNAL p2pt_status p2pt__check_args(void *dst, const void *src, size_t bytes);
/* Check every piece of a host batch (`fn` names the entry point in
 * messages: NULL descs, size_t overflow, each piece's arguments) and fill
 * *b's descs, count, stream, pieces and bytes. */
P2PT_INTERNAL p2pt_status p2pt__batch_check(const char *fn, const p2pt_copy_desc *descs,
                                            size_t count, void *stream, struct p2pt_batch *b);
/* A device batch's buffers: non-NULL, aligned, max_count in range. */
P2PT_INTERNAL p2pt_status p2pt__device_batch_check(const struct p2pt_device_batch *b);
/* The last error, prefixed with which piece of a host batch it is about. */
P2PT_INTERNAL p2pt_status p2pt__piece_fail(p2pt_status st, size_t i, size_t count);

#endif /* P2PT_ARGS_H */
