/*
 * libsharp_mpi: starting non-blocking operations and progressing them.
 *
 * An activation starts (smpi_nb_start: its generalized request made, into
 * its communicator's queue or posted at once); each turn of progress
 * (smpi_nb_progress_all, from every completion call, request.c) looks at
 * every operation in flight once: sharp's request tested, a PMPI redo
 * tested, a node step's phase advanced (node_step.c).  A wait's empty turn
 * yields, then sleeps in growing slices (on the node's segment when a node
 * step waits for the node's other ranks), the layer's lock let go.  Before
 * a blocking call on a communicator, before its group is left and at
 * MPI_Finalize, its operations in flight complete (smpi_nb_drain, which
 * comm.c and init.c call); while a group is made they progress
 * (smpi_nb_wait_req).  A communicator's queue has no bound: a post never
 * waits (a new group is tried only in a blocking call, which drains the
 * communicator's queue first: comm.c).
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include "core/time.h"
#include "mpi-coll/recover.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void nb_wait_hook(void);
static void nb_idle_turn(unsigned turn);
static void smpi_mpi_progress_begin(void);

/* With the first operation, what the layer below calls back: a
 * recovery's decision (smr_decide) lets the other groups' operations end
 * meanwhile. */
SMPI_HOT static void nb_register(void)
{
    static int done;
    if (!done) {
        smr_set_wait_hook(nb_wait_hook);
        done = 1;
    }
}

SMPI_HOT void smpi_nb_link(nb_op_t *o)
{
    nb_register();
    o->next = smpi_nb_ops;
    o->prev = &smpi_nb_ops;
    if (smpi_nb_ops != NULL) {
        smpi_nb_ops->prev = &o->next;
    }
    smpi_nb_ops = o;
}

SMPI_HOT void smpi_nb_start(nb_op_t *o)
{
    comm_state_t *st = o->st;
    o->seq = st->seq;
    o->done = 0;
    o->active = 1;
    /* the node step's exchange: on PMPI for data over the slot (every
     * rank decides alike; at each start: a new group agrees its slot) */
    o->node_mpi = o->node && !smpi_xchg_fits(st, o->bytes);
    if (!o->blocking) {
        PMPI_Grequest_start(smpi_nb_query, smpi_nb_free, smpi_nb_cancel, o,
                            &o->greq);
        if (!o->persistent) {
            smpi_nb_key(o, o->greq);
        }
    }
    o->rec = smpi_cfg.on_fault == SMPI_FALLBACK && st->recoverable;
    SMPI_ADD(smpi.calls[o->ckind][0], 1);
    SMPI_ADD(smpi.bytes[o->ckind][0], o->bytes);
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
        smpi_nb_kick(st);
        if (o->node && o->nphase == 1 && st->node_rank == 0) {
            /* the node may be in already: the network's part now */
            smpi_node_poll(o);
        }
    } else {
        int rc = smpi_nb_post(o, NULL, 0);
        if (rc != SHARP_COLL_SUCCESS) {
            o->h = NULL;
            smpi_fail(o->comm, smpi_nb_name(o), rc);
        }
    }
    /* small sends leave at the library's next loop turn (they are
     * gathered and flushed before it sleeps): one turn now, so the
     * network works while the program computes (a blocking call's wait
     * turns it at once) */
    if (!o->blocking) {
        sharp_coll_progress(smpi.ctx);
    }
}

/* sharp's request is complete (status rc): the result into place, MPI's
 * request completed */
