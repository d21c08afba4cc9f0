/*
 * libsharp_mpi: the non-blocking operation (nb_op_t, nb.h), the engine of
 * the non-blocking and persistent collectives: its queue per
 * communicator, its post through sharp, the delivery of its result, its
 * redo on PMPI and its recovery.
 *
 * The request the program gets is a generalized request
 * (MPI_Grequest_start) that is completed (MPI_Grequest_complete) once
 * sharp's request is, so MPI's own MPI_Wait*, MPI_Test* and
 * MPI_Request_free take it with any other request (request.c).  Offloaded
 * exactly when the blocking call would be (same datatypes, ops, counts,
 * sizes: every rank decides alike; nb_coll.c).
 *
 * Progress: a message up to the OST quota is wholly sent when it goes to
 * sharp, so the network reduces it while the program computes; the result
 * is read at the next MPI_Wait* / MPI_Test* (or any call that progresses
 * sharp; progress.c).  With recovery (SHARP_MPI_ON_FAULT=fallback) a
 * communicator's operations go to sharp one at a time (a queue per
 * communicator), each received into the group's record, and a failed one
 * is recovered as a blocking one is (smpi_nb_recover: fetched from a
 * member, or redone on PMPI); without, they are pipelined and a failure
 * aborts (smpi_fail()).  After a failure the queue takes the later ones
 * too, done on PMPI in order on the communicator's private duplicate.
 *
 * With node-local aggregation (several ranks per node, hier) an operation
 * is one node step: its exchange on shared memory in its non-blocking form
 * (node_shm.h, smn_nb_*) for data up to the smallest slot of the
 * communicator's nodes where every node has its segment (nb_slot, agreed
 * when the group is made), else on PMPI (node_xchg.c): at the head of the
 * queue each rank arrives with its contribution (smpi_node_arrive, here)
 * and goes on; the rest of the step is node_step.c's.
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include "mpi-coll/recover.h"

#include <stdlib.h>
#include <string.h>

nb_op_t *smpi_nb_ops; /* every live operation */

/* the operations by the request the program holds */
static nb_op_t *nb_by_req;

void smpi_nb_key(nb_op_t *o, MPI_Request r)
{
    nb_op_t *old = smpi_nb_find(r);
    if (old != NULL) { /* (a handle MPI gave again: the old one is gone) */
        HASH_DEL(nb_by_req, old);
        old->keyed = 0;
    }
    o->key = r;
    o->keyed = 1;
    HASH_ADD(hh, nb_by_req, key, sizeof(MPI_Request), o);
}

void smpi_nb_unkey(nb_op_t *o)
{
    if (o->keyed) {
        HASH_DEL(nb_by_req, o);
        o->keyed = 0;
    }
}

nb_op_t *smpi_nb_find(MPI_Request r)
{
    nb_op_t *o = NULL;
    if (r == MPI_REQUEST_NULL) {
        return NULL;
    }
    HASH_FIND(hh, nb_by_req, &r, sizeof(MPI_Request), o);
    return o;
}

SMPI_HOT void smpi_nb_unlink(nb_op_t *o)
{
    smpi_nb_unkey(o);
    *o->prev = o->next;
    if (o->next != NULL) {
        o->next->prev = o->prev;
    }
    free(o->ps);
    free(o->pr);
    free(o->nin);
    o->ps = o->pr = o->nin = NULL;
}

void smpi_comm_unref(comm_state_t *s)
{
    smpi_lock();
    int last = --s->refs == 0;
    smpi_unlock();
    if (!last) {
        return;
    }
    if (s->orphan && s->all != MPI_COMM_NULL) {
        PMPI_Comm_free(&s->all); /* a local free in both MPIs */
    }
    free(s);
}

void smpi_nb_release(nb_op_t *o)
{
    smpi_nb_unlink(o);
    if (o->own_dt) {
        PMPI_Type_free(&o->dt); /* the operation's duplicate (nb_coll.c) */
    }
    if (o->persistent) {
        smpi_comm_unref(o->st);
    }
    free(o);
}

