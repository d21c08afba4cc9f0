/*
 * Internal to the adoption (am/am_adopt.c, am/am_adopt_reports.c): the
 * groups reported, by id, and the adoption's state.  am_adopt.c keeps and
 * decides; am_adopt_reports.c, above it, reads the reports into it.
 */
#ifndef SHP_AM_AM_ADOPT_H
#define SHP_AM_AM_ADOPT_H

#include "am/am_int.h"

#include <uthash.h>
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

adopt_group_t *shp_am_adopt_group_get(shp_am_t *am, uint32_t id);
adopt_rep_t *shp_am_adopt_rep_of(adopt_group_t *g, int a);
void shp_am_adopt_resolve(shp_am_t *am, int final);
void shp_am_adopt_evidence(shp_am_t *am);

#endif
