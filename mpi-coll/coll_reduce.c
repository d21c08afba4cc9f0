/*
 * libsharp_mpi: MPI_Allreduce and MPI_Reduce, blocking.
 *
 * Eligible (dtype.c) on a communicator with a group (comm.c): every rank a
 * member, with recovery an allreduce on every rank, a reduce too (the same
 * operation on the tree: every member keeps the result, for a member that
 * missed it); without, straight into the receive buffer, at the root only.
 * With several ranks per node (hier), the node step: on shared memory
 * (node_shm.h) for data that fit a slot, else on PMPI (gather, fold at the
 * leader with the aggregation nodes' engine, bcast), around the leader's
 * sharp call (coll_op.c).  A call that cannot be offloaded, or whose group
 * failed, goes to PMPI with its reason (why.c).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/coll.h"

#include <stdlib.h>
#include <string.h>

/* One reduction through sharp: the call, in the wire's layout, and the
 * buffers it needs (the steps of try_reduce). */
typedef struct reduce_call {
    comm_state_t *st;
    MPI_Comm comm;
    const char *what;
    int root, keep;      /* root < 0: an allreduce; keep: the result here */
    size_t n, ns, bytes; /* MPI elements, sharp elements, wire bytes */
    dt_map_t m;
    shp_reduce_desc_t d; /* the node-local fold's */
    const char *src;     /* the data (packed if m.packed) */
    char *ps, *pr, *all; /* ours: packed data, a result, the node's data */
    struct sharp_coll_reduce_spec spec; /* all but the buffers */
    op_args_t a;
} reduce_call_t;

/* the spec (reproducible: float and double sums, complex ones too, exact,
 * the same bits for any placement; the node-local step adds exactly too)
 * and the data in the wire's layout */
static void reduce_prepare(reduce_call_t *c, const void *sbuf, int sop)
{
    c->spec.dtype = (enum sharp_datatype)c->m.sdt;
    c->spec.tag_dtype = (enum sharp_datatype)c->m.tag;
    c->spec.op = (enum sharp_reduce_op)sop;
    c->spec.length = c->ns;
    if (smpi_exact_wanted(sop, &c->m)) {
        c->spec.op = SHARP_OP_SUM_EXACT;
    }
    c->a = (op_args_t){C_ALLREDUCE, &c->spec, NULL, 0, NULL, -1, 0};
    c->src = sbuf;
    if (c->m.packed) {
        c->ps = smpi_xmalloc(c->bytes, c->comm, c->what);
        smpi_loc_pack(sbuf, c->ps, c->n, &c->m);
        c->src = c->ps;
    }
}

/* the node leader's part: the node's data folded into c->pr (or, for an
 * exact sum, all of them in c->all: no rounding in the node), through
 * sharp */
static int reduce_leader(reduce_call_t *c, char **res)
{
    comm_state_t *st = c->st;
    if (c->spec.op == SHARP_OP_SUM_EXACT) {
        c->spec.sbuf_desc =
            smpi_desc_of(c->all, (size_t)st->node_size * c->bytes);
        c->a.exact_n = st->node_size;
    } else {
        c->spec.sbuf_desc = smpi_desc_of(c->pr, c->bytes);
    }
    c->a.direct = c->pr; /* in place, without recovery */
    return smpi_run_op(st, c->comm, c->what, c->bytes, &c->a, res);
}

/* where the leader's result goes in this node: everyone (-1, an
 * allreduce), the root's node rank (a reduce rooted here), nobody (-2) */
static int reduce_node_to(const reduce_call_t *c)
{
    const comm_state_t *st = c->st;
    return c->root < 0 ? -1
           : st->node_of[c->root] != st->node_of[st->rank]
               ? -2
               : st->rank_in_node[c->root];
}

