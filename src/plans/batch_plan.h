/*
 * How a batch of host descriptors becomes kernel launches (batch_plan.c):
 * pure arithmetic, CUDA-free, unit-tested and fuzzed. The unit arithmetic
 * itself is in kernels/p2pt_kernel_abi.h, shared with the kernels.
 */
#ifndef P2PT_BATCH_PLAN_H
#define P2PT_BATCH_PLAN_H

#include "common.h"
#include "p2pt_kernel_abi.h"

/* A launch's units are numbered in 32 bits; this many at most per launch. */
#define P2PT_BATCH_MAX_UNITS 0x7fffffffu
/* A piece of 4 GiB or more is cut into entries of at most this many bytes
 * per multiple of the unit (so whole bulk chunks stay whole). */
#define P2PT_BATCH_MAX_ENTRY_BYTES 0xffff0000ull

/* Where the next launch starts: piece `next`, byte `offset` within it. */
struct p2pt_batch_cursor {
    size_t next;
    uint64_t offset;
};

/*
 * Fill up to `cap` entries from descs[cur->next ...] for one launch:
 * zero-byte pieces are passed over, pieces of 4 GiB or more are cut into
 * several entries, and the launch ends early rather than pass
 * P2PT_BATCH_MAX_UNITS. Returns the entries written (0 once nothing is
 * left); *total gets their units; *cur moves past what was taken.
 */
P2PT_INTERNAL size_t p2pt__batch_fill(const p2pt_copy_desc *descs, size_t count,
                                      struct p2pt_batch_cursor *cur, uint32_t unit,
                                      struct p2pt_batch_entry *out, size_t cap,
                                      uint32_t *total);

#endif /* P2PT_BATCH_PLAN_H */
