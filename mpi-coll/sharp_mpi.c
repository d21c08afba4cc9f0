/*
 * libsharp_mpi: MPI_Allreduce, MPI_Reduce, MPI_Barrier and MPI_Bcast over
 * sharp, through the PMPI profiling interface.  Built once per MPI
 * (Open MPI, MPICH) from this file, sharp_mpi_nb.c (the non-blocking and
 * persistent forms; what the two share: sharp_mpi_int.h) and recover.c;
 * preloaded (LD_PRELOAD) or linked, so neither the program nor the MPI
 * library is rebuilt.
 *
 *   MPI_Init / MPI_Init_thread   sharp_coll_init over MPI_COMM_WORLD, the
 *                                out-of-band collectives written on PMPI
 *   MPI_Finalize                 groups destroyed, job ended, report
 *   collectives                  offloaded when eligible, else PMPI
 *
 * With several ranks per node only one leader per node is a member: the
 * node's data are gathered and folded at the leader (the same reduction
 * engine as the ANs), the leaders go through sharp, the result is
 * broadcast in the node (SHARP_MPI_NODE_AGGR, default on: measured faster).
 *
 * A communicator's sharp group is created lazily, on its first eligible
 * collective (every rank decides alike: the decision depends only on what
 * MPI requires to be equal across ranks), and destroyed when the
 * communicator is freed (an attribute's delete callback), so dup, split,
 * create and free need no wrapper of their own.
 *
 * Failure protocol (docs/mpi.md): creating a group is agreed by all members
 * (the library's comm_init returns one answer everywhere); a communicator
 * whose group cannot be created uses PMPI from then on, everywhere.  A
 * collective that fails after its group was up is recovered
 * (SHARP_MPI_ON_FAULT=fallback, recover.h): the members agree, through a
 * recovery service of each process, on the first operation that completed
 * nowhere; the one before it is fetched from a member that kept it by
 * those that missed it, and from it on the communicator uses PMPI on every
 * rank.  With SHARP_MPI_ON_FAULT=abort the job aborts naming the failure.
 *
 * Datatypes (docs/mpi.md): a reduction is offloaded for a predefined type
 * and predefined op that MPI defines on it and sharp computes exactly as
 * MPI does (the pair types with a hole are packed to the wire and back,
 * never writing the hole; complex SUM is a sum of twice as many reals); a
 * bcast carries any datatype, named or derived: the decision depends only
 * on count x size, the same on every rank whatever type each passes, and
 * a layout that is not one run of bytes goes through PMPI_Pack/_Unpack.
 *
 * Not offloaded (passed to PMPI unchanged): reductions on derived types or
 * on types sharp cannot carry (long double, 32-byte complex, Fortran
 * LOGICAL, MPI_2REAL, ...), ops MPI does not define on the type (so PMPI
 * reports the error), user ops, count 0, intercommunicators,
 * non-blocking collectives other than MPI_Iallreduce, _Ireduce, _Ibcast and
 * _Ibarrier (those: sharp_mpi_nb.c, one member per process), messages above
 * SHARP_MPI_MAX_BYTES (or 2 GiB) and communicators below
 * SHARP_MPI_MIN_RANKS.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "core/time.h"
#include "mpi-coll/recover.h"
#include "reduce/exact.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Settings ------------------------------------------------------------------ */

smpi_cfg_t smpi_cfg;

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0') {
        return dflt;
    }
    long x = strtol(v, &end, 0);
    if (*end == 'k' || *end == 'K') {
        x <<= 10;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        x <<= 20;
        end++;
    }
    if (*end != '\0') {
        fprintf(stderr, "sharp_mpi: ignoring %s=%s (not a number)\n", name, v);
        return dflt;
    }
    return x;
}

static void cfg_load(void)
{
    smpi_cfg.enable = (int)env_long("SHARP_MPI_ENABLE", 1);
    smpi_cfg.verbose = (int)env_long("SHARP_MPI_VERBOSE", 0);
    smpi_cfg.min_ranks = (int)env_long("SHARP_MPI_MIN_RANKS", 2);
    smpi_cfg.node_aggr = (int)env_long("SHARP_MPI_NODE_AGGR", 1);
    smpi_cfg.node_shm = (int)env_long("SHARP_MPI_NODE_SHM", 1);
    smpi_cfg.node_shm_slot = env_long("SHARP_MPI_NODE_SHM_SLOT", 64L << 10);
    smpi_cfg.node_shm_timeout_ms = env_long("SHARP_MPI_NODE_SHM_TIMEOUT", 0);
    smpi_cfg.node_shm_yield_us = env_long("SHARP_MPI_NODE_SHM_YIELD_US", 2000);
    smpi_cfg.max_bytes = env_long("SHARP_MPI_MAX_BYTES", 64L << 20);
    smpi_cfg.allreduce = (int)env_long("SHARP_MPI_ALLREDUCE", 1);
    smpi_cfg.reduce = (int)env_long("SHARP_MPI_REDUCE", 1);
    smpi_cfg.barrier = (int)env_long("SHARP_MPI_BARRIER", 1);
    smpi_cfg.bcast = (int)env_long("SHARP_MPI_BCAST", 1);
    smpi_cfg.recovery_timeout_ms =
        env_long("SHARP_MPI_RECOVERY_TIMEOUT", 30000);
    smpi_cfg.regroup_calls = env_long("SHARP_MPI_REGROUP_CALLS", 1000);
    const char *f = getenv("SHARP_MPI_ON_FAULT");
    smpi_cfg.fallback = 1;
    if (f != NULL && !strcmp(f, "abort")) {
        smpi_cfg.fallback = 0;
    } else if (f != NULL && *f && strcmp(f, "fallback")) {
        fprintf(stderr,
                "sharp_mpi: ignoring SHARP_MPI_ON_FAULT=%s (fallback or "
                "abort)\n",
                f);
    }
    smpi_cfg.reproducible = (int)env_long("SHARP_MPI_REPRODUCIBLE", 0);
    smpi_cfg.threads = (int)env_long("SHARP_MPI_THREAD_MULTIPLE", 1);
}

/* State ------------------------------------------------------------------------ */

const char *const smpi_coll_names[C_N] = {
    "MPI_Allreduce",  "MPI_Reduce",  "MPI_Barrier",  "MPI_Bcast",
    "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibarrier", "MPI_Ibcast"};

smpi_global_t smpi = {.keyval = MPI_KEYVAL_INVALID};

static comm_state_t *states;

void smpi_note(int verbosity, const char *fmt, ...)
{
    va_list ap;
    if (smpi_cfg.verbose < verbosity) {
        return;
    }
    char line[1024];
    int n = snprintf(line, sizeof(line), "sharp_mpi[%d]: ", smpi.rank);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    /* one write: the ranks' lines do not interleave */
    fprintf(stderr, "%s\n", line);
}

/* Out-of-band collectives on PMPI ------------------------------------------ */

