/*
 * p2pt_explain_copy and p2pt_explain_batch: what the copy path would do
 * with a request, and why, without doing it. They run the same checks and
 * the same resolution as the entry points (api.c, batch.c) and ask the
 * router for its reason in words; they enqueue nothing and count nothing.
 */
#include <stdio.h>
#include <string.h>

#include "handle.h"

static p2pt_status check_choice(const char *fn, const p2pt_choice *c)
{
    if (c == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: choice is NULL", fn);
    if (c->size < offsetof(p2pt_choice, path))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: choice->size is %zu; set it to sizeof(p2pt_choice) (%zu in "
                          "this build)",
                          fn, c->size, sizeof(p2pt_choice));
    return P2PT_SUCCESS;
}

/* Copy what fits in the caller's struct. */
static void give(p2pt_choice *out, const p2pt_choice *c)
{
    size_t n = out->size < sizeof(*c) ? out->size : sizeof(*c);
    size_t size = out->size;
    memcpy(out, c, n);
    out->size = size;
    if (n == sizeof(*c))
        out->reason[sizeof(out->reason) - 1] = '\0';
}

p2pt_status p2pt_explain_copy(p2pt_handle *h, const void *dst, const void *src, size_t bytes,
                              void *stream, p2pt_choice *choice)
{
    static const char fn[] = "p2pt_explain_copy";
    p2pt_status st = p2pt__check_handle(h, fn);
    p2pt_choice c;
    struct p2pt_request r;

    if (st != P2PT_SUCCESS || (st = check_choice(fn, choice)) != P2PT_SUCCESS)
        return st;
    memset(&c, 0, sizeof(c));
    c.device = -1;
    if (bytes == 0) {
        c.transport = "none";
        c.path = "other";
        snprintf(c.reason, sizeof(c.reason), "0 bytes: nothing is enqueued");
        give(choice, &c);
        return P2PT_SUCCESS;
    }
    memset(&r, 0, sizeof(r));
    r.dst = (void *)(uintptr_t)dst;
    r.src = src;
    r.bytes = bytes;
    r.stream = (CUstream)stream;
    P2PT_TRY(p2pt__check_args(r.dst, src, bytes));
    P2PT_TRY(p2pt__resolve(&r));
    const struct p2pt_transport *t = NULL;
    P2PT_TRY(p2pt__route(h, &r, &t, c.reason, sizeof(c.reason)));
    if (h->cfg.validate)
        P2PT_TRY(p2pt__refuse(&r, (t->caps & P2PT_CAP_STAGED) != 0));
    c.transport = t->name;
    c.path = p2pt__path_name(r.path);
    c.device = r.device;
    give(choice, &c);
out:
    return st;
}

p2pt_status p2pt_explain_batch(p2pt_handle *h, const p2pt_copy_desc *descs, size_t count,
                               void *stream, p2pt_choice *choice)
{
    static const char fn[] = "p2pt_explain_batch";
    p2pt_status st = p2pt__check_handle(h, fn);
    p2pt_choice c;
    struct p2pt_batch b;
    bool pushed = false;

    if (st != P2PT_SUCCESS || (st = check_choice(fn, choice)) != P2PT_SUCCESS)
        return st;
    memset(&c, 0, sizeof(c));
    c.device = -1;
    c.path = "batch";
    P2PT_TRY(p2pt__batch_check(fn, descs, count, stream, &b));
    if (b.pieces == 0) {
        c.transport = "none";
        snprintf(c.reason, sizeof(c.reason), "no piece has bytes: nothing is enqueued");
        give(choice, &c);
        goto out;
    }
    P2PT_TRY(p2pt__stream_enter(b.stream, &b.ctx, &b.device, &pushed));
    const struct p2pt_transport *t = NULL;
    P2PT_TRY(p2pt__route_batch(h, &b, &t, c.reason, sizeof(c.reason)));
    c.transport = t->name;
    c.device = b.device;
    give(choice, &c);
out:
    p2pt__ctx_leave(pushed);
    return st;
}
