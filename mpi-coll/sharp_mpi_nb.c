/*
 * libsharp_mpi: non-blocking and persistent collectives, a unit of its
 * own; the communicators, eligibility rules, datatype helpers and recovery
 * it shares with sharp_mpi.c are declared in sharp_mpi_int.h.
 *
 *   MPI_Iallreduce, MPI_Ireduce, MPI_Ibcast, MPI_Ibarrier
 *       posted through sharp_coll_*_nb; the request the program gets is a
 *       generalized request (MPI_Grequest_start) that is completed
 *       (MPI_Grequest_complete) once sharp's request is, so MPI's own
 *       MPI_Wait*, MPI_Test* and MPI_Request_free take it with any other
 *       request.  The wrappers of those calls progress sharp first.
 *   MPI_Allreduce_init, _Reduce_init, _Bcast_init, _Barrier_init (MPI 4:
 *   MPICH) and Open MPI 4.1's MPIX_ ones
 *       the program's handle is an inactive persistent request of MPI's
 *       own (a receive on a private communicator, never started); each
 *       MPI_Start makes a generalized request that stands in for the
 *       handle inside MPI_Wait* / MPI_Test* and the handle is given back.
 *
 * Offloaded exactly when the blocking call would be (same datatypes, ops,
 * counts, sizes: every rank decides alike).  With node-local aggregation
 * (several ranks per node, hier) an operation is one node step on shared
 * memory in its non-blocking form (node_shm.h, smn_nb_*), for data up to
 * the smallest slot of the communicator's nodes where every node has its
 * segment (nb_slot, agreed when the group is made), else PMPI on every
 * rank: the communicator's operations go through its queue one at a time;
 * at the head each rank arrives with its contribution and goes on;
 * progress then has the leader fold the node's contributions (the
 * blocking fold, the same bits), post sharp's _nb call and, once it
 * completes, publish the result and a code (OK, fetched in a recovery,
 * redo on PMPI), and the node's other ranks complete when they see it
 * (node_* below; docs/mpi.md has the table).  The first collective on a
 * communicator makes its group (an agreement of its members), blocking or
 * not.
 *
 * Progress: a message up to the OST quota is wholly sent when it goes to
 * sharp, so the network reduces it while the program computes; the result
 * is read at the next MPI_Wait* / MPI_Test* (or any call that progresses
 * sharp).  With recovery (SHARP_MPI_ON_FAULT=fallback) a communicator's
 * operations go to sharp one at a time (a queue per communicator), each
 * received into the group's record, and a failed one is recovered as a
 * blocking one is (nb_recover: fetched from a member, or redone on PMPI);
 * without, they are pipelined and a failure aborts (smpi_fail()).  With
 * several ranks per node the leader recovers (its group's member) and
 * publishes the outcome to its node; a rank of the node that dies or
 * stays past SHARP_MPI_NODE_SHM_TIMEOUT aborts the job naming it, as the
 * blocking node step does.  A wait on a node step sleeps on the segment's
 * futex (1 ms slices: MPI's own requests still progress).
 * MPI_THREAD_MULTIPLE jobs never get here (sharp_setup: plain MPI).
 */

#include "mpi-coll/sharp_mpi_int.h"

#include "mpi-coll/recover.h"

#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define PCOLL(name) MPI_##name##_init
#define PPCOLL(name) PMPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define PCOLL(name) MPIX_##name##_init
#define PPCOLL(name) PMPIX_##name##_init
#endif

typedef struct nb_op {
    int kind; /* C_IALLREDUCE ... */
    comm_state_t *st;
    unsigned long seq; /* the activation's place in the communicator's
                          calls (comm_state_t seq) */
    MPI_Comm comm;
    /* the arguments, kept for a persistent operation's every start */
    const void *sbuf;
    void *rbuf;
    int count, root, sop, keep;
    MPI_Datatype dt;
    dt_map_t m;
    shp_reduce_desc_t d; /* the node-local fold's */
    size_t n, bytes;
    char *direct; /* bcast: the bytes in the user's buffer, else NULL */
    /* one activation */
    void *h; /* sharp's request, NULL when none in flight */
    char *ps, *pr;
    MPI_Request greq; /* the activation's generalized request */
    int active, done;
    /* with recovery (SHARP_MPI_ON_FAULT=fallback): one operation of a
     * communicator in flight at a time, its result received into the
     * group's record (recover.h); queued: waiting for its turn; preq: the
     * operation done on PMPI instead (the group failed) */
    int rec, queued;
    int ended, end_rc; /* sharp's part ended inside another's recovery */
    char *recbuf;
    MPI_Request preq;
    MPI_Op mop;
    struct nb_op *qnext;
    /* several ranks per node (the communicator's hier): the node step on
     * shared memory, one at a time per communicator (always queued).
     * nphase 0: not begun; 1: arrived (the leader waits for the node's
     * other ranks, they for its publication); 2: the leader's sharp part
     * in flight.  nsrc: what this rank gave (a bcast's data at its root);
     * nin: the leader's input to sharp (the node's fold; every
     * contribution, for an exact sum; a bcast's data from a root in its
     * node) */
    int node, nphase;
    const char *nsrc;
    char *nin;
    /* persistent: the program's handle; freed while active */
    int persistent, user_freed;
    MPI_Request handle;
    struct nb_op *next, **prev;
} nb_op_t;

static nb_op_t *nb_ops; /* every live operation */
/* node steps that moved on (a leader's sharp part posted, a result
 * published or received): a wait that sees one starts its idle backoff
 * afresh (the next part of the operation is near) */
static unsigned long nb_moved;

static void nb_drain(comm_state_t *s);
static void nb_wait_hook(void);
static void nb_idle_turn(unsigned turn);
static void nb_bound_queue(comm_state_t *st);

/* With the first operation, what the layers below call back: sharp_mpi.c
 * drains a communicator's operations before a blocking call on it, before
 * making or leaving a group and at MPI_Finalize; a recovery's decision
 * (smr_decide) lets the other groups' operations end meanwhile. */
static void nb_register(void)
{
    static const smpi_nb_cbs_t cbs = {nb_drain};
    static int done;
    if (!done) {
        smpi_set_nb_cbs(&cbs);
        smr_set_wait_hook(nb_wait_hook);
        done = 1;
    }
}

static void nb_link(nb_op_t *o)
{
    nb_register();
    o->next = nb_ops;
    o->prev = &nb_ops;
    if (nb_ops != NULL) {
        nb_ops->prev = &o->next;
    }
    nb_ops = o;
}

static void nb_release(nb_op_t *o)
{
    *o->prev = o->next;
    if (o->next != NULL) {
        o->next->prev = o->prev;
    }
    free(o->ps);
    free(o->pr);
    free(o->nin);
    free(o);
}

/* Generalized request callbacks -------------------------------------------- */

static int nb_query(void *extra, MPI_Status *status)
{
    (void)extra;
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    status->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
}

/* MPI frees the activation's request (a completed wait or test, or
 * MPI_Request_free after completion) */
static int nb_free(void *extra)
{
    nb_op_t *o = extra;
    o->greq = MPI_REQUEST_NULL;
    o->active = 0;
    if (!o->persistent) {
        nb_release(o);
    }
    return MPI_SUCCESS;
}

