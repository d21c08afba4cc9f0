/*
 * libsharp_mpi: the node step of a non-blocking operation, on shared
 * memory (node_shm.h, the non-blocking form), with several ranks per node
 * (hier).
 *
 * The step is taken in the communicator's queue (op.c): when it comes to
 * the head, every rank arrives with its contribution (a reduction's data in
 * the wire's layout; a bcast's data at its root; a barrier's nothing) and
 * goes on (smpi_node_arrive).  Progress (progress.c) does the rest, here:
 * the leader, once the node's ranks all arrived, folds them in node-rank
 * order (the blocking form's fold, the same bits; an exact sum keeps them
 * apart), posts sharp's non-blocking call, and when it completes publishes
 * the result and a code (NODE_OK; NODE_FELL, fetched in a recovery;
 * NODE_REDO, on PMPI: nb.h); the other ranks complete when it is
 * published.  The leader recovers (its group's member) and publishes the
 * outcome to its node; a rank of the node that dies or stays past
 * SHARP_MPI_NODE_SHM_TIMEOUT aborts the job naming it, as the blocking node
 * step does (fall.c).
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include "mpi-coll/recover.h"

#include <stdlib.h>
#include <string.h>

/* node steps that moved on (a leader's sharp part posted, a result
 * published or received): a wait that sees one starts its idle backoff
 * afresh (the next part of the operation is near) */
unsigned long smpi_nb_moved;

/* the published result (res; NULL: none) and code, at the leader; then
 * the leader's own buffers, and the next operation (or the redo) */
static void node_publish(nb_op_t *o, const char *res, int code)
{
    size_t len = smpi_node_len(o);
    if (len != 0 && res == NULL) {
        res = smpi_xchg_result_area(o); /* nothing to tell: no data */
    }
    smpi_xchg_publish(o, res, len, code);
    o->nphase = 0;
    smpi_nb_moved++;
    if (code == NODE_REDO) {
        smpi_nb_redo(o);
        return;
    }
    if (len != 0) {
        smpi_nb_deliver(o, res);
    }
    if (smpi_xchg_published(o) != SHP_OK) {
        o->nphase = 3; /* done when its publication is (on PMPI) */
        return;
    }
    smpi_nb_dequeue(o); /* o may be gone */
}

static void node_lead_post(nb_op_t *o);

/* the group failed at o (the leader): recovered as smpi_nb_recover does, the
 * outcome published to the node */
static void node_recover(nb_op_t *o, int rc)
{
    comm_state_t *st = o->st;
    int fetched =
        smpi_recover_op(st, o->comm, smpi_nb_name(o), o->bytes, rc, 1);
    if (fetched) {
        smpi_nb_fall(st, o);
        node_publish(o, smpi_node_len(o) != 0 ? smr_result(st->rec) : NULL,
                     NODE_FELL);
    } else if (smpi_comm_failover(st, o->seq)) {
        node_lead_post(o); /* again, on the standby group: the node waits */
    } else {
        smpi_nb_fall(st, NULL);
        node_publish(o, NULL, NODE_REDO);
    }
}

/* the data of a bcast at the leader of its root's node (NULL elsewhere) */
static const char *node_bcast_data(const nb_op_t *o)
{
    const comm_state_t *st = o->st;
    if (st->node_of[o->root] != st->node_of[st->rank]) {
        return NULL;
    }
    return st->rank == o->root ? o->nsrc : o->nin;
}

/* the leader's sharp part ended (rc) */
void smpi_node_finish(nb_op_t *o, int rc)
{
    comm_state_t *st = o->st;
    o->h = NULL;
    const char *data = o->kind == C_IBCAST ? node_bcast_data(o) : NULL;
    const char *res = o->rec ? o->recbuf : o->pr;
    if (o->rec) {
        if (!o->ended) {
            smr_end(st->rec, rc == SHARP_COLL_SUCCESS, o->bytes);
        }
        o->ended = 0;
        if (rc != SHARP_COLL_SUCCESS) {
            node_recover(o, rc);
            return;
        }
        if (data != NULL) {
            /* the root's node sent from its data: the record's last result */
            memcpy(o->recbuf, data, o->bytes);
        }
    } else if (rc != SHARP_COLL_SUCCESS) {
        smpi_fail(o->comm, smpi_nb_name(o), rc);
    }
    node_publish(o, data != NULL ? data : res, NODE_OK);
}

