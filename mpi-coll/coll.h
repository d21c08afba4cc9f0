/*
 * libsharp_mpi internals: one blocking operation through a group
 * (coll_op.c), as the blocking collectives (coll_reduce.c, coll_bcast.c,
 * coll_barrier.c) describe it.  Hidden, as everything in sharp_mpi_int.h.
 */
#ifndef SMPI_COLL_H
#define SMPI_COLL_H

#include "mpi-coll/sharp_mpi_int.h"

#pragma GCC visibility push(hidden)

typedef struct op_args {
    int kind; /* C_ALLREDUCE (a reduce too), C_BARRIER, C_BCAST */
    struct sharp_coll_reduce_spec *spec; /* reductions: all but rbuf */
    const void *bsrc;                    /* bcast: the data, at the root */
    int broot;                           /* bcast: the root in the group */
    /* without recovery (SHARP_MPI_ON_FAULT=abort): the result goes
     * straight to direct (NULL: nowhere, a reduce's non-root) */
    void *direct;
    int root;    /* a reduce's root (< 0: an allreduce) */
    int exact_n; /* > 0: the exact sum of this many contributions each */
} op_args_t;

enum { OP_OK, OP_REDO };

/* One operation of st's group (this rank a member): OP_OK with its len
 * bytes of result at *res, or OP_REDO: the call goes to PMPI on every
 * rank (coll_op.c) */
int smpi_run_op(comm_state_t *st, MPI_Comm comm, const char *what, size_t len,
                op_args_t *a, char **res);
/* the communicator goes to PMPI from now on (every rank, at this call) */
void smpi_fell_back(comm_state_t *st, MPI_Comm comm);

#pragma GCC visibility pop

#endif