static int nb_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS; /* a collective cannot be cancelled */
}

/* Starting and finishing ---------------------------------------------------- */

static const char *nb_name(const nb_op_t *o)
{
    return smpi_coll_names[o->kind];
}

/* sharp's part posted; dst: where a reduction's result goes (the record's
 * buffer with recovery, which every member receives, a reduce's non-roots
 * too), bsrc/bdst: a bcast's buffers */
static int nb_post(nb_op_t *o, void *dst, int as_allreduce)
{
    comm_state_t *st = o->st;
    if (o->kind == C_IBARRIER) {
        return sharp_coll_do_barrier_nb(st->sc, &o->h);
    }
    if (o->kind == C_IBCAST) {
        struct sharp_coll_bcast_spec bs;
        char *p = o->direct;
        if (p == NULL) {
            if (o->pr == NULL) {
                o->pr = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
            }
            p = o->pr;
            if (st->rank == o->root) {
                smpi_pack_data(1, o->rbuf, o->count, o->dt, p, (int)o->bytes,
                               o->comm);
            }
        }
        if (dst != NULL && st->rank != o->root) {
            p = dst; /* the record's buffer: unpacked from it after */
        }
        memset(&bs, 0, sizeof(bs));
        bs.buf_desc = smpi_desc_of(p, o->bytes);
        bs.size = o->bytes;
        bs.root = o->root;
        return sharp_coll_do_bcast_nb(st->sc, &bs, &o->h);
    }
    struct sharp_coll_reduce_spec spec;
    const void *src = o->sbuf == MPI_IN_PLACE ? o->rbuf : o->sbuf;
    if (o->m.packed) {
        if (o->ps == NULL) {
            o->ps = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
        }
        smpi_loc_pack(src, o->ps, o->n, &o->m);
        src = o->ps;
        if (dst == NULL && o->keep) {
            if (o->pr == NULL) {
                o->pr = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
            }
            dst = o->pr;
        }
    } else if (dst == NULL && o->keep) {
        dst = o->rbuf;
    }
    memset(&spec, 0, sizeof(spec));
    spec.dtype = (enum sharp_datatype)o->m.sdt;
    spec.tag_dtype = (enum sharp_datatype)o->m.tag;
    spec.op = (enum sharp_reduce_op)o->sop;
    if (smpi_exact_wanted(o->sop, &o->m)) {
        spec.op = SHARP_OP_SUM_EXACT; /* SHARP_MPI_REPRODUCIBLE */
    }
    spec.length = o->n * (size_t)o->m.mult;
    spec.root = o->root < 0 ? 0 : o->root;
    spec.sbuf_desc = smpi_desc_of((void *)src, o->bytes);
    spec.rbuf_desc = smpi_desc_of(dst, o->bytes);
    return o->kind == C_IALLREDUCE || as_allreduce
               ? sharp_coll_do_allreduce_nb(st->sc, &spec, &o->h)
               : sharp_coll_do_reduce_nb(st->sc, &spec, &o->h);
}

/* the program's buffers from a result of res (the record's buffer, or the
 * one fetched from another member) */
static void nb_deliver(nb_op_t *o, const char *res)
{
    if (o->kind == C_IBCAST) {
        if (o->st->rank == o->root) {
            return;
        }
        if (o->direct != NULL) {
            memcpy(o->direct, res, o->bytes);
        } else {
            smpi_pack_data(0, o->rbuf, o->count, o->dt, (void *)res,
                           (int)o->bytes, o->comm);
        }
    } else if ((o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) && o->keep) {
        if (o->m.packed) {
            smpi_loc_unpack(res, o->rbuf, o->n, &o->m);
        } else {
            memcpy(o->rbuf, res, o->bytes);
        }
    }
}

/* MPI's request of the activation completed (the result in place) */
static void nb_complete_greq(nb_op_t *o)
{
    o->done = 1;
    if (o->user_freed && !o->persistent) {
        /* MPI_Request_free came first: MPI may free it now */
        MPI_Request r = o->greq;
        PMPI_Grequest_complete(r);
        PMPI_Request_free(&r); /* calls nb_free: o is gone */
        return;
    }
    PMPI_Grequest_complete(o->greq);
}

static void nb_kick(comm_state_t *st);

/* the head of its communicator's queue is done: the next one goes */
static void nb_dequeue(nb_op_t *o)
{
    comm_state_t *st = o->st;
    st->nbq_head = o->qnext;
    if (st->nbq_head == NULL) {
        st->nbq_tail = NULL;
    }
    st->nbq_len--;
    if (st->use) {
        st->done_seq = o->seq; /* through the group */
    }
    o->qnext = NULL;
    nb_complete_greq(o); /* o may be gone */
    nb_kick(st);
}

/* the operation on PMPI, on the communicator's private duplicate (every
 * rank does the same operations there in the same order: those from the
 * failed one on), non-blocking so that this process waits nowhere */
static void nb_redo(nb_op_t *o)
{
    comm_state_t *st = o->st;
    MPI_Comm c = st->all;
    int rc = MPI_SUCCESS, done = 0;
    SMPI_ADD(smpi.redone, 1);
    /* counted as offloaded when it started: it went to MPI */
    SMPI_SUB(smpi.calls[o->kind][0], 1);
    SMPI_SUB(smpi.bytes[o->kind][0], o->bytes);
    int red = o->kind == C_IALLREDUCE || o->kind == C_IREDUCE;
    smpi_fallback(o->kind, (long)o->bytes, o->comm, WHY_FELL,
                  o->kind == C_IBARRIER ? MPI_DATATYPE_NULL : o->dt,
                  red ? o->mop : MPI_OP_NULL);
    o->preq = MPI_REQUEST_NULL;
    switch (o->kind) {
    case C_IBARRIER: rc = PMPI_Ibarrier(c, &o->preq); break;
    case C_IBCAST:
        rc = PMPI_Ibcast(o->rbuf, o->count, o->dt, o->root, c, &o->preq);
        break;
    default: {
        int root = o->kind == C_IREDUCE ? o->root : -1, ret = MPI_SUCCESS;
        if (smpi_exact_pmpi(o->sbuf, o->rbuf, o->count, o->dt, o->mop, root, c,
                            &ret)) {
            rc = ret; /* exact sums: the network's arithmetic, blocking */
            done = 1;
        } else if (root < 0) {
            rc = PMPI_Iallreduce(o->sbuf, o->rbuf, o->count, o->dt, o->mop, c,
                                 &o->preq);
        } else {
            rc = PMPI_Ireduce(o->sbuf, o->rbuf, o->count, o->dt, o->mop, root,
                              c, &o->preq);
        }
    }
    }
    if (rc != MPI_SUCCESS) {
        smpi_die(o->comm, "a non-blocking collective redone on MPI");
    }
    if (done || o->preq == MPI_REQUEST_NULL) {
        o->preq = MPI_REQUEST_NULL;
        nb_dequeue(o);
    }
}

/* the group failed at o (or before it was posted): where the group's
 * operations end, decided with the other members (docs/mpi.md, failure
 * protocol): o's result fetched from a member that has it, or o and every
 * later operation on PMPI */