/* a reduction the leader sends as every contribution apart (an exact
 * sum), and the sharp elements of o's data */
static int node_exact(const nb_op_t *o)
{
    return o->kind != C_IBARRIER && o->kind != C_IBCAST &&
           smpi_exact_wanted(o->sop, &o->m);
}

static size_t node_elems(const nb_op_t *o)
{
    return o->n * (size_t)o->m.mult;
}

/* the leader's input to sharp (nin): the node's fold; every
 * contribution, for an exact sum; a bcast's data from a root in its node */
static void node_lead_input(nb_op_t *o, int exact, size_t ns)
{
    comm_state_t *st = o->st;
    if (o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) {
        if (exact) { /* every contribution apart: no rounding in the node */
            if (o->nin == NULL) { /* (a persistent one's, kept) */
                o->nin = smpi_xmalloc((size_t)st->node_size * o->bytes, o->comm,
                                      smpi_nb_name(o));
            }
            smpi_xchg_copy_all(o, o->nin);
        } else {
            if (o->nin == NULL) {
                o->nin = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
            }
            smpi_xchg_fold(o, ns, o->nin);
        }
    } else if (o->kind == C_IBCAST &&
               st->node_of[o->root] == st->node_of[st->rank] &&
               st->rank != o->root) {
        if (o->nin == NULL) {
            o->nin = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
        }
        memcpy(o->nin, smpi_xchg_src(o, st->rank_in_node[o->root]), o->bytes);
    }
}

/* where the leader's sharp part puts its result (*dst): the record's
 * buffer with recovery, else ours.  0: none, the operation recovered
 * already (a member asked: frozen) */
static int node_lead_dst(nb_op_t *o, char **dst)
{
    comm_state_t *st = o->st;
    if (o->rec) {
        int oom = 0;
        o->recbuf = smpi_rec_begin(st, o, &oom);
        if (oom) {
            smpi_fail(o->comm, smpi_nb_name(o), SHARP_COLL_ENOMEM);
        }
        if (o->recbuf == NULL) {
            node_recover(o, SHARP_COLL_ERROR); /* a member asked: frozen */
            return 0;
        }
        *dst = o->recbuf;
    } else {
        *dst = o->kind == C_IBARRIER ? NULL : smpi_node_pr(o);
    }
    return 1;
}

/* a reduction's spec at the leader: from nin (every contribution, for an
 * exact sum) to dst */
static void node_lead_spec(nb_op_t *o, int exact, size_t ns, char *dst,
                           struct sharp_coll_reduce_spec *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->dtype = (enum sharp_datatype)o->m.sdt;
    spec->tag_dtype = (enum sharp_datatype)o->m.tag;
    spec->op = exact ? SHARP_OP_SUM_EXACT : (enum sharp_reduce_op)o->sop;
    spec->length = ns;
    spec->sbuf_desc =
        smpi_desc_of(o->nin, (exact ? (size_t)o->st->node_size : 1) * o->bytes);
    spec->rbuf_desc = smpi_desc_of(dst, o->bytes);
}

/* every rank of the node arrived: the leader's sharp part */
static void node_lead(nb_op_t *o)
{
    node_lead_input(o, node_exact(o), node_elems(o));
    o->nphase = 2;
    node_lead_post(o);
}

