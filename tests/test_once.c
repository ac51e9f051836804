/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt__once, on a CPU: the step runs once however many threads ask at the
 * same time, and every caller, first or later, gets its status and
 * last-error text again (a failed driver or NVRTC load is reported the same
 * way to everyone).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "p2pt_internal.h"

static _Atomic int runs;
static struct p2pt_once failing = P2PT_ONCE_INIT;

static p2pt_status fail_slowly(const char *arg)
{
    atomic_fetch_add(&runs, 1);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return p2pt__fail(P2PT_NO_DRIVER, "cannot load %s", arg);
}

struct caller {
    pthread_t thread;
    p2pt_status st;
    char text[128];
};

static void *call(void *p)
{
    struct caller *c = p;
    p2pt__clear_error();
    c->st = p2pt__once(&failing, fail_slowly, "libnothing.so");
    snprintf(c->text, sizeof(c->text), "%s", p2pt__last_error_text());
    return NULL;
}

Test(once, runs_once_and_replays_the_outcome_to_every_caller)
{
    struct caller c[16];
    for (int i = 0; i < 16; i++)
        cr_assert_eq(pthread_create(&c[i].thread, NULL, call, &c[i]), 0);
    for (int i = 0; i < 16; i++)
        pthread_join(c[i].thread, NULL);
    struct caller late;
    call(&late);
    cr_assert_eq(atomic_load(&runs), 1);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(c[i].st, P2PT_NO_DRIVER, "thread %d", i);
        cr_assert_str_eq(c[i].text, "cannot load libnothing.so", "thread %d", i);
    }
    cr_assert_eq(late.st, P2PT_NO_DRIVER);
    cr_assert_str_eq(late.text, "cannot load libnothing.so");
}