static void nb_fall(comm_state_t *st, const nb_op_t *fetched)
{
    if (fetched != NULL && st->use) {
        st->done_seq = fetched->seq; /* the last one completed somewhere */
    }
    /* the policy of every form: the operations queued stay the layer's,
     * done on PMPI in order, and the later calls go to PMPI until the
     * communicator's turn to try a new group */
    smpi_comm_fall(st);
}

static void nb_recover(nb_op_t *o, int rc)
{
    comm_state_t *st = o->st;
    int fetched = smpi_recover_op(st, o->comm, nb_name(o), o->bytes, rc, 1);
    nb_fall(st, fetched ? o : NULL);
    if (fetched) {
        nb_deliver(o, smr_result(st->rec));
        nb_dequeue(o);
        return;
    }
    nb_redo(o);
}

/* The node step on shared memory ---------------------------------------------
 *
 * With several ranks per node (hier) an operation is one node step
 * (node_shm.h, the non-blocking form), taken in the communicator's queue:
 * when it comes to the head, every rank arrives with its contribution (a
 * reduction's data in the wire's layout; a bcast's data at its root; a
 * barrier's nothing) and goes on.  Progress does the rest: the leader,
 * once the node's ranks all arrived, folds them in node-rank order (the
 * blocking form's fold, the same bits; an exact sum keeps them apart),
 * posts sharp's non-blocking call, and when it completes publishes the
 * result and a code; the other ranks complete when it is published.  The
 * codes: */
enum {
    NODE_OK,   /* the result */
    NODE_FELL, /* the result, fetched in a recovery: later ones on PMPI */
    NODE_REDO  /* this one and the later ones on PMPI (every rank) */
};

static size_t node_len(const nb_op_t *o)
{
    return o->kind == C_IBARRIER ? 0 : o->bytes;
}

static char *node_pr(nb_op_t *o)
{
    if (o->pr == NULL) {
        o->pr = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
    }
    return o->pr;
}

/* a reduction's data in the wire's layout */
static const char *node_red_src(nb_op_t *o)
{
    const void *src = o->sbuf == MPI_IN_PLACE ? o->rbuf : o->sbuf;
    if (o->m.packed) {
        if (o->ps == NULL) {
            o->ps = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
        }
        smpi_loc_pack(src, o->ps, o->n, &o->m);
        src = o->ps;
    }
    return src;
}

/* a bcast's data, at its root */
static const char *node_bcast_src(nb_op_t *o)
{
    if (o->direct != NULL) {
        return o->direct;
    }
    smpi_pack_data(1, o->rbuf, o->count, o->dt, node_pr(o), (int)o->bytes,
                   o->comm);
    return o->pr;
}

static void node_check(nb_op_t *o, shp_status_t s)
{
    if (s != SHP_OK && s != SHP_INPROGRESS) {
        smpi_node_shm_fail(o->st, o->comm, nb_name(o), s);
    }
}

/* the head of the queue begins: this rank's contribution, without waiting */
static void node_arrive(nb_op_t *o)
{
    comm_state_t *st = o->st;
    const char *src = NULL;
    size_t len = 0;
    if (o->kind == C_IBCAST) {
        if (st->rank == o->root) {
            src = node_bcast_src(o);
            len = o->bytes;
        }
    } else if (o->kind != C_IBARRIER) {
        src = node_red_src(o);
        len = o->bytes;
    }
    o->nsrc = src;
    SMPI_ADD(smpi.node_shm_steps, 1);
    node_check(o, smn_nb_arrive(st->nshm, src, len));
    o->nphase = 1;
}

/* the published result (res; NULL: none) and code, at the leader; then
 * the leader's own buffers, and the next operation (or the redo) */
static void node_publish(nb_op_t *o, const char *res, int code)
{
    comm_state_t *st = o->st;
    size_t len = node_len(o);
    if (len != 0 && res == NULL) {
        res = smn_result_area(st->nshm); /* nothing to tell: no data */
    }
    node_check(o, smn_nb_publish(st->nshm, res, len, code));
    o->nphase = 0;
    nb_moved++;
    if (code == NODE_REDO) {
        nb_redo(o);
        return;
    }
    if (len != 0) {
        nb_deliver(o, res);
    }
    nb_dequeue(o); /* o may be gone */
}

/* the group failed at o (the leader): recovered as nb_recover does, the
 * outcome published to the node */
static void node_recover(nb_op_t *o, int rc)
{
    comm_state_t *st = o->st;
    int fetched = smpi_recover_op(st, o->comm, nb_name(o), o->bytes, rc, 1);
    nb_fall(st, fetched ? o : NULL);
    if (fetched) {
        node_publish(o, node_len(o) != 0 ? smr_result(st->rec) : NULL,
                     NODE_FELL);
    } else {
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
static void node_finish(nb_op_t *o, int rc)
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
        smpi_fail(o->comm, nb_name(o), rc);
    }
    node_publish(o, data != NULL ? data : res, NODE_OK);
}

/* every rank of the node arrived: the leader's sharp part */
static void node_lead(nb_op_t *o)
{
    comm_state_t *st = o->st;
    int exact = o->kind != C_IBARRIER && o->kind != C_IBCAST &&
                smpi_exact_wanted(o->sop, &o->m);
    size_t ns = o->n * (size_t)o->m.mult;
    const void *srcs[SMN_MAX_RANKS];
    if (o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) {
        if (exact) { /* every contribution apart: no rounding in the node */
            if (o->nin == NULL) { /* (a persistent one's, kept) */
                o->nin = smpi_xmalloc((size_t)st->node_size * o->bytes, o->comm,
                                      nb_name(o));
            }
            node_check(o, smn_nb_srcs(st->nshm, srcs));
            for (int k = 0; k < st->node_size; k++) {
                memcpy(o->nin + (size_t)k * o->bytes, srcs[k], o->bytes);
            }
        } else {
            if (o->nin == NULL) {
                o->nin = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
            }
            node_check(o, smn_nb_fold(st->nshm, &o->d, ns, o->nin));
        }
    } else if (o->kind == C_IBCAST &&
               st->node_of[o->root] == st->node_of[st->rank] &&
               st->rank != o->root) {
        if (o->nin == NULL) {
            o->nin = smpi_xmalloc(o->bytes, o->comm, nb_name(o));
        }
        node_check(o, smn_nb_srcs(st->nshm, srcs));
        memcpy(o->nin, srcs[st->rank_in_node[o->root]], o->bytes);
    }
    o->nphase = 2;
    char *dst;
    if (o->rec) {
        int oom = 0;
        o->recbuf = st->sc != NULL ? smr_begin(st->rec, o->bytes, &oom) : NULL;
        if (oom) {
            smpi_fail(o->comm, nb_name(o), SHARP_COLL_ENOMEM);
        }
        if (o->recbuf == NULL) {
            node_recover(o, SHARP_COLL_ERROR); /* a member asked: frozen */
            return;
        }
        dst = o->recbuf;
    } else {
        dst = o->kind == C_IBARRIER ? NULL : node_pr(o);
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
        memset(&spec, 0, sizeof(spec));
        spec.dtype = (enum sharp_datatype)o->m.sdt;
        spec.tag_dtype = (enum sharp_datatype)o->m.tag;
        spec.op = exact ? SHARP_OP_SUM_EXACT : (enum sharp_reduce_op)o->sop;
        spec.length = ns;
        spec.sbuf_desc = smpi_desc_of(
            o->nin, (exact ? (size_t)st->node_size : 1) * o->bytes);
        spec.rbuf_desc = smpi_desc_of(dst, o->bytes);
        if (exact) {
            /* libsharp_coll's exact sums are blocking (its _nb forms
             * complete before returning): done here, then published */
            o->h = NULL;
            node_finish(o, sharp_coll_do_allreduce_exact_n(st->sc, &spec,
                                                           st->node_size));
            return;
        }
        rc = sharp_coll_do_allreduce_nb(st->sc, &spec, &o->h);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        o->h = NULL;
        if (!o->rec) {
            smpi_fail(o->comm, nb_name(o), rc);
        }
        smr_end(st->rec, 0, o->bytes);
        node_recover(o, rc);
        return;
    }
    nb_moved++;
    sharp_coll_progress(smpi.ctx); /* on its way while the program computes */
}

