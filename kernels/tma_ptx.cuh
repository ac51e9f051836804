/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The PTX p2pt's kernels are made of: shared-memory addresses, mbarriers,
 * bulk copies global <-> shared (cp.async.bulk) and their waits, the L2
 * evict-first policy, streaming 16-byte loads and stores, programmatic
 * dependent launch. Included by every kernel of this folder; the JIT hands
 * it to NVRTC in memory like p2pt_kernel_abi.h.
 */
#ifndef P2PT_TMA_PTX_CUH
#define P2PT_TMA_PTX_CUH

typedef unsigned long long u64;
typedef unsigned int u32;

static __device__ __forceinline__ u32 smem_u32(const void *p)
{
    u32 a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(a)
                 : "l"(p));
    return a;
}

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count)
                 : "memory");
}

/* Make the initialised barriers visible to the async (TMA) proxy before the
 * first bulk copy signals one of them. */
static __device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

static __device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

/* One bounded wait for the phase of `parity` to complete: true once it has. */
static __device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity)
{
    u32 done;
    asm volatile("{ .reg .pred p;\n"
                 "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "  selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
}

static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
    while (!mbar_try_wait(bar, parity))
        ;
}

static __device__ __forceinline__ u64 evict_first_policy()
{
    u64 policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

static __device__ __forceinline__ void bulk_load(u32 smem, const char *gsrc, u32 bytes,
                                                 u32 bar, bool hint, u64 policy)
{
    if (hint)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(smem),
                     "l"(gsrc), "r"(bytes), "r"(bar), "l"(policy)
                     : "memory");
    else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                     "[%0], [%1], %2, [%3];" ::"r"(smem),
                     "l"(gsrc), "r"(bytes), "r"(bar)
                     : "memory");
}

static __device__ __forceinline__ void bulk_store(char *gdst, u32 smem, u32 bytes,
                                                  bool hint, u64 policy)
{
    if (hint)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint "
                     "[%0], [%1], %2, %3;" ::"l"(gdst),
                     "r"(smem), "r"(bytes), "l"(policy)
                     : "memory");
    else
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst),
                     "r"(smem), "r"(bytes)
                     : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Wait until at most N committed store groups are still reading shared memory. */
template <int N> static __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/* Wait until every committed store has fully completed (written global). */
static __device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* 16 bytes through registers with the streaming (evict-first) cache
 * operator on both sides: copied data is touched once. */
static __device__ __forceinline__ void copy16_cs(void *dst, const void *src)
{
    u32 a, b, c, d;
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                 : "l"(src));
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(a), "r"(b), "r"(c),
                 "r"(d)
                 : "memory");
}

/* Programmatic dependent launch: let the stream's next grid launch now, and
 * wait until the previous grid has completed and its writes are visible.
 * Both are no-ops for a grid launched without the attribute. */
static __device__ __forceinline__ void pdl_launch_dependents()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

static __device__ __forceinline__ void pdl_wait()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

#endif /* P2PT_TMA_PTX_CUH */
