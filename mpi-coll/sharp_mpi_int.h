/*
 * libsharp_mpi internals: what its files share.  Bottom to top (a file
 * calls only files below it; mpi-coll/README.md says what each is for):
 *
 *   settings.c, lock.c, why.c      settings, state, notes; the lock; why a
 *                                  call went to MPI
 *   dtype.c, fall.c                datatypes and eligibility; the fall-back
 *                                  policy and recovery of an operation
 *   op.c, node_step.c, progress.c  the engine of every form (nb.h)
 *   comm.c                         communicators and their groups
 *   coll_*.c                       each collective's eligibility and
 *                                  arguments; its blocking call (coll.h)
 *   nb_coll.c, request.c, init.c   the non-blocking and persistent entry
 *                                  points; the completion calls; MPI_Init
 *                                  and MPI_Finalize
 *
 * All are built into one library per MPI (mpi-coll/module.mk); nothing
 * declared here is exported (only the MPI_* wrappers, marked API, are),
 * and every shared name carries smpi_ (recover.h's carry smr_, node_shm.h's
 * smn_).
 */
#ifndef SHARP_MPI_INT_H
#define SHARP_MPI_INT_H

#include <mpi.h>
#include <sharp/api/sharp.h>

#include "mpi-coll/node_shm.h"
#include "mpi-coll/recover.h"
#include "mpi-coll/settings.h"
#include "reduce/reduce.h"

#include <stddef.h>
#include <stdint.h>

#define API __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)

/* Settings (SHARP_MPI_*, read at MPI_Init): settings.h */
extern smpi_cfg_t smpi_cfg;
/* read from the environment (settings.c), at MPI_Init */
void smpi_cfg_load(void);

/* the collectives counted in the report ([0] offloaded, [1] fallen back) */
enum {
    C_ALLREDUCE,
    C_REDUCE,
    C_BARRIER,
    C_BCAST,
    /* non-blocking, and the starts of persistent ones (nb_coll.c) */
    C_IALLREDUCE,
    C_IREDUCE,
    C_IBARRIER,
    C_IBCAST,
    C_N
};
extern const char *const smpi_coll_names[C_N];

/* Why a call went to MPI (why.c; docs/mpi.md): one reason of this list
 * per call, each a row of why.c's table (name, meaning, remedy); WHY_,
 * not W_: <unistd.h> has W_OK */
enum {
    WHY_OK, /* offloaded */
    /* the job (MPI_Init) and libsharp_coll's status codes */
    WHY_DISABLED,
    WHY_THREAD_MULTIPLE,
    WHY_SHARPD,
    WHY_JOB_REFUSED,
    WHY_QUOTA,
    WHY_NO_RESOURCE,
    WHY_NO_TREE,
    WHY_GROUP_ALLOC,
    WHY_GROUP_JOIN,
    WHY_DEVICE,
    WHY_OOB,
    WHY_NOMEM,
    WHY_INVALID,
    WHY_NOT_SUPP,
    WHY_LOCK,
    WHY_SHARP_ERROR,
    /* a communicator */
    WHY_INTERCOMM,
    WHY_ONE_RANK,
    WHY_MIN_RANKS,
    WHY_ONE_NODE,
    WHY_FELL,
    WHY_NO_GROUP_YET,
    /* a call */
    WHY_KIND_OFF,
    WHY_COUNT_ZERO,
    WHY_USER_OP,
    WHY_DERIVED,
    WHY_DTYPE,
    WHY_OP_DTYPE,
    WHY_MAX_BYTES,
    WHY_OVER_2G,
    WHY_ARGS,
    WHY_PERSISTENT,
    WHY_COMM_FREED,
    WHY_N
};
_Static_assert(WHY_N <= 64, "a reason is a bit of a 64-bit mask");

/* libsharp_coll's status (SHARP_COLL_E*) as a reason */
int smpi_why_of_status(int rc);
const char *smpi_why_name(int why);
/* a call of kind went to MPI for why (bytes; dt, op: MPI_DATATYPE_NULL,
 * MPI_OP_NULL if none): counted, and noted once per communicator and
 * class (SHARP_MPI_VERBOSE >= 1) */
void smpi_why_call(int kind, long bytes, MPI_Comm comm, int why,
                   MPI_Datatype dt, MPI_Op op);
