/*
 * libsharp_mpi: MPI_Allreduce and MPI_Reduce (blocking), and the
 * eligibility and arguments of every form of them (coll.h).
 *
 * Eligible (dtype.c) on a communicator with a group (comm.c): every rank a
 * member, with recovery an allreduce on every rank, a reduce too (the same
 * operation on the tree: every member keeps the result, for a member that
 * missed it); without, straight into the receive buffer, at the root only.
 * The operation is the engine's (op.c): a blocking call is its start and
 * its wait (smpi_nb_run).  With several ranks per node (hier), the node
 * step (node_step.c): on shared memory for data that fit the
 * communicator's slot, else on PMPI, around the leader's sharp part.  A
 * call that cannot be offloaded, or whose group failed, goes to PMPI with
 * its reason (why.c).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

#include <string.h>

SMPI_HOT int smpi_reduce_args(nb_op_t *o, int ckind, const void *sbuf,
                              void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                              int root, MPI_Comm comm, int *why)
{
    dt_map_t m;
    shp_reduce_desc_t d;
    int sop, all = ckind == C_ALLREDUCE || ckind == C_IALLREDUCE;
    size_t bytes;

    *why = smpi_reduce_why(all ? smpi_cfg.allreduce : smpi_cfg.reduce, count,
                           dt, op, &m, &sop, &bytes, &d);
    if (*why != WHY_OK) {
        return 0;
    }
    comm_state_t *st = smpi_coll_comm(comm, ckind, why);
    if (st == NULL) {
        return 0;
    }
    int keep = root < 0 || root == st->rank;
    if (root >= st->size || (sbuf == MPI_IN_PLACE && !keep)) {
        *why = WHY_ARGS;
        return 0; /* erroneous: PMPI says so */
    }
    memset(o, 0, sizeof(*o));
    o->kind = smpi_engine_kind(ckind);
    o->ckind = ckind;
    o->st = st;
    o->comm = comm;
    o->sbuf = sbuf;
    o->rbuf = rbuf;
    o->count = count;
    o->dt = dt;
    o->root = root;
    o->sop = sop;
    o->mop = op;
    o->keep = keep;
    o->m = m;
    o->d = d;
    o->node = st->hier;
    o->n = (size_t)count;
    o->bytes = bytes;
    return 1;
}

/* allreduce (root < 0) or reduce through sharp: 1, else 0 (*why) */
SMPI_HOT static int try_reduce(const void *sbuf, void *rbuf, int count,
                               MPI_Datatype dt, MPI_Op op, int root,
                               MPI_Comm comm, int *why)
{
    nb_op_t o;
    smpi_lock();
    int ok = smpi_reduce_args(&o, root < 0 ? C_ALLREDUCE : C_REDUCE, sbuf, rbuf,
                              count, dt, op, root, comm, why);
    if (ok) {
        smpi_nb_run(&o);
    }
    smpi_unlock();
    return ok;
}

SMPI_HOT API int MPI_Allreduce(const void *sbuf, void *rbuf, int count,
                               MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    int ret, why;
    if (try_reduce(sbuf, rbuf, count, dt, op, -1, comm, &why)) {
        return MPI_SUCCESS;
    }
    smpi_fallback(C_ALLREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    if (smpi_exact_pmpi(sbuf, rbuf, count, dt, op, -1, comm, &ret)) {
        return ret;
    }
    return PMPI_Allreduce(sbuf, rbuf, count, dt, op, comm);
}

API int MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                   MPI_Op op, int root, MPI_Comm comm)
{
    int ret, why = WHY_ARGS;
    if (root >= 0 && try_reduce(sbuf, rbuf, count, dt, op, root, comm, &why)) {
        return MPI_SUCCESS;
    }
    smpi_fallback(C_REDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    if (root >= 0 &&
        smpi_exact_pmpi(sbuf, rbuf, count, dt, op, root, comm, &ret)) {
        return ret;
    }
    return PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
}