/* a node step's turn of progress (nphase 1): 1 if o completed (it may be
 * gone) */
static int node_poll(nb_op_t *o)
{
    comm_state_t *st = o->st;
    if (st->node_rank == 0) {
        shp_status_t s = smn_nb_test_in(st->nshm);
        node_check(o, s);
        if (s == SHP_OK) {
            node_lead(o);
        }
        return 0; /* (its end is nb_poll's to see) */
    }
    /* where the published bytes go: straight into the program's buffer
     * if it takes the wire's layout, else unpacked from ours */
    char *out = NULL;
    int unpack = 0;
    if (o->kind == C_IBCAST) {
        if (st->rank != o->root) {
            out = o->direct != NULL ? o->direct : node_pr(o);
            unpack = o->direct == NULL;
        }
    } else if (o->kind != C_IBARRIER && o->keep) {
        out = o->m.packed ? node_pr(o) : o->rbuf;
        unpack = o->m.packed;
    }
    int code = NODE_OK;
    shp_status_t s = smn_nb_test_out(st->nshm, out, node_len(o), &code);
    node_check(o, s);
    if (s != SHP_OK) {
        return 0;
    }
    o->nphase = 0;
    nb_moved++;
    if (code != NODE_OK) {
        nb_fall(st, code == NODE_FELL ? o : NULL); /* as the leader did */
    }
    if (code == NODE_FELL && out != NULL && node_len(o) != 0) {
        /* a result fetched in a recovery: the engine copies no data with
         * a non-zero code, but it is in the node's result area until this
         * rank arrives again (the leader publishes the next one only
         * then); without this copy the rank kept its own buffer: a wrong
         * result */
        memcpy(out, smn_result_area(st->nshm), node_len(o));
    }
    if (code == NODE_REDO) {
        nb_redo(o); /* (the program's buffers untouched; o may be gone) */
        return 0;
    }
    if (unpack) {
        nb_deliver(o, o->pr);
    }
    nb_dequeue(o); /* o may be gone */
    return 1;
}

/* a segment on which this rank waits for the node's other ranks, if any:
 * a wait's idle turn sleeps on it (woken by their store) */
static smn_node_t *node_waiting(void)
{
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if (o->node && o->nphase == 1 && o->active && !o->done) {
            return o->st->nshm;
        }
    }
    return NULL;
}

/* the head of st's queue posted (through sharp, or on PMPI) */
static void nb_kick(comm_state_t *st)
{
    nb_op_t *o = st->nbq_head;
    if (o == NULL || !o->queued) {
        return;
    }
    o->queued = 0;
    if (!st->use) { /* the group failed at or before this one: PMPI */
        nb_redo(o);
        return;
    }
    if (o->node) {
        node_arrive(o);
        return;
    }
    int oom = 0;
    o->recbuf = st->sc != NULL ? smr_begin(st->rec, o->bytes, &oom) : NULL;
    if (oom) {
        smpi_fail(o->comm, nb_name(o), SHARP_COLL_ENOMEM);
    }
    if (o->recbuf == NULL) {
        nb_recover(o, SHARP_COLL_ERROR); /* a member asked: frozen */
        return;
    }
    int rc = nb_post(o, o->recbuf, 1);
    if (rc != SHARP_COLL_SUCCESS) {
        o->h = NULL;
        smr_end(st->rec, 0, o->bytes);
        nb_recover(o, rc);
    }
}

static void nb_start(nb_op_t *o)
{
    comm_state_t *st = o->st;

    if (o->persistent) {
        smpi_comm_call(st, o->comm); /* (the others' in nb_comm) */
    }
    o->seq = st->seq;
    o->done = 0;
    o->active = 1;
    PMPI_Grequest_start(nb_query, nb_free, nb_cancel, o, &o->greq);
    o->rec = smpi_cfg.fallback && st->recoverable;
    SMPI_ADD(smpi.calls[o->kind][0], 1);
    SMPI_ADD(smpi.bytes[o->kind][0], o->bytes);
    if (o->rec || o->node || !st->use) {
        o->queued = 1;
        o->qnext = NULL;
        st->nbq_len++;
        if (st->nbq_tail != NULL) {
            st->nbq_tail->qnext = o;
        } else {
            st->nbq_head = o;
        }
        st->nbq_tail = o;
        nb_kick(st);
        if (o->node && o->nphase == 1 && st->node_rank == 0) {
            /* the node may be in already: the network's part now */
            node_poll(o);
        }
        nb_bound_queue(st);
    } else {
        int rc = nb_post(o, NULL, 0);
        if (rc != SHARP_COLL_SUCCESS) {
            o->h = NULL;
            smpi_fail(o->comm, nb_name(o), rc);
        }
    }
    /* small sends leave at the library's next loop turn (they are
     * gathered and flushed before it sleeps): one turn now, so the
     * network works while the program computes */
    sharp_coll_progress(smpi.ctx);
}

/* sharp's request is complete (status rc): the result into place, MPI's
 * request completed */
static void nb_finish(nb_op_t *o, int rc)
{
    o->h = NULL;
    if (o->node) {
        node_finish(o, rc);
        return;
    }
    if (o->rec) {
        comm_state_t *st = o->st;
        if (!o->ended) {
            smr_end(st->rec, rc == SHARP_COLL_SUCCESS, o->bytes);
        }
        o->ended = 0;
        if (rc != SHARP_COLL_SUCCESS) {
            nb_recover(o, rc);
            return;
        }
        if (o->kind == C_IBCAST && st->rank == o->root) {
            /* the root sent from its data: now the record's last result */
            memcpy(o->recbuf, o->direct != NULL ? o->direct : o->pr, o->bytes);
        }
        nb_deliver(o, o->recbuf);
        nb_dequeue(o);
        return;
    }
    if (rc != SHARP_COLL_SUCCESS) {
        smpi_fail(o->comm, nb_name(o), rc);
    }
    if (o->kind == C_IBCAST && o->direct == NULL && o->st->rank != o->root) {
        smpi_pack_data(0, o->rbuf, o->count, o->dt, o->pr, (int)o->bytes,
                       o->comm);
    } else if ((o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) &&
               o->m.packed && o->keep) {
        smpi_loc_unpack(o->pr, o->rbuf, o->n, &o->m);
    }
    nb_complete_greq(o);
}