static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    return PMPI_Bcast(buf, len, MPI_BYTE, root, *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

static int oob_barrier(void *ctx)
{
    return PMPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    return PMPI_Gather(sbuf, len, MPI_BYTE, rbuf, len, MPI_BYTE, root,
                       *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

/* Init and finalize ------------------------------------------------------------ */

/* The non-blocking layer above this file (sharp_mpi_nb.c) gives its
 * callbacks with its first operation; NULL before: nothing of it to wait
 * for.  Not on a collective's path: comm_sharp drains only a communicator
 * with non-blocking operations queued. */
static const smpi_nb_cbs_t *nb_cbs;

void smpi_set_nb_cbs(const smpi_nb_cbs_t *cbs)
{
    nb_cbs = cbs;
}

/* s's non-blocking operations in flight (NULL: every communicator's)
 * complete */
static void nb_drain(comm_state_t *s)
{
    if (nb_cbs != NULL) {
        nb_cbs->drain(s);
    }
}

/* What comm_setup made, undone: the group left, the record dropped (after
 * a barrier: a member may still be fetching a result from it), the
 * private communicators freed. */
static void comm_teardown(comm_state_t *s)
{
    nb_drain(s); /* its non-blocking operations in flight complete first */
    if (s->sc != NULL) {
        if (s->rec != NULL) {
            smr_set_cancel(s->rec, NULL, NULL, 0);
        }
        sharp_coll_comm_destroy(s->sc);
        s->sc = NULL;
    }
    if (s->all != MPI_COMM_NULL) {
        if (smpi.svc && s->had_group) {
            PMPI_Barrier(s->all);
        }
        PMPI_Comm_free(&s->all);
    }
    smr_rec_free(s->rec);
    s->rec = NULL;
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

static int comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    comm_state_t *s = attr;
    (void)comm;
    (void)keyval;
    (void)extra;
    comm_teardown(s);
    smpi_lock();
    if (s->prev != NULL) {
        *s->prev = s->next;
        if (s->next != NULL) {
            s->next->prev = s->prev;
        }
    }
    smpi_unlock();
    free(s);
    return MPI_SUCCESS;
}

/* every process's recovery service, known to every process (collective
 * over the world); off when any process cannot run one */
static void recovery_setup(int size, const unsigned char *key, int have_key)
{
    smr_addr_t me;
    int ok = 1, all = 0;
    memset(&me, 0, sizeof(me));
    if (!have_key) {
        smpi_note(1, "no recovery service (rank 0 drew no key)");
        ok = 0;
    } else if (smr_start(getenv("SHARP_COLL_LOCAL_IP"), key, &me) != 0) {
        smpi_note(1, "no recovery service (%s)", strerror(errno));
        ok = 0;
    }
    smpi.addrs = calloc((size_t)size, sizeof(*smpi.addrs));
    if (smpi.addrs == NULL) {
        ok = 0;
    }
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, smpi.oob_world);
    if (all) {
        PMPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, smpi.addrs,
                       (int)sizeof(me), MPI_BYTE, smpi.oob_world);
        smpi.svc = 1;
        return;
    }
    smr_stop();
    free(smpi.addrs);
    smpi.addrs = NULL;
    if (smpi.rank == 0) {
        smpi_note(1,
                  "SHARP_MPI_ON_FAULT=fallback unavailable: a failure in the "
                  "network will abort the job");
    }
}

/* Rank 0's job id (unique on the fabric: its host, pid and clock), a key
 * for the recovery services (key: SMR_KEY_LEN random bytes; *have_key 0
 * if rank 0 could not draw them) and its SHARP_MPI_ON_FAULT (one policy
 * for the whole job), known to every rank.  The key goes only through
 * MPI; the services prove it without sending it (recover.c). */
static uint64_t job_agree(unsigned char *key, int *have_key)
{
    uint64_t job = 0, agreed[3 + SMR_KEY_LEN / 8];
    memset(agreed, 0, sizeof(agreed));
    if (smpi.rank == 0) {
        struct timespec ts;
        char host[64] = "";
        clock_gettime(CLOCK_REALTIME, &ts);
        gethostname(host, sizeof(host) - 1);
        job = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
              ((uint64_t)getpid() << 16);
        for (const char *p = host; *p; p++) {
            job = job * 131 + (unsigned char)*p;
        }
        job &= (1ull << 53) - 1; /* printable as a JSON integer anywhere */
        agreed[0] = job;
        agreed[2] = getrandom(&agreed[3], SMR_KEY_LEN, 0) == SMR_KEY_LEN;
    }
    agreed[1] = (uint64_t)smpi_cfg.fallback;
    PMPI_Bcast(agreed, (int)(sizeof(agreed) / sizeof(agreed[0])), MPI_UINT64_T,
               0, smpi.oob_world);
    job = agreed[0];
    smpi_cfg.fallback = (int)agreed[1];
    *have_key = (int)agreed[2];
    memcpy(key, &agreed[3], SMR_KEY_LEN);
    memset(agreed, 0, sizeof(agreed));
    return job;
}

static void sharp_setup(void)
{
    int size, have_key = 0;
    uint64_t job;
    unsigned char key[SMR_KEY_LEN];

    cfg_load();
    PMPI_Comm_rank(MPI_COMM_WORLD, &smpi.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    smpi_why_init();
    smpi.init_why = WHY_DISABLED;
    if (!smpi_cfg.enable) {
        smpi_note(1, "disabled by SHARP_MPI_ENABLE=0: plain MPI");
        return;
    }
    /* MPI_THREAD_MULTIPLE on any rank: the layer's lock is taken on
     * every rank (lock.c), and libsharp_coll's thread support is on;
     * SHARP_MPI_THREAD_MULTIPLE=0: plain MPI on every rank, said once */
    int level = MPI_THREAD_SINGLE, top = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    PMPI_Allreduce(&level, &top, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (top >= MPI_THREAD_MULTIPLE && !smpi_cfg.threads) {
        smpi.init_why = WHY_THREAD_MULTIPLE;
        if (smpi.rank == 0) {
            smpi_note(0,
                      "MPI_THREAD_MULTIPLE with SHARP_MPI_THREAD_MULTIPLE=0: "
                      "collectives go to the MPI library: plain MPI");
        }
        return;
    }
    smpi.threads = top >= MPI_THREAD_MULTIPLE;
    PMPI_Comm_dup(MPI_COMM_WORLD, &smpi.oob_world);
    smpi.have_oob = 1;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &smpi.keyval,
                            NULL);
    job = job_agree(key, &have_key);

    struct sharp_coll_init_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.job_id = job;
    spec.world_rank = smpi.rank;
    spec.world_size = size;
    spec.config = sharp_coll_default_config;
    spec.config.flags = smpi_cfg.verbose >= 1 ? 0 : SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = oob_bcast;
    spec.oob_colls.barrier = oob_barrier;
    spec.oob_colls.gather = oob_gather;
    spec.oob_ctx = &smpi.oob_world;
    spec.enable_thread_support = smpi.threads;
    int rc = sharp_coll_init(&spec, &smpi.ctx);
    if (rc != SHARP_COLL_SUCCESS) {
        memset(key, 0, sizeof(key));
        smpi.ctx = NULL;
        smpi.init_why = smpi_why_of_status(rc);
        if (smpi.rank == 0) {
            smpi_note(1, "sharp unavailable (%s: %s): plain MPI",
                      smpi_why_name(smpi.init_why), sharp_coll_strerror(rc));
        }
        return;
    }
    smpi.had_sharp = 1;
    smpi.init_why = WHY_OK;
    smpi_note(2, "sharp job %llu up", (unsigned long long)job);
    if (smpi_cfg.fallback) {
        recovery_setup(size, key, have_key);
    }
    memset(key, 0, sizeof(key));
}

static void report(void)
{
    unsigned long long c[C_N][2], b[C_N][2];
    PMPI_Reduce(smpi.calls, c, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(smpi.bytes, b, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    unsigned long long mine[5] = {smpi.fallen, smpi.fetched, smpi.redone, 0,
                                  smpi.regrouped},
                       rec[5];
    PMPI_Reduce(mine, rec, 5, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(&smpi.recovery_us_max, &rec[3], 1, MPI_UNSIGNED_LONG_LONG,
                MPI_MAX, 0, MPI_COMM_WORLD);
    unsigned long long steps[2] = {smpi.node_shm_steps, smpi.node_mpi_steps},
                       nsteps[2];
    PMPI_Reduce(steps, nsteps, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    if (smpi.rank != 0) {
        return;
    }
    fprintf(stderr, "sharp_mpi: report (all ranks)%s\n",
            smpi.had_sharp ? "" : " - sharp was not available");
    fprintf(stderr, "sharp_mpi: %-14s %12s %14s %12s %14s\n", "collective",
            "offloaded", "bytes", "fallback", "bytes");
    for (int k = 0; k < C_N; k++) {
        fprintf(stderr, "sharp_mpi: %-14s %12llu %14llu %12llu %14llu\n",
                smpi_coll_names[k], c[k][0], b[k][0], c[k][1], b[k][1]);
    }
    if (nsteps[0] + nsteps[1] > 0) {
        fprintf(stderr,
                "sharp_mpi: node-local aggregation: %llu step(s) on shared "
                "memory, %llu on MPI (counted by each rank)\n",
                nsteps[0], nsteps[1]);
    }
    if (rec[0] + rec[1] + rec[2] > 0) {
        fprintf(stderr,
                "sharp_mpi: recovery: %llu communicator(s) fell back to MPI "
                "(counted by each rank), %llu result(s) fetched from another "
                "member, %llu call(s) redone on MPI, longest %.1f ms; "
                "%llu group(s) made again\n",
                rec[0], rec[1], rec[2], (double)rec[3] / 1000.0, rec[4]);
    }
}

API int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
    }
    return rc;
}

API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
    }
    return rc;
}

API int MPI_Finalize(void)
{
    nb_drain(NULL); /* operations freed by the program while in flight */
    if (smpi.svc) {
        /* a rank may still be recovering (fetching a result from another
         * rank's record): every record stays until all ranks are here */
        PMPI_Barrier(smpi.oob_world);
    }
    if (smpi.keyval != MPI_KEYVAL_INVALID) {
        /* destroys the world's group (if it has one) */
        void *s;
        int found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, smpi.keyval, &s, &found);
        if (found) {
            PMPI_Comm_delete_attr(MPI_COMM_WORLD, smpi.keyval);
        }
        PMPI_Comm_free_keyval(&smpi.keyval);
    }
    /* communicators the program never freed: their groups go with the
     * context; MPI may still call their delete callbacks later */
    for (comm_state_t *s = states; s != NULL; s = s->next) {
        s->sc = NULL;
        smr_rec_free(s->rec);
        s->rec = NULL;
        s->had_group = 0;
    }
    if (smpi.svc) {
        smr_stop();
        smpi.svc = 0;
        free(smpi.addrs);
        smpi.addrs = NULL;
    }
    if (smpi.ctx != NULL) {
        sharp_coll_finalize(smpi.ctx);
        smpi.ctx = NULL;
    }
    if (smpi_cfg.verbose >= 1) {
        report();
        smpi_why_report();
    }
    smpi_why_fini();
    if (smpi.have_oob) {
        PMPI_Comm_free(&smpi.oob_world);
        smpi.have_oob = 0;
    }
    return PMPI_Finalize();
}

/* Eligibility ------------------------------------------------------------------ */

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
static void rec_setup(comm_state_t *s, MPI_Comm gcomm, uint64_t id,
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
    s->rec = smr_rec_new(id, me, n, peers);
    if (s->rec == NULL) {
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    free(peers);
    free(in);
    free(out);
}

/* the recovery service's way to fail a member's operation (recover.h) */
static void cancel_comm(void *sc)
{
    (void)sharp_coll_comm_cancel(sc);
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
    if (smpi_cfg.node_shm_slot > 0 && smpi_cfg.node_shm_slot <= (1L << 30)) {
        o.slot_bytes = (size_t)smpi_cfg.node_shm_slot;
    }
    /* 0 (the default): a rank late to a collective is waited for as MPI
     * would (a dead one is still seen at once) */
    o.timeout_ms = smpi_cfg.node_shm_timeout_ms > 0 &&
                           smpi_cfg.node_shm_timeout_ms < INT_MAX
                       ? (unsigned)smpi_cfg.node_shm_timeout_ms
                       : 0;
    if (smpi_cfg.node_shm_yield_us >= 0 &&
        smpi_cfg.node_shm_yield_us <= 1000000) {
        o.yield_ns = (unsigned)smpi_cfg.node_shm_yield_us * 1000u;
    }
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
        rec_setup(s, s->oob, id, comm);
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
    PMPI_Comm_dup(comm, &s->all);
    if (smpi.svc) {
        /* the group's name for the recovery services: rank 0's */
        id = ((uint64_t)(uint32_t)smpi.rank << 32) | ++made;
        PMPI_Bcast(&id, 1, MPI_UINT64_T, 0, s->all);
    }
    if (smpi_cfg.node_aggr) {
        split_node(s, comm);
        PMPI_Allreduce(&s->node_size, &maxn, 1, MPI_INT, MPI_MAX, comm);
    }
    if (maxn <= 1) { /* one rank per node: every rank a member */
        if (s->node != MPI_COMM_NULL) {
            PMPI_Comm_free(&s->node);
        }
        rec_setup(s, s->all, id, comm);
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
        /* a member left inside an operation the others gave up on (no
         * notice of the group's failure reached it) leaves it after a
         * third of the time they wait for it */
        long after = smpi_cfg.recovery_timeout_ms / 3;
        smr_set_cancel(s->rec, cancel_comm, s->sc,
                       (int)(after < 5000 ? after : 5000));
    }
    if (!s->use) {
        s->sc = NULL;
        smr_rec_free(s->rec);
        s->rec = NULL;
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

/* A communicator that fell back to PMPI tries a new group (every rank at
 * the same call: the same number of eligible calls since the fall). */
static void regroup(comm_state_t *s, MPI_Comm comm)
{
    unsigned long next =
        s->retry_at < (1ul << 24) ? 2 * s->retry_at : s->retry_at;
    comm_teardown(s);
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
 * included): counted, and a communicator that fell back tries a new
 * group at its turn. */
void smpi_comm_call(comm_state_t *s, MPI_Comm comm)
{
    s->seq++;
    if (!s->use && s->fell && smpi_cfg.regroup_calls > 0 &&
        s->seq - s->fall_pos > s->retry_at) {
        int depth = smpi_release(); /* a collective: no lock held */
        nb_drain(NULL);             /* as before making a group (below) */
        regroup(s, comm);
        smpi_regain(depth);
    }
}

/* The communicator's state, set up on first use; NULL: use PMPI, for
 * *why. */
comm_state_t *smpi_comm_sharp(MPI_Comm comm, int *why)
{
    return smpi_comm_state(comm, why, 1);
}

comm_state_t *smpi_comm_state(MPI_Comm comm, int *why, int blocking)
{
    comm_state_t *s;
    int found = 0, inter = 0;

    if (smpi.ctx == NULL || comm == MPI_COMM_NULL) {
        *why = smpi.ctx == NULL ? smpi.init_why : WHY_ARGS;
        return NULL;
    }
    PMPI_Comm_get_attr(comm, smpi.keyval, &s, &found);
    if (found) {
        if (blocking && s->nbq_head != NULL) {
            /* a blocking call: the communicator's non-blocking operations
             * first (they may find the group failed) */
            nb_drain(s);
        }
        smpi_comm_call(s, comm);
        *why = s->why;
        return s->use ? s : NULL;
    }
    /* making the group is an agreement of the members, blocking: every
     * non-blocking operation in flight completes first (the other ranks
     * may wait for this one's part in them before they get here) */
    nb_drain(NULL);
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        /* the other ranks go on to create the group: abort, not hang */
        smpi_fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    s->oob = s->node = s->leaders = s->all = MPI_COMM_NULL;
    s->seq = 1; /* this call (done_seq, fall_pos: 0) */
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_size(comm, &s->size);
    s->why = inter ? WHY_INTERCOMM
             : s->size < smpi_cfg.min_ranks
                 ? (s->size < 2 ? WHY_ONE_RANK : WHY_MIN_RANKS)
                 : WHY_OK;
    if (s->why == WHY_OK) {
        int depth = smpi_release(); /* a collective: no lock held */
        comm_setup(s, comm);
        smpi_regain(depth);
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
    *why = s->why;
    return s->use ? s : NULL;
}

/* Datatypes ------------------------------------------------------------------
 *
 * A reduction is offloaded only for a predefined datatype and a predefined
 * op that MPI defines on it (MPI-3.1 5.9.2) and that sharp computes with
 * the same result, bit for bit, as the MPI library would; anything else goes
 * to PMPI unchanged (so an op MPI does not define on a type gets the MPI
 * library's own error).  Every rank passes the same count, datatype and op
 * to a reduction, so this local decision is the same everywhere. */

#define OPB(o) (1u << (o))
#define OPS_MINMAX (OPB(SHARP_OP_MAX) | OPB(SHARP_OP_MIN))
#define OPS_ARITH (OPB(SHARP_OP_SUM) | OPB(SHARP_OP_PROD))
#define OPS_LOGICAL                                                            \
    (OPB(SHARP_OP_LAND) | OPB(SHARP_OP_LOR) | OPB(SHARP_OP_LXOR))
#define OPS_BITWISE                                                            \
    (OPB(SHARP_OP_BAND) | OPB(SHARP_OP_BOR) | OPB(SHARP_OP_BXOR))
#define OPS_LOC (OPB(SHARP_OP_MAXLOC) | OPB(SHARP_OP_MINLOC))

enum tclass {
    T_CINT,       /* C integer, signed */
    T_CUINT,      /* C integer, unsigned */
    T_FINT,       /* Fortran integer; MPI_AINT, MPI_OFFSET, MPI_COUNT */
    T_BYTE,       /* MPI_BYTE */
    T_FLOAT,      /* floating point of 4 or 8 bytes (not long double) */
    T_COMPLEX,    /* two of those: SUM is two sums; PROD is not */
    T_BOOL,       /* C (and C++) bool of one byte, 0 or 1 */
    T_PAIR_INT,   /* (integer, int) for MINLOC / MAXLOC */
    T_PAIR_FLOAT, /* (float or double, int) */
};

/* per class: the ops MPI defines and sharp carries */
static const unsigned class_ops[] = {
    [T_CINT] = OPS_MINMAX | OPS_ARITH | OPS_LOGICAL | OPS_BITWISE,
    [T_CUINT] = OPS_MINMAX | OPS_ARITH | OPS_LOGICAL | OPS_BITWISE,
    [T_FINT] = OPS_MINMAX | OPS_ARITH | OPS_BITWISE,
    [T_BYTE] = OPS_BITWISE,
    [T_FLOAT] = OPS_MINMAX | OPS_ARITH,
    [T_COMPLEX] = OPB(SHARP_OP_SUM),
    [T_BOOL] = OPS_LOGICAL,
    [T_PAIR_INT] = OPS_LOC,
    [T_PAIR_FLOAT] = OPS_LOC,
};

/* Not here, so not offloaded: MPI_CHAR, MPI_WCHAR, MPI_CHARACTER and
 * MPI_PACKED (MPI defines no reduction on them); MPI_LONG_DOUBLE,
 * MPI_REAL16, the long double and 32-byte complex types and
 * MPI_LONG_DOUBLE_INT (sharp has no such type); MPI_LOGICAL (its .TRUE. is
 * the MPI library's choice); MPI_2REAL and MPI_2DOUBLE_PRECISION (their
 * index is not an integer); MPI_INTEGER16; Open MPI's MPI_LOGICALn and
 * MPI_2COMPLEX (not MPI's).  A type the MPI library leaves out is
 * MPI_DATATYPE_NULL here and never matches. */
static const struct {
    MPI_Datatype dt;
    enum tclass cls;
} known_types[] = {
    {MPI_INT, T_CINT},
    {MPI_LONG, T_CINT},
    {MPI_SHORT, T_CINT},
    {MPI_SIGNED_CHAR, T_CINT},
    {MPI_LONG_LONG_INT, T_CINT},
    {MPI_LONG_LONG, T_CINT},
    {MPI_INT8_T, T_CINT},
    {MPI_INT16_T, T_CINT},
    {MPI_INT32_T, T_CINT},
    {MPI_INT64_T, T_CINT},
    {MPI_UNSIGNED, T_CUINT},
    {MPI_UNSIGNED_LONG, T_CUINT},
    {MPI_UNSIGNED_SHORT, T_CUINT},
    {MPI_UNSIGNED_CHAR, T_CUINT},
    {MPI_UNSIGNED_LONG_LONG, T_CUINT},
    {MPI_UINT8_T, T_CUINT},
    {MPI_UINT16_T, T_CUINT},
    {MPI_UINT32_T, T_CUINT},
    {MPI_UINT64_T, T_CUINT},
    {MPI_AINT, T_FINT},
    {MPI_OFFSET, T_FINT},
    {MPI_COUNT, T_FINT},
    {MPI_INTEGER, T_FINT},
#ifdef MPI_INTEGER1
    {MPI_INTEGER1, T_FINT},
#endif
#ifdef MPI_INTEGER2
    {MPI_INTEGER2, T_FINT},
#endif
#ifdef MPI_INTEGER4
    {MPI_INTEGER4, T_FINT},
#endif
#ifdef MPI_INTEGER8
    {MPI_INTEGER8, T_FINT},
#endif
    {MPI_BYTE, T_BYTE},
    {MPI_FLOAT, T_FLOAT},
    {MPI_DOUBLE, T_FLOAT},
    {MPI_REAL, T_FLOAT},
    {MPI_DOUBLE_PRECISION, T_FLOAT},
#ifdef MPI_REAL4
    {MPI_REAL4, T_FLOAT},
#endif
#ifdef MPI_REAL8
    {MPI_REAL8, T_FLOAT},
#endif
    {MPI_C_FLOAT_COMPLEX, T_COMPLEX},
    {MPI_C_DOUBLE_COMPLEX, T_COMPLEX},
    {MPI_COMPLEX, T_COMPLEX},
    {MPI_DOUBLE_COMPLEX, T_COMPLEX},
#ifdef MPI_COMPLEX8
    {MPI_COMPLEX8, T_COMPLEX},
#endif
#ifdef MPI_COMPLEX16
    {MPI_COMPLEX16, T_COMPLEX},
#endif
    {MPI_CXX_FLOAT_COMPLEX, T_COMPLEX},
    {MPI_CXX_DOUBLE_COMPLEX, T_COMPLEX},
    {MPI_C_BOOL, T_BOOL},
    {MPI_CXX_BOOL, T_BOOL},
    {MPI_2INT, T_PAIR_INT},
    {MPI_SHORT_INT, T_PAIR_INT},
    {MPI_LONG_INT, T_PAIR_INT},
    {MPI_2INTEGER, T_PAIR_INT},
    {MPI_FLOAT_INT, T_PAIR_FLOAT},
    {MPI_DOUBLE_INT, T_PAIR_FLOAT},
};

static int int_dtype(int size, int is_signed)
{
    switch (size) {
    case 1: return is_signed ? SHARP_DTYPE_INT8 : SHARP_DTYPE_UINT8;
    case 2: return is_signed ? SHARP_DTYPE_SHORT : SHARP_DTYPE_UNSIGNED_SHORT;
    case 4: return is_signed ? SHARP_DTYPE_INT : SHARP_DTYPE_UNSIGNED;
    case 8: return is_signed ? SHARP_DTYPE_LONG : SHARP_DTYPE_UNSIGNED_LONG;
    }
    return -1;
}

static int float_dtype(int size)
{
    return size == 4 ? SHARP_DTYPE_FLOAT : size == 8 ? SHARP_DTYPE_DOUBLE : -1;
}

/* 1 and *m filled in if sharp can reduce this datatype */
static int map_dtype(MPI_Datatype dt, dt_map_t *m)
{
    size_t i, n = sizeof(known_types) / sizeof(known_types[0]);
    int size = 0;
    MPI_Aint lb, ext, tlb, text;

    if (dt == MPI_DATATYPE_NULL) {
        return 0;
    }
    for (i = 0; i < n && known_types[i].dt != dt; i++) {
    }
    if (i == n) {
        return 0; /* derived, or a type sharp cannot carry */
    }
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    memset(m, 0, sizeof(*m));
    m->tag = SHARP_DTYPE_NULL;
    m->mult = 1;
    m->ops = class_ops[known_types[i].cls];
    m->ext = (size_t)ext;
    m->size = (size_t)size;
    switch (known_types[i].cls) {
    case T_CINT:
    case T_FINT: m->sdt = int_dtype(size, 1); break;
    case T_CUINT: m->sdt = int_dtype(size, 0); break;
    case T_BYTE: m->sdt = SHARP_DTYPE_UINT8; break;
    case T_BOOL: m->sdt = size == 1 ? SHARP_DTYPE_UINT8 : -1; break;
    case T_FLOAT: m->sdt = float_dtype(size); break;
    case T_COMPLEX:
        m->sdt = size % 2 == 0 ? float_dtype(size / 2) : -1;
        m->mult = 2;
        break;
    case T_PAIR_INT:
    case T_PAIR_FLOAT:
        /* C struct {value; int index;}: the index's offset from the true
         * extent, the value at 0; the wire has them packed */
        m->sdt = known_types[i].cls == T_PAIR_INT ? int_dtype(size - 4, 1)
                                                  : float_dtype(size - 4);
        m->tag = SHARP_DTYPE_INT;
        m->vs = (size_t)size - 4;
        m->toff = (size_t)text - 4;
        if (lb != 0 || tlb != 0 || text < size || m->toff < m->vs ||
            ext < text) {
            m->sdt = -1;
        }
        m->packed = m->toff != m->vs || (size_t)ext != (size_t)size;
        break;
    }
    /* a named type without holes (but the pairs above) */
    if (m->sdt >= 0 && m->tag == SHARP_DTYPE_NULL &&
        (lb != 0 || tlb != 0 || ext != size || text != size)) {
        m->sdt = -1;
    }
    return m->sdt >= 0;
}

/* Is the data of one element of dt a single run of bytes at true_lb, in
 * the order the type map lists them?  Named types (not MPI_SHORT_INT: it
 * has a hole), and duplicates, contiguous and resized types of such; any
 * other constructor is answered "no" (the data are packed then), since
 * size == true extent alone does not exclude permuted or overlapping
 * blocks. */
int smpi_dense_type(MPI_Datatype dt, int depth)
{
    int ni = 0, na = 0, nd = 0, comb, size = 0, ok = 0;
    MPI_Aint tlb, text;

    PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (text != (MPI_Aint)size) {
        return 0;
    }
    if (comb == MPI_COMBINER_NAMED) {
        return 1;
    }
    if (depth > 16 || nd != 1 || ni > 1 || na > 2 ||
        (comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_CONTIGUOUS &&
         comb != MPI_COMBINER_RESIZED)) {
        return 0;
    }
    int ints[1] = {1};
    MPI_Aint aints[2];
    MPI_Datatype old;
    PMPI_Type_get_contents(dt, ni, na, nd, ints, aints, &old);
    ok = smpi_dense_type(old, depth + 1);
    if (ok && comb == MPI_COMBINER_CONTIGUOUS && ints[0] > 1) {
        int osize = 0;
        MPI_Aint olb, oext;
        PMPI_Type_size(old, &osize);
        PMPI_Type_get_extent(old, &olb, &oext);
        ok = oext == (MPI_Aint)osize;
    }
    PMPI_Type_get_envelope(old, &ni, &na, &nd, &comb);
    if (comb != MPI_COMBINER_NAMED) {
        PMPI_Type_free(&old);
    }
    return ok;
}

static int op_of(MPI_Op op)
{
    if (op == MPI_MAX)
        return SHARP_OP_MAX;
    if (op == MPI_MIN)
        return SHARP_OP_MIN;
    if (op == MPI_SUM)
        return SHARP_OP_SUM;
    if (op == MPI_PROD)
        return SHARP_OP_PROD;
    if (op == MPI_LAND)
        return SHARP_OP_LAND;
    if (op == MPI_BAND)
        return SHARP_OP_BAND;
    if (op == MPI_LOR)
        return SHARP_OP_LOR;
    if (op == MPI_BOR)
        return SHARP_OP_BOR;
    if (op == MPI_LXOR)
        return SHARP_OP_LXOR;
    if (op == MPI_BXOR)
        return SHARP_OP_BXOR;
    if (op == MPI_MAXLOC)
        return SHARP_OP_MAXLOC;
    if (op == MPI_MINLOC)
        return SHARP_OP_MINLOC;
    return -1;
}

struct sharp_coll_data_desc smpi_desc_of(void *p, size_t len)
{
    struct sharp_coll_data_desc d;
    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_BUFFER;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    d.buffer.ptr = p;
    d.buffer.length = len;
    return d;
}

void smpi_fail(MPI_Comm comm, const char *what, int rc)
{
    fprintf(stderr,
            "sharp_mpi[%d]: %s failed in the network (%s); the other ranks "
            "may already have its result, so it cannot be redone with MPI: "
            "aborting (the aggregation node, sharpd and sharp_am logs name "
            "the failed component)\n",
            smpi.rank, what, sharp_coll_strerror(rc));
    PMPI_Abort(comm, 70);
}

/* a local step that cannot fail on a sane MPI did: the other ranks are in
 * the collective already, so abort rather than diverge */
void smpi_die(MPI_Comm comm, const char *what)
{
    fprintf(stderr, "sharp_mpi[%d]: %s failed: aborting\n", smpi.rank, what);
    PMPI_Abort(comm, 70);
}

/* (value, index) pairs with a hole (MPI_DOUBLE_INT, MPI_LONG_INT,
 * MPI_SHORT_INT): the wire has them packed.  Unpacking writes the value and
 * the index only, never the hole (MPI forbids touching it). */
void smpi_loc_pack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->ext, d += m->vs + 4) {
        memcpy(d, s, m->vs);
        memcpy(d + m->vs, s + m->toff, 4);
    }
}

void smpi_loc_unpack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->vs + 4, d += m->ext) {
        memcpy(d, s, m->vs);
        memcpy(d + m->toff, s + m->vs, 4);
    }
}

/* Node-local fold (leaders): every node member's elements (wire layout),
 * in node-rank order, with the same engine the aggregation nodes use, so
 * the result does not depend on the MPI library's own reduction (Open MPI
 * 4.1.4's 8-bit sums are wrong on overflow). */
static void node_fold(comm_state_t *s, const shp_reduce_desc_t *d,
                      const char *all, size_t n, size_t pbytes, char *out,
                      MPI_Comm comm)
{
    const void **srcs = malloc(sizeof(void *) * (size_t)s->node_size);
    if (srcs == NULL) {
        smpi_fail(comm, "node-local aggregation", SHARP_COLL_ENOMEM);
    }
    for (int k = 0; k < s->node_size; k++) {
        srcs[k] = all + (size_t)k * pbytes;
    }
    if (shp_reduce_fold(d, out, srcs, (unsigned)s->node_size, n) != SHP_OK) {
        smpi_fail(comm, "node-local aggregation", SHARP_COLL_ENOT_SUPP);
    }
    free(srcs);
}

void *smpi_xmalloc(size_t n, MPI_Comm comm, const char *what)
{
    void *p = malloc(n + 1);
    if (p == NULL) {
        /* every rank must take the same path: abort, not diverge */
        smpi_fail(comm, what, SHARP_COLL_ENOMEM);
    }
    return p;
}

/* One operation ---------------------------------------------------------- */

typedef struct op_args {
    int kind; /* C_ALLREDUCE (a reduce too), C_BARRIER, C_BCAST */
    struct sharp_coll_reduce_spec *spec; /* reductions: all but rbuf */
    const void *bsrc;                    /* bcast: the data, at the root */
    int broot;                           /* bcast: the root in the group */
    /* without recovery (SHARP_MPI_ON_FAULT=abort): the result goes
     * straight to direct (NULL: nowhere, a reduce's non-root) */
    void *direct;
    int root;    /* a reduce's root (< 0: an allreduce) */
    int exact_n; /* > 0: the exact sum of this many contributions each */
} op_args_t;

enum { OP_OK, OP_REDO };

static int post_op(comm_state_t *st, op_args_t *a, char *buf, size_t len)
{
    struct sharp_coll_bcast_spec bs;
    int rc;
    switch (a->kind) {
    case C_BARRIER: return sharp_coll_do_barrier(st->sc);
    case C_BCAST:
        /* the root sends from its own data: the record's buffer still holds
         * the last result, which a member that missed it may be fetching */
        memset(&bs, 0, sizeof(bs));
        bs.buf_desc =
            smpi_desc_of(a->bsrc != NULL ? (void *)a->bsrc : buf, len);
        bs.size = len;
        bs.root = a->broot;
        rc = sharp_coll_do_bcast(st->sc, &bs);
        if (rc == SHARP_COLL_SUCCESS && a->bsrc != NULL && a->bsrc != buf) {
            memcpy(buf, a->bsrc, len); /* now the last result */
        }
        return rc;
    default:
        a->spec->rbuf_desc = smpi_desc_of(buf, len);
        if (a->exact_n > 0) {
            return sharp_coll_do_allreduce_exact_n(st->sc, a->spec, a->exact_n);
        }
        if (a->root >= 0 && buf == a->direct) {
            a->spec->root = a->root; /* only the root keeps the result */
            return sharp_coll_do_reduce(st->sc, a->spec);
        }
        return sharp_coll_do_allreduce(st->sc, a->spec);
    }
}

/*
 * The group under st failed (rc) in `what`, an operation of len bytes, or
 * this member was frozen before posting it (a member asked): the members
 * agree, through their recovery services, on where the group's operations
 * end (docs/mpi.md, failure protocol; the job aborts if they cannot).
 * leave: the group is left first (the tree then fails the operations still
 * waiting for this member).  1: the operation completed elsewhere, its
 * result fetched (smr_result); 0: it is to be redone on PMPI, and every
 * later one.  The blocking (run_op) and non-blocking (nb_recover) forms'.
 */
int smpi_recover_op(comm_state_t *st, MPI_Comm comm, const char *what,
                    size_t len, int rc, int leave)
{
    char why[200] = "";
    uint64_t before = smr_done(st->rec);
    if (leave && st->sc != NULL) {
        smpi_note(2, "%s failed in the network (%s): recovering", what,
                  sharp_coll_strerror(rc));
        /* a failed group is left at once: the tree fails the operations
         * still waiting for this member (and nothing may cancel it now) */
        smr_set_cancel(st->rec, NULL, NULL, 0);
        sharp_coll_comm_destroy(st->sc);
        st->sc = NULL;
    }
    uint64_t t0 = shp_time_ns();
    uint64_t F = smr_decide(st->rec, len, (int)smpi_cfg.recovery_timeout_ms,
                            why, sizeof(why));
    if (F == 0) {
        fprintf(stderr,
                "sharp_mpi[%d]: %s failed in the network and the members "
                "could not agree on where their operations ended within "
                "%ld ms (%s): aborting\n",
                smpi.rank, what, smpi_cfg.recovery_timeout_ms, why);
        PMPI_Abort(comm, 70);
    }
    uint64_t us = (shp_time_ns() - t0) / SHP_NSEC_PER_USEC;
    if (us > smpi.recovery_us_max) {
        smpi.recovery_us_max = us;
    }
    if (smr_done(st->rec) > before) {
        SMPI_ADD(smpi.fetched,
                 1); /* completed elsewhere: its result, from a member */
        return 1;
    }
    return 0;
}

/* st's communicator goes to PMPI from now on (every rank decides so at
 * the same operation, wherever it learnt of the failure: a blocking call
 * or a non-blocking one), and tries a new group SHARP_MPI_REGROUP_CALLS
 * calls after the last one that completed through the group: 1 if it
 * offloaded until now */
int smpi_comm_fall(comm_state_t *st)
{
    if (!st->use) {
        return 0;
    }
    st->why = WHY_FELL;
    st->use = 0;
    st->fell = 1;
    st->fall_pos = st->done_seq;
    st->retry_at = (unsigned long)smpi_cfg.regroup_calls;
    SMPI_ADD(smpi.fallen, 1);
    if (st->rank == 0) {
        smpi_note(
            1,
            "a communicator of %d ranks falls back to MPI after a failure "
            "in the network",
            st->size);
    }
    return 1;
}

/* One operation of st's group (this rank a member): OP_OK with its len
 * bytes of result at *res (the record's buffer: every member keeps its
 * last result until its next operation), or OP_REDO: the group failed and
 * this call, and every later one on the communicator, goes to PMPI on
 * every rank (docs/mpi.md, failure protocol).  With SHARP_MPI_ON_FAULT=
 * abort a failure aborts the job. */
static int run_op(comm_state_t *st, MPI_Comm comm, const char *what, size_t len,
                  op_args_t *a, char **res)
{
    int oom, rc;
    if (!smpi_cfg.fallback || !st->recoverable) {
        /* no record to keep: the result straight where it goes */
        if (a->direct == NULL && a->root < 0 && a->kind != C_BARRIER) {
            smpi_fail(comm, what, SHARP_COLL_EINVAL); /* cannot happen */
        }
        rc = post_op(st, a, a->direct, len);
        if (rc != SHARP_COLL_SUCCESS) {
            smpi_fail(comm, what, rc);
        }
        *res = a->direct;
        return OP_OK;
    }
    char *buf = smr_begin(st->rec, len, &oom);
    if (oom) {
        smpi_fail(comm, what, SHARP_COLL_ENOMEM);
    }
    if (buf == NULL) { /* a member asked: frozen */
        rc = SHARP_COLL_ERROR;
    } else {
        rc = post_op(st, a, buf, len);
        smr_end(st->rec, rc == SHARP_COLL_SUCCESS, len);
        if (rc == SHARP_COLL_SUCCESS) {
            *res = buf;
            return OP_OK;
        }
    }
    if (smpi_recover_op(st, comm, what, len, rc, buf != NULL)) {
        *res = smr_result(st->rec);
        return OP_OK;
    }
    return OP_REDO;
}

/* the communicator goes to PMPI from now on (every rank, at this call) */
static void fell_back(comm_state_t *st, MPI_Comm comm)
{
    (void)comm;
    smpi_comm_fall(st);
    SMPI_ADD(smpi.redone, 1);
}

/* SHARP_MPI_REPRODUCIBLE: is this sum to be exact?  Float and double sums
 * (complex ones too: sums of their parts). */
int smpi_exact_wanted(int sop, const dt_map_t *m)
{
    return smpi_cfg.reproducible && sop == SHARP_OP_SUM &&
           (m->sdt == SHARP_DTYPE_FLOAT || m->sdt == SHARP_DTYPE_DOUBLE);
}

/* An exact sum without the network (no group, fallen back, too large):
 * the same arithmetic as the network's (reduce/exact.h) on PMPI: the
 * exponent window agreed with an int64 MAX, the values as 32-bit limbs in
 * int64 lanes summed with an int64 SUM (exact in any order), rounded once
 * at the end.  The same bits as through the network.  1 if done (*ret),
 * 0 if the call is not an exact one. */
int smpi_exact_pmpi(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                    MPI_Op op, int root, MPI_Comm comm, int *ret)
{
    dt_map_t m;
    int sop = op_of(op), rank, inter = 0;
    if (!smpi_cfg.reproducible || count <= 0 || sop < 0 ||
        comm == MPI_COMM_NULL || !map_dtype(dt, &m) ||
        !smpi_exact_wanted(sop, &m) || m.packed ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        return 0;
    }
    PMPI_Comm_rank(comm, &rank);
    int keep = root < 0 || root == rank;
    if (sbuf == MPI_IN_PLACE) {
        if (!keep) {
            return 0; /* erroneous: PMPI says so */
        }
        sbuf = rbuf;
    }
    shp_dtype_t sdt = (shp_dtype_t)m.sdt;
    size_t n = (size_t)count * (size_t)m.mult;
    const void *src = sbuf;
    int64_t win[SHP_EXACT_WIN_LANES], agreed[SHP_EXACT_WIN_LANES];
    shp_exact_layout_t lay;
    const char *why = NULL;
    if (shp_exact_window(sdt, &src, 1, n, win) != SHP_OK) {
        return 0;
    }
    PMPI_Allreduce(win, agreed, SHP_EXACT_WIN_LANES, MPI_INT64_T, MPI_MAX,
                   comm);
    if (shp_exact_layout(sdt, agreed, &lay, &why) != SHP_OK) {
        smpi_die(comm, "an exact sum: the agreed window");
    }
    size_t nl = n * lay.lanes;
    int64_t *lanes =
        smpi_xmalloc(sizeof(int64_t) * (nl ? nl : 1), comm, "an exact sum");
    int64_t *sum = keep ? smpi_xmalloc(sizeof(int64_t) * (nl ? nl : 1), comm,
                                       "an exact sum")
                        : NULL;
    if (shp_exact_encode(&lay, &src, 1, n, lanes) != SHP_OK) {
        smpi_die(comm, "an exact sum: encoding");
    }
    /* lanes fit MPI's int count: at most 255 lanes an element, and the
     * caller's count is an int */
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < nl && rc == MPI_SUCCESS;) {
        int c = nl - off > (size_t)INT_MAX ? INT_MAX : (int)(nl - off);
        rc = root < 0 ? PMPI_Allreduce(lanes + off, sum + off, c, MPI_INT64_T,
                                       MPI_SUM, comm)
                      : PMPI_Reduce(lanes + off, keep ? sum + off : NULL, c,
                                    MPI_INT64_T, MPI_SUM, root, comm);
        off += (size_t)c;
    }
    if (rc == MPI_SUCCESS && keep) {
        shp_exact_decode(&lay, sum, n, rbuf);
    }
    free(lanes);
    free(sum);
    *ret = rc;
    return 1;
}

