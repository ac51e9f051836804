/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Status strings and the per-thread last-error text.
 *
 * The text lives in thread-local storage so that a framework thread can ask
 * "why" after any failing call, including a failed init (no handle yet), and
 * threads never see each other's errors.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define P2PT_ERROR_TEXT_MAX 2048

static _Thread_local char last_error[P2PT_ERROR_TEXT_MAX];

const char *p2pt_status_string(p2pt_status status)
{
    /* A switch with no default: the compiler names a status without a
     * string (-Wswitch), and unknown values fall through to the end. */
    switch (status) {
#define P2PT_STATUS_CASE_(name, value, text)                                   \
    case P2PT_##name:                                                          \
        return text;
        P2PT_STATUS_MAP(P2PT_STATUS_CASE_)
#undef P2PT_STATUS_CASE_
    }
    return "unknown status";
}

const char *p2pt_last_error(const p2pt_handle *h)
{
    (void)h; /* errors are per thread, whichever handle raised them */
    return last_error;
}

const char *p2pt__last_error_text(void) { return last_error; }

void p2pt__clear_error(void) { last_error[0] = '\0'; }

p2pt_status p2pt__fail(p2pt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return st;
}

/* pthread_once's routine takes no argument: p2pt__once passes its own
 * through this thread-local (the routine runs on the calling thread). */
struct once_call {
    struct p2pt_once *o;
    p2pt_status (*fn)(const char *);
    const char *arg;
};
static _Thread_local struct once_call once_arg;

static void run_once(void)
{
    struct p2pt_once *o = once_arg.o;
    o->status = once_arg.fn(once_arg.arg);
    snprintf(o->text, sizeof(o->text), "%s",
             o->status == P2PT_SUCCESS ? "" : p2pt__last_error_text());
}

p2pt_status p2pt__once(struct p2pt_once *o, p2pt_status (*fn)(const char *), const char *arg)
{
    /* Saved and restored: a once routine may itself call p2pt__once. */
    struct once_call saved = once_arg;
    once_arg.o = o;
    once_arg.fn = fn;
    once_arg.arg = arg;
    pthread_once(&o->once, run_once);
    once_arg = saved;
    if (o->status != P2PT_SUCCESS)
        return p2pt__fail(o->status, "%s", o->text);
    return P2PT_SUCCESS;
}