SMPI_HOT static void nb_finish(nb_op_t *o, int rc)
{
    o->h = NULL;
    if (o->node) {
        smpi_node_finish(o, rc);
        return;
    }
    if (o->rec) {
        comm_state_t *st = o->st;
        if (!o->ended) {
            smr_end(st->rec, rc == SHARP_COLL_SUCCESS, o->bytes);
        }
        o->ended = 0;
        if (rc != SHARP_COLL_SUCCESS) {
            smpi_nb_recover(o, rc);
            return;
        }
        if (o->kind == C_IBCAST && st->rank == o->root) {
            /* the root sent from its data: now the record's last result */
            memcpy(o->recbuf, o->direct != NULL ? o->direct : o->pr, o->bytes);
        }
        smpi_nb_deliver(o, o->recbuf);
        smpi_nb_dequeue(o);
        return;
    }
    o->ended = 0;
    if (rc != SHARP_COLL_SUCCESS) {
        smpi_fail(o->comm, smpi_nb_name(o), rc);
    }
    if (o->kind == C_IBCAST && o->direct == NULL && o->st->rank != o->root) {
        smpi_pack_data(0, o->rbuf, o->count, o->dt, o->pr, (int)o->bytes,
                       o->comm);
    } else if ((o->kind == C_IALLREDUCE || o->kind == C_IREDUCE) &&
               o->m.packed && o->keep) {
        smpi_loc_unpack(o->pr, o->rbuf, o->n, &o->m);
    }
    smpi_nb_complete_greq(o);
}

