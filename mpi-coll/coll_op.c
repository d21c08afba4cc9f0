/*
 * libsharp_mpi: one blocking operation through a communicator's group
 * (this rank a member): posted through sharp into the group's record (the
 * last result every member keeps for a member that missed it), or straight
 * into place without recovery; a failure recovered (fall.c) to a result
 * fetched from a member, or to the call redone on PMPI on every rank.
 * The blocking collectives (coll_reduce.c, coll_bcast.c, coll_barrier.c)
 * fill its arguments (coll.h) and take its answer.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"
#include "mpi-coll/recover.h"

#include <string.h>

static int post_op(comm_state_t *st, op_args_t *a, char *buf, size_t len)
{
    struct sharp_coll_bcast_spec bs;
    int rc;
    switch (a->kind) {
    case C_BARRIER: return sharp_coll_do_barrier(st->sc);
    case C_BCAST:
        /* the root sends from its own data: the record's buffer still holds
         * the last result, which a member that missed it may be fetching */
        memset(&bs, 0, sizeof(bs));
        bs.buf_desc =
            smpi_desc_of(a->bsrc != NULL ? (void *)a->bsrc : buf, len);
        bs.size = len;
        bs.root = a->broot;
        rc = sharp_coll_do_bcast(st->sc, &bs);
        if (rc == SHARP_COLL_SUCCESS && a->bsrc != NULL && a->bsrc != buf) {
            memcpy(buf, a->bsrc, len); /* now the last result */
        }
        return rc;
    default:
        a->spec->rbuf_desc = smpi_desc_of(buf, len);
        if (a->exact_n > 0) {
            return sharp_coll_do_allreduce_exact_n(st->sc, a->spec, a->exact_n);
        }
        if (a->root >= 0 && buf == a->direct) {
            a->spec->root = a->root; /* only the root keeps the result */
            return sharp_coll_do_reduce(st->sc, a->spec);
        }
        return sharp_coll_do_allreduce(st->sc, a->spec);
    }
}

/* One operation of st's group (this rank a member): OP_OK with its len
 * bytes of result at *res (the record's buffer: every member keeps its
 * last result until its next operation), or OP_REDO: the group failed,
 * and its standby too or it had none, and this call, and every later one
 * on the communicator, goes to PMPI on every rank (docs/mpi.md, failure
 * protocol).  With SHARP_MPI_ON_FAULT=
 * abort a failure aborts the job. */
int smpi_run_op(comm_state_t *st, MPI_Comm comm, const char *what, size_t len,
                op_args_t *a, char **res)
{
    int rc;
    if (smpi_cfg.on_fault != SMPI_FALLBACK || !st->recoverable) {
        /* no record to keep: the result straight where it goes */
        if (a->direct == NULL && a->root < 0 && a->kind != C_BARRIER) {
            smpi_fail(comm, what, SHARP_COLL_EINVAL); /* cannot happen */
        }
        rc = post_op(st, a, a->direct, len);
        if (rc != SHARP_COLL_SUCCESS) {
            smpi_fail(comm, what, rc);
        }
        *res = a->direct;
        return OP_OK;
    }
    do {
        int oom = 0;
        char *buf = st->sc != NULL ? smr_begin(st->rec, len, &oom) : NULL;
        if (oom) {
            smpi_fail(comm, what, SHARP_COLL_ENOMEM);
        }
        if (buf == NULL) { /* a member asked (frozen), or the group failed */
            rc = SHARP_COLL_ERROR;
        } else {
            rc = post_op(st, a, buf, len);
            smr_end(st->rec, rc == SHARP_COLL_SUCCESS, len);
            if (rc == SHARP_COLL_SUCCESS) {
                *res = buf;
                return OP_OK;
            }
        }
        if (smpi_recover_op(st, comm, what, len, rc, buf != NULL)) {
            *res = smr_result(st->rec);
            return OP_OK;
        }
        /* completed nowhere: again on the standby group, if there is one */
    } while (smpi_comm_failover(st, st->seq));
    return OP_REDO;
}

/* the communicator goes to PMPI from now on (every rank, at this call) */
void smpi_fell_back(comm_state_t *st, MPI_Comm comm)
{
    (void)comm;
    smpi_comm_fall(st);
    SMPI_ADD(smpi.redone, 1);
}
