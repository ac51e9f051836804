/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public entry points (p2pt.h): handle life cycle, properties, prepare,
 * copy, windows. The plugin table (plugin.c) points at these. A copy is an
 * operation: the entry point checks the handle and hands it to the
 * pipeline (operation.c).
 */
#include <string.h>

#include "handles.h"
#include "jit.h"
#include "operation.h"
#include "policy.h"
#include "router.h"
#include "share.h"

_Static_assert(P2PT_MAX_TRANSPORTS <= P2PT_PROPERTIES_ENGINES,
               "p2pt_properties has a slot per registered engine");

/* Every property of live handle `h` (the whole struct; the caller copies
 * what its own struct has room for). */
static void fill_properties(const struct p2pt_handle *h, p2pt_properties *out)
{
    p2pt_properties p;
    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    p.transport = p2pt__handle_transport_name(h);
    p.version = P2PT_VERSION_STRING;
    p.abi_version = 1;
    p.driver_version = h->driver_version;
    p.validate = h->cfg.validate;
    p.copies = atomic_load(&h->stats.copies);
    p.bytes = atomic_load(&h->stats.bytes);
    for (int e = 0; e < P2PT_MAX_TRANSPORTS; e++)
        p.ce_fallbacks += atomic_load(&h->stats.engine_fallbacks[e]);
    p.compilations = p2pt__jit_compilations();
    p.module_loads = p2pt__jit_module_loads();
    p.cubin_cache_hits = p2pt__jit_cache_hits();
    p.rejected = atomic_load(&h->stats.rejected);
    p.batch_per_launch = P2PT_BATCH_LARGE;
    p.max_windows = P2PT_BATCH_MAX_WINDOWS;
    p.device_batch_max = P2PT_DEVICE_BATCH_MAX;
    p.batches = atomic_load(&h->stats.batches);
    p.batch_pieces = atomic_load(&h->stats.batch_pieces);
    p.device_batches = atomic_load(&h->stats.device_batches);
    p.signals = atomic_load(&h->stats.signals);
    p.waits = atomic_load(&h->stats.waits);
    p.count_exchanges = atomic_load(&h->stats.count_exchanges);
    p.auto_table = h->cfg.auto_table[0] ? h->cfg.auto_table : NULL;
    for (int e = 0; e < P2PT_MAX_TRANSPORTS && p2pt__transport_at(e) != NULL; e++) {
        p.engine_name[e] = p2pt__transport_at(e)->name;
        p.engine_bytes[e] = atomic_load(&h->stats.engine_bytes[e]);
        p.engine_batches[e] = atomic_load(&h->stats.engine_batches[e]);
        p.engine_fallbacks[e] = atomic_load(&h->stats.engine_fallbacks[e]);
        const struct p2pt_transport *t = p2pt__transport_at(e);
        if (t->report != NULL && p2pt__engine_state(h, t) != NULL)
            t->report(h, e, p2pt__engine_state(h, t), &p);
    }
    p.sm_budget = h->cfg.sm_budget;
    p.max_grid = atomic_load(&h->stats.max_grid);
    p.kernel_launches = atomic_load(&h->stats.kernel_launches);
    if (h->policy->report != NULL)
        h->policy->report(h, &p);
    p2pt__share_report(h, &p);
    *out = p;
}

p2pt_status p2pt_init(const p2pt_init_args *args, p2pt_handle **out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_handle *h = NULL;
    struct p2pt_config cfg;
    struct p2pt_config_known known;
    p2pt_init_args a;
    p2pt_properties p;

    p2pt__clear_error();
    if (out == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "p2pt_init: out is NULL");
    *out = NULL;
    memset(&a, 0, sizeof(a));
    if (args != NULL) {
        /* A size of an older struct ends after one of its fields: one that
         * ends inside a field would hand over half a pointer. */
        const size_t ends[] = {offsetof(p2pt_init_args, logger) + sizeof(args->logger),
                               offsetof(p2pt_init_args, transport) + sizeof(args->transport),
                               offsetof(p2pt_init_args, options) + sizeof(args->options)};
        bool whole = args->size >= sizeof(a);
        for (size_t k = 0; k < P2PT_ARRAY_LEN(ends); k++)
            whole = whole || args->size == ends[k];
        if (!whole)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "p2pt_init: args->size is %zu; set it to "
                              "sizeof(p2pt_init_args) (%zu in this build)",
                              args->size, sizeof(p2pt_init_args));
        /* Read only the fields the caller's struct has. */
        memcpy(&a, args, args->size < sizeof(a) ? args->size : sizeof(a));
    }
    a.size = sizeof(a);

    /* Configuration first, and auto's table file: a typo is reported before
     * any driver is needed. */
    p2pt__config_known(&known);
    P2PT_TRY(p2pt__config_parse(&cfg, a.options, a.transport, &known));
    P2PT_TRY(p2pt__handle_new(&cfg, a.logger, &h));
    p2pt__config_warn_unknown_env(&h->log, &known);
    P2PT_TRY(p2pt__cuda_load(cfg.cuda_library));
    P2PT_CU(p2pt__cu.cuDriverGetVersion(&h->driver_version));
    /* The engines' settings as the properties report them (each engine
     * fills its own). */
    fill_properties(h, &p);
    P2PT_INFO(&h->log,
              "p2pt %s: transport %s (chunk %zu B, %d stages, max CTAs %d, SM budget %d), "
              "CUDA driver %d, validation %s",
              P2PT_VERSION_STRING, p.transport, p.chunk_bytes, p.stages, p.max_ctas,
              p.sm_budget, p.driver_version, p.validate ? "on" : "off");
    if (h->policy->after_driver != NULL)
        P2PT_TRY(h->policy->after_driver(h));
    *out = h;
    h = NULL;
out:
    if (h != NULL)
        p2pt__handle_free(h);
    return st;
}

p2pt_status p2pt_finalize(p2pt_handle *h)
{
    if (h != NULL)
        p2pt__handle_free(h);
    return P2PT_SUCCESS;
}

p2pt_status p2pt_get_properties(const p2pt_handle *h, p2pt_properties *props)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_get_properties");
    if (st != P2PT_SUCCESS)
        return st;
    if (props == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "p2pt_get_properties: props is NULL");
    if (props->size < sizeof(size_t))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_get_properties: props->size is %zu; set it to "
                          "sizeof(p2pt_properties) (%zu in this build)",
                          props->size, sizeof(p2pt_properties));
    p2pt_properties p;
    fill_properties(h, &p);
    p.size = props->size < sizeof(p) ? props->size : sizeof(p);
    /* Fill only what the caller's struct has room for. */
    memcpy(props, &p, p.size);
    return P2PT_SUCCESS;
}


p2pt_status p2pt_prepare(p2pt_handle *h, int device)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_prepare");
    if (st != P2PT_SUCCESS)
        return st;
    return h->policy->prepare(h, device);
}

p2pt_status p2pt_copy_async(p2pt_handle *h, void *dst, const void *src, size_t bytes,
                            void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_async");
    if (st != P2PT_SUCCESS)
        return st;
    if (bytes == 0)
        return P2PT_SUCCESS;
    struct p2pt_op op;
    p2pt__op_copy(&op, "p2pt_copy_async", dst, src, bytes, stream);
    return p2pt__op_run(h, &op, NULL);
}

p2pt_status p2pt_window_register(p2pt_handle *h, int device, const void *base, size_t bytes)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_window_register");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__window_add(&h->windows, device, base, bytes, false, false);
}

p2pt_status p2pt_window_unregister(p2pt_handle *h, int device, const void *base)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_window_unregister");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__window_remove(&h->windows, device, base, false);
}