/* 1 if o's part is done (sharp's or PMPI's); block: wait for it */
int smpi_nb_poll(nb_op_t *o, int block)
{
    if (!o->active || o->done) {
        return 1;
    }
    if (o->waiter) {
        return 0; /* its own thread waits for it (nb_wait_sharp) */
    }
    if ((o->rec || o->node) && (o->queued || o->preq != MPI_REQUEST_NULL)) {
        if (o->xwait) {
            smpi_nb_kick(o->st); /* o is the head: its exchange idle yet? */
            return 0;
        }
        if (o->preq != MPI_REQUEST_NULL) {
            int flag = 0;
            PMPI_Test(&o->preq, &flag, MPI_STATUS_IGNORE);
            if (flag) {
                smpi_nb_dequeue(o); /* o may be gone */
                return 1;
            }
        }
        return 0; /* its turn comes with the others' (smpi_nb_drain) */
    }
    if (o->node && (o->nphase == 1 || o->nphase == 3)) {
        return smpi_node_poll(o);
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

/* A blocking call's wait ---------------------------------------------------
 *
 * The engine's loop, as MPI_Wait's (request.c): a turn of progress, of
 * MPI's own, then an idle turn.  But while the call's operation is the only
 * one in flight, it waits as the blocking collectives always did: in
 * sharp's own wait (spin, yield, sleep) for its sharp part, on the node's
 * segment (spin, yield, futex) for its node step.  The layer's lock is let
 * go meanwhile; a sharp part or node step so waited for is its thread's
 * alone (waiter: no other thread polls it), and a sharp part's record ends
 * before the lock is taken again, as a blocking call's always did (a
 * recovery elsewhere may be asking for it). */

/* o's sharp part waited for in sharp's wait, and finished */
static void nb_wait_sharp(nb_op_t *o)
{
    void *h = o->h;
    o->waiter = 1;
    int depth = smpi_release();
    int rc = sharp_coll_req_wait(h);
    if (o->rec) {
        smr_end(o->st->rec, rc == SHARP_COLL_SUCCESS, o->bytes);
    }
    smpi_regain(depth);
    o->waiter = 0;
    o->ended = o->rec; /* (its record ended) */
    nb_finish(o, rc);
}

/* o waiting for sharp or for its node, nothing of the engine's pending on
 * it: waited for as a blocking call waits (1), else 0.  The caller knows
 * that nothing else in flight needs this process meanwhile. */
SMPI_HOT static int nb_wait_in_place(nb_op_t *o)
{
    if (o->queued || o->ended || o->preq != MPI_REQUEST_NULL) {
        return 0;
    }
    if (o->h != NULL) {
        nb_wait_sharp(o);
        return 1;
    }
    if (o->node && o->nphase == 1 && !o->node_mpi) {
        o->waiter = 1; /* no other thread polls its step meanwhile */
        int depth = smpi_release();
        smn_nb_wait(o->st->nshm);
        smpi_regain(depth);
        o->waiter = 0;
        return 1;
    }
    return 0;
}

/* o alone in flight: waited for as a blocking call waits (1), else 0 */
SMPI_HOT static int nb_wait_alone(nb_op_t *o)
{
    return smpi_nb_alone(o) && nb_wait_in_place(o);
}

/* o's sharp part in flight, nothing of the engine's pending on it */
static int nb_in_sharp(const nb_op_t *o)
{
    return o->h != NULL && !o->queued && !o->ended &&
           o->preq == MPI_REQUEST_NULL;
}

/* every other operation in flight needs nothing of this process while o
 * is waited for in sharp's wait: its sharp part is wholly libsharp's
 * (which that wait progresses), or it is queued behind o (posted once o
 * ends) */
static int nb_others_need_nothing(const nb_op_t *o)
{
    for (const nb_op_t *x = smpi_nb_ops; x != NULL; x = x->next) {
        if (x == o || !x->active || x->done) {
            continue;
        }
        if (x->node || x->ended || x->preq != MPI_REQUEST_NULL ||
            !(x->queued ? x->st == o->st : x->h != NULL)) {
            return 0;
        }
    }
    return 1;
}

SMPI_HOT int smpi_nb_wait_first(int n, MPI_Request reqs[], int *from)
{
    nb_op_t *o = NULL; /* the first in sharp, else the first pending */
    int lead = 1;      /* every entry before i is done or not ours */
    for (int i = *from; i < n; i++) {
        nb_op_t *x = smpi_nb_find(reqs[i]);
        int pending = x != NULL && x->active && !x->done;
        if (lead && !pending) {
            *from = i + 1; /* (done stays done in this call) */
        }
        lead = lead && !pending;
        if (pending && (o == NULL || (!nb_in_sharp(o) && nb_in_sharp(x)))) {
            o = x;
            if (nb_in_sharp(x)) {
                break; /* the first in sharp */
            }
        }
    }
    if (o == NULL || (!smpi_nb_alone(o) && (smpi.threads || !nb_in_sharp(o) ||
                                            !nb_others_need_nothing(o)))) {
        return 0;
    }
    smpi_mpi_progress_begin();
    return nb_wait_in_place(o);
}

SMPI_HOT void smpi_nb_run(nb_op_t *o)
{
    smpi_mpi_progress_begin();
    o->blocking = 1;
    o->greq = o->handle = o->preq = MPI_REQUEST_NULL;
    smpi_nb_link(o);
    smpi_nb_start(o);
    if (o->ended && !o->node) {
        nb_finish(o, o->end_rc); /* sharp's blocking call made (op.c) */
    }
    unsigned long moved = smpi_nb_moved;
    for (unsigned turn = 0; !o->done; turn++) {
        int waited = nb_wait_alone(o);
        if (o->done) {
            break;
        }
        smpi_nb_progress_all();
        if (o->done) {
            break;
        }
        if (smpi_nb_moved != moved) {
            moved = smpi_nb_moved;
            turn = 0; /* a node step moved on: its next part is near */
        }
        if (!waited) {
            smpi_nb_poke_mpi();
            smpi_nb_idle(turn, o);
        }
    }
    if (o->st->use) {
        o->st->done_seq = o->seq;
    }
    smpi_nb_unlink(o);
}

/* while this process decides a group's recovery (smr_decide): the
 * operations of its other groups that ended meanwhile leave their records
 * (the members of those groups may be asking about them) */
static void nb_wait_hook(void)
{
    smpi_lock();
    for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
        if (o->rec && o->h != NULL && !o->ended && !o->waiter &&
            sharp_coll_req_test(o->h)) {
            o->end_rc = sharp_coll_req_wait(o->h);
            o->h = NULL;
            o->ended = 1;
            smr_end(o->st->rec, o->end_rc == SHARP_COLL_SUCCESS, o->bytes);
        }
    }
    smpi_unlock();
}

/* every operation in flight a turn of progress */
void smpi_nb_progress_all(void)
{
    nb_op_t *o, *next;
    for (o = smpi_nb_ops; o != NULL; o = next) {
        next = o->next; /* o may be released */
        smpi_nb_poll(o, 0);
    }
}

/* a turn of MPI's own progress that completes nothing of the program's */
void smpi_nb_poke_mpi(void)
{
    int flag = 0;
    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, smpi.oob_world, &flag,
                MPI_STATUS_IGNORE);
}

