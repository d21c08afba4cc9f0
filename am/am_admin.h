/*
 * sharp_am's admin interface (am/am_admin.c), a consumer of the core: the
 * handler of the admin socket's requests (sharpctl).
 */
#ifndef SHP_AM_AM_ADMIN_H
#define SHP_AM_AM_ADMIN_H

#include "am/am_types.h"

/* Installs the admin interface's request handler in `am` (call before
 * shp_am_start). */
void shp_am_admin_install(shp_am_t *am);

#endif
