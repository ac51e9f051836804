/*
 * What the host code (src/) and the kernels (the .cu files beside this one)
 * must agree on, in one place. The host includes this file; the JIT hands
 * the same bytes to NVRTC as an in-memory header (src/jit.c), and they are
 * part of every cubin's cache key, so the two sides cannot drift apart.
 *
 * Plain C that both a C11 compiler and NVRTC accept: no includes, fixed-size
 * integer types spelled out.
 */
#ifndef P2PT_KERNEL_ABI_H
#define P2PT_KERNEL_ABI_H

/* cp.async.bulk moves 16-byte units between 16-byte aligned addresses. */
#define P2PT_ALIGN 16u

/* The deepest shared-memory ring a CTA may have (P2P_TRANSPORT_STAGES): the
 * kernel keeps one mbarrier per stage in a static array of this length. */
#define P2PT_MAX_STAGES 16

/* Threads per CTA of the copy kernel: one warp, of which one elected thread
 * issues the bulk copies and all move the unaligned head and tail bytes. */
#define P2PT_TMA_THREADS 32

/* `flags` argument of the copy kernel. */
#define P2PT_FLAG_EVICT_FIRST 1u /* L2 evict-first hint on the bulk copies */

#endif /* P2PT_KERNEL_ABI_H */
