/*
 * The node-local step of libsharp_mpi on shared memory (several ranks a
 * node, one group member for them): one segment for one communicator's
 * ranks on one node (node ranks 0..n-1, the
 * leader is node rank 0, the sharp group's member), in which the ranks
 * hand their contributions to the leader and the leader hands results back,
 * without MPI and without waking anyone for MPI's own algorithms.
 *
 * Every step is one "operation" with a sequence number that every rank of
 * the node counts alike (all ranks call the same steps in the same order,
 * as MPI requires of collectives).  A step carries at most one slot's worth
 * of data (smn_slot_bytes()); smn_allreduce() and smn_bcast() cut larger
 * messages into chunks, each one operation.
 *
 *   allreduce     smn_reduce (every rank: its contribution; the leader gets
 *                 the fold in node-rank order, shp_reduce_fold, bitwise what
 *                 the PMPI gather + fold gave), the leader's sharp call,
 *                 smn_result (the leader publishes, the others copy out);
 *                 or smn_gather instead of smn_reduce, where the leader
 *                 needs every contribution apart (an exact sum)
 *   bcast         smn_bcast from one node rank (the leader after its sharp
 *                 bcast, or a root in this node before it)
 *   barrier       smn_barrier: everyone arrives, the leader's hook runs
 *                 (its sharp barrier), the leader releases
 *
 * Waits spin briefly, look between sched_yield calls a while (yield_ns),
 * then sleep on a futex of the shared word (the leader of a fan-in on one
 * arrival count, woken by the last rank only); a waiter that sleeps
 * checks, every period, that the ranks it waits for are alive.
 * A dead peer or a wait past the timeout fails the segment for everyone
 * (SHP_ERR_GROUP_FAILED or SHP_ERR_TIMED_OUT, smn_failed_rank() names the
 * node rank): never a hang, never a wrong result.  A failed segment stays
 * failed; the caller falls back to PMPI.
 *
 * No MPI here: the caller distributes the handle (a fixed-size blob) and
 * makes the node barrier after which the leader unlinks the segment.
 * Functions return shp_status_t; nothing is printed.
 */
#ifndef SHARP_MPI_NODE_SHM_H
#define SHARP_MPI_NODE_SHM_H

#include "core/status.h"
#include "reduce/reduce.h"

#include <stddef.h>
#include <stdint.h>

#define SMN_MAX_RANKS 1024

typedef struct smn_opts {
    size_t slot_bytes;   /* per rank and for the result (leader's choice;
                            rounded up to 64 bytes); default 64 KiB */
    unsigned spin_ns;    /* spin before sleeping; default 2000 (2 us) */
    unsigned yield_ns;   /* then look between sched_yield calls this long
                            before sleeping; default 2000000 (2 ms): the
                            core goes to whoever needs it, and a waiter
                            still runnable when the word is stored costs
                            no wake-up (docs/performance.md) */
    unsigned timeout_ms; /* a fan-in (twice: waiting for a publication, which
                            may include the leader's sharp call); 30000;
                            0: none, a live rank is waited for as long as
                            it takes (a dead one is still seen at once) */
    unsigned period_ms;  /* sleep slices between liveness checks; 100
                            (0 is taken as 1) */
    /* called while a wait lasts, between looks and between sleeps (then
     * 1 ms at most): the caller's own progress, which a rank that has not
     * arrived may be waiting for (its return is not read); NULL (the
     * default): none */
    int (*progress)(void);
} smn_opts_t;

/* The blob the leader gives every other node rank (e.g. PMPI_Bcast of
 * sizeof(smn_handle_t) bytes on the node communicator). */
typedef struct smn_handle {
    char name[48];      /* shm_open name, NUL-terminated */
    uint64_t seg_bytes; /* the whole segment */
    uint64_t cookie;    /* random, also in the segment */
    uint32_t nranks;
    uint32_t slot_bytes;
} smn_handle_t;

typedef struct smn_stats {
    uint64_t ops;    /* operations (chunks) this rank took part in */
    uint64_t spins;  /* waits that ended while spinning */
    uint64_t sleeps; /* futex waits entered */
    uint64_t wakes;  /* futex wakes issued (someone was asleep) */
} smn_stats_t;

