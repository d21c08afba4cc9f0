/*
 * libsharp_mpi: the fall-back policy, one for every form (blocking,
 * non-blocking, persistent; docs/mpi.md, failure protocol).
 *
 * A collective that fails after its group was up is recovered
 * (SHARP_MPI_ON_FAULT=fallback, recover.h): the members agree, through a
 * recovery service of each process, on the first operation that completed
 * nowhere; the one before it is fetched from a member that kept it by
 * those that missed it, and from it on the communicator's standby group
 * carries the operations if it has one (smpi_comm_failover), else PMPI on
 * every rank (smpi_comm_fall), until its turn to try a new group (comm.c).
 * With SHARP_MPI_ON_FAULT=abort the job aborts naming the failure
 * (smpi_fail).
 * A node step on shared memory that fails (a rank of the node died or did
 * not come) aborts the job naming the rank.
 *
 * Below the engine: its operation (op.c, node_step.c), of every form,
 * calls it; it calls none of it.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "core/time.h"
#include "mpi-coll/recover.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The group under st failed (rc) in `what`, an operation of len bytes, or
 * this member was frozen before posting it (a member asked): the members
 * agree, through their recovery services, on where the group's operations
 * end (docs/mpi.md, failure protocol; the job aborts if they cannot).
 * leave: the group is left first (the tree then fails the operations still
 * waiting for this member).  1: the operation completed elsewhere, its
 * result fetched (smr_result; the later calls that completed elsewhere
 * come here too, as the group is gone, and take theirs); 0: it is to be
 * redone on PMPI, and every later one.  The engine's (smpi_nb_recover,
 * and node_step.c's leader).
 */
int smpi_recover_op(comm_state_t *st, MPI_Comm comm, const char *what,
                    size_t len, int rc, int leave)
{
    char why[200] = "";
    if (leave && st->sc != NULL) {
        smpi_note(2, "%s failed in the network (%s): recovering", what,
                  sharp_coll_strerror(rc));
        /* a failed group is left at once: the tree fails the operations
         * still waiting for this member (and nothing may cancel it now) */
        smr_set_cancel(st->rec, NULL, NULL, 0);
        sharp_coll_comm_destroy(st->sc);
        st->sc = NULL;
    }
    uint64_t t0 = shp_time_ns();
    uint64_t F = smr_decide(st->rec, len, (int)smpi_cfg.recovery_timeout_ms,
                            why, sizeof(why));
    if (F == 0) {
        fprintf(stderr,
                "sharp_mpi[%d]: %s failed in the network and the members "
                "could not agree on where their operations ended within "
                "%ld ms (%s): aborting\n",
                smpi.rank, what, (long)smpi_cfg.recovery_timeout_ms, why);
        smpi_abort(comm);
    }
    uint64_t us = (shp_time_ns() - t0) / SHP_NSEC_PER_USEC;
    if (us > smpi.recovery_us_max) {
        smpi.recovery_us_max = us;
    }
    int took = smr_take(st->rec, len);
    if (took < 0) {
        fprintf(stderr,
                "sharp_mpi[%d]: %s of %zu bytes: the operation the other "
                "members completed in its place had a result of another "
                "length (the ranks' collective calls differ): aborting\n",
                smpi.rank, what, len);
        smpi_abort(comm);
    }
    if (took > 0) {
        SMPI_ADD(smpi.fetched,
                 1); /* completed elsewhere: its result, from a member */
    }
    return took > 0;
}

/* st's communicator goes to PMPI from now on (every rank decides so at
 * the same operation, wherever it learnt of the failure: a blocking call
 * or a non-blocking one), and tries a new group SHARP_MPI_REGROUP_CALLS
 * calls after the last one that completed through the group: 1 if it
 * offloaded until now */
int smpi_comm_fall(comm_state_t *st)
{
    if (!st->use) {
        return 0;
    }
    st->why = WHY_FELL;
    st->use = 0;
    st->fell = 1;
    st->fall_pos = st->done_seq;
    st->retry_at = (unsigned long)smpi_cfg.regroup_calls;
    SMPI_ADD(smpi.fallen, 1);
    if (st->rank == 0) {
        smpi_note(
            1,
            "a communicator of %d ranks falls back to MPI after a failure "
            "in the network",
            st->size);
    }
    return 1;
}

