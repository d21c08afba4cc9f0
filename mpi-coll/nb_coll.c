/*
 * libsharp_mpi: the non-blocking and persistent collectives' entry points,
 * their eligibility and arguments; the engine is op.c.
 *
 *   MPI_Iallreduce, MPI_Ireduce, MPI_Ibcast, MPI_Ibarrier
 *       an operation made and started at once; the program gets its
 *       generalized request
 *   MPI_Allreduce_init, _Reduce_init, _Bcast_init, _Barrier_init (MPI 4:
 *   MPICH) and Open MPI 4.1's MPIX_ ones
 *       the program's handle is an inactive persistent request of MPI's
 *       own (a receive on a private communicator, never started); each
 *       MPI_Start (request.c) makes a generalized request that stands in
 *       for the handle inside MPI_Wait* / MPI_Test* and the handle is
 *       given back
 *
 * Offloaded exactly when the blocking call would be (dtype.c's rules:
 * every rank decides alike); with several ranks per node the node step's
 * exchange is on shared memory for data up to the communicator's nb_slot,
 * else on PMPI (node_xchg.c).  None makes a group: a communicator that
 * has none yet sends them to MPI (comm.c).  Each entry point holds the
 * layer's lock (lock.c).
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/coll.h"

#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <stdlib.h>

#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define PCOLL(name) MPI_##name##_init
#define PPCOLL(name) PMPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define PCOLL(name) MPIX_##name##_init
#define PPCOLL(name) PMPIX_##name##_init
#endif

/* An operation of the program's, filled in at tmp: a live one of ours.
 * A derived datatype is duplicated: MPI lets the program free its own
 * while the operation is pending or persistent (released with the
 * operation, op.c). */
static nb_op_t *nb_new(const nb_op_t *tmp)
{
    int ni, na, nd, comb = MPI_COMBINER_NAMED;
    nb_op_t *o = malloc(sizeof(*o));
    if (o == NULL) {
        smpi_fail(tmp->comm, smpi_nb_name(tmp), SHARP_COLL_ENOMEM);
    }
    *o = *tmp;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    o->own_dt = 0;
    if (o->kind != C_IBARRIER && o->dt != MPI_DATATYPE_NULL) {
        PMPI_Type_get_envelope(o->dt, &ni, &na, &nd, &comb);
    }
    if (comb != MPI_COMBINER_NAMED) {
        if (PMPI_Type_dup(tmp->dt, &o->dt) != MPI_SUCCESS) {
            smpi_die(tmp->comm, "a datatype's duplicate");
        }
        o->own_dt = 1;
    }
    smpi_nb_link(o);
    return o;
}

/* an (all)reduce as an operation, or NULL: PMPI, for *why */
static nb_op_t *nb_reduce_op(int kind, const void *sbuf, void *rbuf, int count,
                             MPI_Datatype dt, MPI_Op op, int root,
                             MPI_Comm comm, int *why)
{
    nb_op_t tmp;
    return smpi_reduce_args(&tmp, kind, sbuf, rbuf, count, dt, op, root, comm,
                            why)
               ? nb_new(&tmp)
               : NULL;
}

static nb_op_t *nb_bcast_op(void *buf, int count, MPI_Datatype dt, int root,
                            MPI_Comm comm, int *why)
{
    nb_op_t tmp;
    return smpi_bcast_args(&tmp, C_IBCAST, buf, count, dt, root, comm, why)
               ? nb_new(&tmp)
               : NULL;
}

static nb_op_t *nb_barrier_op(MPI_Comm comm, int *why)
{
    nb_op_t tmp;
    return smpi_barrier_args(&tmp, C_IBARRIER, comm, why) ? nb_new(&tmp) : NULL;
}

/* Non-blocking collectives -------------------------------------------------- */

static int nb_go(nb_op_t *o, MPI_Request *req)
{
    smpi_nb_start(o);
    *req = o->greq;
    return MPI_SUCCESS;
}

