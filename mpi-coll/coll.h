/*
 * libsharp_mpi internals: the collectives' eligibility and arguments, one
 * file each (coll_reduce.c, coll_bcast.c, coll_barrier.c), for every form:
 * a call of kind ckind (C_ALLREDUCE ... C_IBCAST: blocking, non-blocking,
 * or a persistent one's init) becomes an operation of the engine (nb.h),
 * filled in at *o, or goes to PMPI for *why (0).  The blocking entry
 * points are theirs; the non-blocking and persistent ones nb_coll.c's.
 * Hidden, as everything in sharp_mpi_int.h.
 */
#ifndef SMPI_COLL_H
#define SMPI_COLL_H

#include "mpi-coll/nb.h"

#pragma GCC visibility push(hidden)

/* an (all)reduce (root < 0: an allreduce) */
int smpi_reduce_args(nb_op_t *o, int ckind, const void *sbuf, void *rbuf,
                     int count, MPI_Datatype dt, MPI_Op op, int root,
                     MPI_Comm comm, int *why);
int smpi_bcast_args(nb_op_t *o, int ckind, void *buf, int count,
                    MPI_Datatype dt, int root, MPI_Comm comm, int *why);
int smpi_barrier_args(nb_op_t *o, int ckind, MPI_Comm comm, int *why);
/* the engine's kind of a call's */
static inline int smpi_engine_kind(int ckind)
{
    return ckind < C_IALLREDUCE ? ckind + (C_IALLREDUCE - C_ALLREDUCE) : ckind;
}

#pragma GCC visibility pop

#endif