/* the recovery service's way to fail a member's operation (recover.h) */
static void cancel_comm(void *sc)
{
    (void)sharp_coll_comm_cancel(sc);
}

/* r, the record of a member of sc, takes sc's cancel: a member left inside
 * an operation the others gave up on (no notice of the group's failure
 * reached it) leaves it after a third of the time they wait for it */
void smpi_rec_cancel(smr_rec_t *r, struct sharp_coll_comm *sc)
{
    int64_t after = smpi_cfg.recovery_timeout_ms / 3;
    smr_set_cancel(r, cancel_comm, sc, (int)(after < 5000 ? after : 5000));
}

/* r, the record of a member of sc, allows what sc does: bcasts that
 * complete at members apart (sharp_coll_comm_window), kept in its window
 * slots (recover.h) */
void smpi_rec_window(smr_rec_t *r, struct sharp_coll_comm *sc, MPI_Comm comm)
{
    size_t most = 0;
    unsigned apart = 0;
    if (sharp_coll_comm_window(sc, &most, &apart) != SHARP_COLL_SUCCESS ||
        most == 0) {
        return;
    }
    if (most > SMR_WIN_BYTES || apart >= SMR_WIN) {
        fprintf(stderr,
                "sharp_mpi[%d]: the sharp group lets bcasts of %zu bytes "
                "complete %u operations apart; the recovery keeps %d of at "
                "most %d bytes: aborting\n",
                smpi.rank, most, apart, SMR_WIN, SMR_WIN_BYTES);
        smpi_abort(comm);
    }
    smr_allow_window(r);
}

/* The group under st failed and its members agreed that the operation at
 * hand completed nowhere: the standby group, if st has one, carries it
 * and every later one.  Every member decides alike: the standby was made
 * on all or on none (comm_init's answer is the same everywhere), and a
 * member learns of the failure at this same operation, whether it failed
 * here or was frozen before posting it.  The failed group is left (a
 * member frozen before posting still had it); its record is kept until
 * the communicator's teardown, a member may still be asking it. */
int smpi_comm_failover(comm_state_t *st, unsigned long seq)
{
    if (st->standby == NULL) {
        return 0;
    }
    smr_rec_t **r =
        realloc(st->retired, sizeof(*r) * (size_t)(st->nretired + 1));
    if (r == NULL) {
        smpi_fail(st->all, "a failover to the standby group",
                  SHARP_COLL_ENOMEM);
    }
    st->retired = r;
    st->retired[st->nretired++] = st->rec;
    smr_set_cancel(st->rec, NULL, NULL, 0);
    if (st->sc != NULL) {
        sharp_coll_comm_destroy(st->sc);
    }
    st->sc = st->standby;
    st->rec = st->standby_rec;
    st->standby = NULL;
    st->standby_rec = NULL;
    smpi_rec_cancel(st->rec, st->sc);
    /* a new standby, on the trees the manager has rebuilt by then (comm.c;
     * the queue's bound, progress.c, has every member past this operation
     * by that call) */
    st->standby_at = smpi_cfg.regroup_calls > 0
                         ? seq + (unsigned long)smpi_cfg.regroup_calls
                         : 0;
    st->failed_ns = shp_time_ns();
    SMPI_ADD(smpi.failovers, 1);
    if (st->rank == 0) {
        smpi_note(1,
                  "a communicator of %d ranks goes on through its standby "
                  "group after a failure in the network",
                  st->size);
    }
    return 1;
}

/* A node step on shared memory that failed: a rank of this node died or
 * did not come (node_shm.h); the others are inside the collective. */
void smpi_node_shm_fail(comm_state_t *st, MPI_Comm comm, const char *what,
                        shp_status_t s)
{
    fprintf(stderr,
            "sharp_mpi[%d]: the node-local step of %s failed: node rank %d "
            "%s: aborting\n",
            smpi.rank, what, smn_failed_rank(st->nshm),
            s == SHP_ERR_TIMED_OUT ? "did not come in time"
                                   : "died (or its node step failed)");
    smpi_abort(comm);
}