void smpi_why_init(void);   /* at MPI_Init, after the settings */
void smpi_why_fini(void);   /* at MPI_Finalize */
void smpi_why_report(void); /* the report's table (collective) */

/* the library's state */
typedef struct smpi_global {
    struct sharp_coll_context *ctx;
    int threads; /* MPI_THREAD_MULTIPLE: the layer's lock is taken (read
                    by every call: on the first line, with ctx) */
    MPI_Comm oob_world;
    int have_oob;
    int had_sharp;
    int init_why; /* no context: why (WHY_DISABLED, WHY_SHARPD, ...) */
    int keyval;
    int rank;
    /* [collective][0 offloaded, 1 fallen back]: calls and bytes */
    unsigned long long calls[C_N][2], bytes[C_N][2];
    /* recovery: every process's service (world ranks), and what it did */
    int svc;
    smr_addr_t *addrs;
    unsigned long long fallen, fetched, redone, regrouped, recovery_us_max;
    /* standby groups: failovers to one; communicators that got none; new
     * ones made after a failover */
    unsigned long long failovers, standbys_missing, standbys_remade;
    /* node-local steps: on shared memory, and on MPI (gather / bcast) */
    unsigned long long node_shm_steps, node_mpi_steps;
    /* result bytes smpi_nb_deliver copied from the recovery record into
     * the program's buffers (SHARP_MPI_VERBOSE=2 prints them) */
    unsigned long long delivered;
    /* communicators whose group was made with them and not used yet */
    int unused;
} smpi_global_t;

extern smpi_global_t smpi;

/* The counters above, from any thread */
#define SMPI_ADD(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_RELAXED)
/* the functions of an offloaded call: kept together (.text.hot), so that
 * a call after a context switch misses fewer lines of code */
#define SMPI_HOT __attribute__((hot))
#define SMPI_SUB(x, v) __atomic_fetch_sub(&(x), (v), __ATOMIC_RELAXED)

/* The layer's lock (lock.c), taken only at MPI_THREAD_MULTIPLE: it guards
 * what the threads share (the operations in flight and their progress,
 * the list of communicators, the reasons' tables), never a wait for other
 * processes: a thread that would wait (an MPI call that blocks, a group
 * being made, an idle turn) lets it go entirely first (smpi_release) and
 * takes it back after (smpi_regain).  Recursive per thread. */
void smpi_lock_mt(void);
void smpi_unlock_mt(void);
static inline void smpi_lock(void)
{
    if (smpi.threads) { /* (one predictable branch without threads) */
        smpi_lock_mt();
    }
}
static inline void smpi_unlock(void)
{
    if (smpi.threads) {
        smpi_unlock_mt();
    }
}
int smpi_release(void);
void smpi_regain(int depth);