/* Why a datatype sharp does not carry is not (derived or not) */
static int dtype_why(MPI_Datatype dt)
{
    int ni = 0, na = 0, nd = 0, comb = MPI_COMBINER_NAMED;
    if (dt != MPI_DATATYPE_NULL) {
        PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    }
    return comb == MPI_COMBINER_NAMED ? WHY_DTYPE : WHY_DERIVED;
}

/* May a reduction of count x dt with op go through sharp (`on`: that kind
 * is enabled)?  The rules of the blocking and the non-blocking forms: the
 * type map in *m, sharp's op in *sop, the wire's bytes in *bytes (count x
 * the type's size) and the fold's descriptor in *d.  WHY_OK, or why not. */
int smpi_reduce_why(int on, int count, MPI_Datatype dt, MPI_Op op, dt_map_t *m,
                    int *sop, size_t *bytes, shp_reduce_desc_t *d)
{
    *sop = op_of(op);
    if (!on) {
        return WHY_KIND_OFF;
    }
    if (count <= 0) {
        return WHY_COUNT_ZERO;
    }
    if (*sop < 0) {
        return WHY_USER_OP;
    }
    if (!map_dtype(dt, m)) {
        return dtype_why(dt);
    }
    if (!(m->ops & OPB(*sop))) {
        return WHY_OP_DTYPE;
    }
    *bytes = (size_t)count * m->size;
    if (*bytes > INT_MAX) {
        return WHY_OVER_2G;
    }
    if (*bytes > (size_t)smpi_cfg.max_bytes) {
        return WHY_MAX_BYTES;
    }
    *d = (shp_reduce_desc_t){(shp_dtype_t)m->sdt, (shp_op_t)*sop,
                             (shp_dtype_t)m->tag};
    return shp_reduce_desc_check(d, NULL) == SHP_OK &&
                   shp_reduce_elem_size(d) * (size_t)m->mult == m->size
               ? WHY_OK
               : WHY_DTYPE;
}

