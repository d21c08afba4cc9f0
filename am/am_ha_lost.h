/*
 * What a standby manager hears from nodes that lost the active one
 * (am_ha.c): a node (an AN or a sharpd, proved by its node secret) that
 * registers with a standby saying it lost the active manager (its
 * registration's "lost", protocol/am_list.h) with that manager's epoch.  When more than half of the
 * fabric's nodes did so within a window, the active one is cut off from
 * them (a partition, a dead link) while the standby still hears it, and
 * the standby takes over (docs/am.md, "A standby manager").
 */
#ifndef SHP_AM_HA_LOST_H
#define SHP_AM_HA_LOST_H

#include "am/am_int.h"

#include <stddef.h>
#include <stdint.h>

typedef struct am_ha_lost am_ha_lost_t;

/* the most nodes remembered: beyond it the oldest are forgotten first */
#define AM_HA_LOST_MAX 65536

am_ha_lost_t *am_ha_lost_new(void);
void am_ha_lost_free(am_ha_lost_t *l);

/* ROLE NAME said it lost the active manager at NOW (ns): how many distinct
 * nodes did so within WINDOW ns before NOW (those older are forgotten) */
int am_ha_lost_note(am_ha_lost_t *l, const char *role, const char *name,
                    uint64_t now, uint64_t window);

/* forget them all */
void am_ha_lost_clear(am_ha_lost_t *l);

/* node P (registering with this standby AM at NOW) lost the active
 * manager: noted; 1 if more than half of the topology's
 * nodes (switches and hosts) did so within 3 x keepalive + 5 s (the nodes'
 * reconnection backoff), the first of them takeover_after ago or more,
 * with WHY said, and the notes forgotten */
int am_ha_lost_quorum(am_ha_lost_t *l, shp_am_t *am, const shp_am_peer_t *p,
                      uint64_t now, char *why, size_t whylen);

#endif