/* a communicator of the program, as this layer sees it (an attribute) */
typedef struct comm_state {
    struct sharp_coll_comm *sc; /* this rank's group (hier: leaders only) */
    int use;                    /* offload here (the same on every rank) */
    int hier;                   /* node-local aggregation, one leader a node */
    MPI_Comm oob, node, leaders;
    int rank, size, node_rank, node_size;
    int *node_of;      /* [size] the leader (rank in `leaders`) of each node */
    int *rank_in_node; /* [size] */
    smn_node_t *nshm;  /* hier: the node step's segment (NULL: PMPI) */
    /* hier: every node has its segment, each slot at least this many
     * bytes (0: not every node): the non-blocking forms' node step */
    size_t nb_slot;
    /* the non-blocking node step's exchange on PMPI (node_xchg.c), made
     * at its first use */
    struct smpi_xchg *xc;
    /* the last result and the recovery service's view of the group
     * (members only); all: a duplicate of the communicator, for the
     * barrier that keeps the record until every rank is done with it */
    smr_rec_t *rec;
    int recoverable; /* every member's service is known */
    /* The standby group (members only; SHARP_MPI_STANDBY): joined with
     * sc, on the tree sharing the fewest ANs with sc's, and its record;
     * NULL: none.  When sc fails, it becomes sc at the operation the
     * members agreed completed nowhere (smpi_comm_failover, fall.c).
     * rec_id, gen: the records' ids (the same on every member); retired:
     * the records of failed groups, kept until teardown (a member may
     * still be asking them); standby_at: the call at which a
     * communicator that failed over makes a new standby (0: none due;
     * SHARP_MPI_REGROUP_CALLS calls after the failed operation, the same
     * call on every member, and again as many later until every member
     * is SHARP_MPI_STANDBY_AFTER past the failure). */
    struct sharp_coll_comm *standby;
    smr_rec_t *standby_rec;
    uint64_t rec_id;
    unsigned gen;
    smr_rec_t **retired;
    int nretired;
    unsigned long standby_at;
    uint64_t failed_ns; /* when it failed over (shp_time_ns) */
    int had_group;      /* the same on every rank */
    int why;            /* !use: why (the same on every rank) */
    /* Positions in the communicator's stream of eligible calls, the same
     * on every rank whatever the form (blocking, non-blocking, a
     * persistent start) and whenever a rank learns of a failure: seq, the
     * calls so far (the current one included); done_seq, the last one
     * that completed through the group (or whose result was fetched in a
     * recovery); fall_pos, done_seq when the group failed: the calls
     * after it are on PMPI, and the one fall_pos + retry_at + 1 tries a
     * new group (SHARP_MPI_REGROUP_CALLS, doubled after each failed
     * try). Counting from what every rank agreed (where the group's
     * operations ended) rather than from when a rank noticed is what
     * makes every rank try at the same call. */
    int fell;
    unsigned long seq, done_seq, fall_pos, retry_at;
    MPI_Comm all;
    /* non-blocking operations with recovery, and every one with several
     * ranks per node (op.c): the communicator's activations in
     * posting order, the first in flight (its node step, through sharp,
     * or on PMPI once the group failed); nbq_len of them. After a failure
     * a queue not yet empty takes the new ones too (done on PMPI in
     * order) */
    struct nb_op *nbq_head, *nbq_tail;
    unsigned long nbq_len;
    /* who holds the state: its communicator, and each persistent operation
     * made on it (MPI lets the program free the communicator first: the
     * state is then an orphan, its group gone, its operations on PMPI on
     * the private duplicate `all`, until the last one is freed) */
    int refs, orphan;
    int unused; /* its group made with it, no collective on it yet */
    struct comm_state *next, **prev; /* every live state, for finalize */
} comm_state_t;

/* how a datatype travels through sharp */
typedef struct dt_map {
    int sdt;         /* sharp dtype of the values */
    int tag;         /* pairs: the index's sharp dtype; else SHARP_DTYPE_NULL */
    unsigned ops;    /* OPB(SHARP_OP_x) that may be offloaded */
    int mult;        /* sharp elements in one MPI element (complex: 2) */
    int packed;      /* pairs with a hole: packed to (value, index) */
    size_t vs, toff; /* pairs: value size, index offset in the element */
    size_t ext, size; /* the MPI element's extent and size */
} dt_map_t;

/* Helpers (settings.c; smpi_desc_of: dtype.c) */
void smpi_note(int verbosity, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* the job aborted (exit code 70) once the message printed before it can
 * reach the launcher */
void smpi_abort(MPI_Comm comm);
/* a failure in the network that cannot be recovered: abort the job */
void smpi_fail(MPI_Comm comm, const char *what, int rc);
/* a local step that cannot fail on a sane MPI did: abort */
void smpi_die(MPI_Comm comm, const char *what);
void *smpi_xmalloc(size_t n, MPI_Comm comm, const char *what); /* aborts */
struct sharp_coll_data_desc smpi_desc_of(void *p, size_t len);

/* Datatypes (dtype.c) */
int smpi_dense_type(MPI_Datatype dt, int depth);
void smpi_loc_pack(const void *in, void *out, size_t n, const dt_map_t *m);
void smpi_loc_unpack(const void *in, void *out, size_t n, const dt_map_t *m);
void smpi_pack_data(int pack, void *buf, int count, MPI_Datatype dt, char *tmp,
                    int len, MPI_Comm comm);
long smpi_bytes_of(int count, MPI_Datatype dt);

/* Eligibility, the same rules for the blocking and non-blocking forms
 * (dtype.c) */
/* WHY_OK if offloadable, else why not */
int smpi_reduce_why(int on, int count, MPI_Datatype dt, MPI_Op op, dt_map_t *m,
                    int *sop, size_t *bytes, shp_reduce_desc_t *d);
int smpi_bcast_why(long bytes);
int smpi_exact_wanted(int sop, const dt_map_t *m);
/* an exact sum on PMPI: 1 if done (*ret), 0 if not an exact one */
int smpi_exact_pmpi(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                    MPI_Op op, int root, MPI_Comm comm, int *ret);
/* a call that went to PMPI, counted (and its reason: smpi_why_call;
 * why.c) */
void smpi_fallback(int kind, long bytes, MPI_Comm comm, int why,
                   MPI_Datatype dt, MPI_Op op);

/* Communicators (comm.c): the state of one that offloads (its group made
 * with the communicator, or at its first blocking eligible call) for a
 * call of kind ckind (C_ALLREDUCE ...), or NULL (*why: the reason) */
comm_state_t *smpi_coll_comm(MPI_Comm comm, int ckind, int *why);
/* the communicators' attribute's delete callback (MPI_Comm_free, or the
 * world's at MPI_Finalize): the group left, the state freed */
int smpi_comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra);
/* at MPI_Finalize: every communicator's group and record forgotten */
void smpi_comm_forget_all(void);

