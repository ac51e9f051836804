/* Links the installed library and checks the plugin table is reachable. */
#include <p2pt_plugin.h>
#include <stdio.h>

int main(void)
{
    if (p2pt_plugin_v1.abi_version != 1)
        return 1;
    printf("installed p2pt %s: %s\n", p2pt_plugin_v1.version, p2pt_status_string(P2PT_SUCCESS));
    return 0;
}
