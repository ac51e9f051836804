/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The failure schedule the fault-injecting libraries share (the fake driver,
 * the fake NVRTC and the GPU shim), each holding its own copy: every entry
 * counts its calls, and P2PT_FAULT="name:N:code[,name:N:code...]" makes the
 * Nth call of `name` return `code` instead of running (once: the (N+1)th runs
 * again). P2PT_FAULT_CENSUS=<file> appends "<library> <name> <calls>" lines
 * at exit, so a first run lists what a workload calls and how often. A
 * thread may pause the schedule around calls of its own (the workload's
 * buffers and streams), so that only the library's calls count.
 * Each library names itself (FAULT_LIBRARY, defined before this header);
 * one named in P2PT_FAULT_SKIP (a comma-separated list) neither fails nor
 * counts: the fake driver when it stands behind the GPU shim in a CPU run.
 */
#ifndef P2PT_FAULT_PLAN_H
#define P2PT_FAULT_PLAN_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAULT_MAX_ENTRIES 128
#define FAULT_MAX_RULES 8

struct fault_count {
    const char *name;
    unsigned long calls;
};

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fault_count fault_counts[FAULT_MAX_ENTRIES];
static int fault_n_counts;
static struct {
    char name[64];
    unsigned long nth;
    int code;
} fault_rules[FAULT_MAX_RULES];
static int fault_n_rules = -1;
static _Thread_local int fault_paused;

static int fault_skipped(void)
{
    const char *skip = getenv("P2PT_FAULT_SKIP");
    size_t n = strlen(FAULT_LIBRARY);
    while (skip != NULL && *skip != '\0') {
        if (strncmp(skip, FAULT_LIBRARY, n) == 0 && (skip[n] == ',' || skip[n] == '\0'))
            return 1;
        skip = strchr(skip, ',');
        if (skip != NULL)
            skip++;
    }
    return 0;
}

static void fault_parse_locked(void)
{
    fault_n_rules = 0;
    const char *spec = fault_skipped() ? NULL : getenv("P2PT_FAULT");
    while (spec != NULL && *spec != '\0' && fault_n_rules < FAULT_MAX_RULES) {
        char name[64];
        unsigned long nth = 0;
        int code = 0, used = 0;
        if (sscanf(spec, "%63[^:]:%lu:%i%n", name, &nth, &code, &used) != 3)
            break;
        snprintf(fault_rules[fault_n_rules].name, sizeof(fault_rules[0].name), "%s", name);
        fault_rules[fault_n_rules].nth = nth;
        fault_rules[fault_n_rules].code = code;
        fault_n_rules++;
        spec += used;
        if (*spec == ',')
            spec++;
    }
}

/* Count a call of `name` (a string literal); the code it must fail with, or
 * 0 to run. */
static int fault_hit(const char *name)
{
    if (fault_paused)
        return 0;
    int code = 0;
    pthread_mutex_lock(&fault_lock);
    if (fault_n_rules < 0)
        fault_parse_locked();
    struct fault_count *c = NULL;
    for (int i = 0; i < fault_n_counts; i++)
        if (strcmp(fault_counts[i].name, name) == 0)
            c = &fault_counts[i];
    if (c == NULL && fault_n_counts < FAULT_MAX_ENTRIES) {
        c = &fault_counts[fault_n_counts++];
        c->name = name;
    }
    unsigned long n = c != NULL ? ++c->calls : 0;
    for (int i = 0; i < fault_n_rules; i++)
        if (fault_rules[i].nth == n && strcmp(fault_rules[i].name, name) == 0)
            code = fault_rules[i].code;
    pthread_mutex_unlock(&fault_lock);
    return code;
}

static void fault_census(void)
{
    const char *path = getenv("P2PT_FAULT_CENSUS");
    if (path == NULL || path[0] == '\0' || fault_skipped())
        return;
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return;
    pthread_mutex_lock(&fault_lock);
    for (int i = 0; i < fault_n_counts; i++)
        fprintf(f, "%s %s %lu\n", FAULT_LIBRARY, fault_counts[i].name, fault_counts[i].calls);
    pthread_mutex_unlock(&fault_lock);
    fclose(f);
}

#endif /* P2PT_FAULT_PLAN_H */