/* One reduction through sharp: the call, in the wire's layout, and the
 * buffers it needs (the steps of try_reduce). */
typedef struct reduce_call {
    comm_state_t *st;
    MPI_Comm comm;
    const char *what;
    int root, keep;      /* root < 0: an allreduce; keep: the result here */
    size_t n, ns, bytes; /* MPI elements, sharp elements, wire bytes */
    dt_map_t m;
    shp_reduce_desc_t d; /* the node-local fold's */
    const char *src;     /* the data (packed if m.packed) */
    char *ps, *pr, *all; /* ours: packed data, a result, the node's data */
    struct sharp_coll_reduce_spec spec; /* all but the buffers */
    op_args_t a;
} reduce_call_t;

/* the spec (reproducible: float and double sums, complex ones too, exact,
 * the same bits for any placement; the node-local step adds exactly too)
 * and the data in the wire's layout */
static void reduce_prepare(reduce_call_t *c, const void *sbuf, int sop)
{
    c->spec.dtype = (enum sharp_datatype)c->m.sdt;
    c->spec.tag_dtype = (enum sharp_datatype)c->m.tag;
    c->spec.op = (enum sharp_reduce_op)sop;
    c->spec.length = c->ns;
    if (smpi_exact_wanted(sop, &c->m)) {
        c->spec.op = SHARP_OP_SUM_EXACT;
    }
    c->a = (op_args_t){C_ALLREDUCE, &c->spec, NULL, 0, NULL, -1, 0};
    c->src = sbuf;
    if (c->m.packed) {
        c->ps = smpi_xmalloc(c->bytes, c->comm, c->what);
        smpi_loc_pack(sbuf, c->ps, c->n, &c->m);
        c->src = c->ps;
    }
}

