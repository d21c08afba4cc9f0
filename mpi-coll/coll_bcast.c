/*
 * libsharp_mpi: MPI_Bcast (blocking), and the eligibility and arguments
 * of every form of it (coll.h).  Whether to offload depends only on count
 * x size (dtype.c) and the communicator; the bytes go through the group
 * as an operation of the engine (op.c; a blocking call is its start and
 * its wait), with several ranks per node the root's node first and the
 * other nodes after (node_step.c: on shared memory for data that fit the
 * communicator's slot, else on PMPI).
 *
 * MPI requires only the type signatures to match: the root may send 4
 * MPI_INT that another rank receives as one contiguous type of 4 ints, or
 * as 2 MPI_2INT, and the named pair types have holes.  Every rank takes
 * the same path; the local layout only decides how the bytes get there:
 * straight from / into the buffer when they are one run in type-map order
 * (direct), else through PMPI_Pack / PMPI_Unpack and a buffer of exactly
 * those bytes (the homogeneous packed form is the type map's bytes in
 * order, what a contiguous buffer holds).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

#include <string.h>

SMPI_HOT int smpi_bcast_args(nb_op_t *o, int ckind, void *buf, int count,
                             MPI_Datatype dt, int root, MPI_Comm comm, int *why)
{
    long bytes = smpi_bytes_of(count, dt);
    *why = smpi_bcast_why(bytes);
    comm_state_t *st = *why == WHY_OK ? smpi_coll_comm(comm, ckind, why) : NULL;
    if (st == NULL) {
        return 0;
    }
    if (root < 0 || root >= st->size) {
        *why = WHY_ARGS;
        return 0;
    }
    memset(o, 0, sizeof(*o));
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
    o->ckind = ckind;
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    o->rbuf = buf;
    o->count = count;
    o->dt = dt;
    o->root = root;
    o->bytes = (size_t)bytes;
    return 1;
}

SMPI_HOT API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root,
                           MPI_Comm comm)
{
    nb_op_t o;
    int why;
    smpi_lock();
    int ok = smpi_bcast_args(&o, C_BCAST, buf, count, dt, root, comm, &why);
    if (ok) {
        smpi_nb_run(&o);
    }
    smpi_unlock();
    if (ok) {
        return MPI_SUCCESS;
    }
    smpi_fallback(C_BCAST, smpi_bytes_of(count, dt), comm, why,
                  MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Bcast(buf, count, dt, root, comm);
}