/* a rank other than the leader that gets the result: where (*res) */
static void reduce_node_dest(reduce_call_t *c, void *rbuf, char **res)
{
    int to = reduce_node_to(c);
    if (c->st->node_rank != 0 && (to == -1 || to == c->st->node_rank)) {
        *res = c->m.packed ? (c->pr = smpi_xmalloc(c->bytes, c->comm, c->what))
                           : rbuf;
    }
}

/* the leader's result to where it goes in this node: everyone (an
 * allreduce), the root (a reduce rooted here), nobody */
static void reduce_node_result(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int bytes = (int)c->bytes;
    int to = reduce_node_to(c);
    reduce_node_dest(c, rbuf, res);
    if (to == -1) {
        PMPI_Bcast(*res, bytes, MPI_BYTE, 0, st->node);
    } else if (to > 0 && st->node_rank == 0) {
        PMPI_Send(*res, bytes, MPI_BYTE, to, 0, st->node);
    } else if (to > 0 && st->node_rank == to) {
        PMPI_Recv(*res, bytes, MPI_BYTE, 0, 0, st->node, MPI_STATUS_IGNORE);
    }
}

/* Node-local aggregation: members -> node leader (gather, fold), leaders
 * through sharp, leader -> members (bcast; for a reduce, to the root
 * only); a reduce is an allreduce whose result only the root keeps.  Data
 * move in the wire layout, so no hole is ever written. */
static int reduce_hier(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int how = OP_OK;
    if (st->node_rank == 0) {
        c->all =
            smpi_xmalloc((size_t)st->node_size * c->bytes, c->comm, c->what);
        c->pr = smpi_xmalloc(c->bytes, c->comm, c->what);
    }
    SMPI_ADD(smpi.node_mpi_steps, 1);
    PMPI_Gather(c->src, (int)c->bytes, MPI_BYTE, c->all, (int)c->bytes,
                MPI_BYTE, 0, st->node);
    if (st->node_rank == 0) {
        if (c->spec.op != SHARP_OP_SUM_EXACT) {
            smpi_node_fold(st, &c->d, c->all, c->ns, c->bytes, c->pr, c->comm);
        }
        how = reduce_leader(c, res);
    }
    PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
    if (how == OP_OK) {
        reduce_node_result(c, rbuf, res);
    }
    return how;
}

/* Node-local aggregation on shared memory (node_shm.h), for data that fit
 * a slot: every rank's contribution into the node's segment and the
 * leader's fold in node-rank order (an exact sum: every contribution
 * apart), its sharp call, then the result and the status out of the
 * segment.  The same results as reduce_hier, bitwise; one step in and one
 * out, the ranks asleep in between, none woken for MPI's algorithms. */
static int reduce_hier_shm(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int how = OP_OK, lead = st->node_rank == 0;
    shp_status_t s;
    SMPI_ADD(smpi.node_shm_steps, 1);
    if (lead) {
        c->pr = smpi_xmalloc(c->bytes, c->comm, c->what);
    }
    if (c->spec.op == SHARP_OP_SUM_EXACT) {
        const void *srcs[SMN_MAX_RANKS];
        s = smn_gather(st->nshm, c->src, c->bytes, srcs);
        if (s == SHP_OK && lead) {
            c->all = smpi_xmalloc((size_t)st->node_size * c->bytes, c->comm,
                                  c->what);
            for (int k = 0; k < st->node_size; k++) {
                memcpy(c->all + (size_t)k * c->bytes, srcs[k], c->bytes);
            }
        }
    } else {
        s = smn_reduce(st->nshm, &c->d, c->src, c->ns, c->pr);
    }
    if (s != SHP_OK) {
        smpi_node_shm_fail(st, c->comm, c->what, s);
    }
    if (lead) {
        how = reduce_leader(c, res);
    } else {
        reduce_node_dest(c, rbuf, res);
    }
    /* the leader publishes its result (whatever c->pr holds if the
     * operation is to be redone: nobody reads it then) and how */
    void *out = lead ? (how == OP_OK && *res != NULL ? *res : c->pr) : *res;
    s = smn_result(st->nshm, out, c->bytes, &how);
    if (s != SHP_OK) {
        smpi_node_shm_fail(st, c->comm, c->what, s);
    }
    return how;
}