/* 1 if o's part is done (sharp's or PMPI's); block: wait for it */
static int nb_poll(nb_op_t *o, int block)
{
    if (!o->active || o->done) {
        return 1;
    }
    if ((o->rec || o->node) && (o->queued || o->preq != MPI_REQUEST_NULL)) {
        if (o->preq != MPI_REQUEST_NULL) {
            int flag = 0;
            PMPI_Test(&o->preq, &flag, MPI_STATUS_IGNORE);
            if (flag) {
                nb_dequeue(o); /* o may be gone */
                return 1;
            }
        }
        return 0; /* its turn comes with the others' (nb_drain) */
    }
    if (o->node && o->nphase == 1) {
        return node_poll(o);
    }
    if (o->ended) {
        nb_finish(o, o->end_rc); /* ended in nb_wait_hook */
        return 1;
    }
    if (o->h == NULL) {
        return 0;
    }
    if (!block && !sharp_coll_req_test(o->h)) {
        return 0;
    }
    nb_finish(o, sharp_coll_req_wait(o->h));
    return 1;
}

/* while this process decides a group's recovery (smr_decide): the
 * operations of its other groups that ended meanwhile leave their records
 * (the members of those groups may be asking about them) */
static void nb_wait_hook(void)
{
    smpi_lock();
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if (o->rec && o->h != NULL && !o->ended && sharp_coll_req_test(o->h)) {
            o->end_rc = sharp_coll_req_wait(o->h);
            o->h = NULL;
            o->ended = 1;
            smr_end(o->st->rec, o->end_rc == SHARP_COLL_SUCCESS, o->bytes);
        }
    }
    smpi_unlock();
}

/* every operation in flight a turn of progress */
static void nb_progress_all(void)
{
    nb_op_t *o, *next;
    for (o = nb_ops; o != NULL; o = next) {
        next = o->next; /* o may be released */
        nb_poll(o, 0);
    }
}

/* a turn of MPI's own progress that completes nothing of the program's */
static void nb_poke_mpi(void)
{
    int flag = 0;
    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, smpi.oob_world, &flag,
                MPI_STATUS_IGNORE);
}

/* a wait's empty turn: the first 16 yield the core, then sleeps of 20 us,
 * doubling every 64 turns up to 1 ms (a long wait, on a machine that many
 * processes share, must not take the CPU the daemons and the other ranks
 * need: the network's keepalives and the operations waited for) */
static void nb_idle(unsigned turn)
{
    int depth = smpi_release(); /* (MPI_THREAD_MULTIPLE) */
    nb_idle_turn(turn);
    smpi_regain(depth);
}

static void nb_idle_turn(unsigned turn)
{
    if (turn < 16) {
        sched_yield();
        return;
    }
    unsigned shift = (turn - 16) / 64;
    long ns = shift >= 6 ? 1000000 : 20000L << shift;
    struct timespec ts = {0, ns < 1000000 ? ns : 1000000};
    smn_node_t *nd = node_waiting();
    if (nd != NULL) {
        /* asleep on the node's segment, woken by the store of the rank
         * (or the leader) this one waits for: the longest slice at once
         * (1 ms: MPI's own progress still has its turn that often) */
        smn_nb_sleep(nd, 1000000);
        return;
    }
    nanosleep(&ts, NULL);
}

/* some operation of s (s NULL: of any communicator) whose part is not
 * done */
static int nb_pending(comm_state_t *s)
{
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if ((s == NULL || o->st == s) && o->active && !o->done) {
            return 1;
        }
    }
    return 0;
}

/* before a communicator's group goes (MPI_Comm_free, MPI_Finalize) or a
 * blocking call on it: its operations in flight complete first (s NULL:
 * every communicator's); both libraries progress meanwhile */
static void nb_drain(comm_state_t *s)
{
    smpi_lock();
    for (unsigned turn = 0; nb_pending(s); turn++) {
        nb_progress_all();
        if (!nb_pending(s)) {
            break;
        }
        nb_poke_mpi();
        nb_idle(turn);
    }
    smpi_unlock();
}

/* A communicator's queue holds fewer operations than the calls after
 * which a failed group is tried again (SHARP_MPI_REGROUP_CALLS): a post
 * beyond that waits for the oldest.  So a rank that has not yet learnt
 * of a failure cannot have posted the call at which the others, who have,
 * make a new group: the failed operation was out of its queue before. */
static void nb_bound_queue(comm_state_t *st)
{
    if (smpi_cfg.regroup_calls <= 0) {
        return; /* never tried again */
    }
    unsigned long most = smpi_cfg.regroup_calls > 2
                             ? (unsigned long)smpi_cfg.regroup_calls - 2
                             : 1;
    for (unsigned turn = 0; st->use && st->nbq_len > most; turn++) {
        nb_progress_all();
        if (st->nbq_len <= most) {
            break;
        }
        nb_poke_mpi();
        nb_idle(turn);
    }
}

static nb_op_t *nb_find(MPI_Request r)
{
    if (r == MPI_REQUEST_NULL) {
        return NULL;
    }
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if ((o->persistent && o->handle == r) ||
            (!o->persistent && o->greq == r)) {
            return o;
        }
    }
    return NULL;
}

/* Deciding ------------------------------------------------------------------ */

/* the communicator's state if a non-blocking operation may go through
 * sharp there (the same answer on every rank), else NULL (*why) */
static comm_state_t *nb_comm(MPI_Comm comm, size_t bytes, int *why)
{
    comm_state_t *st = NULL, *had = NULL;
    int found = 0;
    if (smpi.ctx != NULL && comm != MPI_COMM_NULL) {
        PMPI_Comm_get_attr(comm, smpi.keyval, &had, &found);
    }
    st = smpi_comm_state(comm, why, 0);
    comm_state_t *s = st != NULL ? st : found ? had : NULL;
    if (s != NULL && s->hier && (s->nb_slot == 0 || bytes > s->nb_slot)) {
        /* the node step on MPI (no segment on some node), or data over
         * one slot: PMPI (decided from what the group's making agreed,
         * whether or not it failed since) */
        *why = WHY_NB_NODE;
        return NULL;
    }
    if (st == NULL && found && had->why == WHY_FELL &&
        had->all != MPI_COMM_NULL) {
        /* fallen back: the layer's still, queued and done on PMPI on the
         * private duplicate (nb_kick, nb_redo), as the operations a rank
         * had posted before it learnt of the failure are; one rule for
         * every rank whenever it learnt, so the same operations meet on
         * the same communicator */
        return had;
    }
    return st;
}

/* an (all)reduce as an operation, or NULL: PMPI (try_reduce's rules),
 * for *why */
