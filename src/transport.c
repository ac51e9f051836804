/*
 * The registry of transports (curl's available_backends[] pattern). Adding a
 * transport is adding one file and one line here.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "p2pt_internal.h"

const struct p2pt_transport_ops *const p2pt__transports[] = {
    &p2pt__transport_ce,
    &p2pt__transport_tma,
    NULL,
};

const struct p2pt_transport_ops *p2pt__transport_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; p2pt__transports[i] != NULL; i++)
        if (strcasecmp(name, p2pt__transports[i]->name) == 0)
            return p2pt__transports[i];
    return NULL;
}

const char *p2pt__transport_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; p2pt__transports[i] != NULL && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                         p2pt__transports[i]->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}