/* Every rank a member: with recovery an allreduce on every rank, a reduce
 * too (the same operation on the tree): every member keeps the result,
 * for a member that missed it (docs/mpi.md, failure protocol); without,
 * straight into the receive buffer, at the root only. */
static int reduce_flat(reduce_call_t *c, void *rbuf, char **res)
{
    c->spec.sbuf_desc = smpi_desc_of((void *)c->src, c->bytes);
    c->a.root = c->root;
    if (c->keep) {
        c->a.direct = c->m.packed
                          ? (c->pr = smpi_xmalloc(c->bytes, c->comm, c->what))
                          : rbuf;
    }
    return smpi_run_op(c->st, c->comm, c->what, c->bytes, &c->a, res);
}

/* allreduce (root < 0) or reduce; 1 if offloaded, else 0 (*why) */
static int try_reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, int *ret, int *why)
{
    dt_map_t m;
    shp_reduce_desc_t d;
    int sop, kind = root < 0 ? C_ALLREDUCE : C_REDUCE;
    size_t bytes;

    *why = smpi_reduce_why(root < 0 ? smpi_cfg.allreduce : smpi_cfg.reduce,
                           count, dt, op, &m, &sop, &bytes, &d);
    if (*why != WHY_OK) {
        return 0;
    }
    comm_state_t *st = smpi_comm_sharp(comm, why);
    if (st == NULL) {
        return 0;
    }
    if (root >= st->size) {
        *why = WHY_ARGS;
        return 0; /* an invalid root: PMPI says so */
    }
    int keep = root < 0 || root == st->rank;
    if (sbuf == MPI_IN_PLACE) {
        if (!keep) {
            *why = WHY_ARGS;
            return 0; /* only the root may: PMPI says so */
        }
        sbuf = rbuf;
    }
    reduce_call_t c = {.st = st,
                       .comm = comm,
                       .what = smpi_coll_names[kind],
                       .root = root,
                       .keep = keep,
                       .n = (size_t)count,
                       .ns = (size_t)count * (size_t)m.mult,
                       .bytes = bytes,
                       .m = m,
                       .d = d};
    char *res = NULL;
    reduce_prepare(&c, sbuf, sop);
    int how = !st->hier ? reduce_flat(&c, rbuf, &res)
              : st->nshm != NULL && bytes <= smn_slot_bytes(st->nshm)
                  ? reduce_hier_shm(&c, rbuf, &res)
                  : reduce_hier(&c, rbuf, &res);
    if (how == OP_OK && keep && res != rbuf) {
        if (m.packed) {
            smpi_loc_unpack(res, rbuf, c.n, &m);
        } else {
            memcpy(rbuf, res, bytes);
        }
    }
    free(c.ps);
    free(c.pr);
    free(c.all);
    if (how == OP_REDO) {
        smpi_fell_back(st, comm);
        *why = WHY_FELL;
        return 0; /* the same call on PMPI, on every rank */
    }
    st->done_seq = st->seq;
    SMPI_ADD(smpi.calls[kind][0], 1);
    SMPI_ADD(smpi.bytes[kind][0], bytes);
    *ret = MPI_SUCCESS;
    return 1;
}

API int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int ret, why;
    if (try_reduce(sbuf, rbuf, count, dt, op, -1, comm, &ret, &why)) {
        return ret;
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
    if (root >= 0 &&
        try_reduce(sbuf, rbuf, count, dt, op, root, comm, &ret, &why)) {
        return ret;
    }
    smpi_fallback(C_REDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    if (root >= 0 &&
        smpi_exact_pmpi(sbuf, rbuf, count, dt, op, root, comm, &ret)) {
        return ret;
    }
    return PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
}
