/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake driver's modules, launches and events (fake_cuda.c says what the
 * driver is): any ELF image loads, a launch runs nothing but records its
 * entry and grid for the tests (and a kernel named p2pt_test_fault makes the
 * context's error sticky), and events complete at once unless the tests hold
 * them behind a gate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

static CUresult fake_cuModuleLoadData(CUmodule *m, const void *image)
{
    FAULT("cuModuleLoadData");
    READY();
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (image != NULL && strncmp(image, ".version", 8) == 0)
        goto accepted; /* PTX text */
    if (image == NULL || memcmp(image, "\177ELF", 4) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    /* The fake NVRTC's images: the architecture in e_flags, and an empty
     * section header that a damaged file no longer has. */
    const unsigned char *b = image;
    uint16_t machine;
    uint32_t arch;
    memcpy(&machine, b + 0x12, sizeof(machine));
    memcpy(&arch, b + 0x30, sizeof(arch));
    if (machine == 190 && arch != 0 && arch != 90)
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    for (int i = 64; machine == 190 && arch != 0 && i < 128; i++)
        if (b[i] != 0)
            return CUDA_ERROR_INVALID_IMAGE;
accepted:;
    struct fake_module *fm = calloc(1, sizeof(*fm));
    if (fm == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    fm->next = modules;
    modules = fm;
    pthread_mutex_unlock(&lock);
    *m = (CUmodule)fm;
    return CUDA_SUCCESS;
}

static CUresult fake_cuModuleUnload(CUmodule m)
{
    FAULT("cuModuleUnload");
    pthread_mutex_lock(&lock);
    for (struct fake_module **at = &modules; *at != NULL; at = &(*at)->next) {
        if (*at == (struct fake_module *)m) {
            struct fake_module *fm = *at;
            *at = fm->next;
            while (fm->functions != NULL) {
                struct fake_function *f = fm->functions;
                fm->functions = f->next;
                free(f);
            }
            free(fm);
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name)
{
    FAULT("cuModuleGetFunction");
    if (m == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_function *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fake_module *fm = (struct fake_module *)m;
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->module = fm;
    pthread_mutex_lock(&lock);
    f->next = fm->functions;
    fm->functions = f;
    pthread_mutex_unlock(&lock);
    *fn = (CUfunction)f;
    return CUDA_SUCCESS;
}

static CUresult fake_cuFuncSetAttribute(CUfunction fn, CUfunction_attribute a, int v)
{
    FAULT("cuFuncSetAttribute");
    if (fn == NULL || v < 0)
        return CUDA_ERROR_INVALID_VALUE;
    (void)a;
    return CUDA_SUCCESS;
}

/* The last launch of a device batch entry: its grid and the head of its
 * parameters (struct p2pt_batch_dev_params), for tests of how the library
 * launches what it cannot show through its API. Only these entries: their
 * parameters are known to be at least LAUNCH_HEAD bytes. */
enum { LAUNCH_HEAD = 64 };
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[64];
    unsigned grid;
    unsigned char head[LAUNCH_HEAD];
} last_launch;

/* The last launch of any kernel: its entry's name and grid. */
static struct {
    char name[64];
    unsigned grid;
} last_any;

static void record_launch(CUfunction fn, unsigned grid, void **params)
{
    const char *name = ((struct fake_function *)fn)->name;
    pthread_mutex_lock(&launch_lock);
    snprintf(last_any.name, sizeof(last_any.name), "%s", name);
    last_any.grid = grid;
    pthread_mutex_unlock(&launch_lock);
    if (params == NULL || params[0] == NULL ||
        (strcmp(name, "p2pt_batch_copy_dev") != 0 && strcmp(name, "p2pt_batch_copy_marks") != 0))
        return;
    pthread_mutex_lock(&launch_lock);
    snprintf(last_launch.name, sizeof(last_launch.name), "%s", name);
    last_launch.grid = grid;
    memcpy(last_launch.head, params[0], LAUNCH_HEAD);
    pthread_mutex_unlock(&launch_lock);
}

/* The last device batch launch: its entry's name (empty: none yet), grid
 * and the first `n` bytes (at most 64) of its parameters. */
EXPORT void p2pt_fake_last_batch_launch(char *name, size_t name_n, unsigned *grid, void *head,
                                        size_t n);
EXPORT void p2pt_fake_last_batch_launch(char *name, size_t name_n, unsigned *grid, void *head,
                                        size_t n)
{
    pthread_mutex_lock(&launch_lock);
    snprintf(name, name_n, "%s", last_launch.name);
    *grid = last_launch.grid;
    memcpy(head, last_launch.head, n < LAUNCH_HEAD ? n : LAUNCH_HEAD);
    pthread_mutex_unlock(&launch_lock);
}

/* The last launch of any kernel: its entry's name (empty: none yet) and
 * grid. */
EXPORT void p2pt_fake_last_launch(char *name, size_t name_n, unsigned *grid);
EXPORT void p2pt_fake_last_launch(char *name, size_t name_n, unsigned *grid)
{
    pthread_mutex_lock(&launch_lock);
    snprintf(name, name_n, "%s", last_any.name);
    *grid = last_any.grid;
    pthread_mutex_unlock(&launch_lock);
}

static CUresult fake_cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                    CUstream s, void **params, void **extra)
{
    FAULT("cuLaunchKernel");
    (void)s, (void)smem, (void)extra, (void)params;
    if (fn == NULL || gx * gy * gz == 0 || bx * by * bz == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(((struct fake_function *)fn)->name, "p2pt_test_fault") == 0)
        sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    record_launch(fn, gx, params);
    return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction fn, void **params,
                                      void **extra)
{
    FAULT("cuLaunchKernelEx");
    (void)extra;
    if (c == NULL || fn == NULL || params == NULL || c->gridDimX == 0 || c->blockDimX == 0)
        return CUDA_ERROR_INVALID_VALUE;
    record_launch(fn, c->gridDimX, params);
    return CUDA_SUCCESS;
}

/* Events are kept in a list (one destroyed is unlinked): an event the
 * library could not destroy is the fake's to free at exit, not a leak. */
static CUresult fake_cuEventCreate(CUevent *e, unsigned flags)
{
    FAULT("cuEventCreate");
    (void)flags;
    struct fake_event *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    ev->next = events;
    events = ev;
    pthread_mutex_unlock(&lock);
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventDestroy(CUevent e)
{
    FAULT("cuEventDestroy");
    pthread_mutex_lock(&lock);
    for (struct fake_event **at = &events; *at != NULL; at = &(*at)->next)
        if (*at == (struct fake_event *)e) {
            *at = (*at)->next;
            pthread_mutex_unlock(&lock);
            free(e);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_HANDLE;
}

/* Work "queued" behind a gate: while held, event queries say not ready and
 * synchronizing an event waits until the test lets go (the tests' stand-in
 * for a kernel still running when a window closes). */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int holding;
static unsigned long waiting_on_hold;

EXPORT void p2pt_fake_hold_events(int on);
EXPORT void p2pt_fake_hold_events(int on)
{
    pthread_mutex_lock(&hold_lock);
    holding = on;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

/* Calls blocked behind the hold right now. */
EXPORT unsigned long p2pt_fake_held_waiters(void);
EXPORT unsigned long p2pt_fake_held_waiters(void)
{
    pthread_mutex_lock(&hold_lock);
    unsigned long n = waiting_on_hold;
    pthread_mutex_unlock(&hold_lock);
    return n;
}

void wait_for_hold(void)
{
    pthread_mutex_lock(&hold_lock);
    waiting_on_hold++;
    while (holding)
        pthread_cond_wait(&hold_cond, &hold_lock);
    waiting_on_hold--;
    pthread_mutex_unlock(&hold_lock);
}

static CUresult fake_cuEventRecord(CUevent e, CUstream s)
{
    FAULT("cuEventRecord");
    (void)s;
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventQuery(CUevent e)
{
    FAULT("cuEventQuery");
    pthread_mutex_lock(&hold_lock);
    int held = holding;
    pthread_mutex_unlock(&hold_lock);
    return e == NULL ? CUDA_ERROR_INVALID_HANDLE : held ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult fake_cuEventSynchronize(CUevent e)
{
    FAULT("cuEventSynchronize");
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    wait_for_hold();
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    FAULT("cuEventElapsedTime");
    *ms = 0.001f;
    return a != NULL && b != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    FAULT("cuStreamWaitEvent");
    (void)s, (void)flags;
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

const struct fake_entry fake_launch_entries[] = {
    ENTRY(cuModuleLoadData),
    ENTRY(cuModuleUnload),
    ENTRY(cuModuleGetFunction),
    ENTRY(cuFuncSetAttribute),
    ENTRY(cuLaunchKernel),
    ENTRY(cuLaunchKernelEx),
    ENTRY(cuEventCreate),
    ENTRY(cuEventDestroy),
    ENTRY(cuEventRecord),
    ENTRY(cuEventQuery),
    ENTRY(cuEventSynchronize),
    ENTRY(cuEventElapsedTime),
    ENTRY(cuStreamWaitEvent),
    ENTRIES_END,
};
