/*
 * The public entry points (p2pt.h): handle life cycle, properties, prepare,
 * copy. The plugin table (plugin.c) points at these.
 *
 * Live handles are kept in a registry so that finalize is safe to call twice:
 * the second call finds nothing and touches no freed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct p2pt_handle **registry;
static size_t registry_len, registry_cap;

static p2pt_status registry_add(struct p2pt_handle *h)
{
    p2pt_status st = P2PT_SUCCESS;
    pthread_mutex_lock(&registry_lock);
    if (registry_len == registry_cap) {
        size_t cap = registry_cap ? registry_cap * 2 : 8;
        struct p2pt_handle **grown = realloc(registry, cap * sizeof(*grown));
        if (grown == NULL) {
            st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
            goto out;
        }
        registry = grown;
        registry_cap = cap;
    }
    registry[registry_len++] = h;
out:
    pthread_mutex_unlock(&registry_lock);
    return st;
}

/* Remove `h`; false when it was not there (already finalized). */
static bool registry_remove(const struct p2pt_handle *h)
{
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++) {
        if (registry[i] == h) {
            registry[i] = registry[--registry_len];
            found = true;
            break;
        }
    }
    if (registry_len == 0) {
        free(registry);
        registry = NULL;
        registry_cap = 0;
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

p2pt_status p2pt__check_handle(const p2pt_handle *h, const char *fn)
{
    if (h == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: handle is NULL", fn);
    if (h->magic != P2PT_HANDLE_MAGIC)
        return p2pt__fail(P2PT_INVALID_USAGE,
                          "%s: %p is not a live p2pt handle (never initialized, or "
                          "already finalized)",
                          fn, (const void *)h);
    return P2PT_SUCCESS;
}

p2pt_status p2pt_init(const p2pt_init_args *args, p2pt_handle **out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_handle *h = NULL;
    p2pt_init_args a = {sizeof(a), NULL, NULL};

    p2pt__clear_error();
    if (out == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "p2pt_init: out is NULL");
    *out = NULL;
    if (args != NULL) {
        if (args->size < offsetof(p2pt_init_args, logger) + sizeof(args->logger))
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "p2pt_init: args->size is %zu; set it to "
                              "sizeof(p2pt_init_args) (%zu in this build)",
                              args->size, sizeof(p2pt_init_args));
        /* Read only the fields the caller's struct has. */
        memcpy(&a, args, args->size < sizeof(a) ? args->size : sizeof(a));
        a.size = sizeof(a);
    }

    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    /* Configuration first: a typo is reported before any driver is needed. */
    P2PT_TRY(p2pt__config_read(&h->cfg, a.transport));
    h->log.fn = a.logger;
    h->log.level = h->cfg.log_level;
    h->ops = p2pt__transport_find(h->cfg.transport);
    if (h->ops == NULL) {
        st = p2pt__fail(P2PT_INTERNAL_ERROR, "transport \"%s\" vanished", h->cfg.transport);
        goto out;
    }
    P2PT_TRY(p2pt__cuda_load(h->cfg.cuda_library));
    P2PT_CU(p2pt__cu.cuDriverGetVersion(&h->driver_version));
    h->magic = P2PT_HANDLE_MAGIC;
    P2PT_TRY(registry_add(h));
    P2PT_INFO(&h->log,
              "p2pt %s: transport %s (chunk %zu B, %d stages, max CTAs %d), CUDA "
              "driver %d, validation %s",
              P2PT_VERSION_STRING, h->ops->name, h->cfg.chunk_bytes, h->cfg.stages,
              h->cfg.max_ctas, h->driver_version, h->cfg.validate ? "on" : "off");
    *out = h;
    h = NULL;
out:
    free(h);
    return st;
}

p2pt_status p2pt_finalize(p2pt_handle *h)
{
    if (h == NULL || !registry_remove(h))
        return P2PT_SUCCESS;
    h->magic = 0;
    free(h);
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
    memset(&p, 0, sizeof(p));
    p.size = props->size < sizeof(p) ? props->size : sizeof(p);
    p.transport = h->ops->name;
    p.version = P2PT_VERSION_STRING;
    p.abi_version = 1;
    p.driver_version = h->driver_version;
    p.chunk_bytes = h->cfg.chunk_bytes;
    p.stages = h->cfg.stages;
    p.max_ctas = h->cfg.max_ctas;
    p.validate = h->cfg.validate;
    p.pdl = h->cfg.pdl;
    p.copies = atomic_load(&h->stats.copies);
    p.bytes = atomic_load(&h->stats.bytes);
    p.tma_launches = atomic_load(&h->stats.tma_launches);
    p.ce_copies = atomic_load(&h->stats.ce_copies);
    p.ce_fallbacks = atomic_load(&h->stats.ce_fallbacks);
    p.compilations = p2pt__jit_compilations();
    p.module_loads = p2pt__jit_module_loads();
    p.cubin_cache_hits = p2pt__jit_cache_hits();
    p.rejected = atomic_load(&h->stats.rejected);
    /* Fill only what the caller's struct has room for. */
    memcpy(props, &p, p.size);
    return P2PT_SUCCESS;
}

p2pt_status p2pt_prepare(p2pt_handle *h, int device)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_prepare");
    if (st != P2PT_SUCCESS)
        return st;
    return h->ops->prepare(h, device);
}

p2pt_status p2pt_copy_async(p2pt_handle *h, void *dst, const void *src, size_t bytes,
                            void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_async");
    if (st != P2PT_SUCCESS)
        return st;
    if (bytes == 0)
        return P2PT_SUCCESS;
    struct p2pt_copy c = {dst, src, bytes, (CUstream)stream, NULL, false, -1, -1};
    st = p2pt__copy_check(h, &c);
    if (st != P2PT_SUCCESS)
        return st;
    st = h->ops->copy(h, &c);
    if (st == P2PT_SUCCESS) {
        atomic_fetch_add_explicit(&h->stats.copies, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->stats.bytes, bytes, memory_order_relaxed);
    }
    return st;
}
