/*
 * The aggregation manager's core as its consumers call it (the admin
 * interface, am_admin.c): the state they read and the changes they make,
 * each defined by the core's file named beside it.  The core's files
 * reach them through am/am_int.h.
 */
#ifndef SHP_AM_AM_SERVICES_H
#define SHP_AM_AM_SERVICES_H

#include <jansson.h>
#include <stddef.h>

#include "am/am_types.h"
#include "core/status.h"

/* The active/standby state for sharpctl status (am_ha.c): a new
 * reference. */
json_t *shp_am_ha_status(shp_am_t *am);

/* sharpctl adoption (am_adopt.c) */
json_t *shp_am_adopt_json(const shp_am_t *am);
/* The end of a job: its processes are told (am_jobs.c) */
void shp_am_job_end(shp_am_t *am, shp_am_job_t *job, shp_status_t why,
                    const char *reason);
/* the AN's name of a topology node (am_state.c) */
const char *shp_am_an_name(const shp_am_t *am, int node);
/* g's standby or stripe fields (standby_of or stripe_of, shared_ans)
 * added to its JSON form d (the requester's descriptor, sharpctl groups)
 * if g stands by or stripes a group; d returned (am_groups.c) */
json_t *shp_am_group_standby_json(const shp_am_group_t *g, json_t *d);
/* An administrator's settings (am_settings.c), committed to the state
 * database before they return.  reason NULL: undrain, thaw (of an AN or
 * tree not drained or frozen: SHP_OK).  SHP_ERR_NOT_FOUND: no such AN in
 * the topology, no such tree; err says why not. */
SHP_WUR shp_status_t shp_am_an_drain(shp_am_t *am, const char *name,
                                     const char *reason, char *err,
                                     size_t errlen);
SHP_WUR shp_status_t shp_am_tree_freeze(shp_am_t *am, int tree,
                                        const char *reason, char *err,
                                        size_t errlen);
/* the AN's drain, the tree's freeze; NULL: none */
const shp_am_drain_t *shp_am_drained(const shp_am_t *am, const char *name);
const shp_am_freeze_t *shp_am_frozen(const shp_am_t *am, int tree);

#endif