typedef struct smn_node smn_node_t;

/* The leader's hook inside smn_allreduce / smn_barrier: buf holds the
 * node's fold of this chunk (count elements, elements offset..offset+count
 * of the whole message), to be replaced in place by the final result (the
 * sharp call); NULL for a barrier.  Its return value reaches every rank
 * (smn_result's code). */
typedef int (*smn_leader_fn_t)(void *arg, void *buf, size_t count,
                               size_t offset);

void smn_opts_default(smn_opts_t *o);

/* Setup ------------------------------------------------------------------ */

/* Leader (node rank 0): a new segment for nranks ranks (mode 0600, a
 * random name, O_EXCL); *h is what the others attach with. */
SHP_WUR shp_status_t smn_create(unsigned nranks, const smn_opts_t *o,
                                smn_node_t **node, smn_handle_t *h);
/* Node rank `rank` (1..n-1) attaches; the segment must match the handle
 * (size, magic, version, node size, slot size, cookie, owner, mode):
 * SHP_ERR_PROTO / SHP_ERR_VERSION / SHP_ERR_MISMATCH / SHP_ERR_PERM if not.
 * Only slot_bytes of o is ignored (the leader's). */
SHP_WUR shp_status_t smn_attach(const smn_handle_t *h, unsigned rank,
                                const smn_opts_t *o, smn_node_t **node);
/* Removes the segment's name once every rank attached (call it after a
 * node barrier, e.g. smn_barrier); mapped memory stays.  Any rank may call
 * it; SHP_ERR_BUSY (and nothing done) if not all ranks attached. */
SHP_WUR shp_status_t smn_unlink(smn_node_t *node);
/* Unmaps (and unlinks the name if it still exists). */
void smn_destroy(smn_node_t *node);

unsigned smn_rank(const smn_node_t *node);
unsigned smn_size(const smn_node_t *node);
size_t smn_slot_bytes(const smn_node_t *node);
/* elements of desc in one chunk (0 if desc is invalid) */
size_t smn_chunk_count(const smn_node_t *node, const shp_reduce_desc_t *desc);
/* the leader's result area (slot_bytes): smn_reduce may fold into it and
 * smn_result publish from it without a copy */
void *smn_result_area(smn_node_t *node);
/* after a failure: the node rank that died or did not come, else -1 */
int smn_failed_rank(const smn_node_t *node);
void smn_get_stats(const smn_node_t *node, smn_stats_t *st);

/* One chunk of an allreduce ---------------------------------------------- */

/* Every rank: src (count elements of desc, wire layout, count <=
 * smn_chunk_count()) is its contribution.  The leader waits for all and
 * writes the fold (ranks 0..n-1 in order, its own src first) to dst (may
 * be src itself, or smn_result_area()); the others return at once (dst
 * unused).  Must be followed by smn_result on every rank. */
SHP_WUR shp_status_t smn_reduce(smn_node_t *node, const shp_reduce_desc_t *desc,
                                const void *src, size_t count, void *dst);
/* The same, but the leader gets each rank's contribution apart: srcs[0] =
 * its src, srcs[i] = rank i's, bytes each, valid until its smn_result. */
SHP_WUR shp_status_t smn_gather(smn_node_t *node, const void *src, size_t bytes,
                                const void **srcs);
/* Ends the chunk.  Leader: publishes bytes of buf (<= slot_bytes; buf may
 * be smn_result_area()) and code.  Others: wait, copy bytes into buf (NULL:
 * copy nothing, e.g. a reduce's non-root) and get the leader's code (code
 * may be NULL); with a non-zero code nothing is copied (buf may be the
 * caller's in-place input, to redo the operation another way).  bytes must
 * be the same on every rank. */
SHP_WUR shp_status_t smn_result(smn_node_t *node, void *buf, size_t bytes,
                                int *code);

/* Whole collectives -------------------------------------------------------- */

/* Allreduce of count elements in chunks: per chunk smn_reduce, the
 * leader's fn on the fold (NULL: none, a node-only allreduce), smn_result.
 * dst gets the result on every rank (may be src).  The first non-zero code
 * of fn stops the loop after that chunk, on every rank, and is returned in
 * *code. */
