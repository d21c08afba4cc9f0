/*
 * libsharp_mpi: the program's communicators as this layer sees them
 * (comm_state_t, an attribute of each), and their sharp groups.
 *
 * A communicator's group is made inside the blocking call that makes the
 * communicator (comm_new.c's wrappers, the world's in MPI_Init:
 * smpi_comm_made; SHARP_MPI_GROUP_AT=create), or else at its first
 * blocking collective; never inside a non-blocking call or a start, which
 * MPI forbids to wait for other processes (a communicator without a group
 * sends those to PMPI: every rank alike, none has a state).  It is
 * destroyed when the communicator is freed (the attribute's delete
 * callback, smpi_comm_delete).  Creating a group is agreed by all members
 * (the library's comm_init returns one answer everywhere); a communicator
 * whose group cannot be created uses PMPI from then on, everywhere.
 *
 * With several ranks per node only one leader per node is a member
 * (SHARP_MPI_NODE_AGGR, default on: measured faster): the node's data are
 * gathered and folded at the leader, the leaders go through sharp, the
 * result is broadcast in the node; the node step runs on a shared-memory
 * segment of the node (node_shm.h) made with the group, else on PMPI.
 *
 * A communicator that fell back to PMPI after a failure (fall.c) tries a
 * new group SHARP_MPI_REGROUP_CALLS eligible calls later, every rank at the
 * same call (smpi_comm_call).  Making or leaving a group is an agreement
 * of the members, blocking: leaving, the communicator's non-blocking
 * operations in flight complete first (smpi_nb_drain, progress.c, below
 * this file); making, every operation in flight progresses until every
 * member is there (smpi_nb_wait_req).
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include "core/time.h"
#include "mpi-coll/recover.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static comm_state_t *states;

/* s's records: its group's, its standby's and the failed groups' */
static void recs_free(comm_state_t *s)
{
    smr_rec_free(s->rec);
    smr_rec_free(s->standby_rec);
    for (int i = 0; i < s->nretired; i++) {
        smr_rec_free(s->retired[i]);
    }
    free(s->retired);
    s->rec = s->standby_rec = NULL;
    s->retired = NULL;
    s->nretired = 0;
    s->standby_at = 0;
    s->gen = 0;
}

/* What comm_setup made, undone: the group left, the record dropped (after
 * a barrier: a member may still be fetching a result from it), the
 * private communicators freed (the duplicate `all` kept if keep_all: an
 * orphan's persistent operations go on there). */
static void comm_teardown(comm_state_t *s, int keep_all)
{
    smpi_nb_drain(s); /* its non-blocking operations in flight complete first */
    if (s->sc != NULL) {
        if (s->rec != NULL) {
            smr_set_cancel(s->rec, NULL, NULL, 0);
        }
        sharp_coll_comm_destroy(s->sc);
        s->sc = NULL;
    }
    if (s->standby != NULL) {
        smr_set_cancel(s->standby_rec, NULL, NULL, 0);
        sharp_coll_comm_destroy(s->standby);
        s->standby = NULL;
    }
    if (s->all != MPI_COMM_NULL) {
        if (smpi.svc && s->had_group) {
            MPI_Request r;
            PMPI_Ibarrier(s->all, &r);
            smpi_nb_wait_req(&r);
        }
        if (!keep_all) {
            PMPI_Comm_free(&s->all);
        }
    }
    recs_free(s);
    smpi_xchg_free(s); /* (before its node communicator) */
    MPI_Comm *cs[] = {&s->oob, &s->node, &s->leaders};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        if (*cs[i] != MPI_COMM_NULL) {
            PMPI_Comm_free(cs[i]);
        }
    }
    smn_destroy(s->nshm);
    s->nshm = NULL;
    s->nb_slot = 0;
    free(s->node_of);
    free(s->rank_in_node);
    s->node_of = s->rank_in_node = NULL;
    s->use = s->hier = s->had_group = 0;
}