/* The same turn inside a wait: Open MPI's progress yields the core when it
 * found nothing to do (mpi_yield_when_idle, as jobs that share cores run),
 * and with 64 ranks on 2 cores a yield costs the rank about 3 ms before it
 * runs again, where its result may already wait; a turn without the yield
 * costs 16 us.  The switch is Open MPI's own flag (libopen-pal's
 * opal_progress_yield_when_idle), off for the turn: found at run time, and
 * without it (MPICH, whose progress does not yield) the turn is MPI's as
 * it is.  Threads that turn at once may leave the flag as another set it:
 * a yield more or less, nothing else. */
static void smpi_nb_poke_quiet(void)
{
    static bool *yield;
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&yield,
                         dlsym(RTLD_DEFAULT, "opal_progress_yield_when_idle"),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    bool *y = __atomic_load_n(&yield, __ATOMIC_RELAXED);
    bool was = y != NULL && __atomic_exchange_n(y, false, __ATOMIC_RELAXED);
    smpi_nb_poke_mpi();
    if (was) {
        __atomic_store_n(y, true, __ATOMIC_RELAXED);
    }
}

/* Called again and again while this thread waits inside sharp's wait or a
 * node step's.  The program's own requests progress only in MPI calls, and
 * another rank may wait for one before it joins the collective this one
 * waits in: rank 0 MPI_Isend's a large message to rank 1 and calls
 * MPI_Allreduce; rank 1 receives it, then calls MPI_Allreduce.  Over TCP
 * the send needs rank 0 to move it on, and rank 0 waits for rank 1: they
 * would wait for ever (as they do not under MPI's own collective, which
 * progresses everything).  So a blocking call's wait that lasts gives MPI a
 * turn, first once it has lasted four times as long as the longest wait of
 * this thread's recent calls that needed none (2 ms at least, 50 ms at
 * most), then after 1 ms, 2, 4 ... 32 ms, each without Open MPI's yield
 * (above).  Not sooner: a turn every 100 us of waiting made an 8-byte
 * allreduce at 8 ranks a third slower, and a first turn after 2 ms and one
 * every 1 ms after, each with its yield, made one at 64 ranks, whose calls
 * take 2-3 ms on 2 cores and often many more, two to three times slower
 * (docs/mpi.md).  0 (what sharp's progress_func returns; nobody reads
 * it). */
#define SMPI_POKE_MIN_NS 2000000u
#define SMPI_POKE_MAX_NS 50000000u
#define SMPI_POKE_NS 1000000u
#define SMPI_POKE_MAX_GAP_NS 32000000u
static __thread unsigned long smpi_calls; /* blocking calls begun here */

static void smpi_mpi_progress_begin(void)
{
    smpi_calls++;
}

/* the wait at which a call's first turn of MPI's comes: four times the
 * longest wait of the recent calls that needed none (a maximum that loses
 * 1/16 a call) */
static uint64_t smpi_poke_first(uint64_t *usual, uint64_t waited, int poked)
{
    if (!poked) {
        uint64_t decayed = *usual - *usual / 16;
        *usual = waited > decayed ? waited : decayed;
    }
    uint64_t first = *usual * 4;
    return first < SMPI_POKE_MIN_NS   ? SMPI_POKE_MIN_NS
           : first > SMPI_POKE_MAX_NS ? SMPI_POKE_MAX_NS
                                      : first;
}