SHP_WUR shp_status_t smn_allreduce(smn_node_t *node,
                                   const shp_reduce_desc_t *desc,
                                   const void *src, void *dst, size_t count,
                                   smn_leader_fn_t fn, void *arg, int *code);
/* bytes of buf from node rank root to all, in chunks. */
SHP_WUR shp_status_t smn_bcast(smn_node_t *node, void *buf, size_t bytes,
                               unsigned root);
/* All arrive; the leader runs fn(arg, NULL, 0, 0) (NULL: nothing) once all
 * arrived; all leave with its code. */
SHP_WUR shp_status_t smn_barrier(smn_node_t *node, smn_leader_fn_t fn,
                                 void *arg, int *code);

/* Non-blocking steps (libsharp_mpi's MPI_Iallreduce and the like) -------- *
 *
 * One reduce/gather + result operation cut where the blocking form waits,
 * for a caller that progresses it from its own loop.  One step at a time
 * per segment (a caller with several queues them and begins the next once
 * the last ended); the blocking calls refuse while one is pending
 * (SHP_ERR_INVALID_PARAM) and may be used between.
 *
 *   every rank   smn_nb_arrive: the next operation, with bytes of src as
 *                its contribution (the others: copied into the slot now;
 *                the leader: read from src at smn_nb_fold/srcs).  Never
 *                waits.
 *   leader       smn_nb_test_in until SHP_OK (every rank arrived), then
 *                smn_nb_fold (the fold in node-rank order, bitwise the
 *                blocking one's) or smn_nb_srcs (each contribution
 *                apart, valid until the publication), then, whenever the
 *                result is ready, smn_nb_publish (bytes and a code; ends
 *                its step)
 *   the others   smn_nb_test_out until SHP_OK: the published bytes copied
 *                to buf (nothing with a non-zero code) and the code; ends
 *                their step
 *
 * The tests return SHP_INPROGRESS while the peer has not stored; at most
 * once per period_ms they also check that the peer lives and the timeout
 * (from the arrival: the leader's wait for the others one timeout, the
 * others' wait for the publication two, as the blocking form's), and fail
 * the segment as the blocking waits do.  smn_nb_await says which word the
 * pending step waits for (0: none); smn_nb_sleep blocks on it (a futex)
 * for at most max_ns, or until it changes or the segment fails, reading
 * nothing else of the node (the layer's lock may be let go between the
 * two, while other threads move the node's state on), and checks nothing
 * (call the test after); 1 if it slept. */
SHP_WUR shp_status_t smn_nb_arrive(smn_node_t *node, const void *src,
                                   size_t bytes);
SHP_WUR shp_status_t smn_nb_test_in(smn_node_t *node);
SHP_WUR shp_status_t smn_nb_fold(smn_node_t *node,
                                 const shp_reduce_desc_t *desc, size_t count,
                                 void *dst);
SHP_WUR shp_status_t smn_nb_srcs(smn_node_t *node, const void **srcs);
SHP_WUR shp_status_t smn_nb_publish(smn_node_t *node, const void *buf,
                                    size_t bytes, int code);
SHP_WUR shp_status_t smn_nb_test_out(smn_node_t *node, void *buf, size_t bytes,
                                     int *code);
/* 1 while a step is pending on this rank */
int smn_nb_pending(const smn_node_t *node);
typedef struct smn_nb_await {
    _Atomic uint32_t *w, *sleepers, *fail; /* in the segment */
    uint32_t target;
} smn_nb_await_t;
int smn_nb_await(smn_node_t *node, smn_nb_await_t *a);
int smn_nb_sleep(const smn_nb_await_t *a, uint64_t max_ns);
/* counted in the node's statistics: a sleep smn_nb_sleep made (under the
 * lock again) */
void smn_nb_slept(smn_node_t *node);
/* a pending step's wait, as the blocking steps wait (spin, yield, sleep
 * on the word; the peer's death or the timeout fail the segment): until
 * the next test finds it done or failed */
void smn_nb_wait(smn_node_t *node);

#endif