/* Recovery (fall.c): after a failed operation, 1 if it completed
 * elsewhere (its result: smr_result), 0 if it is to be redone on PMPI */
int smpi_recover_op(comm_state_t *st, MPI_Comm comm, const char *what,
                    size_t len, int rc, int leave);
/* the communicator goes to PMPI: 1 if it offloaded until now */
int smpi_comm_fall(comm_state_t *st);
void smpi_rec_window(smr_rec_t *r, struct sharp_coll_comm *sc, MPI_Comm comm);
/* st's group failed and the operation at hand (seq, its place in the
 * communicator's calls) completed nowhere: 1 if its
 * standby took over (st->sc, st->rec are the standby's: post the
 * operation again there), 0 if there is none (go to PMPI) */
int smpi_comm_failover(comm_state_t *st, unsigned long seq);
/* r, a member's record of sc, lets the recovery service fail the
 * member's operation in sc if it stays inside after the others asked
 * (smr_set_cancel) */
void smpi_rec_cancel(smr_rec_t *r, struct sharp_coll_comm *sc);
/* an eligible call on a communicator with a state begins: counted (a
 * persistent start's, which smpi_comm_sharp does not see), a new group
 * tried at its turn */
void smpi_comm_call(comm_state_t *s, MPI_Comm comm, int blocking);
/* a communicator just made by a blocking call of all its ranks: its group
 * made now (SHARP_MPI_GROUP_AT=create; no lock held) */
void smpi_comm_made(MPI_Comm comm);
/* a node step on shared memory failed (a rank of the node died or did not
 * come, node_shm.h): abort, naming it */
void smpi_node_shm_fail(comm_state_t *st, MPI_Comm comm, const char *what,
                        shp_status_t s);
/* the non-blocking node step's PMPI exchange gone, its requests done
 * (node_xchg.c) */
void smpi_xchg_free(comm_state_t *st);
/* the leader's fold of its node's node_size contributions of n elements,
 * pbytes apart from all, in node-rank order, into out (node_xchg.c; the
 * blocking and non-blocking node steps on PMPI) */
void smpi_node_fold(comm_state_t *s, const shp_reduce_desc_t *d,
                    const char *all, size_t n, size_t pbytes, char *out,
                    MPI_Comm comm);

/* Non-blocking operations (progress.c, below comm.c): s's operations in
 * flight (NULL: every communicator's) complete; both libraries progress
 * meanwhile */
void smpi_nb_drain(comm_state_t *s);
/* an MPI request of the layer's own waited for, every operation in flight
 * progressing meanwhile (called without the layer's lock) */
void smpi_nb_wait_req(MPI_Request *r);
/* MPI's own progress from inside a wait of sharp's (libsharp_coll's
 * progress_func) or of a node step (the segment's progress hook), once a
 * blocking call's wait has lasted long, then less and less often: see
 * progress.c */
int smpi_mpi_progress(void);

#pragma GCC visibility pop

#endif
