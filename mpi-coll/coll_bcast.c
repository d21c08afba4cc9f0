/*
 * libsharp_mpi: MPI_Bcast, blocking.  Whether to offload depends only on
 * count x size (dtype.c) and the communicator; the bytes go through the
 * group (coll_op.c), with several ranks per node the root's node first and
 * the other nodes after (on shared memory for data that fit a slot, else
 * on PMPI).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

#include <stdlib.h>
#include <string.h>

/* the bytes of a bcast through sharp, from p (len bytes) at the root:
 * OP_OK (every rank has them at p) or OP_REDO */
static int bcast_bytes(comm_state_t *st, char *p, int len, int root,
                       MPI_Comm comm)
{
    op_args_t a = {C_BCAST, NULL, NULL, root, p, -1, 0};
    char *res = NULL;
    int how = OP_OK;
    if (st->hier && st->nshm != NULL &&
        (size_t)len <= smn_slot_bytes(st->nshm)) {
        /* on shared memory: the root's node first (from the root), then
         * the leaders; the leader's status, and its data to the other
         * nodes' ranks, in one step out */
        int lroot = st->node_of[root], rin = st->rank_in_node[root];
        int early = st->node_of[st->rank] == lroot && rin != 0;
        const void *srcs[SMN_MAX_RANKS];
        shp_status_t s = SHP_OK;
        SMPI_ADD(smpi.node_shm_steps, 1);
        if (early) {
            s = smn_bcast(st->nshm, p, (size_t)len, (unsigned)rin);
        }
        if (s == SHP_OK) {
            s = smn_gather(st->nshm, NULL, 0, srcs);
        }
        if (s == SHP_OK && st->node_rank == 0) {
            a.broot = lroot;
            a.bsrc = st->node_of[st->rank] == lroot ? p : NULL;
            how = smpi_run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
            if (how == OP_OK && a.bsrc == NULL && res != p) {
                memcpy(p, res, (size_t)len);
            }
        }
        if (s == SHP_OK) {
            s = smn_result(st->nshm, p, early ? 0 : (size_t)len, &how);
        }
        if (s != SHP_OK) {
            smpi_node_shm_fail(st, comm, "MPI_Bcast", s);
        }
    } else if (st->hier) {
        /* the root's node first, then the leaders, then the other nodes */
        int lroot = st->node_of[root];
        SMPI_ADD(smpi.node_mpi_steps, 1);
        int early =
            st->node_of[st->rank] == lroot && st->rank_in_node[root] != 0;
        if (early) {
            PMPI_Bcast(p, len, MPI_BYTE, st->rank_in_node[root], st->node);
        }
        if (st->node_rank == 0) {
            a.broot = lroot;
            a.bsrc = st->node_of[st->rank] == lroot ? p : NULL;
            how = smpi_run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
            if (how == OP_OK && a.bsrc == NULL && res != p) {
                memcpy(p, res, (size_t)len);
            }
        }
        PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
        if (how == OP_OK && !early) {
            PMPI_Bcast(p, len, MPI_BYTE, 0, st->node);
        }
    } else {
        a.bsrc = st->rank == root ? p : NULL;
        how = smpi_run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
        if (how == OP_OK && a.bsrc == NULL && res != p) {
            memcpy(p, res, (size_t)len);
        }
    }
    return how;
}

/* MPI requires only the type signatures to match: the root may send 4
 * MPI_INT that another rank receives as one contiguous type of 4 ints, or
 * as 2 MPI_2INT, and the named pair types have holes.  Whether to offload
 * depends only on count x size (equal on every rank) and the communicator,
 * so every rank takes the same path; the local layout only decides how the
 * bytes get there: straight from / into the buffer when they are one run
 * in type-map order, else through PMPI_Pack / PMPI_Unpack and a buffer of
 * exactly those bytes (the homogeneous packed form is the type map's bytes
 * in order, what a contiguous buffer holds). */
API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root,
                  MPI_Comm comm)
{
    long bytes = smpi_bytes_of(count, dt);
    int why = smpi_bcast_why(bytes);
    comm_state_t *st = why == WHY_OK ? smpi_comm_sharp(comm, &why) : NULL;

    if (st == NULL || root < 0 || root >= st->size) {
        smpi_fallback(C_BCAST, bytes, comm, st == NULL ? why : WHY_ARGS,
                      MPI_DATATYPE_NULL, MPI_OP_NULL);
        return PMPI_Bcast(buf, count, dt, root, comm);
    }
    int len = (int)bytes, size = 0;
    char *p, *tmp = NULL;
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (buf != MPI_BOTTOM && (count == 1 || ext == (MPI_Aint)size) &&
        smpi_dense_type(dt, 0)) {
        p = (char *)buf + tlb;
    } else {
        p = tmp = smpi_xmalloc((size_t)len, comm, "MPI_Bcast");
        if (st->rank == root) {
            smpi_pack_data(1, buf, count, dt, tmp, len, comm);
        }
    }
    if (bcast_bytes(st, p, len, root, comm) == OP_REDO) {
        free(tmp);
        smpi_fell_back(st, comm);
        smpi_fallback(C_BCAST, bytes, comm, WHY_FELL, MPI_DATATYPE_NULL,
                      MPI_OP_NULL);
        return PMPI_Bcast(buf, count, dt, root, comm);
    }
    if (tmp != NULL && st->rank != root) {
        smpi_pack_data(0, buf, count, dt, tmp, len, comm);
    }
    free(tmp);
    st->done_seq = st->seq;
    SMPI_ADD(smpi.calls[C_BCAST][0], 1);
    SMPI_ADD(smpi.bytes[C_BCAST][0], (unsigned long long)bytes);
    return MPI_SUCCESS;
}