/* the node leader's part: the node's data folded into c->pr (or, for an
 * exact sum, all of them in c->all: no rounding in the node), through
 * sharp */
static int reduce_leader(reduce_call_t *c, char **res)
{
    comm_state_t *st = c->st;
    if (c->spec.op == SHARP_OP_SUM_EXACT) {
        c->spec.sbuf_desc =
            smpi_desc_of(c->all, (size_t)st->node_size * c->bytes);
        c->a.exact_n = st->node_size;
    } else {
        c->spec.sbuf_desc = smpi_desc_of(c->pr, c->bytes);
    }
    c->a.direct = c->pr; /* in place, without recovery */
    return run_op(st, c->comm, c->what, c->bytes, &c->a, res);
}

/* where the leader's result goes in this node: everyone (-1, an
 * allreduce), the root's node rank (a reduce rooted here), nobody (-2) */
static int reduce_node_to(const reduce_call_t *c)
{
    const comm_state_t *st = c->st;
    return c->root < 0 ? -1
           : st->node_of[c->root] != st->node_of[st->rank]
               ? -2
               : st->rank_in_node[c->root];
}

/* a rank other than the leader that gets the result: where (*res) */
static void reduce_node_dest(reduce_call_t *c, void *rbuf, char **res)
{
    int to = reduce_node_to(c);
    if (c->st->node_rank != 0 && (to == -1 || to == c->st->node_rank)) {
        *res = c->m.packed ? (c->pr = smpi_xmalloc(c->bytes, c->comm, c->what))
                           : rbuf;
    }
}

