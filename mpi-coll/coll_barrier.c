/*
 * libsharp_mpi: MPI_Barrier (blocking), and the eligibility of every form
 * of it (coll.h): an operation of the engine (op.c; a blocking call is its
 * start and its wait) through the communicator's group; with several
 * ranks per node, one node step around the leaders' barrier (node_step.c:
 * on shared memory, else on PMPI).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

#include <string.h>

SMPI_HOT int smpi_barrier_args(nb_op_t *o, int ckind, MPI_Comm comm, int *why)
{
    *why = WHY_KIND_OFF;
    comm_state_t *st =
        smpi_cfg.barrier ? smpi_coll_comm(comm, ckind, why) : NULL;
    if (st == NULL) {
        return 0;
    }
    memset(o, 0, sizeof(*o));
    o->kind = C_IBARRIER;
    o->ckind = ckind;
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    return 1;
}

SMPI_HOT API int MPI_Barrier(MPI_Comm comm)
{
    nb_op_t o;
    int why;
    smpi_lock();
    int ok = smpi_barrier_args(&o, C_BARRIER, comm, &why);
    if (ok) {
        smpi_nb_run(&o);
    }
    smpi_unlock();
    if (ok) {
        return MPI_SUCCESS;
    }
    smpi_fallback(C_BARRIER, 0, comm, why, MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Barrier(comm);
}