static int nb_api_iallreduce(const void *sbuf, void *rbuf, int count,
                             MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                             MPI_Request *req)
{
    int why;
    nb_op_t *o =
        nb_reduce_op(C_IALLREDUCE, sbuf, rbuf, count, dt, op, -1, comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IALLREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    return PMPI_Iallreduce(sbuf, rbuf, count, dt, op, comm, req);
}

API int MPI_Iallreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                       MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_iallreduce(sbuf, rbuf, count, dt, op, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ireduce(const void *sbuf, void *rbuf, int count,
                          MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm,
                          MPI_Request *req)
{
    int why = WHY_ARGS;
    nb_op_t *o = root >= 0 ? nb_reduce_op(C_IREDUCE, sbuf, rbuf, count, dt, op,
                                          root, comm, &why)
                           : NULL;
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    return PMPI_Ireduce(sbuf, rbuf, count, dt, op, root, comm, req);
}

API int MPI_Ireduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                    MPI_Op op, int root, MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ireduce(sbuf, rbuf, count, dt, op, root, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ibcast(void *buf, int count, MPI_Datatype dt, int root,
                         MPI_Comm comm, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_bcast_op(buf, count, dt, root, comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IBCAST, smpi_bytes_of(count, dt), comm, why,
                  MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Ibcast(buf, count, dt, root, comm, req);
}

API int MPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root,
                   MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ibcast(buf, count, dt, root, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ibarrier(MPI_Comm comm, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_barrier_op(comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IBARRIER, 0, comm, why, MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Ibarrier(comm, req);
}

API int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ibarrier(comm, req);
    smpi_unlock();
    return rc;
}

/* Persistent collectives ---------------------------------------------------- */

#ifdef HAVE_PCOLL
/* MPI-4 matches a persistent collective by its _init, and lets each rank
 * start them in its own order; a group's operations meet in the order
 * they start.  So they are offloaded only where the program says its
 * starts are in one order on every rank (SHARP_MPI_PERSISTENT_ORDERED=1),
 * else MPI's own, counted at their init with their reason. */
static int nb_persist_ok(int kind, long bytes, MPI_Comm comm, MPI_Datatype dt,
                         MPI_Op op)
{
    if (smpi_cfg.persistent_ordered || smpi.ctx == NULL) {
        return 1;
    }
    smpi_fallback(kind, bytes, comm, WHY_PERSISTENT, dt, op);
    return 0;
}

static int nb_persist(nb_op_t *o, MPI_Request *req)
{
    /* a handle of MPI's own, never started (so inactive to PMPI) and
     * distinct from every other: a receive on the library's private
     * communicator (MPICH gives every receive from MPI_PROC_NULL one
     * handle) */
    o->persistent = 1;
    o->st->refs++; /* the communicator may be freed first (comm.c) */
    PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, 0x5a17, smpi.oob_world,
                   &o->handle);
    smpi_nb_key(o, o->handle);
    *req = o->handle;
    return MPI_SUCCESS;
}

static int nb_api_pcoll_allreduce(const void *sbuf, void *rbuf, int count,
                                  MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                  MPI_Info info, MPI_Request *req)
{
    int why; /* not counted: the starts are (MPI's own, here) */
    nb_op_t *o =
        nb_persist_ok(C_IALLREDUCE, smpi_bytes_of(count, dt), comm, dt, op)
            ? nb_reduce_op(C_IALLREDUCE, sbuf, rbuf, count, dt, op, -1, comm,
                           &why)
            : NULL;
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Allreduce)(sbuf, rbuf, count, dt, op, comm, info, req);
}

API int PCOLL(Allreduce)(const void *sbuf, void *rbuf, int count,
                         MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                         MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_allreduce(sbuf, rbuf, count, dt, op, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_reduce(const void *sbuf, void *rbuf, int count,
                               MPI_Datatype dt, MPI_Op op, int root,
                               MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o = root >= 0 && nb_persist_ok(C_IREDUCE, smpi_bytes_of(count, dt),
                                            comm, dt, op)
                     ? nb_reduce_op(C_IREDUCE, sbuf, rbuf, count, dt, op, root,
                                    comm, &why)
                     : NULL;
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Reduce)(sbuf, rbuf, count, dt, op, root, comm, info, req);
}

API int PCOLL(Reduce)(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, MPI_Info info,
                      MPI_Request *req)
{
    smpi_lock();
    int rc =
        nb_api_pcoll_reduce(sbuf, rbuf, count, dt, op, root, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_bcast(void *buf, int count, MPI_Datatype dt, int root,
                              MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_persist_ok(C_IBCAST, smpi_bytes_of(count, dt), comm,
                               MPI_DATATYPE_NULL, MPI_OP_NULL)
                     ? nb_bcast_op(buf, count, dt, root, comm, &why)
                     : NULL;
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Bcast)(buf, count, dt, root, comm, info, req);
}

API int PCOLL(Bcast)(void *buf, int count, MPI_Datatype dt, int root,
                     MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_bcast(buf, count, dt, root, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_barrier(MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o =
        nb_persist_ok(C_IBARRIER, 0, comm, MPI_DATATYPE_NULL, MPI_OP_NULL)
            ? nb_barrier_op(comm, &why)
            : NULL;
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Barrier)(comm, info, req);
}

API int PCOLL(Barrier)(MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_barrier(comm, info, req);
    smpi_unlock();
    return rc;
}
#endif
