/*
 * libsharp_mpi: the calls that make a communicator, each MPI's own followed
 * by the new communicator's group (smpi_comm_made, comm.c): every rank of
 * the new communicator is inside the same blocking call, so the group's
 * agreement adds no wait that MPI does not already have, and no
 * non-blocking collective on it will need one (docs/mpi.md, "When a
 * communicator gets its group").  A rank that gets MPI_COMM_NULL (a split's
 * MPI_UNDEFINED color, a create's non-member) takes no part.
 * Intercommunicators get a state of their own at their first collective
 * (no group: they go to MPI).  MPI_Comm_idup is MPI's own: non-blocking,
 * its communicator gets its group at its first blocking collective.
 */
#include "mpi-coll/sharp_mpi_int.h"

/* the new communicator *c of a call that returned rc, given its group
 * (read here: after the call) */
static int made(int rc, const MPI_Comm *c)
{
    if (rc == MPI_SUCCESS) {
        smpi_comm_made(*c);
    }
    return rc;
}

API int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    return made(PMPI_Comm_dup(comm, newcomm), newcomm);
}

API int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
    return made(PMPI_Comm_dup_with_info(comm, info, newcomm), newcomm);
}

API int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    return made(PMPI_Comm_split(comm, color, key, newcomm), newcomm);
}

API int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info,
                            MPI_Comm *newcomm)
{
    return made(PMPI_Comm_split_type(comm, type, key, info, newcomm), newcomm);
}

API int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    return made(PMPI_Comm_create(comm, group, newcomm), newcomm);
}

API int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag,
                              MPI_Comm *newcomm)
{
    return made(PMPI_Comm_create_group(comm, group, tag, newcomm), newcomm);
}

API int MPI_Intercomm_merge(MPI_Comm inter, int high, MPI_Comm *newcomm)
{
    return made(PMPI_Intercomm_merge(inter, high, newcomm), newcomm);
}

API int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[],
                        const int periods[], int reorder, MPI_Comm *newcomm)
{
    return made(PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm),
                newcomm);
}

API int MPI_Cart_sub(MPI_Comm comm, const int remain[], MPI_Comm *newcomm)
{
    return made(PMPI_Cart_sub(comm, remain, newcomm), newcomm);
}

API int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[],
                         const int edges[], int reorder, MPI_Comm *newcomm)
{
    return made(PMPI_Graph_create(comm, nnodes, index, edges, reorder, newcomm),
                newcomm);
}

API int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[],
                              const int degrees[], const int dests[],
                              const int weights[], MPI_Info info, int reorder,
                              MPI_Comm *newcomm)
{
    return made(PMPI_Dist_graph_create(comm, n, sources, degrees, dests,
                                       weights, info, reorder, newcomm),
                newcomm);
}

API int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree,
                                       const int sources[],
                                       const int sourceweights[], int outdegree,
                                       const int dests[],
                                       const int destweights[], MPI_Info info,
                                       int reorder, MPI_Comm *newcomm)
{
    return made(PMPI_Dist_graph_create_adjacent(
                    comm, indegree, sources, sourceweights, outdegree, dests,
                    destweights, info, reorder, newcomm),
                newcomm);
}