static nb_op_t *nb_reduce_op(int kind, const void *sbuf, void *rbuf, int count,
                             MPI_Datatype dt, MPI_Op op, int root,
                             MPI_Comm comm, int *why)
{
    dt_map_t m;
    shp_reduce_desc_t d;
    int sop;
    size_t bytes;

    *why = smpi_reduce_why(kind == C_IALLREDUCE ? smpi_cfg.allreduce
                                                : smpi_cfg.reduce,
                           count, dt, op, &m, &sop, &bytes, &d);
    if (*why != WHY_OK) {
        return NULL;
    }
    size_t n = (size_t)count;
    comm_state_t *st = nb_comm(comm, bytes, why);
    if (st == NULL) {
        return NULL;
    }
    int keep = root < 0 || root == st->rank;
    if (root >= st->size || (sbuf == MPI_IN_PLACE && !keep)) {
        *why = WHY_ARGS;
        return NULL; /* erroneous: PMPI says so */
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, smpi_coll_names[kind], SHARP_COLL_ENOMEM);
    }
    o->kind = kind;
    o->st = st;
    o->comm = comm;
    o->sbuf = sbuf;
    o->rbuf = rbuf;
    o->count = count;
    o->dt = dt;
    o->root = root;
    o->sop = sop;
    o->mop = op;
    o->keep = keep;
    o->m = m;
    o->d = d;
    o->node = st->hier;
    o->n = n;
    o->bytes = bytes;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    nb_link(o);
    return o;
}

static nb_op_t *nb_bcast_op(void *buf, int count, MPI_Datatype dt, int root,
                            MPI_Comm comm, int *why)
{
    long bytes = smpi_bytes_of(count, dt);
    *why = smpi_bcast_why(bytes);
    comm_state_t *st =
        *why == WHY_OK ? nb_comm(comm, (size_t)bytes, why) : NULL;
    if (st == NULL) {
        return NULL;
    }
    if (root < 0 || root >= st->size) {
        *why = WHY_ARGS;
        return NULL;
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, "MPI_Ibcast", SHARP_COLL_ENOMEM);
    }
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
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    o->rbuf = buf;
    o->count = count;
    o->dt = dt;
    o->root = root;
    o->bytes = (size_t)bytes;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    nb_link(o);
    return o;
}

static nb_op_t *nb_barrier_op(MPI_Comm comm, int *why)
{
    *why = WHY_KIND_OFF;
    comm_state_t *st = smpi_cfg.barrier ? nb_comm(comm, 0, why) : NULL;
    if (st == NULL) {
        return NULL;
    }
    nb_op_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        smpi_fail(comm, "MPI_Ibarrier", SHARP_COLL_ENOMEM);
    }
    o->kind = C_IBARRIER;
    o->node = st->hier;
    o->st = st;
    o->comm = comm;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    nb_link(o);
    return o;
}

/* Non-blocking collectives -------------------------------------------------- */

static int nb_go(nb_op_t *o, MPI_Request *req)
{
    nb_start(o);
    *req = o->greq;
    return MPI_SUCCESS;
}

