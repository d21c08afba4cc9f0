/*
 * sharp_am: the aggregation manager.  One per fabric.  Holds the topology,
 * the registered ANs, the trees, the admitted jobs and their groups; talks
 * to ANs and sharpds over authenticated TCP control connections and to
 * sharpctl over a root-only Unix socket.  See docs/am.md.
 *
 * The manager started and stopped, its topology replaced (am.c); its
 * types: am/am_types.h.
 */
#ifndef SHP_AM_AM_H
#define SHP_AM_AM_H

#include <ev.h>
#include <stddef.h>

#include "am/am_types.h"
#include "core/status.h"

SHP_WUR shp_status_t shp_am_start(shp_am_t *am, struct ev_loop *loop, char *err,
                                  size_t errlen);
void shp_am_stop(shp_am_t *am);
/* Replace the topology (no jobs may run); err says why not. */
SHP_WUR shp_status_t shp_am_topology_load(shp_am_t *am, const char *path,
                                          char *err, size_t errlen);

#endif