SMPI_HOT int smpi_nb_alone(const nb_op_t *o)
{
    for (const nb_op_t *x = smpi_nb_ops; x != NULL; x = x->next) {
        if (x != o && x->active && !x->done) {
            return 0;
        }
    }
    return 1;
}

/* Generalized request callbacks -------------------------------------------- */

int smpi_nb_query(void *extra, MPI_Status *status)
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
 * MPI_Request_free after completion): always inside a call of the layer's
 * that holds its lock (request.c never lets the lock go around an MPI call
 * whose array holds one of ours), so the shared list and table are
 * touched under it */
int smpi_nb_free(void *extra)
{
    nb_op_t *o = extra;
    o->greq = MPI_REQUEST_NULL;
    o->active = 0;
    if (!o->persistent) {
        smpi_nb_release(o);
    }
    return MPI_SUCCESS;
}

int smpi_nb_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS; /* a collective cannot be cancelled */
}

/* Starting and finishing ---------------------------------------------------- */

/* A blocking call alone in flight in a single-threaded program makes
 * sharp's blocking call, as it always did: its part ends here (ended,
 * end_rc: finished at the next look, smpi_nb_poll), no request made or
 * waited for.  0: it is not such a call (the non-blocking form, then). */
SMPI_HOT static int nb_post_blocking(nb_op_t *o, int rc)
{
    o->h = NULL;
    if (rc == SHARP_COLL_SUCCESS) {
        if (o->rec) { /* (a failure's is its caller's) */
            smr_end(o->st->rec, 1, o->bytes);
        }
        o->ended = 1;
        o->end_rc = rc;
    }
    return rc;
}

SMPI_HOT static int nb_blocking(const nb_op_t *o)
{
    return o->blocking && !smpi.threads && smpi_nb_alone(o);
}

SMPI_HOT static int nb_post_bcast(nb_op_t *o, struct sharp_coll_bcast_spec *bs,
                                  int blk)
{
    if (blk) {
        return nb_post_blocking(o, sharp_coll_do_bcast(o->st->sc, bs));
    }
    return sharp_coll_do_bcast_nb(o->st->sc, bs, &o->h);
}

SMPI_HOT static int nb_post_reduce(nb_op_t *o,
                                   struct sharp_coll_reduce_spec *spec, int all,
                                   int blk)
{
    struct sharp_coll_comm *sc = o->st->sc;
    if (blk) {
        return nb_post_blocking(o, all ? sharp_coll_do_allreduce(sc, spec)
                                       : sharp_coll_do_reduce(sc, spec));
    }
    return all ? sharp_coll_do_allreduce_nb(sc, spec, &o->h)
               : sharp_coll_do_reduce_nb(sc, spec, &o->h);
}

/* sharp's part posted; dst: where a reduction's result goes (the record's
 * buffer with recovery, which every member receives, a reduce's non-roots
 * too), bsrc/bdst: a bcast's buffers */
