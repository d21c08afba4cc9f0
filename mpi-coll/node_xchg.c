/*
 * libsharp_mpi: the node step's exchange for a non-blocking operation, on
 * shared memory (node_shm.h's smn_nb_*) when the communicator's nodes all
 * have their segment and the data fit its slot (nb_slot), else on PMPI
 * over the node's communicator: the ranks' contributions to the leader
 * (PMPI_Igather of a reduction's data; a bcast's from its root,
 * PMPI_Ibcast inside the root's node; PMPI_Ibarrier for a barrier), the
 * leader's code and result given back (PMPI_Ibcast).  node_step.c drives
 * either the same way.
 *
 * On PMPI the order of the node communicator's collectives is the same on
 * every rank: an operation's way in, then its way out, then the next one's
 * (a communicator's node steps go one at a time, op.c's queue); the
 * others post their half of the bcast when they arrive, the leader its
 * own when it publishes, and the leader's operation completes with its
 * bcast (nphase 3), so no buffer is reused while MPI still reads it.
 * A rank that dies is MPI's to report, as in any PMPI call.
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include <stdlib.h>
#include <string.h>

/* the published code's room ahead of the data (keeps the data aligned) */
#define XC_HDR 16

/* a communicator's PMPI exchange (comm_state_t xc) */
struct smpi_xchg {
    MPI_Request in, out; /* this rank's halves of the way in and out */
    char *all; /* leader: every rank's bytes, in node-rank order (a bcast:
                  its root's); the others: a bcast's inside the node */
    size_t all_cap;
    char *res; /* the code (XC_HDR) then the result */
    size_t res_cap;
};

size_t smpi_node_len(const nb_op_t *o)
{
    return o->kind == C_IBARRIER ? 0 : o->bytes;
}

void smpi_node_check(nb_op_t *o, shp_status_t s)
{
    if (s != SHP_OK && s != SHP_INPROGRESS) {
        smpi_node_shm_fail(o->st, o->comm, smpi_nb_name(o), s);
    }
}

int smpi_xchg_fits(const comm_state_t *st, size_t bytes)
{
    return st->nb_slot != 0 && bytes <= st->nb_slot;
}

static struct smpi_xchg *xc_of(nb_op_t *o)
{
    comm_state_t *st = o->st;
    if (st->xc == NULL) {
        st->xc = calloc(1, sizeof(*st->xc));
        if (st->xc == NULL) {
            smpi_fail(o->comm, smpi_nb_name(o), SHARP_COLL_ENOMEM);
        }
        st->xc->in = st->xc->out = MPI_REQUEST_NULL;
    }
    return st->xc;
}

static void xc_grow(nb_op_t *o, char **buf, size_t *cap, size_t n)
{
    if (*cap >= n) {
        return;
    }
    free(*buf);
    *buf = smpi_xmalloc(n, o->comm, smpi_nb_name(o));
    *cap = n;
}

/* the leader's input: a reduction's data from every rank (gathered, in
 * node-rank order), a bcast's from its root if it is in this node (a bcast
 * inside the node: its ranks have the data early, the leader folds
 * nothing), a barrier's arrival of every rank */
static void xc_in(nb_op_t *o, const char *src, struct smpi_xchg *x)
{
    comm_state_t *st = o->st;
    int n = (int)o->bytes;
    if (o->kind == C_IBARRIER) {
        PMPI_Ibarrier(st->node, &x->in);
    } else if (o->kind != C_IBCAST) {
        PMPI_Igather(src, n, MPI_BYTE, x->all, n, MPI_BYTE, 0, st->node,
                     &x->in);
    } else if (st->node_of[o->root] == st->node_of[st->rank]) {
        void *p = st->rank == o->root ? (void *)src : (void *)x->all;
        PMPI_Ibcast(p, n, MPI_BYTE, st->rank_in_node[o->root], st->node,
                    &x->in);
    }
}

static void xc_arrive_mpi(nb_op_t *o, const char *src)
{
    comm_state_t *st = o->st;
    struct smpi_xchg *x = xc_of(o);
    /* none in flight: the head waits for smpi_xchg_idle (op.c) */
    if (o->kind == C_IBCAST) { /* (the bcast in the root's node) */
        xc_grow(o, &x->all, &x->all_cap, o->bytes + 1);
    } else if (st->node_rank == 0) {
        xc_grow(o, &x->all, &x->all_cap, (size_t)st->node_size * o->bytes + 1);
    }
    if (st->node_rank != 0) {
        xc_grow(o, &x->res, &x->res_cap, XC_HDR + smpi_node_len(o));
    }
    xc_in(o, src, x);
    if (st->node_rank != 0) {
        PMPI_Ibcast(x->res, (int)(XC_HDR + smpi_node_len(o)), MPI_BYTE, 0,
                    st->node, &x->out);
    }
}

int smpi_xchg_idle(comm_state_t *st)
{
    struct smpi_xchg *x = st->xc;
    int in = 1, out = 1;
    if (x != NULL) {
        PMPI_Test(&x->in, &in, MPI_STATUS_IGNORE);
        PMPI_Test(&x->out, &out, MPI_STATUS_IGNORE);
    }
    return in && out;
}

void smpi_xchg_arrive(nb_op_t *o, const char *src, size_t len)
{
    if (o->node_mpi) {
        xc_arrive_mpi(o, src);
        return;
    }
    smpi_node_check(o, smn_nb_arrive(o->st->nshm, src, len));
}

shp_status_t smpi_xchg_test_in(nb_op_t *o)
{
    if (!o->node_mpi) {
        return smn_nb_test_in(o->st->nshm);
    }
    int flag = 0;
    PMPI_Test(&o->st->xc->in, &flag, MPI_STATUS_IGNORE);
    return flag ? SHP_OK : SHP_INPROGRESS;
}