int smpi_comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    comm_state_t *s = attr;
    (void)comm;
    (void)keyval;
    (void)extra;
    if (s->unused) {
        s->unused = 0;
        SMPI_SUB(smpi.unused, 1);
    }
    smpi_lock();
    int held = s->refs > 1;
    if (s->prev != NULL) { /* off the list: nothing of it for finalize */
        *s->prev = s->next;
        if (s->next != NULL) {
            s->next->prev = s->prev;
        }
        s->prev = NULL;
    }
    smpi_unlock();
    /* (held: an operation of ours was made on it, so it had a group and
     * has its duplicate `all`) */
    comm_teardown(s, held);
    smpi_lock();
    if (held) {
        /* persistent operations still hold it: on PMPI from now on, on
         * the private duplicate, never a new group */
        s->orphan = 1;
        s->fell = 1;
        s->why = WHY_COMM_FREED;
        for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
            if (o->st == s) {
                o->comm = s->all; /* the program's handle is gone */
            }
        }
    }
    smpi_unlock();
    smpi_comm_unref(s);
    return MPI_SUCCESS;
}

/* At MPI_Finalize: communicators the program never freed lose their
 * groups (they go with the context) and records; MPI may still call their
 * delete callbacks later (smpi_comm_delete: nothing left to undo). */
void smpi_comm_forget_all(void)
{
    for (comm_state_t *s = states; s != NULL; s = s->next) {
        s->sc = s->standby = NULL;
        recs_free(s);
        s->had_group = 0;
    }
}

/* The node this rank runs on, as a communicator: the ranks of one host of
 * the fabric (SHARP_FABRIC_HOST, set by sharp-fabric) or of one shared-
 * memory node. */
static void split_node(comm_state_t *s, MPI_Comm comm)
{
    const char *host = getenv("SHARP_FABRIC_HOST");
    if (host != NULL && *host) {
        unsigned h = 5381;
        for (const char *c = host; *c; c++) {
            h = h * 33 + (unsigned char)*c;
        }
        PMPI_Comm_split(comm, (int)(h & 0x7fffffff), s->rank, &s->node);
    } else {
        PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL,
                             &s->node);
    }
    PMPI_Comm_rank(s->node, &s->node_rank);
    PMPI_Comm_size(s->node, &s->node_size);
}

/* This rank's record as a member of the group over gcomm (the
 * communicator's ranks, or the node leaders), made before the group is
 * created: once any member has the group, every member has its record. */
