/* Prints the ENVIRONMENT entries of sharp_coll(3) from libsharp_coll's own
 * table of SHARP_COLL_* settings (linked with the static library: the
 * shared one exports only sharp_coll_*). */
#include "core/config.h"
#include "libsharp/coll_int.h"

#include <stdio.h>

int main(void)
{
    shp_config_man(shp_coll_config_table(), SHP_CONFIG_MAN_ENV, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}
