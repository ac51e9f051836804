/* SPDX-License-Identifier: Apache-2.0 */
/* Links the installed library and checks the plugin table is reachable;
 * CONSUMER names how it was built, so each line says which consumer ran. */
#include <p2pt_plugin.h>
#include <stdio.h>

#ifndef CONSUMER
#define CONSUMER "consumer"
#endif

int main(void)
{
    if (p2pt_plugin_v1.abi_version != 1)
        return 1;
    printf("%s: installed p2pt %s runs (%s)\n", CONSUMER, p2pt_plugin_v1.version,
           p2pt_status_string(P2PT_SUCCESS));
    return 0;
}
