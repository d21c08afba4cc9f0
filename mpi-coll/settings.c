/*
 * libsharp_mpi: its settings and its state.  The settings are the
 * SHARP_MPI_* environment, read once at MPI_Init (smpi_cfg_load; docs/mpi.md
 * lists them); the state is one object (smpi: the context, the world's
 * out-of-band communicator, the counters of the report).  The notes the
 * layer writes (smpi_note, one line a write, so that the ranks' lines do
 * not interleave) and the ways it gives up (smpi_fail, smpi_die: abort
 * rather than let the ranks diverge) are here too, the bottom of the
 * library: every other file uses them, they use none.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

smpi_cfg_t smpi_cfg;

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0') {
        return dflt;
    }
    long x = strtol(v, &end, 0);
    if (*end == 'k' || *end == 'K') {
        x <<= 10;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        x <<= 20;
        end++;
    }
    if (*end != '\0') {
        fprintf(stderr, "sharp_mpi: ignoring %s=%s (not a number)\n", name, v);
        return dflt;
    }
    return x;
}

void smpi_cfg_load(void)
{
    smpi_cfg.enable = (int)env_long("SHARP_MPI_ENABLE", 1);
    smpi_cfg.verbose = (int)env_long("SHARP_MPI_VERBOSE", 0);
    smpi_cfg.min_ranks = (int)env_long("SHARP_MPI_MIN_RANKS", 2);
    smpi_cfg.node_aggr = (int)env_long("SHARP_MPI_NODE_AGGR", 1);
    smpi_cfg.node_shm = (int)env_long("SHARP_MPI_NODE_SHM", 1);
    smpi_cfg.node_shm_slot = env_long("SHARP_MPI_NODE_SHM_SLOT", 64L << 10);
    smpi_cfg.node_shm_timeout_ms = env_long("SHARP_MPI_NODE_SHM_TIMEOUT", 0);
    smpi_cfg.node_shm_yield_us = env_long("SHARP_MPI_NODE_SHM_YIELD_US", 2000);
    smpi_cfg.max_bytes = env_long("SHARP_MPI_MAX_BYTES", 64L << 20);
    smpi_cfg.allreduce = (int)env_long("SHARP_MPI_ALLREDUCE", 1);
    smpi_cfg.reduce = (int)env_long("SHARP_MPI_REDUCE", 1);
    smpi_cfg.barrier = (int)env_long("SHARP_MPI_BARRIER", 1);
    smpi_cfg.bcast = (int)env_long("SHARP_MPI_BCAST", 1);
    smpi_cfg.recovery_timeout_ms =
        env_long("SHARP_MPI_RECOVERY_TIMEOUT", 30000);
    smpi_cfg.regroup_calls = env_long("SHARP_MPI_REGROUP_CALLS", 1000);
    const char *f = getenv("SHARP_MPI_ON_FAULT");
    smpi_cfg.fallback = 1;
    if (f != NULL && !strcmp(f, "abort")) {
        smpi_cfg.fallback = 0;
    } else if (f != NULL && *f && strcmp(f, "fallback")) {
        fprintf(stderr,
                "sharp_mpi: ignoring SHARP_MPI_ON_FAULT=%s (fallback or "
                "abort)\n",
                f);
    }
    smpi_cfg.reproducible = (int)env_long("SHARP_MPI_REPRODUCIBLE", 0);
    smpi_cfg.threads = (int)env_long("SHARP_MPI_THREAD_MULTIPLE", 1);
}

const char *const smpi_coll_names[C_N] = {
    "MPI_Allreduce",  "MPI_Reduce",  "MPI_Barrier",  "MPI_Bcast",
    "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibarrier", "MPI_Ibcast"};

smpi_global_t smpi = {.keyval = MPI_KEYVAL_INVALID};

void smpi_note(int verbosity, const char *fmt, ...)
{
    va_list ap;
    if (smpi_cfg.verbose < verbosity) {
        return;
    }
    char line[1024];
    int n = snprintf(line, sizeof(line), "sharp_mpi[%d]: ", smpi.rank);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    /* one write: the ranks' lines do not interleave */
    fprintf(stderr, "%s\n", line);
}

void smpi_fail(MPI_Comm comm, const char *what, int rc)
{
    fprintf(stderr,
            "sharp_mpi[%d]: %s failed in the network (%s); the other ranks "
            "may already have its result, so it cannot be redone with MPI: "
            "aborting (the aggregation node, sharpd and sharp_am logs name "
            "the failed component)\n",
            smpi.rank, what, sharp_coll_strerror(rc));
    PMPI_Abort(comm, 70);
}

/* a local step that cannot fail on a sane MPI did: the other ranks are in
 * the collective already, so abort rather than diverge */
void smpi_die(MPI_Comm comm, const char *what)
{
    fprintf(stderr, "sharp_mpi[%d]: %s failed: aborting\n", smpi.rank, what);
    PMPI_Abort(comm, 70);
}

void *smpi_xmalloc(size_t n, MPI_Comm comm, const char *what)
{
    void *p = malloc(n + 1);
    if (p == NULL) {
        /* every rank must take the same path: abort, not diverge */
        smpi_fail(comm, what, SHARP_COLL_ENOMEM);
    }
    return p;
}
