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
 * else on PMPI (node_xchg.c).  The first collective on a communicator
 * makes its group (comm.c), blocking or not.  Each entry point holds the
 * layer's lock (lock.c).
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

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

/* the communicator's state if a non-blocking operation may go through
 * sharp there (the same answer on every rank), else NULL (*why) */
static comm_state_t *nb_comm(MPI_Comm comm, int *why)
{
    comm_state_t *st = NULL, *had = NULL;
    int found = 0;
    if (smpi.ctx != NULL && comm != MPI_COMM_NULL) {
        PMPI_Comm_get_attr(comm, smpi.keyval, &had, &found);
    }
    st = smpi_comm_state(comm, why, 0);
    if (st == NULL && found && had->why == WHY_FELL &&
        had->all != MPI_COMM_NULL) {
        /* fallen back: the layer's still, queued and done on PMPI on the
         * private duplicate (smpi_nb_kick, smpi_nb_redo), as the operations a rank
         * had posted before it learnt of the failure are; one rule for
         * every rank whenever it learnt, so the same operations meet on
         * the same communicator */
        return had;
    }
    return st;
}

/* an (all)reduce as an operation, or NULL: PMPI (try_reduce's rules),
 * for *why */
static nb_op_t *nb_reduce_op(int kind, const void *sbuf, void *rbuf, int count,
                             MPI_Datatype dt, MPI_Op op, int root,
                             MPI_Comm comm, int *why)
{
    dt_map_t m;
    shp_reduce_desc_t d;
    int sop;
    size_t bytes;

    *why = smpi_reduce_why(kind == C_IALLREDUCE ? smpi_cfg.allreduce
                                                : smpi_cfg.reduce,
                           count, dt, op, &m, &sop, &bytes, &d);
    if (*why != WHY_OK) {
        return NULL;
    }
    size_t n = (size_t)count;
    comm_state_t *st = nb_comm(comm, why);
    if (st == NULL) {
        return NULL;
    }
    int keep = root < 0 || root == st->rank;
    if (root >= st->size || (sbuf == MPI_IN_PLACE && !keep)) {
        *why = WHY_ARGS;
        return NULL; /* erroneous: PMPI says so */
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, smpi_coll_names[kind], SHARP_COLL_ENOMEM);
    }
    o->kind = kind;
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
    o->n = n;
    o->bytes = bytes;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    smpi_nb_link(o);
    return o;
}

static nb_op_t *nb_bcast_op(void *buf, int count, MPI_Datatype dt, int root,
                            MPI_Comm comm, int *why)
{
    long bytes = smpi_bytes_of(count, dt);
    *why = smpi_bcast_why(bytes);
    comm_state_t *st = *why == WHY_OK ? nb_comm(comm, why) : NULL;
    if (st == NULL) {
        return NULL;
    }
    if (root < 0 || root >= st->size) {
        *why = WHY_ARGS;
        return NULL;
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, "MPI_Ibcast", SHARP_COLL_ENOMEM);
    }
    int size = 0;
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (buf != MPI_BOTTOM && (count == 1 || ext == (MPI_Aint)size) &&
        smpi_dense_type(dt, 0)) {
        o->direct = (char *)buf + tlb;
    }
    o->kind = C_IBCAST;
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    o->rbuf = buf;
    o->count = count;
    o->dt = dt;
    o->root = root;
    o->bytes = (size_t)bytes;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    smpi_nb_link(o);
    return o;
}

static nb_op_t *nb_barrier_op(MPI_Comm comm, int *why)
{
    *why = WHY_KIND_OFF;
    comm_state_t *st = smpi_cfg.barrier ? nb_comm(comm, why) : NULL;
    if (st == NULL) {
        return NULL;
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, "MPI_Ibarrier", SHARP_COLL_ENOMEM);
    }
    o->kind = C_IBARRIER;
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    smpi_nb_link(o);
    return o;
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
static int nb_persist(nb_op_t *o, MPI_Request *req)
{
    /* a handle of MPI's own, never started (so inactive to PMPI) and
     * distinct from every other: a receive on the library's private
     * communicator (MPICH gives every receive from MPI_PROC_NULL one
     * handle) */
    o->persistent = 1;
    PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, 0x5a17, smpi.oob_world,
                   &o->handle);
    *req = o->handle;
    return MPI_SUCCESS;
}

static int nb_api_pcoll_allreduce(const void *sbuf, void *rbuf, int count,
                                  MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                  MPI_Info info, MPI_Request *req)
{
    int why; /* not counted: the starts are (MPI's own, here) */
    nb_op_t *o =
        nb_reduce_op(C_IALLREDUCE, sbuf, rbuf, count, dt, op, -1, comm, &why);
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
    nb_op_t *o = root >= 0 ? nb_reduce_op(C_IREDUCE, sbuf, rbuf, count, dt, op,
                                          root, comm, &why)
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
    nb_op_t *o = nb_bcast_op(buf, count, dt, root, comm, &why);
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
    nb_op_t *o = nb_barrier_op(comm, &why);
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
