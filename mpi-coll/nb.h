/*
 * libsharp_mpi internals: the non-blocking engine's operation and its
 * steps, shared by the files of the non-blocking and persistent forms.
 * Bottom to top: node_xchg.c (the node step's exchange: on shared memory
 * or on PMPI), op.c (the operation, its queue, post, delivery, redo and
 * recovery; the node step's arrival), node_step.c (the rest of the node
 * step), progress.c (starting, progress, drain), then nb_coll.c (the
 * MPI_I* and persistent entry points) and request.c (the completion
 * calls).  Hidden, as everything in sharp_mpi_int.h.
 */
#ifndef SMPI_NB_H
#define SMPI_NB_H

#include "mpi-coll/sharp_mpi_int.h"

#include <uthash.h>

#pragma GCC visibility push(hidden)

typedef struct nb_op {
    int kind;  /* the engine's: C_IALLREDUCE ... */
    int ckind; /* the call's, counted and named: C_ALLREDUCE ... C_IBCAST */
    /* a blocking call's (on its caller's stack, no generalized request:
     * smpi_nb_run); waiter: its thread waits for its sharp part or its
     * node step with the layer's lock let go, and nobody else touches it
     * meanwhile */
    int blocking, waiter;
    comm_state_t *st;
    unsigned long seq; /* the activation's place in the communicator's
                          calls (comm_state_t seq) */
    MPI_Comm comm;
    /* the arguments, kept for a persistent operation's every start */
    const void *sbuf;
    void *rbuf;
    int count, root, sop, keep;
    MPI_Datatype dt; /* own_dt: the operation's duplicate of the program's */
    int own_dt;
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
    /* several ranks per node (the communicator's hier): the node step
     * (its exchange on shared memory, or on PMPI: node_mpi), one at a time
     * per communicator (always queued).
     * nphase 0: not begun; 1: arrived (the leader waits for the node's
     * other ranks, they for its publication); 2: the leader's sharp part
     * in flight; 3: the leader's publication on PMPI in flight.  nsrc:
     * what this rank gave (a bcast's data at its root); nin: the leader's
     * input to sharp (the node's fold; every
     * contribution, for an exact sum; a bcast's data from a root in its
     * node) */
    int node, nphase;
    int node_mpi; /* the node step's exchange on PMPI (node_xchg.c) */
    int xwait;    /* the head, queued until the exchange is idle */
    const char *nsrc;
    char *nin;
    /* persistent: the program's handle; freed while active */
    int persistent, user_freed;
    MPI_Request handle;
    struct nb_op *next, **prev;
    /* the request the program holds (persistent: handle; else greq) in
     * the table smpi_nb_find looks it up in (keyed: in it) */
    MPI_Request key;
    int keyed;
    UT_hash_handle hh;
} nb_op_t;

/* The codes a node step's leader publishes with its result (node_step.c) */
enum {
    NODE_OK,   /* the result */
    NODE_FELL, /* the result, fetched in a recovery: later ones on PMPI */
    NODE_REDO  /* this one and the later ones on PMPI (every rank) */
};

/* every live operation (op.c) */
extern nb_op_t *smpi_nb_ops;
/* node steps that moved on (node_step.c): a wait that sees the count
 * change starts its idle backoff afresh */
extern unsigned long smpi_nb_moved;

/* The operation (op.c) */
void smpi_nb_unlink(nb_op_t *o); /* unlinked, its buffers freed */
/* the live operation of a request (a program's handle), or NULL: a
 * look-up in a table, whatever the number in flight */
nb_op_t *smpi_nb_find(MPI_Request r);
/* o's request (r: its generalized request, or a persistent one's handle)
 * into that table, and out of it (smpi_nb_unlink does) */
void smpi_nb_key(nb_op_t *o, MPI_Request r);
void smpi_nb_unkey(nb_op_t *o);
void smpi_nb_release(nb_op_t *o); /* unlinked and freed */
/* s let go by its communicator (comm.c) or by a persistent operation made
 * on it: freed, with an orphan's private duplicate, when nothing holds it */
void smpi_comm_unref(comm_state_t *s);
/* o the only operation in flight (a persistent one not started is not) */
int smpi_nb_alone(const nb_op_t *o);
/* its generalized request's callbacks (MPI_Grequest_start) */
int smpi_nb_query(void *extra, MPI_Status *status);
int smpi_nb_free(void *extra);
int smpi_nb_cancel(void *extra, int complete);
/* the call's name, for messages */
static inline const char *smpi_nb_name(const nb_op_t *o)
{
    return smpi_coll_names[o->ckind];
}
/* sharp's part posted (dst: the record's buffer with recovery, else NULL) */
int smpi_nb_post(nb_op_t *o, void *dst, int as_allreduce);
/* the program's buffers from a result at res */
void smpi_nb_deliver(nb_op_t *o, const char *res);
/* MPI's request of the activation completed (o may be gone) */
void smpi_nb_complete_greq(nb_op_t *o);
/* the head of its communicator's queue is done: the next one goes (o may
 * be gone) */
