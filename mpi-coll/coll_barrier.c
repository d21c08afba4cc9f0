/*
 * libsharp_mpi: MPI_Barrier, blocking: through the communicator's group
 * (coll_op.c); with several ranks per node, one node step around the
 * leaders' barrier (on shared memory, else the node's PMPI barrier in and
 * a bcast of the outcome out).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

/* the leader's sharp barrier inside the node's (smn_barrier) */
typedef struct barrier_hook {
    comm_state_t *st;
    MPI_Comm comm;
} barrier_hook_t;

static int barrier_leader(void *arg, void *buf, size_t count, size_t offset)
{
    barrier_hook_t *b = arg;
    op_args_t a = {C_BARRIER, NULL, NULL, 0, NULL, -1, 0};
    char *res;
    (void)buf;
    (void)count;
    (void)offset;
    return smpi_run_op(b->st, b->comm, "MPI_Barrier", 0, &a, &res);
}

API int MPI_Barrier(MPI_Comm comm)
{
    int why = WHY_KIND_OFF;
    comm_state_t *st = smpi_cfg.barrier ? smpi_comm_sharp(comm, &why) : NULL;
    if (st != NULL) {
        op_args_t a = {C_BARRIER, NULL, NULL, 0, NULL, -1, 0};
        char *res;
        int how = OP_OK;
        if (st->hier && st->nshm != NULL) { /* one node step around it */
            barrier_hook_t b = {st, comm};
            SMPI_ADD(smpi.node_shm_steps, 1);
            shp_status_t s = smn_barrier(st->nshm, barrier_leader, &b, &how);
            if (s != SHP_OK) {
                smpi_node_shm_fail(st, comm, "MPI_Barrier", s);
            }
        } else if (st->hier) { /* the node in, the leaders, the node out */
            SMPI_ADD(smpi.node_mpi_steps, 1);
            PMPI_Barrier(st->node);
            if (st->node_rank == 0) {
                how = smpi_run_op(st, comm, "MPI_Barrier", 0, &a, &res);
            }
            PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
        } else {
            how = smpi_run_op(st, comm, "MPI_Barrier", 0, &a, &res);
        }
        if (how == OP_OK) {
            st->done_seq = st->seq;
            SMPI_ADD(smpi.calls[C_BARRIER][0], 1);
            return MPI_SUCCESS;
        }
        smpi_fell_back(st, comm);
        why = WHY_FELL;
    }
    smpi_fallback(C_BARRIER, 0, comm, why, MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Barrier(comm);
}
