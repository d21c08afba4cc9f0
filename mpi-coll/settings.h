/*
 * libsharp_mpi's settings: the SHARP_MPI_* environment as one option
 * table (settings_table.c), so that docs, the man page's ENVIRONMENT
 * (libsharp_mpi(7), made from the table) and the layer read the same
 * rows.  No MPI here: the man page's generator links the table alone.
 */
#ifndef SHARP_MPI_SETTINGS_H
#define SHARP_MPI_SETTINGS_H

#include "core/config.h"

#include <stddef.h>
#include <stdint.h>

typedef struct smpi_cfg {
    int enable, verbose, min_ranks, node_aggr;
    int node_shm;                /* the node step on shared memory */
    size_t node_shm_slot;        /* bytes a rank */
    int64_t node_shm_timeout_ms; /* 0: as long as it takes */
    unsigned node_shm_yield_us;
    size_t max_bytes;
    int allreduce, reduce, barrier, bcast;
    int on_fault; /* SMPI_FALLBACK or SMPI_ABORT: rank 0's (init.c) */
    int64_t recovery_timeout_ms;
    int regroup_calls;        /* 0: never */
    int standby;              /* a standby group per communicator */
    int64_t standby_after_ms; /* a new one, no sooner after a failover */
    int reproducible;         /* floating-point MPI_SUM exact */
    int threads;              /* MPI_THREAD_MULTIPLE offloaded */
    int group_at;             /* SMPI_AT_CREATE or SMPI_AT_FIRST */
    int unused_groups;        /* groups made at creation and not used yet */
    int persistent_ordered;   /* persistent starts in one order: offloaded */
} smpi_cfg_t;

enum { SMPI_FALLBACK, SMPI_ABORT };
/* when a communicator's group is made: with the communicator (every
 * blocking call that makes one), or at its first blocking collective */
enum { SMPI_AT_CREATE, SMPI_AT_FIRST };

/* the table (env prefix SHARP_MPI_) */
const shp_config_table_t *smpi_config_table(void);

#endif
