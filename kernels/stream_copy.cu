/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt's streaming copy kernel: large same-device copies (the TMA transport
 * sends local copies of P2P_TRANSPORT_STREAM_MIN bytes and more here).
 *
 * Compiled at run time by NVRTC like tma_copy.cu. One thread per 16 bytes
 * of the 16-byte aligned body, P2PT_STREAM_THREADS threads (4 KiB) per CTA
 * and a CTA for every 4 KiB: each thread loads its 16 bytes into registers
 * and stores them, with the streaming cache operator. CTA 0 also moves the
 * unaligned head bytes (< 16) and the last CTA the tail bytes.
 *
 * Why not the bulk-copy ring of tma_copy.cu: for large local copies every
 * pattern of large per-CTA runs (persistent rings, a CTA per large run, one
 * to three CTAs per SM) stayed slower than cuMemcpyAsync at the same DRAM
 * traffic, and the driver's own same-device copy, read with ncu, is this
 * grid: a tiny CTA per 4 KiB. Thousands of tiny CTAs in launch order keep
 * the bytes in flight within a window that sweeps the buffers from start to
 * end, and the block scheduler refills every SM the moment a CTA ends; this
 * shape matched the driver's copy where the runs did not
 * (bench/results/copies.md, "TMA local copies at the copy engine's speed"
 * and "the driver's shape").
 *
 * Programmatic dependent launch as in tma_copy.cu: every CTA lets the
 * stream's next grid launch at once, and touches no global memory before
 * griddepcontrol.wait.
 */

#include "p2pt_kernel_abi.h"

#include "tma_ptx.cuh"

extern "C" __global__ void __launch_bounds__(P2PT_STREAM_THREADS)
p2pt_stream_copy(char *dst, const char *src, u64 head, u64 body, u64 tail)
{
    const u64 i = (u64)blockIdx.x * P2PT_STREAM_THREADS + threadIdx.x;

    pdl_launch_dependents();
    pdl_wait();

    if (blockIdx.x == 0 && threadIdx.x < head)
        dst[threadIdx.x] = src[threadIdx.x];
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x < tail) {
        const u64 o = head + body + threadIdx.x;
        dst[o] = src[o];
    }
    if (i < body / 16)
        copy16_cs(dst + head + 16 * i, src + head + 16 * i);
}
