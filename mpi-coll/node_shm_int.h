/*
 * The node-local step on shared memory, inside: the segment's layout and
 * the handle's state (node_shm.c makes and attaches the segment and waits
 * on its words; node_shm_op.c runs the operations on it).  Nothing here is
 * for the callers of node_shm.h.
 */
#ifndef SMN_NODE_SHM_INT_H
#define SMN_NODE_SHM_INT_H

#include "mpi-coll/node_shm.h"

#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define SMN_MAGIC 0x31454430504e4853ull /* "SHNP0DE1" */
#define SMN_VERSION 2
#define SMN_LINE 64
#define SMN_PREFIX "/sharp-node-"

enum { SMN_FAIL_DEAD = 1, SMN_FAIL_TIMEOUT = 2 };

typedef struct smn_hdr {
    alignas(SMN_LINE) uint64_t magic;
    uint32_t version;
    uint32_t nranks;
    uint64_t seg_bytes;
    uint64_t cookie;
    uint32_t slot_bytes;
    _Atomic uint32_t attached; /* ranks attached, the leader included */
    _Atomic uint32_t unlinked;
    _Atomic uint32_t fail; /* 0, or reason << 16 | (node rank + 1) */
} smn_hdr_t;

typedef struct smn_pub {
    alignas(SMN_LINE) _Atomic uint32_t go;
    _Atomic uint32_t go_sleepers;
    int32_t code;
    uint32_t bytes;
} smn_pub_t;

/* The fan-in's count: every arrival of a rank > 0 adds one, so the leader
 * sleeps on one word and only the last rank to arrive wakes it (waiting on
 * each rank's own word in turn woke it once for every rank that came after
 * the ones before it had: about ln(n) + 0.6 times an operation). */
typedef struct smn_in {
    alignas(SMN_LINE) _Atomic uint32_t count;
    _Atomic uint32_t sleepers;
} smn_in_t;

typedef struct smn_line {
    alignas(SMN_LINE) _Atomic uint32_t arr; /* the last operation it joined */
    _Atomic uint32_t fin;
    _Atomic uint32_t fin_sleepers;
    _Atomic int32_t pid;
    uint64_t pidns; /* inode of its pid namespace (0: unknown) */
} smn_line_t;

_Static_assert(sizeof(smn_hdr_t) == SMN_LINE, "one line");
_Static_assert(sizeof(smn_pub_t) == SMN_LINE, "one line");
_Static_assert(sizeof(smn_in_t) == SMN_LINE, "one line");
_Static_assert(sizeof(smn_line_t) == SMN_LINE, "one line");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "a futex word");

struct smn_node {
    char *base;
    size_t seg_bytes;
    smn_hdr_t *hdr;
    smn_pub_t *pub;
    smn_in_t *in;
    smn_line_t *lines;
    char *area;
    char *slots;
    unsigned rank, n;
    size_t slot;
    uint32_t seq; /* the current (last begun) operation */
    /* in->count once everyone arrived in the current fan-in (every rank
     * counts it alike: n - 1 more for each fan-in) */
    uint32_t in_target;
    int open; /* a reduce/gather awaits its smn_result */
    /* the non-blocking step (smn_nb_*): 0 none, 1 arrived (the leader:
     * waiting for the others; the others: for the publication), 2 the
     * leader has every contribution (folded or handed out) */
    int nb;
    uint64_t nb_deadline; /* the timeout of this step's wait */
    uint64_t nb_check_at; /* next liveness check (every period_ms) */
    const void *nb_src;   /* leader: its own contribution */
    size_t nb_bytes;
    uint64_t pidns;
    int *pidfd;        /* [n]: -1 not opened, -2 no pidfds here */
    const void **srcs; /* [n] */
    smn_opts_t o;
    smn_stats_t st;
    char name[sizeof(((smn_handle_t *)0)->name)];
};

static inline void smn_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static inline int reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

/* The peer of a fan-in's wait: every rank not arrived yet. */
#define SMN_LATE UINT_MAX

/* The segment's helpers (node_shm.c), for its operations (node_shm_op.c) */
uint64_t smn_now_ns(void);
/* every sleeper on w woken */
void smn_wake_all(_Atomic uint32_t *w);
void smn_post(smn_node_t *nd, _Atomic uint32_t *w, _Atomic uint32_t *sleepers,
              uint32_t v);
shp_status_t smn_failed(const smn_node_t *nd);
shp_status_t smn_fail(smn_node_t *nd, unsigned peer, uint32_t why);
unsigned smn_blame(smn_node_t *nd, unsigned peer, int *dead);
uint64_t smn_deadline(const smn_node_t *nd, unsigned times);
shp_status_t smn_wait(smn_node_t *nd, _Atomic uint32_t *w,
                      _Atomic uint32_t *sleepers, uint32_t target,
                      unsigned peer, uint64_t deadline);
char *smn_slot(const smn_node_t *nd, unsigned i);

#pragma GCC visibility pop

#endif