/* the leader's result to where it goes in this node: everyone (an
 * allreduce), the root (a reduce rooted here), nobody */
static void reduce_node_result(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int bytes = (int)c->bytes;
    int to = reduce_node_to(c);
    reduce_node_dest(c, rbuf, res);
    if (to == -1) {
        PMPI_Bcast(*res, bytes, MPI_BYTE, 0, st->node);
    } else if (to > 0 && st->node_rank == 0) {
        PMPI_Send(*res, bytes, MPI_BYTE, to, 0, st->node);
    } else if (to > 0 && st->node_rank == to) {
        PMPI_Recv(*res, bytes, MPI_BYTE, 0, 0, st->node, MPI_STATUS_IGNORE);
    }
}

/* Node-local aggregation: members -> node leader (gather, fold), leaders
 * through sharp, leader -> members (bcast; for a reduce, to the root
 * only); a reduce is an allreduce whose result only the root keeps.  Data
 * move in the wire layout, so no hole is ever written. */
static int reduce_hier(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int how = OP_OK;
    if (st->node_rank == 0) {
        c->all =
            smpi_xmalloc((size_t)st->node_size * c->bytes, c->comm, c->what);
        c->pr = smpi_xmalloc(c->bytes, c->comm, c->what);
    }
    SMPI_ADD(smpi.node_mpi_steps, 1);
    PMPI_Gather(c->src, (int)c->bytes, MPI_BYTE, c->all, (int)c->bytes,
                MPI_BYTE, 0, st->node);
    if (st->node_rank == 0) {
        if (c->spec.op != SHARP_OP_SUM_EXACT) {
            node_fold(st, &c->d, c->all, c->ns, c->bytes, c->pr, c->comm);
        }
        how = reduce_leader(c, res);
    }
    PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
    if (how == OP_OK) {
        reduce_node_result(c, rbuf, res);
    }
    return how;
}