static int nb_api_iallreduce(const void *sbuf, void *rbuf, int count,
                             MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                             MPI_Request *req)
{
    int why;
    nb_op_t *o =
        nb_reduce_op(C_IALLREDUCE, sbuf, rbuf, count, dt, op, -1, comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IALLREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    return PMPI_Iallreduce(sbuf, rbuf, count, dt, op, comm, req);
}

API int MPI_Iallreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                       MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_iallreduce(sbuf, rbuf, count, dt, op, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ireduce(const void *sbuf, void *rbuf, int count,
                          MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm,
                          MPI_Request *req)
{
    int why = WHY_ARGS;
    nb_op_t *o = root >= 0 ? nb_reduce_op(C_IREDUCE, sbuf, rbuf, count, dt, op,
                                          root, comm, &why)
                           : NULL;
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    return PMPI_Ireduce(sbuf, rbuf, count, dt, op, root, comm, req);
}

API int MPI_Ireduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                    MPI_Op op, int root, MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ireduce(sbuf, rbuf, count, dt, op, root, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ibcast(void *buf, int count, MPI_Datatype dt, int root,
                         MPI_Comm comm, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_bcast_op(buf, count, dt, root, comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IBCAST, smpi_bytes_of(count, dt), comm, why,
                  MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Ibcast(buf, count, dt, root, comm, req);
}

API int MPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root,
                   MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ibcast(buf, count, dt, root, comm, req);
    smpi_unlock();
    return rc;
}

static int nb_api_ibarrier(MPI_Comm comm, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_barrier_op(comm, &why);
    if (o != NULL) {
        return nb_go(o, req);
    }
    smpi_fallback(C_IBARRIER, 0, comm, why, MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Ibarrier(comm, req);
}

API int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_ibarrier(comm, req);
    smpi_unlock();
    return rc;
}

/* Persistent collectives ---------------------------------------------------- */

#ifdef HAVE_PCOLL
static int nb_persist(nb_op_t *o, MPI_Request *req)
{
    /* a handle of MPI's own, never started (so inactive to PMPI) and
     * distinct from every other: a receive on the library's private
     * communicator (MPICH gives every receive from MPI_PROC_NULL one
     * handle) */
    o->persistent = 1;
    PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, 0x5a17, smpi.oob_world,
                   &o->handle);
    *req = o->handle;
    return MPI_SUCCESS;
}

static int nb_api_pcoll_allreduce(const void *sbuf, void *rbuf, int count,
                                  MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                  MPI_Info info, MPI_Request *req)
{
    int why; /* not counted: the starts are (MPI's own, here) */
    nb_op_t *o =
        nb_reduce_op(C_IALLREDUCE, sbuf, rbuf, count, dt, op, -1, comm, &why);
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Allreduce)(sbuf, rbuf, count, dt, op, comm, info, req);
}

API int PCOLL(Allreduce)(const void *sbuf, void *rbuf, int count,
                         MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                         MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_allreduce(sbuf, rbuf, count, dt, op, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_reduce(const void *sbuf, void *rbuf, int count,
                               MPI_Datatype dt, MPI_Op op, int root,
                               MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o = root >= 0 ? nb_reduce_op(C_IREDUCE, sbuf, rbuf, count, dt, op,
                                          root, comm, &why)
                           : NULL;
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Reduce)(sbuf, rbuf, count, dt, op, root, comm, info, req);
}

API int PCOLL(Reduce)(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, MPI_Info info,
                      MPI_Request *req)
{
    smpi_lock();
    int rc =
        nb_api_pcoll_reduce(sbuf, rbuf, count, dt, op, root, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_bcast(void *buf, int count, MPI_Datatype dt, int root,
                              MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_bcast_op(buf, count, dt, root, comm, &why);
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Bcast)(buf, count, dt, root, comm, info, req);
}

API int PCOLL(Bcast)(void *buf, int count, MPI_Datatype dt, int root,
                     MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_bcast(buf, count, dt, root, comm, info, req);
    smpi_unlock();
    return rc;
}

static int nb_api_pcoll_barrier(MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    int why;
    nb_op_t *o = nb_barrier_op(comm, &why);
    if (o != NULL) {
        return nb_persist(o, req);
    }
    return PPCOLL(Barrier)(comm, info, req);
}

API int PCOLL(Barrier)(MPI_Comm comm, MPI_Info info, MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_pcoll_barrier(comm, info, req);
    smpi_unlock();
    return rc;
}
#endif

static int nb_api_start(MPI_Request *req)
{
    nb_op_t *o = nb_find(*req);
    if (o == NULL || !o->persistent) {
        return PMPI_Start(req);
    }
    if (o->active) {
        return MPI_ERR_REQUEST; /* started twice */
    }
    nb_start(o);
    return MPI_SUCCESS;
}

API int MPI_Start(MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_start(req);
    smpi_unlock();
    return rc;
}

static int nb_api_startall(int n, MPI_Request reqs[])
{
    for (int i = 0; i < n; i++) {
        int rc = MPI_Start(&reqs[i]);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
    }
    return MPI_SUCCESS;
}

API int MPI_Startall(int n, MPI_Request reqs[])
{
    smpi_lock();
    int rc = nb_api_startall(n, reqs);
    smpi_unlock();
    return rc;
}

/* Completion ------------------------------------------------------------------
 *
 * Every call progresses sharp first.  In the array handed to PMPI, the
 * handle of an active persistent operation of ours is replaced by its
 * activation's generalized request; after the call the handle is put back
 * (and the operation inactive if MPI completed the activation). */

typedef struct {
    int n;
    MPI_Request *sub;
    nb_op_t **ops; /* [n] ours (persistent and active) or NULL */
    int ours;      /* active operations of ours in the array */
    int others;    /* active requests not ours */
    MPI_Request one;
    nb_op_t *one_op;
} nb_set_t;

static int nb_set_make(nb_set_t *s, int n, MPI_Request reqs[])
{
    s->n = n;
    s->ours = s->others = 0;
    if (n <= 1) {
        s->sub = &s->one;
        s->ops = &s->one_op;
    } else {
        s->sub = malloc(sizeof(MPI_Request) * (size_t)n);
        s->ops = malloc(sizeof(nb_op_t *) * (size_t)n);
        if (s->sub == NULL || s->ops == NULL) {
            free(s->sub);
            free(s->ops);
            return MPI_ERR_NO_MEM;
        }
    }
    for (int i = 0; i < n; i++) {
        nb_op_t *o = nb_find(reqs[i]);
        s->sub[i] = reqs[i];
        s->ops[i] = NULL;
        if (o == NULL) {
            s->others += reqs[i] != MPI_REQUEST_NULL;
            continue;
        }
        if (o->active) {
            s->ours++;
        }
        if (o->persistent && o->active) {
            s->sub[i] = o->greq;
            s->ops[i] = o;
        }
    }
    return MPI_SUCCESS;
}

/* the handles back; an activation that MPI freed: the operation inactive */
static void nb_set_done(nb_set_t *s, MPI_Request reqs[])
{
    for (int i = 0; i < s->n; i++) {
        if (s->ops[i] == NULL) {
            reqs[i] = s->sub[i];
            continue;
        }
        if (s->sub[i] == MPI_REQUEST_NULL) {
            s->ops[i]->active = 0;
        }
        reqs[i] = s->ops[i]->handle;
    }
    if (s->sub != &s->one) {
        free(s->sub);
        free(s->ops);
    }
}

/* Every request of the set at once, ours done (to MPI: their generalized
 * requests complete): MPI's requests first, in an array of their own
 * (test: only if all of them are complete), then ours.  MPICH 4.0.2's
 * MPI_Testall fails with MPI_ERR_IN_STATUS on some arrays that mix
 * generalized requests with others, so they are never mixed. */
static int nb_set_all(nb_set_t *s, MPI_Request reqs[], int test, int *flag,
                      MPI_Status statuses[])
{
    int n = s->n, k = 0, rc;
    int ignore = statuses == MPI_STATUSES_IGNORE;
    MPI_Request *oth = malloc(sizeof(MPI_Request) * (size_t)n + 1);
    int *at = malloc(sizeof(int) * (size_t)n + 1);
    /* MPI_STATUSES_IGNORE is NULL in Open MPI: not a failed malloc */
    MPI_Status *st = ignore ? MPI_STATUSES_IGNORE
                            : malloc(sizeof(MPI_Status) * (size_t)n + 1);
    if (oth == NULL || at == NULL || (!ignore && st == NULL)) {
        free(oth);
        free(at);
        if (!ignore) {
            free(st);
        }
        return MPI_ERR_NO_MEM;
    }
    for (int i = 0; i < n; i++) {
        nb_op_t *o = nb_find(reqs[i]);
        if (o == NULL || !o->active) {
            at[k] = i;
            oth[k++] = s->sub[i];
        }
    }
    if (test) {
        rc = PMPI_Testall(k, oth, flag, st);
    } else {
        int depth = smpi_release(); /* MPI's own wait */
        rc = PMPI_Waitall(k, oth, st);
        smpi_regain(depth);
        *flag = 1;
    }
    if (rc == MPI_SUCCESS && *flag) {
        for (int j = 0; j < k; j++) {
            s->sub[at[j]] = oth[j];
            if (!ignore) {
                statuses[at[j]] = st[j];
            }
        }
        for (int i = 0; i < n; i++) {
            nb_op_t *o = nb_find(reqs[i]);
            if (o != NULL && o->active) {
                PMPI_Wait(&s->sub[i],
                          ignore ? MPI_STATUS_IGNORE : &statuses[i]);
            }
        }
    }
    free(oth);
    free(at);
    if (!ignore) {
        free(st);
    }
    return rc;
}

/* operations of ours in the set whose sharp part is not done */
static int nb_set_pending(const nb_set_t *s, MPI_Request reqs[])
{
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        nb_op_t *o = nb_find(reqs[i]);
        k += o != NULL && o->active && !o->done;
    }
    return k;
}

static int nb_any_active(void)
{
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if (o->active) {
            return 1;
        }
    }
    return 0;
}

/* an operation of ours, in any array or none, whose sharp part is not done:
 * it may need this process (its later fragments are posted as earlier ones
 * complete), and the other ranks may wait for it */
static int nb_sharp_busy(void)
{
    for (nb_op_t *o = nb_ops; o != NULL; o = o->next) {
        if (o->active && !o->done) {
            return 1;
        }
    }
    return 0;
}

/* The completion calls: one loop for all.  Each turn progresses sharp (an
 * operation whose sharp part is done gets its generalized request
 * completed), then asks MPI with the test form of the call on the array
 * (active persistent handles of ours replaced by their activations); a
 * wait repeats until that is satisfied.  While one of our operations is in
 * flight anywhere a wait never blocks inside MPI (the operation's later
 * fragments need this process, and the other ranks may wait for them), nor
 * inside sharp (MPI's own requests, in this array or not, progress only in
 * MPI calls, and the other ranks may wait for those): a turn of each, then
 * a short sleep.  With none of ours in flight the wait is MPI's own. */
enum { NB_ONE, NB_ALL, NB_ANY, NB_SOME };

/* the empty status (MPI 4.0, 3.7.3) */
static void nb_status_empty(MPI_Status *st)
{
    if (st == MPI_STATUS_IGNORE) {
        return;
    }
    st->MPI_SOURCE = MPI_ANY_SOURCE;
    st->MPI_TAG = MPI_ANY_TAG;
    st->MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
}

static int nb_complete(int form, int wait, int n, MPI_Request reqs[], int *flag,
                       int *index, int *outcount, int indices[],
                       MPI_Status *statuses)
{
    unsigned long moved = nb_moved;
    for (unsigned turn = 0;; turn++) {
        nb_set_t s;
        int rc, done = 0, f = 0;
        nb_progress_all();
        if (nb_moved != moved) {
            moved = nb_moved;
            turn = 0; /* a node step moved on: its next part is near */
        }
        int busy = nb_sharp_busy();
        rc = nb_set_make(&s, n, reqs);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        if (wait && !busy) {
            /* MPI's own wait: the layer's lock let go meanwhile */
            int depth = form == NB_ALL && s.ours != 0 ? 0 : smpi_release();
            switch (form) {
            case NB_ONE: rc = PMPI_Wait(s.sub, statuses); break;
            case NB_ALL:
                /* ours in the array are complete to MPI */
                rc = s.ours == 0 ? PMPI_Waitall(n, s.sub, statuses)
                                 : nb_set_all(&s, reqs, 0, &f, statuses);
                break;
            case NB_ANY: rc = PMPI_Waitany(n, s.sub, index, statuses); break;
            default: rc = PMPI_Waitsome(n, s.sub, outcount, indices, statuses);
            }
            smpi_regain(depth);
            nb_set_done(&s, reqs);
            return rc;
        }
        switch (form) {
        case NB_ONE: rc = PMPI_Test(s.sub, &f, statuses); break;
        case NB_ALL:
            /* all or nothing: while one of ours is not done, nothing
             * completes (MPICH 4.0.2's MPI_Testall fails with
             * MPI_ERR_IN_STATUS on some arrays that mix generalized
             * requests with others: they are never mixed) */
            if (s.ours == 0) {
                rc = PMPI_Testall(n, s.sub, &f, statuses);
            } else if (nb_set_pending(&s, reqs) == 0) {
                rc = nb_set_all(&s, reqs, 1, &f, statuses);
            } else {
                nb_poke_mpi();
            }
            break;
        case NB_ANY:
            rc = PMPI_Testany(n, s.sub, index, &f, statuses);
            if (rc == MPI_SUCCESS && f && *index == MPI_UNDEFINED) {
                /* nothing active: an empty status, which MPICH 4.0.2's
                 * MPI_Testany of more than one request does not write
                 * (its MPI_Waitany does) */
                nb_status_empty(statuses);
            }
            break;
        default:
            rc = PMPI_Testsome(n, s.sub, outcount, indices, statuses);
            f = *outcount != 0;
        }
        nb_set_done(&s, reqs);
        done = f;
        if (flag != NULL) {
            *flag = f;
        }
        if (rc != MPI_SUCCESS || done || !wait) {
            return rc;
        }
        /* nothing yet: let the others run (2 cores may hold many ranks) */
        nb_idle(turn);
    }
}

static int nb_api_test(MPI_Request *req, int *flag, MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Test(req, flag, status);
    }
    return nb_complete(NB_ONE, 0, 1, req, flag, NULL, NULL, NULL, status);
}

