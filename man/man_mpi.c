/* Prints the SHARP_MPI_* entries of libsharp_mpi(7)'s ENVIRONMENT from
 * libsharp_mpi's own table of settings (mpi-coll/settings_table.c, which
 * needs no MPI). */
#include "core/config.h"
#include "mpi-coll/settings.h"

#include <stdio.h>

int main(void)
{
    shp_config_man(smpi_config_table(), SHP_CONFIG_MAN_ENV, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}
