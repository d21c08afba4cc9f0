/*
 * Group ids (24 bits, not 0): which a manager may hand out.
 *
 * A manager with peers hands out only the ids of its own stripe, id %
 * SHP_AM_LIST_MAX == its rank among the sorted addresses of itself and its
 * peers; one without peers every id.  Two managers active at once (cut
 * from each other by a partition) so never give the same id, however many
 * groups each makes and however often they take over from each other.
 * Within its stripe a manager goes round in turn, past the ids it handed
 * out before a restart (am_persist.c) and the ids its nodes report
 * (adoption), skipping those in use.
 */
#ifndef SHP_AM_IDS_H
#define SHP_AM_IDS_H

#include <stdint.h>

#include "am/am_types.h"
#include "protocol/am_list.h"

/* The stripe of the manager known as `self` among `peers` (which may name
 * it too); next_group moved into it. */
void shp_am_ids_stripe(shp_am_t *am, const char *self,
                       const shp_am_list_t *peers);

/* The first id of the stripe at `v` or after it (round to the start). */
uint32_t shp_am_ids_align(const shp_am_t *am, uint64_t v);

/* An id a node reported: the next one handed out is past it (if ours). */
void shp_am_ids_seen(shp_am_t *am, uint32_t id);

/* 1 if a peer's next_group lies in this manager's stripe: the two were
 * given the same rank (their address lists differ). */
int shp_am_ids_clash(const shp_am_t *am, uint32_t peer_next);

/* The next id of the stripe (in use or not: the caller skips those), its
 * block committed to the state database first; 0: the database failed. */
uint32_t shp_am_ids_next(shp_am_t *am);

#endif