/* the leader's input folded (nin): its sharp part posted */
static void node_lead_post(nb_op_t *o)
{
    comm_state_t *st = o->st;
    int exact = node_exact(o);
    char *dst;
    if (!node_lead_dst(o, &dst)) {
        return;
    }
    int rc;
    if (o->kind == C_IBARRIER) {
        rc = sharp_coll_do_barrier_nb(st->sc, &o->h);
    } else if (o->kind == C_IBCAST) {
        struct sharp_coll_bcast_spec bs;
        const char *data = node_bcast_data(o);
        memset(&bs, 0, sizeof(bs));
        bs.buf_desc = smpi_desc_of(data != NULL ? (void *)data : dst, o->bytes);
        bs.size = o->bytes;
        bs.root = st->node_of[o->root];
        rc = sharp_coll_do_bcast_nb(st->sc, &bs, &o->h);
    } else {
        struct sharp_coll_reduce_spec spec;
        node_lead_spec(o, exact, node_elems(o), dst, &spec);
        if (exact) {
            /* libsharp_coll's exact sums are blocking (its _nb forms
             * complete before returning): done here, then published */
            o->h = NULL;
            smpi_node_finish(o, sharp_coll_do_allreduce_exact_n(st->sc, &spec,
                                                                st->node_size));
            return;
        }
        rc = sharp_coll_do_allreduce_nb(st->sc, &spec, &o->h);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        o->h = NULL;
        if (!o->rec) {
            smpi_fail(o->comm, smpi_nb_name(o), rc);
        }
        smr_end(st->rec, 0, o->bytes);
        node_recover(o, rc);
        return;
    }
    smpi_nb_moved++;
    sharp_coll_progress(smpi.ctx); /* on its way while the program computes */
}

/* a node step's turn of progress (nphase 1, or 3: the leader's
 * publication on PMPI): 1 if o completed (it may be gone) */
int smpi_node_poll(nb_op_t *o)
{
    comm_state_t *st = o->st;
    if (o->nphase == 3) { /* the leader's publication on PMPI */
        if (smpi_xchg_published(o) != SHP_OK) {
            return 0;
        }
        o->nphase = 0;
        smpi_nb_dequeue(o); /* o may be gone */
        return 1;
    }
    if (st->node_rank == 0) {
        shp_status_t s = smpi_xchg_test_in(o);
        smpi_node_check(o, s);
        if (s == SHP_OK) {
            node_lead(o);
        }
        return 0; /* (its end is smpi_nb_poll's to see) */
    }
    /* where the published bytes go: straight into the program's buffer
     * if it takes the wire's layout, else unpacked from ours */
    char *out = NULL;
    int unpack = 0;
    if (o->kind == C_IBCAST) {
        if (st->rank != o->root) {
            out = o->direct != NULL ? o->direct : smpi_node_pr(o);
            unpack = o->direct == NULL;
        }
    } else if (o->kind != C_IBARRIER && o->keep) {
        out = o->m.packed ? smpi_node_pr(o) : o->rbuf;
        unpack = o->m.packed;
    }
    int code = NODE_OK;
    shp_status_t s = smpi_xchg_test_out(o, out, smpi_node_len(o), &code);
    smpi_node_check(o, s);
    if (s != SHP_OK) {
        return 0;
    }
    o->nphase = 0;
    smpi_nb_moved++;
    if (code != NODE_OK) {
        smpi_nb_fall(st, code == NODE_FELL ? o : NULL); /* as the leader did */
    }
    if (code == NODE_FELL && out != NULL && smpi_node_len(o) != 0) {
        /* a result fetched in a recovery: the engine copies no data with
         * a non-zero code, but it is in the node's result area until this
         * rank arrives again (the leader publishes the next one only
         * then); without this copy the rank kept its own buffer: a wrong
         * result */
        memcpy(out, smpi_xchg_result_area(o), smpi_node_len(o));
    }
    if (code == NODE_REDO) {
        smpi_nb_redo(o); /* (the program's buffers untouched; o may be gone) */
        return 0;
    }
    if (unpack) {
        smpi_nb_deliver(o, o->pr);
    }
    smpi_nb_dequeue(o); /* o may be gone */
    return 1;
}