/* A node step on shared memory that failed: a rank of this node died or
 * did not come (node_shm.h); the others are inside the collective. */
void smpi_node_shm_fail(comm_state_t *st, MPI_Comm comm, const char *what,
                        shp_status_t s)
{
    fprintf(stderr,
            "sharp_mpi[%d]: the node-local step of %s failed: node rank %d "
            "%s: aborting\n",
            smpi.rank, what, smn_failed_rank(st->nshm),
            s == SHP_ERR_TIMED_OUT ? "did not come in time"
                                   : "died (or its node step failed)");
    PMPI_Abort(comm, 70);
}

/* Node-local aggregation on shared memory (node_shm.h), for data that fit
 * a slot: every rank's contribution into the node's segment and the
 * leader's fold in node-rank order (an exact sum: every contribution
 * apart), its sharp call, then the result and the status out of the
 * segment.  The same results as reduce_hier, bitwise; one step in and one
 * out, the ranks asleep in between, none woken for MPI's algorithms. */
static int reduce_hier_shm(reduce_call_t *c, void *rbuf, char **res)
{
    comm_state_t *st = c->st;
    int how = OP_OK, lead = st->node_rank == 0;
    shp_status_t s;
    SMPI_ADD(smpi.node_shm_steps, 1);
    if (lead) {
        c->pr = smpi_xmalloc(c->bytes, c->comm, c->what);
    }
    if (c->spec.op == SHARP_OP_SUM_EXACT) {
        const void *srcs[SMN_MAX_RANKS];
        s = smn_gather(st->nshm, c->src, c->bytes, srcs);
        if (s == SHP_OK && lead) {
            c->all = smpi_xmalloc((size_t)st->node_size * c->bytes, c->comm,
                                  c->what);
            for (int k = 0; k < st->node_size; k++) {
                memcpy(c->all + (size_t)k * c->bytes, srcs[k], c->bytes);
            }
        }
    } else {
        s = smn_reduce(st->nshm, &c->d, c->src, c->ns, c->pr);
    }
    if (s != SHP_OK) {
        smpi_node_shm_fail(st, c->comm, c->what, s);
    }
    if (lead) {
        how = reduce_leader(c, res);
    } else {
        reduce_node_dest(c, rbuf, res);
    }
    /* the leader publishes its result (whatever c->pr holds if the
     * operation is to be redone: nobody reads it then) and how */
    void *out = lead ? (how == OP_OK && *res != NULL ? *res : c->pr) : *res;
    s = smn_result(st->nshm, out, c->bytes, &how);
    if (s != SHP_OK) {
        smpi_node_shm_fail(st, c->comm, c->what, s);
    }
    return how;
}

/* Every rank a member: with recovery an allreduce on every rank, a reduce
 * too (the same operation on the tree): every member keeps the result,
 * for a member that missed it (docs/mpi.md, failure protocol); without,
 * straight into the receive buffer, at the root only. */
static int reduce_flat(reduce_call_t *c, void *rbuf, char **res)
{
    c->spec.sbuf_desc = smpi_desc_of((void *)c->src, c->bytes);
    c->a.root = c->root;
    if (c->keep) {
        c->a.direct = c->m.packed
                          ? (c->pr = smpi_xmalloc(c->bytes, c->comm, c->what))
                          : rbuf;
    }
    return run_op(c->st, c->comm, c->what, c->bytes, &c->a, res);
}

/* allreduce (root < 0) or reduce; 1 if offloaded, else 0 (*why) */
static int try_reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, int *ret, int *why)
{
    dt_map_t m;
    shp_reduce_desc_t d;
    int sop, kind = root < 0 ? C_ALLREDUCE : C_REDUCE;
    size_t bytes;

    *why = smpi_reduce_why(root < 0 ? smpi_cfg.allreduce : smpi_cfg.reduce,
                           count, dt, op, &m, &sop, &bytes, &d);
    if (*why != WHY_OK) {
        return 0;
    }
    comm_state_t *st = smpi_comm_sharp(comm, why);
    if (st == NULL) {
        return 0;
    }
    if (root >= st->size) {
        *why = WHY_ARGS;
        return 0; /* an invalid root: PMPI says so */
    }
    int keep = root < 0 || root == st->rank;
    if (sbuf == MPI_IN_PLACE) {
        if (!keep) {
            *why = WHY_ARGS;
            return 0; /* only the root may: PMPI says so */
        }
        sbuf = rbuf;
    }
    reduce_call_t c = {.st = st,
                       .comm = comm,
                       .what = smpi_coll_names[kind],
                       .root = root,
                       .keep = keep,
                       .n = (size_t)count,
                       .ns = (size_t)count * (size_t)m.mult,
                       .bytes = bytes,
                       .m = m,
                       .d = d};
    char *res = NULL;
    reduce_prepare(&c, sbuf, sop);
    int how = !st->hier ? reduce_flat(&c, rbuf, &res)
              : st->nshm != NULL && bytes <= smn_slot_bytes(st->nshm)
                  ? reduce_hier_shm(&c, rbuf, &res)
                  : reduce_hier(&c, rbuf, &res);
    if (how == OP_OK && keep && res != rbuf) {
        if (m.packed) {
            smpi_loc_unpack(res, rbuf, c.n, &m);
        } else {
            memcpy(rbuf, res, bytes);
        }
    }
    free(c.ps);
    free(c.pr);
    free(c.all);
    if (how == OP_REDO) {
        fell_back(st, comm);
        *why = WHY_FELL;
        return 0; /* the same call on PMPI, on every rank */
    }
    st->done_seq = st->seq;
    SMPI_ADD(smpi.calls[kind][0], 1);
    SMPI_ADD(smpi.bytes[kind][0], bytes);
    *ret = MPI_SUCCESS;
    return 1;
}

void smpi_fallback(int kind, long bytes, MPI_Comm comm, int why,
                   MPI_Datatype dt, MPI_Op op)
{
    SMPI_ADD(smpi.calls[kind][1], 1);
    SMPI_ADD(smpi.bytes[kind][1], (unsigned long long)(bytes > 0 ? bytes : 0));
    smpi_why_call(kind, bytes, comm, why, dt, op);
}

long smpi_bytes_of(int count, MPI_Datatype dt)
{
    int s = 0;
    if (dt == MPI_DATATYPE_NULL || count <= 0 ||
        PMPI_Type_size(dt, &s) != MPI_SUCCESS) {
        return 0;
    }
    return (long)count * s;
}

/* The collectives ------------------------------------------------------------ */

API int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int ret, why;
    if (try_reduce(sbuf, rbuf, count, dt, op, -1, comm, &ret, &why)) {
        return ret;
    }
    smpi_fallback(C_ALLREDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    if (smpi_exact_pmpi(sbuf, rbuf, count, dt, op, -1, comm, &ret)) {
        return ret;
    }
    return PMPI_Allreduce(sbuf, rbuf, count, dt, op, comm);
}

API int MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                   MPI_Op op, int root, MPI_Comm comm)
{
    int ret, why = WHY_ARGS;
    if (root >= 0 &&
        try_reduce(sbuf, rbuf, count, dt, op, root, comm, &ret, &why)) {
        return ret;
    }
    smpi_fallback(C_REDUCE, smpi_bytes_of(count, dt), comm, why, dt, op);
    if (root >= 0 &&
        smpi_exact_pmpi(sbuf, rbuf, count, dt, op, root, comm, &ret)) {
        return ret;
    }
    return PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
}

/* the leader's sharp barrier inside the node's (smn_barrier) */
typedef struct barrier_hook {
    comm_state_t *st;
    MPI_Comm comm;
} barrier_hook_t;