/* On PMPI a node may hold more ranks than a segment (SMN_MAX_RANKS):
 * nothing here keeps an array of them on the stack */
const char *smpi_xchg_src(nb_op_t *o, int k)
{
    if (!o->node_mpi) {
        const void *srcs[SMN_MAX_RANKS]; /* (a segment's ranks) */
        smpi_node_check(o, smn_nb_srcs(o->st->nshm, srcs));
        return srcs[k];
    }
    /* a bcast's data: once, from its root */
    return o->st->xc->all + (o->kind == C_IBCAST ? 0 : (size_t)k * o->bytes);
}

void smpi_xchg_copy_all(nb_op_t *o, char *dst)
{
    if (o->node_mpi) { /* gathered so already */
        memcpy(dst, o->st->xc->all, (size_t)o->st->node_size * o->bytes);
        return;
    }
    const void *srcs[SMN_MAX_RANKS];
    smpi_node_check(o, smn_nb_srcs(o->st->nshm, srcs));
    for (int k = 0; k < o->st->node_size; k++) {
        memcpy(dst + (size_t)k * o->bytes, srcs[k], o->bytes);
    }
}

/* Node-local fold (leaders): every node rank's elements (wire layout, pbytes
 * apart from all), in node-rank order, with the same engine the
 * aggregation nodes use, so the result does not depend on the MPI
 * library's own reduction (Open MPI 4.1.4's 8-bit sums are wrong on
 * overflow).  The blocking node step's on PMPI too (coll_reduce.c). */
void smpi_node_fold(comm_state_t *s, const shp_reduce_desc_t *d,
                    const char *all, size_t n, size_t pbytes, char *out,
                    MPI_Comm comm)
{
    const void **srcs = malloc(sizeof(void *) * (size_t)s->node_size);
    if (srcs == NULL) {
        smpi_fail(comm, "node-local aggregation", SHARP_COLL_ENOMEM);
    }
    for (int k = 0; k < s->node_size; k++) {
        srcs[k] = all + (size_t)k * pbytes;
    }
    if (shp_reduce_fold(d, out, srcs, (unsigned)s->node_size, n) != SHP_OK) {
        smpi_fail(comm, "node-local aggregation", SHARP_COLL_ENOT_SUPP);
    }
    free(srcs);
}

/* the node's fold in node-rank order (the shared-memory one's bits) */
void smpi_xchg_fold(nb_op_t *o, size_t count, void *dst)
{
    if (!o->node_mpi) {
        smpi_node_check(o, smn_nb_fold(o->st->nshm, &o->d, count, dst));
    } else if (count != 0) {
        smpi_node_fold(o->st, &o->d, o->st->xc->all, count, o->bytes, dst,
                       o->comm);
    }
}

char *smpi_xchg_result_area(nb_op_t *o)
{
    if (!o->node_mpi) {
        return smn_result_area(o->st->nshm);
    }
    struct smpi_xchg *x = xc_of(o);
    xc_grow(o, &x->res, &x->res_cap, XC_HDR + smpi_node_len(o));
    return x->res + XC_HDR;
}

void smpi_xchg_publish(nb_op_t *o, const char *res, size_t len, int code)
{
    if (!o->node_mpi) {
        smpi_node_check(o, smn_nb_publish(o->st->nshm, res, len, code));
        return;
    }
    struct smpi_xchg *x = xc_of(o);
    PMPI_Wait(&x->out, MPI_STATUS_IGNORE); /* (none: see xc_arrive_mpi) */
    char *area = smpi_xchg_result_area(o);
    memcpy(x->res, &code, sizeof(code));
    if (len != 0 && res != area) {
        memcpy(area, res, len);
    }
    PMPI_Ibcast(x->res, (int)(XC_HDR + len), MPI_BYTE, 0, o->st->node, &x->out);
}

/* the leader: SHP_OK once its publication's bcast is done (at once on
 * shared memory) */
shp_status_t smpi_xchg_published(nb_op_t *o)
{
    if (!o->node_mpi) {
        return SHP_OK;
    }
    int flag = 0;
    PMPI_Test(&o->st->xc->out, &flag, MPI_STATUS_IGNORE);
    return flag ? SHP_OK : SHP_INPROGRESS;
}

/* the others: SHP_OK once the leader published; its code at *code and,
 * with NODE_OK, its len bytes at buf (if not NULL) */
shp_status_t smpi_xchg_test_out(nb_op_t *o, void *buf, size_t len, int *code)
{
    if (!o->node_mpi) {
        return smn_nb_test_out(o->st->nshm, buf, len, code);
    }
    struct smpi_xchg *x = o->st->xc;
    int in = 0, out = 0;
    PMPI_Test(&x->in, &in, MPI_STATUS_IGNORE); /* (its half of the way in) */
    PMPI_Test(&x->out, &out, MPI_STATUS_IGNORE);
    if (!in || !out) {
        return SHP_INPROGRESS;
    }
    memcpy(code, x->res, sizeof(*code));
    if (*code == NODE_OK && buf != NULL && len != 0) {
        memcpy(buf, x->res + XC_HDR, len);
    }
    return SHP_OK;
}

/* the communicator's exchange gone (its requests done first: every rank
 * of the node posted them) */
void smpi_xchg_free(comm_state_t *st)
{
    struct smpi_xchg *x = st->xc;
    if (x == NULL) {
        return;
    }
    PMPI_Wait(&x->in, MPI_STATUS_IGNORE);
    PMPI_Wait(&x->out, MPI_STATUS_IGNORE);
    free(x->all);
    free(x->res);
    free(x);
    st->xc = NULL;
}
