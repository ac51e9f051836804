/*
 * The kernels p2pt compiles at run time, one entry each. Adding a kernel is
 * its file in kernels/, one embed line in CMakeLists.txt, one id in jit.h
 * and one entry here.
 */
#include "jit.h"

const struct p2pt_kernel p2pt__kernels[P2PT_KERNEL_COUNT] = {
    [P2PT_KERNEL_TMA_COPY] =
        {
            .name = "tma_copy",
            .file = "kernels/tma_copy.cu",
            .source = p2pt__tma_copy_source,
            .entries = {"p2pt_tma_copy", NULL},
            .min_cc = 90,
            .defines = {NULL},
        },
    [P2PT_KERNEL_BATCH] =
        {
            .name = "batch_copy",
            .file = "kernels/batch_copy.cu",
            .source = p2pt__batch_copy_source,
            .entries = {"p2pt_batch_copy_s", "p2pt_batch_copy_l", "p2pt_batch_copy_dev1",
                        "p2pt_batch_plan", "p2pt_batch_copy_dev", NULL},
            .min_cc = 90,
            .defines = {NULL},
        },
};