static int barrier_leader(void *arg, void *buf, size_t count, size_t offset)
{
    barrier_hook_t *b = arg;
    op_args_t a = {C_BARRIER, NULL, NULL, 0, NULL, -1, 0};
    char *res;
    (void)buf;
    (void)count;
    (void)offset;
    return run_op(b->st, b->comm, "MPI_Barrier", 0, &a, &res);
}

API int MPI_Barrier(MPI_Comm comm)
{
    int why = WHY_KIND_OFF;
    comm_state_t *st = smpi_cfg.barrier ? smpi_comm_sharp(comm, &why) : NULL;
    if (st != NULL) {
        op_args_t a = {C_BARRIER, NULL, NULL, 0, NULL, -1, 0};
        char *res;
        int how = OP_OK;
        if (st->hier && st->nshm != NULL) { /* one node step around it */
            barrier_hook_t b = {st, comm};
            SMPI_ADD(smpi.node_shm_steps, 1);
            shp_status_t s = smn_barrier(st->nshm, barrier_leader, &b, &how);
            if (s != SHP_OK) {
                smpi_node_shm_fail(st, comm, "MPI_Barrier", s);
            }
        } else if (st->hier) { /* the node in, the leaders, the node out */
            SMPI_ADD(smpi.node_mpi_steps, 1);
            PMPI_Barrier(st->node);
            if (st->node_rank == 0) {
                how = run_op(st, comm, "MPI_Barrier", 0, &a, &res);
            }
            PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
        } else {
            how = run_op(st, comm, "MPI_Barrier", 0, &a, &res);
        }
        if (how == OP_OK) {
            st->done_seq = st->seq;
            SMPI_ADD(smpi.calls[C_BARRIER][0], 1);
            return MPI_SUCCESS;
        }
        fell_back(st, comm);
        why = WHY_FELL;
    }
    smpi_fallback(C_BARRIER, 0, comm, why, MPI_DATATYPE_NULL, MPI_OP_NULL);
    return PMPI_Barrier(comm);
}

/* May a bcast of this many bytes go through sharp (the blocking and the
 * non-blocking forms' rule)?  WHY_OK, or why not. */
int smpi_bcast_why(long bytes)
{
    return !smpi_cfg.bcast              ? WHY_KIND_OFF
           : bytes <= 0                 ? WHY_COUNT_ZERO
           : bytes > INT_MAX            ? WHY_OVER_2G
           : bytes > smpi_cfg.max_bytes ? WHY_MAX_BYTES
                                        : WHY_OK;
}

/* the bytes of a bcast through sharp, from p (len bytes) at the root:
 * OP_OK (every rank has them at p) or OP_REDO */
static int bcast_bytes(comm_state_t *st, char *p, int len, int root,
                       MPI_Comm comm)
{
    op_args_t a = {C_BCAST, NULL, NULL, root, p, -1, 0};
    char *res = NULL;
    int how = OP_OK;
    if (st->hier && st->nshm != NULL &&
        (size_t)len <= smn_slot_bytes(st->nshm)) {
        /* on shared memory: the root's node first (from the root), then
         * the leaders; the leader's status, and its data to the other
         * nodes' ranks, in one step out */
        int lroot = st->node_of[root], rin = st->rank_in_node[root];
        int early = st->node_of[st->rank] == lroot && rin != 0;
        const void *srcs[SMN_MAX_RANKS];
        shp_status_t s = SHP_OK;
        SMPI_ADD(smpi.node_shm_steps, 1);
        if (early) {
            s = smn_bcast(st->nshm, p, (size_t)len, (unsigned)rin);
        }
        if (s == SHP_OK) {
            s = smn_gather(st->nshm, NULL, 0, srcs);
        }
        if (s == SHP_OK && st->node_rank == 0) {
            a.broot = lroot;
            a.bsrc = st->node_of[st->rank] == lroot ? p : NULL;
            how = run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
            if (how == OP_OK && a.bsrc == NULL && res != p) {
                memcpy(p, res, (size_t)len);
            }
        }
        if (s == SHP_OK) {
            s = smn_result(st->nshm, p, early ? 0 : (size_t)len, &how);
        }
        if (s != SHP_OK) {
            smpi_node_shm_fail(st, comm, "MPI_Bcast", s);
        }
    } else if (st->hier) {
        /* the root's node first, then the leaders, then the other nodes */
        int lroot = st->node_of[root];
        SMPI_ADD(smpi.node_mpi_steps, 1);
        int early =
            st->node_of[st->rank] == lroot && st->rank_in_node[root] != 0;
        if (early) {
            PMPI_Bcast(p, len, MPI_BYTE, st->rank_in_node[root], st->node);
        }
        if (st->node_rank == 0) {
            a.broot = lroot;
            a.bsrc = st->node_of[st->rank] == lroot ? p : NULL;
            how = run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
            if (how == OP_OK && a.bsrc == NULL && res != p) {
                memcpy(p, res, (size_t)len);
            }
        }
        PMPI_Bcast(&how, 1, MPI_INT, 0, st->node);
        if (how == OP_OK && !early) {
            PMPI_Bcast(p, len, MPI_BYTE, 0, st->node);
        }
    } else {
        a.bsrc = st->rank == root ? p : NULL;
        how = run_op(st, comm, "MPI_Bcast", (size_t)len, &a, &res);
        if (how == OP_OK && a.bsrc == NULL && res != p) {
            memcpy(p, res, (size_t)len);
        }
    }
    return how;
}

/* PMPI_Pack (pack) or PMPI_Unpack of count x dt at buf to or from the
 * len bytes at tmp, all of them.  Data at MPI_BOTTOM (absolute addresses)
 * are reached from an address of our own and a struct type displaced back
 * to 0: MPICH 4.0.2 refuses a NULL buffer to pack from or into. */
void smpi_pack_data(int pack, void *buf, int count, MPI_Datatype dt, char *tmp,
                    int len, MPI_Comm comm)
{
    static char anchor;
    MPI_Datatype t = dt;
    int pos = 0, rc;
    if (buf == MPI_BOTTOM) {
        MPI_Aint a;
        PMPI_Get_address(&anchor, &a);
        a = -a;
        PMPI_Type_create_struct(1, &count, &a, &dt, &t);
        PMPI_Type_commit(&t);
        buf = &anchor;
        count = 1;
    }
    rc = pack ? PMPI_Pack(buf, count, t, tmp, len, &pos, comm)
              : PMPI_Unpack(tmp, len, &pos, buf, count, t, comm);
    if (t != dt) {
        PMPI_Type_free(&t);
    }
    if (rc != MPI_SUCCESS || pos != len) {
        smpi_die(comm, pack ? "MPI_Bcast: PMPI_Pack of the root's data"
                            : "MPI_Bcast: PMPI_Unpack of the data");
    }
}

/* MPI requires only the type signatures to match: the root may send 4
 * MPI_INT that another rank receives as one contiguous type of 4 ints, or
 * as 2 MPI_2INT, and the named pair types have holes.  Whether to offload
 * depends only on count x size (equal on every rank) and the communicator,
 * so every rank takes the same path; the local layout only decides how the
 * bytes get there: straight from / into the buffer when they are one run
 * in type-map order, else through PMPI_Pack / PMPI_Unpack and a buffer of
 * exactly those bytes (the homogeneous packed form is the type map's bytes
 * in order, what a contiguous buffer holds). */
API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root,
                  MPI_Comm comm)
{
    long bytes = smpi_bytes_of(count, dt);
    int why = smpi_bcast_why(bytes);
    comm_state_t *st = why == WHY_OK ? smpi_comm_sharp(comm, &why) : NULL;

    if (st == NULL || root < 0 || root >= st->size) {
        smpi_fallback(C_BCAST, bytes, comm, st == NULL ? why : WHY_ARGS,
                      MPI_DATATYPE_NULL, MPI_OP_NULL);
        return PMPI_Bcast(buf, count, dt, root, comm);
    }
    int len = (int)bytes, size = 0;
    char *p, *tmp = NULL;
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (buf != MPI_BOTTOM && (count == 1 || ext == (MPI_Aint)size) &&
        smpi_dense_type(dt, 0)) {
        p = (char *)buf + tlb;
    } else {
        p = tmp = smpi_xmalloc((size_t)len, comm, "MPI_Bcast");
        if (st->rank == root) {
            smpi_pack_data(1, buf, count, dt, tmp, len, comm);
        }
    }
    if (bcast_bytes(st, p, len, root, comm) == OP_REDO) {
        free(tmp);
        fell_back(st, comm);
        smpi_fallback(C_BCAST, bytes, comm, WHY_FELL, MPI_DATATYPE_NULL,
                      MPI_OP_NULL);
        return PMPI_Bcast(buf, count, dt, root, comm);
    }
    if (tmp != NULL && st->rank != root) {
        smpi_pack_data(0, buf, count, dt, tmp, len, comm);
    }
    free(tmp);
    st->done_seq = st->seq;
    SMPI_ADD(smpi.calls[C_BCAST][0], 1);
    SMPI_ADD(smpi.bytes[C_BCAST][0], (unsigned long long)bytes);
    return MPI_SUCCESS;
}
