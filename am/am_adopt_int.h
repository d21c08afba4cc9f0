/*
 * Internal to the manager's adoption (am_adopt.c, am_adopt_sharpd.c):
 * the groups reported by the ANs while a restarted manager takes the
 * fabric back, and what the sharpds' reports (am_adopt_sharpd.c) use of
 * them.  am_adopt_sharpd.c calls am_adopt.c, never the other way.
 */
#ifndef SHP_AM_ADOPT_INT_H
#define SHP_AM_ADOPT_INT_H

#include "am/am_int.h"

#define ADOPT_MAX_GROUPS (1u << 20) /* groups reported and pending */
#define ADOPT_MAX_CHILDREN 1024     /* an AN's children in one group */
#define ADOPT_LOG_MAX 1024          /* revocations kept for sharpctl */

typedef struct adopt_rep {
    int an; /* AN index */
    int top;
    int pidx;
    char *kinds; /* 'a' AN, 'm' member, per child in order */
} adopt_rep_t;

typedef struct adopt_group {
    uint32_t id;
    int tree;
    uint64_t job;
    char fp[SHP_AUTH_FP_HEX];
    int dist;
    char mcast[64];
    unsigned osts;
    uint32_t payload;
    adopt_rep_t *reps; /* one per AN that reported it */
    int nreps;
    json_t *members; /* host names in rank order (a sharpd's), or NULL */
    char why[300];   /* the reports disagree: revoked for this */
    int gone;        /* revoked: later reports of it are removed quietly */
    UT_hash_handle hh;
} adopt_group_t;

struct shp_am_adopt {
    int on;          /* within adopt_timeout of the start */
    int evidence;    /* something was reported to take back */
    int trees_ready; /* trees over every AN (or the timeout passed) */
    int built_all;   /* ready with every AN up: nothing to wait for */
    ev_timer deadline;
    adopt_group_t *groups;
    unsigned ngroups;
    json_t *log; /* [{group_id, job_id, reason}] revoked, the last ones */
};

/* am_adopt.c */
/* the group of id reported (made if new; NULL past ADOPT_MAX_GROUPS) */
adopt_group_t *shp_am_adopt_group_get(shp_am_t *am, uint32_t id);
/* something to take back was reported: the trees wait for every AN */
void shp_am_adopt_evidence(shp_am_t *am);
/* every group reported: taken back, revoked, or (not final) left */
void shp_am_adopt_resolve(shp_am_t *am, int final);

#endif
