/*
 * Recovery of a communicator whose sharp group failed (libsharp_mpi,
 * SHARP_MPI_ON_FAULT=fallback; the protocol is in docs/mpi.md).
 *
 * An operation of a group completes at a member only after every member
 * contributed to it, and a member contributes to operation k only after it
 * completed k - 1; one kind excepted, the windowed operation (a bcast the
 * other members send nothing for: it completes at them once the root's data
 * comes), which the tree lets a member complete up to SMR_WIN - 1
 * operations ahead of the slowest.  When a member's operation k fails (or
 * it learns of a failure before posting k), the members decide F, the first
 * operation that completed nowhere: 1 + the most any member completed, once
 * none of them can complete more.  Every operation before F completed at
 * some member, and a member behind it misses at most its operation at hand
 * and then windowed ones, whose results the members ahead still keep (each
 * member keeps its last result and its last SMR_WIN windowed ones).  Members
 * ask each other's recovery service (a thread of each process, a TCP
 * socket): a question freezes the member asked (it posts no further
 * operation of that group) and its answer is final once it is not inside an
 * operation that could still complete.  Members behind fetch the results up
 * to F - 1 from one that has them and take them as their next calls come;
 * operations from F on go to the standby group or PMPI on every member.  No
 * member's main thread has to answer, so a member that completed the last
 * operation and went on computing, or blocked in another MPI call, cannot
 * make the others wait.
 *
 * This file uses no MPI: the caller keeps the records' results and calls
 * in at the start and end of every operation.
 */
#ifndef SHARP_MPI_RECOVER_H
#define SHARP_MPI_RECOVER_H

#include <stddef.h>
#include <stdint.h>

/* a process's recovery service: an IPv4 address and port, network order */
typedef struct smr_addr {
    uint32_t ip;
    uint16_t port;
    uint16_t pad;
} smr_addr_t;

/* the job's key: questions and answers prove it (HMAC-SHA-256) */
#define SMR_KEY_LEN 32

/* Start this process's service, bound to ip (dotted; NULL or "": the
 * first address of the host's name, or every address if that is not
 * this host's); other processes' questions must prove key (SMR_KEY_LEN
 * bytes, the same in every process of the job, never sent by the service).  0 or -1
 * (errno). */
int smr_start(const char *ip, const unsigned char *key, smr_addr_t *me);
void smr_stop(void);

typedef struct smr_rec smr_rec_t;

/* A group's record: id the same on every member, peers[size] the members'
 * services (this one is rank).  NULL: out of memory. */
smr_rec_t *smr_rec_new(uint64_t id, int rank, int size,
                       const smr_addr_t *peers);
void smr_rec_free(smr_rec_t *r);

/* A member asked about its group while inside an operation is waited for
 * (its operation may still complete).  Should it stay inside after_ms
 * (> 0) from the first question, the service calls cancel(arg) once, with
 * the record locked (so the member is still inside: cancel must only ask,
 * e.g. sharp_coll_comm_cancel): its operation fails, and it joins the
 * decision like any member whose operation failed.  No notice of the
 * group's failure may then leave a member, and the others, waiting. */
void smr_set_cancel(smr_rec_t *r, void (*cancel)(void *), void *arg,
                    int after_ms);

/* Operation `done + 1` is about to be posted, its result len bytes: the
 * buffer to receive it in (the record keeps it), or NULL if the operation
 * must not be posted (a peer asked: smr_decide; or out of memory: *oom).
 * Nothing but the operation's result may be written into it: until the
 * result comes, it holds the last one, which a member that missed it may
 * be fetching (a bcast's root sends from its own data and copies it in
 * once the operation completed). */
void *smr_begin(smr_rec_t *r, size_t len, int *oom);
/* The group may run windowed operations: every member says so before its
 * first operation (a decision then hears every member before it ends). */
void smr_allow_window(smr_rec_t *r);
/* smr_begin for a windowed operation (len <= SMR_WIN_BYTES, the group
 * allowed them): its buffer is one of the record's SMR_WIN slots, which hold
 * the last windowed results (a member may complete one while another is
 * SMR_WIN - 1 behind). */
#define SMR_WIN 16
#define SMR_WIN_BYTES 4096
void *smr_begin_win(smr_rec_t *r, size_t len, int *oom);
/* The operation ended: ok, its len-byte result in the buffer smr_begin
 * gave. */
void smr_end(smr_rec_t *r, int ok, size_t len);
/* A record's buffer over SMR_KEEP_BYTES is given back once
 * SMR_SMALL_RUN operations in a row needed less than a quarter of it. */
#define SMR_KEEP_BYTES ((size_t)1 << 20)
#define SMR_SMALL_RUN 64
/* the buffer's size now (what the record holds between operations) */
size_t smr_capacity(const smr_rec_t *r);
/* the result of the operation taken last: the last one that completed, or
 * the one smr_take gave (valid until the next smr_begin or smr_take) */
void *smr_result(smr_rec_t *r);
/* operations completed (through sharp or by fetching results) */
uint64_t smr_done(const smr_rec_t *r);

/* The operation at hand (k: the one after the last taken) failed or was
 * not posted: decide, with the other members, where the group's operations
 * end.  Returns F (k + 1 or more: k completed somewhere, and the results
 * from k to F - 1 are now this record's, to be taken by smr_take; k: k
 * completed nowhere, redo it and everything after without sharp), or 0 if
 * no decision could be reached within timeout_ms (a member's operation
 * neither completed nor failed, a service unreachable, a result that could
 * not be fetched).  why: a message.  Once decided, it returns F at once. */
uint64_t smr_decide(smr_rec_t *r, size_t len, int timeout_ms, char *why,
                    size_t whylen);
/* The operation at hand, once decided: 1 if it completed elsewhere (its
 * len-byte result is now smr_result()), 0 if it is F or later (redo it
 * without sharp), -1 if its result has another length than len (the
 * members did not make the same calls). */
int smr_take(smr_rec_t *r, size_t len);
/* F, once decided (0 before) */
uint64_t smr_decided(const smr_rec_t *r);

/* Called by smr_decide between its rounds of questions (in the caller's
 * thread, no lock held): a member with operations of other groups in
 * flight (non-blocking ones) ends those that completed or failed meanwhile
 * (smr_end), or the other groups' members, asking about them, would wait
 * for this one while it waits here. */
void smr_set_wait_hook(void (*hook)(void));

#endif
