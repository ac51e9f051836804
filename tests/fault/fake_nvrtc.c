/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An NVRTC for the fault-injection loop: "compiles" any source at once into
 * a small ELF64 image that the fake driver loads (its e_flags carry the
 * architecture of --gpu-architecture=sm_XX, which the fake driver checks),
 * and fails any call on the schedule of fault_plan.h
 * (nvrtcCompileProgram:1:6 is a compile error with a log).
 * P2PT_FAKE_NVRTC_OUTPUT=garbage hands out bytes that are no ELF image, of
 * the same size.
 */
#include <nvrtc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAULT_LIBRARY "nvrtc"
#include "fault_plan.h"

#define EXPORT __attribute__((visibility("default")))
#define IMAGE_BYTES 4096

#define FAULT(name)                                                            \
    do {                                                                       \
        int fault_code_ = fault_hit(name);                                     \
        if (fault_code_ != 0)                                                  \
            return (nvrtcResult)fault_code_;                                   \
    } while (0)

struct fake_program {
    int arch;
    int compiled;
    int failed;
};

__attribute__((destructor)) static void fake_nvrtc_exit(void) { fault_census(); }

EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    FAULT("nvrtcVersion");
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

EXPORT const char *nvrtcGetErrorString(nvrtcResult r)
{
    switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    default: return "NVRTC_ERROR (injected by the fake NVRTC)";
    }
}

EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                                      int num_headers, const char *const *headers,
                                      const char *const *include_names)
{
    FAULT("nvrtcCreateProgram");
    (void)name, (void)headers, (void)include_names;
    if (prog == NULL || src == NULL || num_headers < 0)
        return NVRTC_ERROR_INVALID_INPUT;
    struct fake_program *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    *prog = (nvrtcProgram)p;
    return NVRTC_SUCCESS;
}

/* A failed destroy still frees: the caller has nothing left to release. */
EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    int code = fault_hit("nvrtcDestroyProgram");
    if (prog == NULL || *prog == NULL)
        return NVRTC_ERROR_INVALID_PROGRAM;
    free(*prog);
    *prog = NULL;
    return (nvrtcResult)code;
}

EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *opts)
{
    struct fake_program *p = (struct fake_program *)prog;
    if (p == NULL)
        return NVRTC_ERROR_INVALID_PROGRAM;
    int code = fault_hit("nvrtcCompileProgram");
    if (code != 0) {
        p->failed = 1;
        return (nvrtcResult)code;
    }
    p->arch = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(opts[i], "--gpu-architecture=sm_", 22) == 0)
            p->arch = atoi(opts[i] + 22);
    p->compiled = 1;
    return NVRTC_SUCCESS;
}

static const char failed_log[] = "p2pt_kernel.cu(1): error: injected by the fake NVRTC\n";

EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size)
{
    FAULT("nvrtcGetProgramLogSize");
    struct fake_program *p = (struct fake_program *)prog;
    if (p == NULL)
        return NVRTC_ERROR_INVALID_PROGRAM;
    *size = p->failed ? sizeof(failed_log) : 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    FAULT("nvrtcGetProgramLog");
    struct fake_program *p = (struct fake_program *)prog;
    if (p == NULL)
        return NVRTC_ERROR_INVALID_PROGRAM;
    if (p->failed)
        memcpy(log, failed_log, sizeof(failed_log));
    else
        log[0] = '\0';
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size)
{
    FAULT("nvrtcGetCUBINSize");
    struct fake_program *p = (struct fake_program *)prog;
    if (p == NULL || !p->compiled || p->arch == 0)
        return NVRTC_ERROR_INVALID_PROGRAM;
    *size = IMAGE_BYTES;
    return NVRTC_SUCCESS;
}

static void put16(unsigned char *b, unsigned v) { memcpy(b, &(uint16_t){(uint16_t)v}, 2); }
static void put32(unsigned char *b, unsigned v) { memcpy(b, &(uint32_t){v}, 4); }
static void put64(unsigned char *b, uint64_t v) { memcpy(b, &v, 8); }

/* An ELF64 header (EM_CUDA, the architecture in e_flags) and one empty
 * section header right after it. */
EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    FAULT("nvrtcGetCUBIN");
    struct fake_program *p = (struct fake_program *)prog;
    if (p == NULL || !p->compiled || p->arch == 0)
        return NVRTC_ERROR_INVALID_PROGRAM;
    unsigned char *b = (unsigned char *)cubin;
    memset(b, 0, IMAGE_BYTES);
    const char *mode = getenv("P2PT_FAKE_NVRTC_OUTPUT");
    if (mode != NULL && strcmp(mode, "garbage") == 0) {
        for (int i = 0; i < IMAGE_BYTES; i++)
            b[i] = (unsigned char)(i * 37 + 11);
        return NVRTC_SUCCESS;
    }
    memcpy(b, "\177ELF", 4);
    b[4] = 2; /* ELFCLASS64 */
    b[5] = 1; /* little-endian */
    b[6] = 1; /* EV_CURRENT */
    put16(b + 0x10, 2);   /* ET_EXEC */
    put16(b + 0x12, 190); /* EM_CUDA */
    put32(b + 0x14, 1);
    put64(b + 0x28, 64); /* e_shoff */
    put32(b + 0x30, (unsigned)p->arch);
    put16(b + 0x34, 64); /* e_ehsize */
    put16(b + 0x3A, 64); /* e_shentsize */
    put16(b + 0x3C, 1);  /* e_shnum */
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size)
{
    FAULT("nvrtcGetPTXSize");
    (void)prog;
    *size = 16;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)
{
    FAULT("nvrtcGetPTX");
    (void)prog;
    memcpy(ptx, "// fake PTX\n\0\0\0", 16);
    return NVRTC_SUCCESS;
}