API int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_test(req, flag, status);
    smpi_unlock();
    return rc;
}

static int nb_api_testall(int n, MPI_Request reqs[], int *flag,
                          MPI_Status statuses[])
{
    if (!nb_any_active()) {
        return PMPI_Testall(n, reqs, flag, statuses);
    }
    return nb_complete(NB_ALL, 0, n, reqs, flag, NULL, NULL, NULL, statuses);
}

API int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
    smpi_lock();
    int rc = nb_api_testall(n, reqs, flag, statuses);
    smpi_unlock();
    return rc;
}

static int nb_api_testany(int n, MPI_Request reqs[], int *index, int *flag,
                          MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Testany(n, reqs, index, flag, status);
    }
    return nb_complete(NB_ANY, 0, n, reqs, flag, index, NULL, NULL, status);
}

API int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag,
                    MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_testany(n, reqs, index, flag, status);
    smpi_unlock();
    return rc;
}

static int nb_api_testsome(int n, MPI_Request reqs[], int *outcount,
                           int indices[], MPI_Status statuses[])
{
    if (!nb_any_active()) {
        return PMPI_Testsome(n, reqs, outcount, indices, statuses);
    }
    return nb_complete(NB_SOME, 0, n, reqs, NULL, NULL, outcount, indices,
                       statuses);
}

API int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                     MPI_Status statuses[])
{
    smpi_lock();
    int rc = nb_api_testsome(n, reqs, outcount, indices, statuses);
    smpi_unlock();
    return rc;
}

static int nb_api_request_get_status(MPI_Request req, int *flag,
                                     MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Request_get_status(req, flag, status);
    }
    nb_set_t s;
    nb_progress_all();
    int rc = nb_set_make(&s, 1, &req);
    if (rc == MPI_SUCCESS) {
        rc = PMPI_Request_get_status(s.sub[0], flag, status);
        nb_set_done(&s, &req);
    }
    return rc;
}

API int MPI_Request_get_status(MPI_Request req, int *flag, MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_request_get_status(req, flag, status);
    smpi_unlock();
    return rc;
}

API int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Wait(req, status);
    }
    int rc = nb_complete(NB_ONE, 1, 1, req, NULL, NULL, NULL, NULL, status);
    smpi_unlock();
    return rc;
}

API int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[])
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitall(n, reqs, statuses);
    }
    int rc = nb_complete(NB_ALL, 1, n, reqs, NULL, NULL, NULL, NULL, statuses);
    smpi_unlock();
    return rc;
}

API int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status)
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitany(n, reqs, index, status);
    }
    int rc = nb_complete(NB_ANY, 1, n, reqs, NULL, index, NULL, NULL, status);
    smpi_unlock();
    return rc;
}

API int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                     MPI_Status statuses[])
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    }
    int rc = nb_complete(NB_SOME, 1, n, reqs, NULL, NULL, outcount, indices,
                         statuses);
    smpi_unlock();
    return rc;
}

static int nb_api_request_free(MPI_Request *req)
{
    nb_op_t *o = nb_find(*req);
    if (o == NULL) {
        return PMPI_Request_free(req);
    }
    if (o->persistent) {
        /* MPI lets an active one be freed; it must still complete (its
         * buffers are the program's): wait for it now */
        if (o->active) {
            for (unsigned turn = 0; !o->done; turn++) {
                if (!nb_poll(o, 0)) {
                    nb_progress_all();
                    nb_poke_mpi();
                    nb_idle(turn);
                }
            }
            if (o->greq != MPI_REQUEST_NULL) {
                PMPI_Request_free(&o->greq); /* nb_free: inactive */
            }
        }
        PMPI_Request_free(&o->handle);
        nb_release(o);
    } else if (o->done) {
        PMPI_Request_free(&o->greq); /* nb_free releases o */
    } else {
        o->user_freed = 1; /* released when sharp's part completes */
    }
    *req = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

API int MPI_Request_free(MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_request_free(req);
    smpi_unlock();
    return rc;
}
