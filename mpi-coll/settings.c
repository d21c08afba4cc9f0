/*
 * libsharp_mpi: its settings and its state.  The settings are the
 * SHARP_MPI_* environment, read once at MPI_Init (smpi_cfg_load) by the
 * rows of settings_table.c (docs/mpi.md and libsharp_mpi(7) list them);
 * the state is one object (smpi: the context, the world's
 * out-of-band communicator, the counters of the report).  The notes the
 * layer writes (smpi_note, one line a write, so that the ranks' lines do
 * not interleave) and the ways it gives up (smpi_fail, smpi_die: abort
 * rather than let the ranks diverge) are here too, the bottom of the
 * library: every other file uses them, they use none.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

smpi_cfg_t smpi_cfg;

/* The table's defaults, then each SHARP_MPI_* variable that is set; a bad
 * value is named and ignored (its default kept), as a typo must not end a
 * job that would run on MPI anyway. */
void smpi_cfg_load(void)
{
    const shp_config_table_t *t = smpi_config_table();
    shp_config_err_t err;
    memset(&smpi_cfg, 0, sizeof(smpi_cfg));
    if (shp_config_defaults(t, &smpi_cfg) != SHP_OK) {
        smpi_cfg.enable = 0; /* cannot happen: the table's own defaults */
        return;
    }
    for (const shp_config_opt_t *o = t->opts; o->name != NULL; o++) {
        char env[96];
        shp_config_env_name(t, o->name, env, sizeof(env));
        const char *v = getenv(env);
        if (v != NULL && *v != '\0' &&
            shp_config_set(t, &smpi_cfg, o->name, v, env, &err) != SHP_OK) {
            fprintf(stderr, "sharp_mpi: ignoring %s=%s: %s\n", env, v, err.msg);
        }
    }
    if (smpi_cfg.recovery_timeout_ms < 0 ||
        smpi_cfg.recovery_timeout_ms > INT_MAX) {
        smpi_cfg.recovery_timeout_ms = INT_MAX; /* inf */
    }
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

/* The job aborted (exit code 70), after what the caller printed: stderr
 * flushed, then a moment for the launcher to forward it (MPICH's hydra
 * tears the job down at the abort and could drop the message that says
 * why) */
void smpi_abort(MPI_Comm comm)
{
    struct timespec ts = {0, 200 * 1000 * 1000};
    fflush(stderr);
    nanosleep(&ts, NULL);
    PMPI_Abort(comm, 70);
}

void smpi_fail(MPI_Comm comm, const char *what, int rc)
{
    fprintf(stderr,
            "sharp_mpi[%d]: %s failed in the network (%s); the other ranks "
            "may already have its result, so it cannot be redone with MPI: "
            "aborting (the aggregation node, sharpd and sharp_am logs name "
            "the failed component)\n",
            smpi.rank, what, sharp_coll_strerror(rc));
    smpi_abort(comm);
}

/* a local step that cannot fail on a sane MPI did: the other ranks are in
 * the collective already, so abort rather than diverge */
void smpi_die(MPI_Comm comm, const char *what)
{
    fprintf(stderr, "sharp_mpi[%d]: %s failed: aborting\n", smpi.rank, what);
    smpi_abort(comm);
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