int smpi_mpi_progress(void)
{
    static __thread unsigned long call;
    static __thread uint64_t begin_ns, last_ns, next_ns, gap_ns, usual_ns;
    uint64_t now = shp_time_ns();
    if (call != smpi_calls) { /* the first turn of this call's wait */
        uint64_t first =
            smpi_poke_first(&usual_ns, last_ns - begin_ns, gap_ns != 0);
        call = smpi_calls;
        begin_ns = now;
        next_ns = now + first;
        gap_ns = 0;
    } else if (now >= next_ns) {
        gap_ns = gap_ns == 0                     ? SMPI_POKE_NS
                 : gap_ns < SMPI_POKE_MAX_GAP_NS ? gap_ns * 2
                                                 : gap_ns;
        next_ns = now + gap_ns;
        smpi_nb_poke_quiet();
    }
    last_ns = now;
    return 0;
}

/* a node step that this rank waits for on its segment, if any: own's
 * (the caller's operation), or with one thread any operation's.  Found
 * under the layer's lock: another thread's operation may end and its
 * communicator go while this one sleeps, and the list changes meanwhile */
static smn_node_t *node_waiting(nb_op_t *own)
{
    for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
        if ((o == own || !smpi.threads) && o->node && !o->node_mpi &&
            o->nphase == 1 && o->active && !o->done) {
            return o->st->nshm;
        }
    }
    return NULL;
}

/* a wait's empty turn: the first 16 yield the core, then sleeps of 20 us,
 * doubling every 64 turns up to 1 ms (a long wait, on a machine that many
 * processes share, must not take the CPU the daemons and the other ranks
 * need: the network's keepalives and the operations waited for); while a
 * node step is awaited, asleep on the node's segment instead, woken by the
 * store of the rank (or the leader) this one waits for: the longest slice
 * at once (1 ms: MPI's own progress still has its turn that often).  The
 * layer's lock is let go meanwhile (MPI_THREAD_MULTIPLE). */
void smpi_nb_idle(unsigned turn, nb_op_t *own)
{
    smn_nb_await_t a;
    smn_node_t *nd = turn < 16 ? NULL : node_waiting(own);
    int node = nd != NULL && smn_nb_await(nd, &a);
    int depth = smpi_release();
    int slept = 0;
    if (node) {
        slept = smn_nb_sleep(&a, 1000000);
    } else {
        nb_idle_turn(turn);
    }
    smpi_regain(depth);
    if (slept) {
        smn_nb_slept(nd); /* nd's communicator is own's, or one thread's */
    }
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
    nanosleep(&ts, NULL);
}

/* some operation of s (s NULL: of any communicator) whose part is not
 * done */
static int nb_pending(comm_state_t *s, unsigned long unused)
{
    (void)unused;
    for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
        if ((s == NULL || o->st == s) && o->active && !o->done) {
            return 1;
        }
    }
    return 0;
}

/* both libraries progress, idle turns between, while busy(s, arg) */
static void nb_progress_while(int (*busy)(comm_state_t *, unsigned long),
                              comm_state_t *s, unsigned long arg)
{
    for (unsigned turn = 0; busy(s, arg); turn++) {
        smpi_nb_progress_all();
        if (!busy(s, arg)) {
            break;
        }
        smpi_nb_poke_mpi();
        smpi_nb_idle(turn, NULL);
    }
}

/* before a communicator's group goes (MPI_Comm_free, MPI_Finalize) or a
 * blocking call on it: its operations in flight complete first (s NULL:
 * every communicator's); both libraries progress meanwhile */
void smpi_nb_drain(comm_state_t *s)
{
    smpi_lock();
    nb_progress_while(nb_pending, s, 0);
    smpi_unlock();
}

/* An MPI request of the layer's own (the rendezvous that begins a
 * group's making) waited for while every operation in flight has its
 * turns: one of them may need this process before the others reach the
 * rendezvous (a node step's leader, a message's later fragments).  Called
 * without the layer's lock. */
void smpi_nb_wait_req(MPI_Request *r)
{
    int flag = 0;
    for (unsigned turn = 0;; turn++) {
        PMPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            return;
        }
        smpi_lock();
        smpi_nb_progress_all();
        smpi_nb_idle(turn, NULL); /* node_waiting reads the list */
        smpi_unlock();
    }
}