static smr_rec_t *rec_new(comm_state_t *s, MPI_Comm gcomm, uint64_t id,
                          MPI_Comm comm)
{
    int n, me, ok = 1;
    MPI_Group gg, wg;
    PMPI_Comm_size(gcomm, &n);
    PMPI_Comm_rank(gcomm, &me);
    smr_addr_t *peers = calloc((size_t)n, sizeof(*peers));
    int *in = malloc(sizeof(int) * (size_t)n);
    int *out = malloc(sizeof(int) * (size_t)n);
    if (peers == NULL || in == NULL || out == NULL) {
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    if (smpi.svc) {
        PMPI_Comm_group(gcomm, &gg);
        PMPI_Comm_group(MPI_COMM_WORLD, &wg);
        for (int i = 0; i < n; i++) {
            in[i] = i;
        }
        PMPI_Group_translate_ranks(gg, n, in, wg, out);
        for (int i = 0; i < n; i++) {
            if (out[i] == MPI_UNDEFINED) {
                ok = 0; /* a process of another world: no service known */
            } else {
                peers[i] = smpi.addrs[out[i]];
            }
        }
        PMPI_Group_free(&gg);
        PMPI_Group_free(&wg);
    }
    s->recoverable = smpi.svc && ok;
    smr_rec_t *r = smr_rec_new(id, me, n, peers);
    if (r == NULL) {
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    free(peers);
    free(in);
    free(out);
    return r;
}

/* A member's standby group (SHARP_MPI_STANDBY, with recovery: it takes
 * over from the operation the members agree completed nowhere), over the
 * same members as sc; collective over them, one answer everywhere.  Its
 * record's id is the group's, told apart by a generation every member
 * counts alike. */
static void standby_setup(comm_state_t *s, MPI_Comm comm)
{
    if (!smpi_cfg.standby || smpi_cfg.on_fault != SMPI_FALLBACK ||
        !s->recoverable || s->sc == NULL || s->standby != NULL) {
        return;
    }
    MPI_Comm *g = s->hier ? &s->oob : &s->all;
    struct sharp_coll_comm_init_spec cs = {.oob_ctx = g};
    PMPI_Comm_rank(*g, &cs.rank);
    PMPI_Comm_size(*g, &cs.size);
    s->gen++;
    uint64_t id = s->rec_id ^ ((uint64_t)(s->gen & 0x7f) << 56);
    s->standby_rec = rec_new(s, *g, id, comm);
    int rc = sharp_coll_comm_init_standby(smpi.ctx, &cs, s->sc, &s->standby);
    if (rc != SHARP_COLL_SUCCESS) {
        s->standby = NULL;
        smr_rec_free(s->standby_rec);
        s->standby_rec = NULL;
        SMPI_ADD(smpi.standbys_missing, 1);
        if (cs.rank == 0) {
            smpi_note(1,
                      "no standby group for a communicator of %d (%s): a "
                      "failure of its group sends it to MPI",
                      s->size, sharp_coll_strerror(rc));
        }
        return;
    }
    smpi_rec_cancel(s->standby_rec, s->standby);
    smpi_rec_window(s->standby_rec, s->standby, comm);
}

/* The node step's shared-memory segment (node_shm.h): the leader makes
 * it, the others attach; kept only if every rank of the node has it (else
 * this node's steps stay on PMPI: the choice is the node's own, its ranks
 * alike).  Unlinked at once: nothing is left if the job dies. */
static void node_shm_setup(comm_state_t *s)
{
    smn_opts_t o;
    smn_handle_t h;
    int ok = 0, all = 0, code = 0;
    smn_opts_default(&o);
    if (smpi_cfg.node_shm_slot > 0 &&
        smpi_cfg.node_shm_slot <= ((size_t)1 << 30)) {
        o.slot_bytes = smpi_cfg.node_shm_slot;
    }
    /* 0 (the default): a rank late to a collective is waited for as MPI
     * would (a dead one is still seen at once) */
    o.timeout_ms = smpi_cfg.node_shm_timeout_ms > 0 &&
                           smpi_cfg.node_shm_timeout_ms < INT_MAX
                       ? (unsigned)smpi_cfg.node_shm_timeout_ms
                       : 0;
    if (smpi_cfg.node_shm_yield_us <= 1000000) {
        o.yield_ns = smpi_cfg.node_shm_yield_us * 1000u;
    }
    o.progress = smpi_mpi_progress; /* its waits let MPI move */
    memset(&h, 0, sizeof(h));
    if (s->node_rank == 0) {
        ok = smn_create((unsigned)s->node_size, &o, &s->nshm, &h) == SHP_OK;
        if (!ok) {
            memset(&h, 0, sizeof(h));
        }
    }
    PMPI_Bcast(&h, (int)sizeof(h), MPI_BYTE, 0, s->node);
    if (s->node_rank != 0) {
        ok = h.name[0] != '\0' &&
             smn_attach(&h, (unsigned)s->node_rank, &o, &s->nshm) == SHP_OK;
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, s->node);
    if (all && smn_barrier(s->nshm, NULL, NULL, &code) == SHP_OK) {
        /* (every rank attached: it cannot be busy; destroy unlinks too) */
        if (s->node_rank == 0 && smn_unlink(s->nshm) != SHP_OK) {
            smpi_note(2, "node-local segment: not unlinked yet");
        }
        return;
    }
    /* (a failed barrier fails the segment for every rank of the node) */
    if (s->node_rank == 0 && all) {
        smpi_note(1, "node-local step on shared memory unavailable: on MPI");
    }
    smn_destroy(s->nshm);
    s->nshm = NULL;
}

/* With several ranks on a node: one leader a node (node rank 0) is the
 * group's member; every rank learns each rank's leader and place in its
 * node.  The group's status, the same on every rank. */
static int comm_setup_hier(comm_state_t *s, MPI_Comm comm, uint64_t id)
{
    int me[2], lrank = -1, lsize = 0, rc = SHARP_COLL_SUCCESS;
    s->hier = 1;
    PMPI_Comm_split(comm, s->node_rank == 0 ? 0 : MPI_UNDEFINED, s->rank,
                    &s->leaders);
    if (s->leaders != MPI_COMM_NULL) {
        PMPI_Comm_rank(s->leaders, &lrank);
        PMPI_Comm_size(s->leaders, &lsize);
    }
    PMPI_Bcast(&lrank, 1, MPI_INT, 0, s->node);
    me[0] = lrank;
    me[1] = s->node_rank;
    int *all = malloc(sizeof(int) * 2 * (size_t)s->size);
    s->node_of = malloc(sizeof(int) * (size_t)s->size);
    s->rank_in_node = malloc(sizeof(int) * (size_t)s->size);
    if (all == NULL || s->node_of == NULL || s->rank_in_node == NULL) {
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    PMPI_Allgather(me, 2, MPI_INT, all, 2, MPI_INT, comm);
    for (int r = 0; r < s->size; r++) {
        s->node_of[r] = all[2 * r];
        s->rank_in_node[r] = all[2 * r + 1];
    }
    free(all);
    if (smpi_cfg.node_shm) {
        node_shm_setup(s);
    }
    /* the non-blocking forms take the node step on shared memory only if
     * every node has it, up to the smallest slot (every rank decides
     * alike whether a call is offloaded) */
    long have = s->nshm != NULL ? -(long)smn_slot_bytes(s->nshm) : 0, all_nb;
    PMPI_Allreduce(&have, &all_nb, 1, MPI_LONG, MPI_MAX, comm);
    s->nb_slot = (size_t)-all_nb;
    if (s->leaders != MPI_COMM_NULL) {
        PMPI_Comm_dup(s->leaders, &s->oob);
        s->rec = rec_new(s, s->oob, id, comm);
        struct sharp_coll_comm_init_spec cs = {
            .rank = lrank, .size = lsize, .oob_ctx = &s->oob};
        rc = lsize >= 2 ? sharp_coll_comm_init(smpi.ctx, &cs, &s->sc)
                        : SHARP_COLL_ENOT_SUPP; /* one node */
    }
    PMPI_Bcast(&rc, 1, MPI_INT, 0, s->node);
    return rc;
}

/* Set up a communicator: one sharp group over every rank, or, with several
 * ranks on a node, over one leader per node (node-local aggregation).  All
 * ranks reach the same answer. */
static void comm_setup(comm_state_t *s, MPI_Comm comm)
{
    static uint32_t made;
    int rc, maxn = 1;
    uint64_t id = 0;
    MPI_Request r;
    /* the rendezvous: once every member is here, none waits for anything
     * but the others' part in this agreement; until then this process's
     * operations in flight progress (another rank may need them first) */
    PMPI_Comm_idup(comm, &s->all, &r);
    smpi_nb_wait_req(&r);
    if (smpi.svc) {
        /* the group's name for the recovery services: rank 0's (a
         * standby's: bits 56-62 its generation, standby_setup) */
        id = ((uint64_t)(uint32_t)smpi.rank << 32) |
             __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
        PMPI_Bcast(&id, 1, MPI_UINT64_T, 0, s->all);
    }
    s->rec_id = id;
    if (smpi_cfg.node_aggr) {
        split_node(s, comm);
        PMPI_Allreduce(&s->node_size, &maxn, 1, MPI_INT, MPI_MAX, comm);
    }
    if (maxn <= 1) { /* one rank per node: every rank a member */
        if (s->node != MPI_COMM_NULL) {
            PMPI_Comm_free(&s->node);
        }
        s->rec = rec_new(s, s->all, id, comm);
        struct sharp_coll_comm_init_spec cs = {
            .rank = s->rank, .size = s->size, .oob_ctx = &s->all};
        rc = sharp_coll_comm_init(smpi.ctx, &cs, &s->sc);
    } else {
        rc = comm_setup_hier(s, comm, id);
    }
    s->use = s->had_group = rc == SHARP_COLL_SUCCESS;
    /* every rank on one node: node-local aggregation left one member */
    s->why = s->use                        ? WHY_OK
             : maxn > 1 && maxn == s->size ? WHY_ONE_NODE
                                           : smpi_why_of_status(rc);
    if (s->use && s->rec != NULL && s->sc != NULL) {
        smpi_rec_cancel(s->rec, s->sc);
        smpi_rec_window(s->rec, s->sc, comm);
        standby_setup(s, comm);
    }
    if (!s->use) {
        s->sc = NULL;
        recs_free(s);
        smn_destroy(s->nshm); /* no group: no node step (every rank) */
        s->nshm = NULL;
        s->nb_slot = 0;
        if (s->rank == 0) { /* its calls report the reason (why.c) */
            smpi_note(2, "no sharp group for a communicator of %d (%s)",
                      s->size, sharp_coll_strerror(rc));
        }
    } else if (s->rank == 0) {
        smpi_note(2, "sharp group for a communicator of %d%s", s->size,
                  s->hier ? " (one member per node)" : "");
    }
}

/* A communicator that failed over makes a new standby at its turn
 * (standby_at: the same call on every member).  Its members drain their
 * operations first (as before making a group: a member waiting in one
 * needs the others' part), then agree that each still has its group (one
 * whose group failed since, its last result fetched, has none: its next
 * operation fails over or goes to PMPI, on every member alike) and is
 * SHARP_MPI_STANDBY_AFTER past the failure (the manager has rebuilt its
 * trees, an AN restarted is back in them); if not, the next try is
 * SHARP_MPI_REGROUP_CALLS calls later. */
static void standby_again(comm_state_t *s, MPI_Comm comm)
{
    s->standby_at = 0;
    int depth = smpi_release(); /* a collective: no lock held */
    int64_t after = smpi_cfg.standby_after_ms;
    int mine = s->use && s->sc != NULL &&
               shp_time_ns() - s->failed_ns >=
                   (uint64_t)(after > 0 ? after : 0) * SHP_NSEC_PER_MSEC,
        all = 0;
    MPI_Request r;
    PMPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, s->hier ? s->oob : s->all,
                    &r);
    smpi_nb_wait_req(&r); /* the rendezvous: operations in flight progress */
    if (all) {
        standby_setup(s, comm);
        if (s->standby != NULL) {
            SMPI_ADD(smpi.standbys_remade, 1);
        }
    } else if (s->use) {
        s->standby_at = s->seq + (unsigned long)smpi_cfg.regroup_calls;
    }
    smpi_regain(depth);
}

/* A communicator that fell back to PMPI tries a new group (every rank at
 * the same call: the same number of eligible calls since the fall). */
static void regroup(comm_state_t *s, MPI_Comm comm)
{
    unsigned long next =
        s->retry_at < (1ul << 24) ? 2 * s->retry_at : s->retry_at;
    comm_teardown(s, 0);
    comm_setup(s, comm);
    if (s->use) {
        s->fell = 0;
        /* this call is the new group's first operation */
        s->done_seq = s->fall_pos = s->seq - 1;
        s->retry_at = (unsigned long)smpi_cfg.regroup_calls;
        SMPI_ADD(smpi.regrouped, 1);
        if (s->rank == 0) {
            smpi_note(1, "a communicator of %d ranks has a sharp group again",
                      s->size);
        }
    } else {
        s->fall_pos = s->seq; /* the next try, `next` calls after this one */
        s->retry_at = next;
    }
}

/* An eligible call on s's communicator begins (its state found: every
 * rank calls this at the same calls, blocking or not, a persistent start
 * included): counted; a communicator that failed over makes its new
 * standby, and one that fell back tries a new group, at their turn: the
 * first blocking call at or after it (blocking on every rank alike, MPI
 * matches no blocking collective with a non-blocking one; a non-blocking
 * call or a start never waits for the others).  The blocking call drained
 * the communicator's own operations first (smpi_comm_state), so every
 * rank has learnt of a failure before it: the same call everywhere. */
SMPI_HOT void smpi_comm_call(comm_state_t *s, MPI_Comm comm, int blocking)
{
    s->seq++;
    if (s->unused) {
        s->unused = 0;
        SMPI_SUB(smpi.unused, 1);
    }
    if (!blocking) {
        return;
    }
    if (s->standby_at != 0 && s->seq >= s->standby_at) { /* members only */
        standby_again(s, comm);
    }
    if (!s->use && s->fell && !s->orphan && smpi_cfg.regroup_calls > 0 &&
        s->seq - s->fall_pos > s->retry_at) {
        int depth = smpi_release(); /* a collective: no lock held */
        regroup(s, comm);
        smpi_regain(depth);
    }
}

/* the state of comm (made here if it has none, in a blocking call); a
 * blocking call's communicator's non-blocking operations complete first
 * (below) */
static comm_state_t *smpi_comm_state(MPI_Comm comm, int *why, int blocking);

/* The communicator's state for a call of kind ckind; NULL: use PMPI, for
 * *why.  A blocking call's communicator's non-blocking operations
 * complete first (they may find the group failed), and it goes to PMPI
 * once the communicator fell back.  A non-blocking call on a communicator
 * that fell back stays the layer's: queued and done on PMPI on the private
 * duplicate (smpi_nb_kick, smpi_nb_redo), as the operations a rank had
 * posted before it learnt of the failure are; one rule for every rank
 * whenever it learnt, so the same operations meet on the same
 * communicator. */
SMPI_HOT comm_state_t *smpi_coll_comm(MPI_Comm comm, int ckind, int *why)
{
    comm_state_t *had = NULL;
    int found = 0, blocking = ckind < C_IALLREDUCE;
    if (blocking) {
        return smpi_comm_state(comm, why, 1);
    }
    if (smpi.ctx != NULL && comm != MPI_COMM_NULL) {
        PMPI_Comm_get_attr(comm, smpi.keyval, &had, &found);
    }
    comm_state_t *st = smpi_comm_state(comm, why, 0);
    if (st == NULL && found && had->why == WHY_FELL &&
        had->all != MPI_COMM_NULL) {
        return had;
    }
    return st;
}

/* A new state for comm, its group made if it is to have one (a
 * collective of its ranks: the caller holds no lock), kept on the list
 * and as comm's attribute. */
static comm_state_t *state_new(MPI_Comm comm)
{
    int inter = 0;
    comm_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        /* the other ranks go on to create the group: abort, not hang */
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    s->oob = s->node = s->leaders = s->all = MPI_COMM_NULL;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_size(comm, &s->size);
    s->refs = 1; /* the communicator's (smpi_comm_delete) */
    s->why = inter ? WHY_INTERCOMM
             : s->size < smpi_cfg.min_ranks
                 ? (s->size < 2 ? WHY_ONE_RANK : WHY_MIN_RANKS)
                 : WHY_OK;
    if (s->why == WHY_OK) {
        comm_setup(s, comm);
    }
    smpi_lock();
    s->next = states;
    s->prev = &states;
    if (states != NULL) {
        states->prev = &s->next;
    }
    states = s;
    smpi_unlock();
    PMPI_Comm_set_attr(comm, smpi.keyval, s);
    return s;
}

/* a communicator without a state would make a group (a collective) */
static int wants_group(MPI_Comm comm)
{
    int inter = 0, size = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    return !inter && size >= smpi_cfg.min_ranks && size >= 2;
}

/* A communicator just made by a blocking call of every one of its ranks
 * (comm_new.c; the world in MPI_Init): its group made now
 * (SHARP_MPI_GROUP_AT=create), so that no non-blocking call on it will
 * need to, while every member holds fewer than SHARP_MPI_UNUSED_GROUPS
 * groups made so and never used (a program that makes communicators it
 * never reduces on spends no more of the job's quota); the members agree
 * on the communicator itself, new, so nothing of the program's is on it
 * yet.  Else it gets its group at its first blocking collective.  Called
 * without the layer's lock. */
void smpi_comm_made(MPI_Comm comm)
{
    comm_state_t *s;
    int found = 0, room, all = 0;
    if (smpi.ctx == NULL || comm == MPI_COMM_NULL ||
        smpi_cfg.group_at != SMPI_AT_CREATE) {
        return;
    }
    PMPI_Comm_get_attr(comm, smpi.keyval, &s, &found);
    if (found || !wants_group(comm)) {
        return;
    }
    MPI_Request r;
    room = __atomic_load_n(&smpi.unused, __ATOMIC_RELAXED) <
           smpi_cfg.unused_groups;
    PMPI_Iallreduce(&room, &all, 1, MPI_INT, MPI_MIN, comm, &r);
    smpi_nb_wait_req(&r); /* the rendezvous: operations in flight progress */
    if (all) {
        s = state_new(comm);
        s->unused = s->use && comm != MPI_COMM_WORLD; /* (it will be) */
        SMPI_ADD(smpi.unused, s->unused);
    }
}

SMPI_HOT static comm_state_t *smpi_comm_state(MPI_Comm comm, int *why,
                                              int blocking)
{
    comm_state_t *s;
    int found = 0;

    if (smpi.ctx == NULL || comm == MPI_COMM_NULL) {
        *why = smpi.ctx == NULL ? smpi.init_why : WHY_ARGS;
        return NULL;
    }
    PMPI_Comm_get_attr(comm, smpi.keyval, &s, &found);
    if (found) {
        if (blocking && s->nbq_head != NULL) {
            /* a blocking call: the communicator's non-blocking operations
             * first (they may find the group failed) */
            smpi_nb_drain(s);
        }
        smpi_comm_call(s, comm, blocking);
        *why = s->why;
        return s->use ? s : NULL;
    }
    if (!blocking && wants_group(comm)) {
        /* its group would be an agreement of the ranks: a non-blocking
         * call or a start may not wait for it (MPI); MPI's until a
         * blocking call makes it (every rank alike: no rank has a state) */
        *why = WHY_NO_GROUP_YET;
        return NULL;
    }
    int depth = smpi_release(); /* a collective: no lock held */
    s = state_new(comm);
    smpi_regain(depth);
    s->seq = 1; /* this call (done_seq, fall_pos: 0) */
    *why = s->why;
    return s->use ? s : NULL;
}