SMPI_HOT int smpi_nb_post(nb_op_t *o, void *dst, int as_allreduce)
{
    comm_state_t *st = o->st;
    int blk = nb_blocking(o);
    if (o->kind == C_IBARRIER) {
        if (blk) {
            return nb_post_blocking(o, sharp_coll_do_barrier(st->sc));
        }
        return sharp_coll_do_barrier_nb(st->sc, &o->h);
    }
    if (o->kind == C_IBCAST) {
        struct sharp_coll_bcast_spec bs;
        char *p = o->direct;
        if (p == NULL) {
            if (o->pr == NULL) {
                o->pr = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
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
        return nb_post_bcast(o, &bs, blk);
    }
    struct sharp_coll_reduce_spec spec;
    const void *src = o->sbuf == MPI_IN_PLACE ? o->rbuf : o->sbuf;
    if (o->m.packed) {
        if (o->ps == NULL) {
            o->ps = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
        }
        smpi_loc_pack(src, o->ps, o->n, &o->m);
        src = o->ps;
        if (dst == NULL && o->keep) {
            if (o->pr == NULL) {
                o->pr = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
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
    return nb_post_reduce(o, &spec, o->kind == C_IALLREDUCE || as_allreduce,
                          blk);
}

/* the program's buffers from a result of res (the record's buffer, or the
 * one fetched from another member) */
SMPI_HOT void smpi_nb_deliver(nb_op_t *o, const char *res)
{
    if (o->kind == C_IBCAST) {
        if (o->st->rank == o->root) {
            return;
        }
        SMPI_ADD(smpi.delivered, o->bytes);
        if (o->direct != NULL) {
            memcpy(o->direct, res, o->bytes);
        } else {
            smpi_pack_data(0, o->rbuf, o->count, o->dt, (void *)res,
                           (int)o->bytes, o->comm);
        }
    } else if ((o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) && o->keep) {
        SMPI_ADD(smpi.delivered, o->bytes);
        if (o->m.packed) {
            smpi_loc_unpack(res, o->rbuf, o->n, &o->m);
        } else {
            memcpy(o->rbuf, res, o->bytes);
        }
    }
}

/* MPI's request of the activation completed (the result in place) */
unsigned long smpi_nb_completed;

SMPI_HOT void smpi_nb_complete_greq(nb_op_t *o)
{
    o->done = 1;
    smpi_nb_completed++;
    if (o->blocking) {
        return; /* no request: its caller sees done */
    }
    if (o->user_freed) {
        /* MPI_Request_free came first: MPI may free it now (a copy of the
         * handle: MPI writes MPI_REQUEST_NULL into it after the free
         * callback released o) */
        MPI_Request r = o->greq;
        int persistent = o->persistent;
        PMPI_Grequest_complete(r);
        PMPI_Request_free(&r); /* smpi_nb_free: o gone, or inactive */
        if (persistent) {
            MPI_Request h = o->handle;
            PMPI_Request_free(&h);
            smpi_nb_release(o);
        }
        return;
    }
    PMPI_Grequest_complete(o->greq);
}

/* the head of its communicator's queue is done: the next one goes */
SMPI_HOT void smpi_nb_dequeue(nb_op_t *o)
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
    smpi_nb_complete_greq(o); /* o may be gone */
    smpi_nb_kick(st);
}

/* the operation on PMPI, on the communicator's private duplicate (every
 * rank does the same operations there in the same order: those from the
 * failed one on), non-blocking so that this process waits nowhere */
void smpi_nb_redo(nb_op_t *o)
{
    comm_state_t *st = o->st;
    MPI_Comm c = st->all;
    int rc = MPI_SUCCESS, done = 0;
    SMPI_ADD(smpi.redone, 1);
    /* counted as offloaded when it started: it went to MPI */
    SMPI_SUB(smpi.calls[o->ckind][0], 1);
    SMPI_SUB(smpi.bytes[o->ckind][0], o->bytes);
    int red = o->kind == C_IALLREDUCE || o->kind == C_IREDUCE;
    smpi_fallback(o->ckind, (long)o->bytes, o->comm,
                  st->orphan ? WHY_COMM_FREED : WHY_FELL,
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
        smpi_nb_dequeue(o);
    }
}

/* the group failed at o (or before it was posted): where the group's
 * operations end, decided with the other members (docs/mpi.md, failure
 * protocol): o's result fetched from a member that has it, or o and every
 * later operation on PMPI */
void smpi_nb_fall(comm_state_t *st, const nb_op_t *fetched)
{
    if (fetched != NULL) {
        /* the last one completed somewhere; the next one meets the
         * group's end (as a blocking call does): the standby group
         * carries it, or it goes to PMPI */
        if (st->use) {
            st->done_seq = fetched->seq;
        }
        return;
    }
    /* the policy of every form: the operations queued stay the layer's,
     * done on PMPI in order, and the later calls go to PMPI until the
     * communicator's turn to try a new group */
    smpi_comm_fall(st);
}

void smpi_nb_recover(nb_op_t *o, int rc)
{
    comm_state_t *st = o->st;
    int fetched =
        smpi_recover_op(st, o->comm, smpi_nb_name(o), o->bytes, rc, 1);
    if (fetched) {
        smpi_nb_fall(st, o);
        smpi_nb_deliver(o, smr_result(st->rec));
        smpi_nb_dequeue(o);
        return;
    }
    if (smpi_comm_failover(st, o->seq)) { /* o, again, on the standby group */
        o->queued = 1;
        smpi_nb_kick(st);
        return;
    }
    smpi_nb_fall(st, NULL);
    smpi_nb_redo(o);
}

/* The node step's arrival ------------------------------------------------- */

char *smpi_node_pr(nb_op_t *o)
{
    if (o->pr == NULL) {
        o->pr = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
    }
    return o->pr;
}

/* a reduction's data in the wire's layout */
static const char *node_red_src(nb_op_t *o)
{
    const void *src = o->sbuf == MPI_IN_PLACE ? o->rbuf : o->sbuf;
    if (o->m.packed) {
        if (o->ps == NULL) {
            o->ps = smpi_xmalloc(o->bytes, o->comm, smpi_nb_name(o));
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
    smpi_pack_data(1, o->rbuf, o->count, o->dt, smpi_node_pr(o), (int)o->bytes,
                   o->comm);
    return o->pr;
}

/* the head of the queue begins: this rank's contribution, without waiting */
void smpi_node_arrive(nb_op_t *o)
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
    if (o->node_mpi) {
        SMPI_ADD(smpi.node_mpi_steps, 1);
    } else {
        SMPI_ADD(smpi.node_shm_steps, 1);
    }
    smpi_xchg_arrive(o, src, len);
    o->nphase = 1;
}

/* the record's buffer for o's result (NULL: the group is gone or a member
 * asked; *oom: out of memory): one of its window slots for a bcast the
 * group may complete at members apart, else its buffer (recover.h) */
void *smpi_rec_begin(comm_state_t *st, const nb_op_t *o, int *oom)
{
    size_t most = 0;
    unsigned apart = 0;
    *oom = 0;
    if (st->sc == NULL) {
        return NULL;
    }
    if (o->kind == C_IBCAST && o->bytes > 0 &&
        sharp_coll_comm_window(st->sc, &most, &apart) == SHARP_COLL_SUCCESS &&
        o->bytes <= most) {
        return smr_begin_win(st->rec, o->bytes, oom);
    }
    return smr_begin(st->rec, o->bytes, oom);
}

/* the head of st's queue posted (through sharp, or on PMPI) */
SMPI_HOT void smpi_nb_kick(comm_state_t *st)
{
    nb_op_t *o = st->nbq_head;
    if (o == NULL || !o->queued) {
        return;
    }
    /* a step a redo left on PMPI still in flight: this one waits, queued,
     * and its poll kicks again (never a wait for the node's other ranks
     * here: a post may call this) */
    o->xwait = st->use && o->node && o->node_mpi && !smpi_xchg_idle(st);
    if (o->xwait) {
        return;
    }
    o->queued = 0;
    if (!st->use) { /* the group failed at or before this one: PMPI */
        smpi_nb_redo(o);
        return;
    }
    if (o->node) {
        smpi_node_arrive(o);
        return;
    }
    int oom = 0;
    o->recbuf = smpi_rec_begin(st, o, &oom);
    if (oom) {
        smpi_fail(o->comm, smpi_nb_name(o), SHARP_COLL_ENOMEM);
    }
    if (o->recbuf == NULL) {
        smpi_nb_recover(o, SHARP_COLL_ERROR); /* a member asked: frozen */
        return;
    }
    int rc = smpi_nb_post(o, o->recbuf, 1);
    if (rc != SHARP_COLL_SUCCESS) {
        o->h = NULL;
        smr_end(st->rec, 0, o->bytes);
        smpi_nb_recover(o, rc);
    }
}