void smpi_nb_dequeue(nb_op_t *o);
/* the operation on PMPI, on the communicator's private duplicate */
void smpi_nb_redo(nb_op_t *o);
void *smpi_rec_begin(comm_state_t *st, const nb_op_t *o, int *oom);
/* the communicator falls back (fetched: the last operation completed
 * somewhere, or NULL) */
void smpi_nb_fall(comm_state_t *st, const nb_op_t *fetched);
/* the group failed at o (rc): recovered, o delivered or redone */
void smpi_nb_recover(nb_op_t *o, int rc);
/* the head of st's queue posted (through sharp, on PMPI, or its node
 * step's arrival) */
void smpi_nb_kick(comm_state_t *st);

/* The node step's pieces (op.c: its arrival; node_step.c: the rest;
 * node_xchg.c: its exchange, below) */
char *smpi_node_pr(nb_op_t *o);
void smpi_node_arrive(nb_op_t *o);
/* the leader's sharp part ended (rc) */
void smpi_node_finish(nb_op_t *o, int rc);
/* a node step's turn of progress (nphase 1 or 3): 1 if o completed */
int smpi_node_poll(nb_op_t *o);

/* The node step's exchange (node_xchg.c): on shared memory, or on PMPI
 * (o->node_mpi).  Errors on shared memory abort the job naming the rank
 * (smpi_node_check); on PMPI they are MPI's. */
/* the data a node step carries (0: a barrier) */
size_t smpi_node_len(const nb_op_t *o);
/* a shared-memory step's status: an error aborts the job, naming the rank */
void smpi_node_check(nb_op_t *o, shp_status_t s);
/* bytes fit the communicator's shared-memory slot (else: PMPI) */
int smpi_xchg_fits(const comm_state_t *st, size_t bytes);
void smpi_xchg_arrive(nb_op_t *o, const char *src, size_t len);
/* the communicator's PMPI exchange has nothing in flight (a redo may leave
 * a step's requests behind: every rank of the node posted them) */
int smpi_xchg_idle(comm_state_t *st);
shp_status_t smpi_xchg_test_in(nb_op_t *o); /* the leader: all arrived */
/* the leader: node rank k's contribution; every one, in node-rank order,
 * into dst (node ranks x bytes) */
const char *smpi_xchg_src(nb_op_t *o, int k);
void smpi_xchg_copy_all(nb_op_t *o, char *dst);
void smpi_xchg_fold(nb_op_t *o, size_t count, void *dst);
/* where a published result is: the leader's to publish from, the others'
 * to read after it (until their next arrival) */
char *smpi_xchg_result_area(nb_op_t *o);
void smpi_xchg_publish(nb_op_t *o, const char *res, size_t len, int code);
shp_status_t smpi_xchg_published(nb_op_t *o);
shp_status_t smpi_xchg_test_out(nb_op_t *o, void *buf, size_t len, int *code);

/* Starting and progress (progress.c) */
void smpi_nb_link(nb_op_t *o); /* a new operation, live */
void smpi_nb_start(nb_op_t *o);
/* a blocking call: o (on the caller's stack) linked, started and waited
 * for, as MPI_Wait would, then unlinked: its result in place, or redone
 * on PMPI (every rank) */
void smpi_nb_run(nb_op_t *o);
/* MPI_Wait or MPI_Waitall of reqs[n]: an operation of ours pending there
 * (the first in sharp, else the first; from *from on, which it moves past
 * the entries done or not ours, so a long array is looked through once)
 * waited for as smpi_nb_run waits,
 * if it is alone in flight, or if every other operation in flight needs
 * nothing of this process meanwhile (single-threaded programs: their
 * sharp parts wholly libsharp's, or queued behind it); 1 if it waited, 0
 * if not (poll) */
int smpi_nb_wait_first(int n, MPI_Request reqs[], int *from);
/* operations whose MPI request completed so far (a wait that saw no
 * change need not look through its array again) */
extern unsigned long smpi_nb_completed;
/* 1 if o's part is done (sharp's or PMPI's); block: wait for it */
int smpi_nb_poll(nb_op_t *o, int block);
void smpi_nb_progress_all(void);
void smpi_nb_poke_mpi(void);
/* a wait's turn that found nothing: the core yielded or a sleep (on the
 * node's segment if own, the caller's operation, waits for a node step) */
void smpi_nb_idle(unsigned turn, nb_op_t *own);

#pragma GCC visibility pop

#endif
