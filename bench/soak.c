/*
 * bench_soak: the chaos soak (make soak).
 *
 * A sharp-fabric of a 3-level fat-tree (20 switches, 16 hosts: sharp_am,
 * 20 sharp_an, 16 sharpd), in network namespaces when run as root (so
 * multicast crosses a bridge, links can be cut and 5% of every host's
 * multicast datagrams are dropped), else on loopback (127.29).  JOBS jobs
 * (64) run at once, each of MEMBERS (4) member processes on distinct
 * hosts, forked by a runner per job that serves their out-of-band
 * collectives (tests/support/oob_hub.h).  Every member loops: sharp_coll_init
 * (a fresh job id each time), a communicator, then verified operations
 * until the group fails or the soak ends: allreduce of every dtype (sum,
 * max, min), barrier, bcast from a moving root; every result is compared
 * with the fold computed locally.  Each communicator has a standby group
 * (SOAK_STANDBY=0: none): after a failure the members agree, through the
 * hub, to go on through it if every one has it (failovers counted);
 * otherwise, and after the standby's own failure, every member destroys
 * and finalizes and the job begins again.
 *
 * Meanwhile the chaos driver (this process) kills -9 and restarts random
 * ANs, sharpds and the manager, and (namespaces) cuts links of hosts and
 * ANs for a few seconds, one fault at a time.
 *
 * At the end: one table (operations, verified, wrong, failures and the
 * time from the fault to each report, hangs, jobs and groups still held at
 * the manager and at the ANs, restarts, daemon memory).  Exit status 1
 * when a wrong result, a hang, a report slower than 5 s, a group or job
 * left behind or memory growth beyond the bound was seen.
 *
 * Environment: SOAK_SECONDS (180), SOAK_JOBS (64), SOAK_MEMBERS (4),
 * SOAK_PACE_MS (pause between a member's operations, 250), SOAK_STANDBY
 * (1: a standby group per communicator; 0: none), SOAK_NETNS
 * (1 as root: namespaces; 0: loopback), SOAK_CHAOS (1; 0 for a calm run),
 * SOAK_KEEP (keep the fabric directory).
 */
#include "reduce/reduce.h"
#include "core/time.h"
#include <sharp/api/sharp.h>
#include "tests/support/oob_hub.h"
#include "tests/support/ctl_client.h"
#include "tests/support/fabric.h"
#include "tests/support/coll_desc.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define NHOSTS 16
#define MAXJOBS 64
#define MAXMEM 8
#define REPORT_BOUND_MS 5000
/* a restarted manager revokes what it cannot take back once its trees are
 * built: when every AN is back, at most its adopt_timeout (set below)
 * after its start; reports after a manager kill may take that longer */
#define ADOPT_TIMEOUT_MS 4000
#define REPORT_BOUND_AM_MS (REPORT_BOUND_MS + ADOPT_TIMEOUT_MS)
#define HANG_S 30
#define MEM_BOUND_KIB (32 * 1024)

typedef struct {
    uint64_t ops, verified, wrong, fails, setup_fails, incarnations;
    uint64_t failovers, no_standby; /* to the standby group; none made */
    uint64_t rep_max_ms, rep_sum_ms, rep_over, unexplained;
    uint64_t kind_n[4], kind_max_ms[4]; /* by the kind of the last fault */
    uint64_t progress_ns;               /* last sign of life */
    int busy;                           /* 1 while inside a sharp_coll call */
} mstat_t;

typedef struct {
    int stop;
    uint64_t t0;            /* when the jobs began */
    uint64_t last_event_ns; /* when the latest fault was injected */
    int last_kind;          /* 0 AN, 1 sharpd, 2 manager killed, 3 link cut */
    mstat_t m[MAXJOBS][MAXMEM];
} shared_t;

static shared_t *sh;
static test_fabric_t fab; /* its dir: the fabric's, the logs, the topology */
static int njobs = 64, nmem = 4, pace_ms = 250, use_netns, chaos = 1;
static int use_standby = 1;
static int job_hosts[MAXJOBS][MAXMEM];
static int job_index; /* in a runner and its members */

static uint64_t now_ns(void)
{
    return shp_time_ns();
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* --- members ------------------------------------------------------------ */

static const int dtypes[] = {
    SHARP_DTYPE_UNSIGNED,       SHARP_DTYPE_INT,   SHARP_DTYPE_UNSIGNED_LONG,
    SHARP_DTYPE_LONG,           SHARP_DTYPE_FLOAT, SHARP_DTYPE_DOUBLE,
    SHARP_DTYPE_UNSIGNED_SHORT, SHARP_DTYPE_SHORT, SHARP_DTYPE_FLOAT_SHORT,
    SHARP_DTYPE_BFLOAT16,       SHARP_DTYPE_UINT8, SHARP_DTYPE_INT8};
#define NDT ((int)(sizeof(dtypes) / sizeof(dtypes[0])))
static const int dsize[] = {4, 4, 8, 8, 4, 8, 2, 2, 2, 2, 1, 1};
static const int dsigned[] = {0, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1};
static const int ops3[] = {SHARP_OP_SUM, SHARP_OP_MAX, SHARP_OP_MIN};

/* a member's value: small integers, exact in every dtype, and sums of 8 of
 * them too (|x| <= 8 * 16 = 128 < 256: bfloat16's exact range) */
static int64_t value(uint64_t job, uint64_t k, int rank, size_t i, int sgn)
{
    uint64_t x = job * 0x9e3779b97f4a7c15ull ^ (k << 20) ^
                 ((uint64_t)rank << 48) ^ (i * 0xbf58476d1ce4e5b9ull);
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return sgn ? (int64_t)(x % 32) - 16 : (int64_t)(x % 16);
}

static void store(void *buf, size_t i, int t, int64_t v)
{
    switch (t) {
    case 0: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case 1: ((int32_t *)buf)[i] = (int32_t)v; break;
    case 2: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case 3: ((int64_t *)buf)[i] = v; break;
    case 4: ((float *)buf)[i] = (float)v; break;
    case 5: ((double *)buf)[i] = (double)v; break;
    case 6: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case 7: ((int16_t *)buf)[i] = (int16_t)v; break;
    case 8: ((uint16_t *)buf)[i] = shp_f32_to_f16((float)v); break;
    case 9: ((uint16_t *)buf)[i] = shp_f32_to_bf16((float)v); break;
    case 10: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: ((int8_t *)buf)[i] = (int8_t)v; break;
    }
}

static mstat_t *me;

static void alive(void)
{
    __atomic_store_n(&me->progress_ns, now_ns(), __ATOMIC_RELAXED);
}

/* a failed operation: the time since the latest fault */
static void failed(int rank, uint64_t k, const char *what)
{
    uint64_t ev = __atomic_load_n(&sh->last_event_ns, __ATOMIC_RELAXED);
    uint64_t ms = (now_ns() - ev) / 1000000;
    me->fails++;
    if (ev == 0 || ms > 60000) {
        me->unexplained++;
        fprintf(stderr,
                "soak: job %d rank %d: %s %" PRIu64
                " failed with no fault in the last minute\n",
                job_index, rank, what, k);
        return;
    }
    int kind = __atomic_load_n(&sh->last_kind, __ATOMIC_RELAXED) & 3;
    me->kind_n[kind]++;
    me->kind_max_ms[kind] =
        ms > me->kind_max_ms[kind] ? ms : me->kind_max_ms[kind];
    me->rep_sum_ms += ms;
    me->rep_max_ms = ms > me->rep_max_ms ? ms : me->rep_max_ms;
    if (ms > (kind == 2 ? REPORT_BOUND_AM_MS : REPORT_BOUND_MS)) {
        me->rep_over++;
        fprintf(stderr,
                "soak: t=%.1f job %d rank %d: %s %" PRIu64 " failed %" PRIu64
                " ms after the last fault\n",
                (double)(now_ns() - sh->t0) / 1e9, job_index, rank, what, k,
                ms);
    }
}

/* operation k of a communicator: 1 done and right, 0 failed, -1 wrong */
static int one_op(struct sharp_coll_comm *c, uint64_t job, uint64_t k, int rank,
                  int *stop)
{
    static uint8_t sbuf[8 * 600], rbuf[8 * 600], ref[8 * 600];
    int kind = (int)(k % 16), size = nmem;
    if (kind < NDT) { /* allreduce of dtype `kind` */
        int t = kind, op = ops3[(k / 16) % 3];
        size_t n = 1 + (k * 37) % 500, len = n * (size_t)dsize[t];
        for (size_t i = 0; i < n; i++) {
            int64_t acc = 0;
            for (int r = 0; r < size; r++) {
                int64_t v = value(job, k, r, i, dsigned[t]);
                if (r == 0) {
                    acc = v;
                } else if (op == SHARP_OP_SUM) {
                    acc += v;
                } else if (op == SHARP_OP_MAX) {
                    acc = v > acc ? v : acc;
                } else {
                    acc = v < acc ? v : acc;
                }
                if (r == rank) {
                    store(sbuf, i, t, v);
                }
            }
            store(ref, i, t, acc);
        }
        memset(rbuf, 0xee, len);
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(sbuf, len);
        sp.rbuf_desc = test_host_desc(rbuf, len);
        sp.dtype = dtypes[t];
        sp.op = op;
        sp.length = n;
        if (sharp_coll_do_allreduce(c, &sp) != SHARP_COLL_SUCCESS) {
            return 0;
        }
        if (memcmp(rbuf, ref, len) != 0) {
            fprintf(stderr,
                    "soak: WRONG job %" PRIu64 " op %" PRIu64
                    " rank %d: allreduce dtype %d op %d count %zu\n",
                    job, k, rank, dtypes[t], op, n);
            return -1;
        }
        return 1;
    }
    if (kind == 12) {
        return sharp_coll_do_barrier(c) == SHARP_COLL_SUCCESS;
    }
    /* bcast from a moving root; kind 15 is rank 0's stop flag, so that
     * every member leaves at the same operation */
    int root = kind == 15 ? 0 : (int)((k / 16) % (uint64_t)size);
    size_t len = kind == 15 ? 16 : 1 + (k * 131) % 4000;
    for (size_t i = 0; i < len; i++) {
        ref[i] = (uint8_t)value(job, k, root, i, 0) * 17;
    }
    if (kind == 15) {
        ref[0] = (uint8_t)__atomic_load_n(&sh->stop, __ATOMIC_RELAXED);
    }
    memcpy(rbuf, ref, len);
    if (rank != root) {
        memset(rbuf, 0xee, len);
    }
    struct sharp_coll_bcast_spec bs;
    memset(&bs, 0, sizeof(bs));
    bs.root = root;
    bs.buf_desc = test_host_desc(rbuf, len);
    bs.size = len;
    if (sharp_coll_do_bcast(c, &bs) != SHARP_COLL_SUCCESS) {
        return 0;
    }
    if (kind == 15) {
        *stop = rbuf[0] != 0;
        ref[0] = rbuf[0];
    }
    if (memcmp(rbuf, ref, len) != 0) {
        fprintf(stderr,
                "soak: WRONG job %" PRIu64 " op %" PRIu64
                " rank %d: bcast root %d len %zu\n",
                job, k, rank, root, len);
        return -1;
    }
    return 1;
}

/* c's operations from *k on, until the stop flag (1) or a failure (0,
 * *k the operation that failed) */
static int run_ops(struct sharp_coll_comm *c, uint64_t job, uint64_t *k,
                   int rank)
{
    int stop = 0;
    for (; !stop; ++*k) {
        alive();
        int r = one_op(c, job, *k, rank, &stop);
        alive();
        if (r == 0) {
            failed(rank, *k, "operation");
            return 0;
        }
        me->ops++;
        if (r > 0) {
            me->verified++;
        } else {
            me->wrong++;
        }
        me->busy = 0;
        usleep((useconds_t)pace_ms * 1000);
        me->busy = 1;
    }
    return 1;
}

/* After the op loop ended (stopped: the stop flag; else failed at k): the
 * members agree, through the hub, whether they go on through the standby
 * group: only if none stopped and every one has it; then from the latest
 * operation that failed anywhere (the ones before completed somewhere:
 * the soak's operations stand alone).  The operation to go on from, or -1;
 * -2 if the hub failed. */
static int64_t failover_at(hub_oob_t *oob, int rank, int stopped, uint64_t k,
                           int have_standby)
{
    int64_t mine[2] = {stopped ? -1 : (int64_t)k, have_standby}, at = -1;
    int64_t all[2 * MAXMEM];
    if (hub_gather(oob, 0, mine, all, (int)sizeof(mine)) != 0) {
        return -2;
    }
    if (rank == 0) {
        for (int r = 0; r < nmem; r++) {
            if (all[2 * r] < 0 || !all[2 * r + 1]) {
                at = -1;
                break;
            }
            at = all[2 * r] > at ? all[2 * r] : at;
        }
    }
    if (hub_bcast(oob, &at, (int)sizeof(at), 0) != 0) {
        return -2;
    }
    return at;
}

/* one incarnation's communicator and, with SOAK_STANDBY, its standby: the
 * operations through the first, then through the standby if the first
 * failed and every member can go on (failover_at).  -1: the hub failed. */
static int run_comm(struct sharp_coll_context *ctx,
                    struct sharp_coll_comm_init_spec *cs,
                    struct sharp_coll_comm *comm, hub_oob_t *oob, uint64_t job,
                    int rank)
{
    struct sharp_coll_comm *standby = NULL;
    if (use_standby && sharp_coll_comm_init_standby(ctx, cs, comm, &standby) !=
                           SHARP_COLL_SUCCESS) {
        standby = NULL;
        me->no_standby++;
    }
    int rc = 0;
    for (uint64_t k = 0;;) {
        int stopped = run_ops(comm, job, &k, rank);
        int64_t at = failover_at(oob, rank, stopped, k, standby != NULL);
        if (at < 0) {
            rc = at == -2 ? -1 : 0;
            break;
        }
        sharp_coll_comm_destroy(comm);
        comm = standby;
        standby = NULL;
        k = (uint64_t)at;
        me->failovers++;
    }
    sharp_coll_comm_destroy(comm);
    if (standby != NULL) {
        sharp_coll_comm_destroy(standby);
    }
    return rc;
}

static int member(int rank, void *arg)
{
    (void)arg;
    alarm(0); /* the soak bounds itself (hangs are counted, then killed) */
    me = &sh->m[job_index][rank];
    test_fabric_become_host(&fab, job_hosts[job_index][rank]);
    hub_oob_t oob = {1, rank, nmem};
    for (uint64_t inc = 0;; inc++) {
        /* rank 0's stop flag, so that every member leaves here together
         * (a member gone would leave the others' out-of-band calls
         * waiting) */
        int32_t stop_all = __atomic_load_n(&sh->stop, __ATOMIC_RELAXED);
        alive();
        if (hub_bcast(&oob, &stop_all, sizeof(stop_all), 0) != 0) {
            return 1;
        }
        if (stop_all) {
            break;
        }
        uint64_t job = (uint64_t)(job_index + 1) * 1000000 + inc;
        struct sharp_coll_init_spec s = {0};
        struct sharp_coll_context *ctx = NULL;
        struct sharp_coll_comm *comm = NULL;
        s.job_id = job;
        s.world_rank = rank;
        s.world_size = nmem;
        s.config = sharp_coll_default_config;
        s.config.coll_timeout = 10000;
        s.oob_colls.bcast = hub_bcast;
        s.oob_colls.barrier = hub_barrier;
        s.oob_colls.gather = hub_gather;
        s.oob_ctx = &oob;
        alive();
        me->busy = 1;
        if (sharp_coll_init(&s, &ctx) != SHARP_COLL_SUCCESS) {
            me->busy = 0;
            me->setup_fails++;
            usleep(1000000);
            continue;
        }
        struct sharp_coll_comm_init_spec cs = {
            .rank = rank, .size = nmem, .oob_ctx = &oob};
        if (sharp_coll_comm_init(ctx, &cs, &comm) != SHARP_COLL_SUCCESS) {
            me->setup_fails++;
            sharp_coll_finalize(ctx);
            me->busy = 0;
            usleep(1000000);
            continue;
        }
        me->incarnations++;
        if (run_comm(ctx, &cs, comm, &oob, job, rank) != 0) {
            return 1;
        }
        sharp_coll_finalize(ctx);
        me->busy = 0;
        alive();
    }
    return 0;
}

/* a runner: the members of one job and their out-of-band hub */
static void runner(int j)
{
    job_index = j;
    char log[400];
    snprintf(log, sizeof(log), "%s/logs/job-%02d.log", fab.dir, j);
    if (freopen(log, "w", stderr) == NULL) {
        _exit(1);
    }
    setvbuf(stderr, NULL, _IOLBF, 0);
    hub_t *h = calloc(1, sizeof(*h));
    for (int r = 0; r < nmem; r++) {
        if (hub_spawn(h, member, r, NULL) < 0) {
            _exit(1);
        }
    }
    /* the driver ends it: members see the stop flag, or are killed */
    _exit(hub_run(h, 1e9) == nmem ? 0 : 1);
}

/* --- the driver --------------------------------------------------------- */

typedef struct {
    char kind[16], name[64];
    long rss0, rss1;
    int restarts;
} daemon_t;

static daemon_t daemons[64];
static int ndaemons;
static int n_ans, n_restarts[3]; /* am, an, sharpd */
static int n_cuts;
/* manager kills: the jobs running then, and those of them that kept their
 * offload (no member failed or began again from the kill until
 * KEPT_WATCH_MS after the restart: the restarted manager took them back) */
static int n_am_jobs, n_am_kept;
#define KEPT_WATCH_MS 8000

/* a job's failures and beginnings so far, summed over its members; 0 in
 * *running if it has no group now */
static uint64_t job_changes(int j, int *running)
{
    uint64_t n = 0;
    *running = 1;
    for (int m = 0; m < nmem; m++) {
        const mstat_t *s = &sh->m[j][m];
        n += s->fails + s->setup_fails + s->incarnations;
        *running &= s->incarnations > 0;
    }
    return n;
}

static long rss_kib(pid_t pid)
{
    char p[64], line[256];
    long kib = -1;
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "VmRSS: %ld", &kib) == 1) {
            break;
        }
    }
    if (f) {
        fclose(f);
    }
    return kib;
}

/* read DIR/pids: every daemon's current RSS into rss0 (first) or rss1 */
static void sample_memory(int end)
{
    char p[400], kind[16], name[64], addr[64];
    int pid;
    snprintf(p, sizeof(p), "%s/pids", fab.dir);
    FILE *f = fopen(p, "r");
    while (f && fscanf(f, "%15s %63s %63s %d", kind, name, addr, &pid) == 4) {
        daemon_t *d = NULL;
        for (int i = 0; i < ndaemons; i++) {
            if (!strcmp(daemons[i].name, name)) {
                d = &daemons[i];
            }
        }
        if (d == NULL && ndaemons < 64) {
            d = &daemons[ndaemons++];
            snprintf(d->kind, sizeof(d->kind), "%s", kind);
            snprintf(d->name, sizeof(d->name), "%s", name);
        }
        if (d) {
            *(end ? &d->rss1 : &d->rss0) = rss_kib(pid);
        }
    }
    if (f) {
        fclose(f);
    }
}

/* sharp-fabric WHAT NAME; on failure its reason (the last line it wrote
 * to the chaos log) goes to stderr too: the log is gone after the run */
static void fabric(const char *what, const char *name)
{
    char path[600], line[512], last[512] = "";
    FILE *f;

    if (test_fabric_do(&fab, "%s %s >>%s/logs/chaos.log 2>&1", what, name,
                       fab.dir) == 0) {
        return;
    }
    snprintf(path, sizeof(path), "%s/logs/chaos.log", fab.dir);
    if ((f = fopen(path, "r")) != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            snprintf(last, sizeof(last), "%s", line);
        }
        fclose(f);
    }
    last[strcspn(last, "\n")] = '\0';
    fprintf(stderr, "soak: sharp-fabric %s %s failed%s%s\n", what, name,
            last[0] ? ": " : "", last);
}

static FILE *chaos_log;

static void event(const char *what, const char *name, int kind)
{
    __atomic_store_n(&sh->last_kind, kind, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->last_event_ns, now_ns(), __ATOMIC_RELAXED);
    fprintf(chaos_log, "t=%.1f %s %s\n", (double)(now_ns() - sh->t0) / 1e9,
            what, name);
    fflush(chaos_log);
}

static void pause_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

static char an_names[64][32];

static void chaos_once(unsigned *seed)
{
    int what = (int)(rand_r(seed) % 10),
        down = 1000 + (int)(rand_r(seed) % 2000);
    char name[32];
    if (what < 4) { /* an AN */
        snprintf(name, sizeof(name), "%s",
                 an_names[rand_r(seed) % (unsigned)n_ans]);
    } else if (what < 7) { /* a sharpd */
        snprintf(name, sizeof(name), "n%05d", 1 + (int)(rand_r(seed) % NHOSTS));
    } else if (what < 8) {
        snprintf(name, sizeof(name), "sharp_am");
    } else if (use_netns) { /* a link cut: a host's or an AN's */
        if (what == 8) {
            snprintf(name, sizeof(name), "n%05d",
                     1 + (int)(rand_r(seed) % NHOSTS));
        } else {
            snprintf(name, sizeof(name), "%s",
                     an_names[rand_r(seed) % (unsigned)n_ans]);
        }
        char args[64];
        event("link down", name, 3);
        snprintf(args, sizeof(args), "%s down", name);
        fabric("link", args);
        n_cuts++;
        pause_ms(down);
        snprintf(args, sizeof(args), "%s up", name);
        fabric("link", args);
        return;
    } else {
        return; /* no links to cut on loopback */
    }
    uint64_t before[MAXJOBS];
    int running[MAXJOBS];
    for (int j = 0; what == 7 && j < njobs; j++)
        before[j] = job_changes(j, &running[j]);
    event("kill -9", name, what < 4 ? 0 : what < 7 ? 1 : 2);
    fabric("kill", name);
    pause_ms(down);
    fabric("start", name);
    if (what == 7) { /* which jobs kept their offload through it */
        pause_ms(KEPT_WATCH_MS);
        for (int j = 0; j < njobs; j++) {
            int r;
            if (!running[j])
                continue;
            n_am_jobs++;
            n_am_kept += job_changes(j, &r) == before[j];
        }
    }
    n_restarts[what < 4 ? 1 : what < 7 ? 2 : 0]++;
    for (int i = 0; i < ndaemons; i++) {
        if (!strcmp(daemons[i].name, name)) {
            daemons[i].restarts++;
        }
    }
}

/* the manager's admin answer to `type` (NULL if it cannot be had) */
static json_t *admin(const char *type)
{
    char p[400];
    snprintf(p, sizeof(p), "%s/am.sock", fab.dir);
    int fd = shp_unix_connect(p);
    if (fd < 0) {
        return NULL;
    }
    json_t *r = call(fd, json_pack("{s:s}", "type", type));
    close(fd);
    return r;
}

/* jobs and groups the manager holds, groups the ANs say they hold */
static void held(int *jobs, int *groups, int *an_groups)
{
    json_t *r = admin("jobs");
    *jobs = r ? (int)json_array_size(json_object_get(r, "jobs")) : -1;
    json_decref(r);
    r = admin("groups");
    *groups = r ? (int)json_array_size(json_object_get(r, "groups")) : -1;
    json_decref(r);
    r = admin("ans");
    *an_groups = r ? 0 : -1;
    size_t i;
    json_t *a;
    json_array_foreach(r ? json_object_get(r, "ans") : NULL, i, a)
    {
        json_t *c = json_object_get(a, "counters");
        *an_groups += (int)json_integer_value(json_object_get(c, "groups"));
    }
    json_decref(r);
}

int main(void)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/sharp-soak.%d", (int)getpid());
    if (test_fabric_init(&fab, "", dir) != 0) {
        return 1;
    }
    int secs = env_int("SOAK_SECONDS", 180);
    njobs = env_int("SOAK_JOBS", 64);
    nmem = env_int("SOAK_MEMBERS", 4);
    pace_ms = env_int("SOAK_PACE_MS", 250);
    chaos = env_int("SOAK_CHAOS", 1);
    use_standby = env_int("SOAK_STANDBY", 1);
    use_netns = env_int("SOAK_NETNS", geteuid() == 0);
    if (njobs < 1 || njobs > MAXJOBS || nmem < 2 || nmem > MAXMEM ||
        secs < 10) {
        fprintf(stderr,
                "soak: SOAK_JOBS 1..%d, SOAK_MEMBERS 2..%d, "
                "SOAK_SECONDS >= 10\n",
                MAXJOBS, MAXMEM);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (mkdir(dir, 0700) != 0 || test_fabric_sh("mkdir -p %s/logs", dir) != 0) {
        return 1;
    }
    /* the fabric: keepalives of 1 s so that lost peers are noticed fast;
     * results by multicast and RC (namespaces) */
    char topo[128], topo_args[128], env[256], up_log[128];
    snprintf(topo, sizeof(topo), "%s/ft3.ibnd", dir);
    snprintf(topo_args, sizeof(topo_args),
             "fat-tree --levels 3 --radix 4 --hosts %d", NHOSTS);
    snprintf(env, sizeof(env),
             "SHARP_AM_KEEPALIVE=1s SHARPD_KEEPALIVE=1s "
             "SHARP_AN_AM_KEEPALIVE=1s SHARP_AM_STATS_INTERVAL=1s "
             "SHARP_AM_GROUP_TIMEOUT=5s SHARP_AM_ADOPT_TIMEOUT=%ds%s",
             ADOPT_TIMEOUT_MS / 1000, use_netns ? " SHARP_AM_DIST=both" : "");
    snprintf(up_log, sizeof(up_log), ">%s/logs/up.log 2>&1", dir);
    if (test_fabric_topo(&fab, topo_args, topo) != 0 ||
        test_fabric_up(&fab, env, topo, use_netns ? NULL : "127.29", up_log) !=
            0) {
        fprintf(stderr, "soak: the fabric did not come up (%s/logs)\n", dir);
        return 1;
    }
    if (use_netns) {
        for (int h = 0; h < NHOSTS; h++) {
            char name[32];
            snprintf(name, sizeof(name), "n%05d 5 --udp", h + 1);
            fabric("loss", name);
        }
    }
    sample_memory(0);
    for (int i = 0; i < ndaemons; i++) {
        if (!strcmp(daemons[i].kind, "an")) {
            snprintf(an_names[n_ans++], sizeof(an_names[0]), "%s",
                     daemons[i].name);
        }
    }
    /* members' hosts: job j on hosts j*m, j*m+1 ... (mod 16): distinct,
     * and every host carries as many members */
    for (int j = 0; j < njobs; j++) {
        for (int r = 0; r < nmem; r++) {
            job_hosts[j][r] = (j * nmem + r + j / (NHOSTS / nmem)) % NHOSTS;
        }
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    setenv("SHARP_COLL_LOG_LEVEL", "1", 1);
    pid_t runners[MAXJOBS];
    uint64_t t0 = now_ns();
    sh->t0 = t0;
    char clog[400];
    snprintf(clog, sizeof(clog), "%s/logs/chaos.log", dir);
    chaos_log = fopen(clog, "a");
    if (chaos_log == NULL) {
        return 1;
    }
    for (int j = 0; j < njobs; j++) {
        runners[j] = fork();
        if (runners[j] == 0) {
            runner(j);
        }
    }
    printf("soak: %d jobs x %d members on a 3-level fat-tree (%d ANs, %d "
           "hosts)%s, %d s%s\n",
           njobs, nmem, n_ans, NHOSTS,
           use_netns ? " in network namespaces, 5% of multicast dropped"
                     : " on loopback",
           secs, chaos ? ", chaos" : ", no chaos");
    fflush(stdout);

    /* chaos, one fault at a time, while watching for hangs */
    unsigned seed = (unsigned)getpid();
    int hangs = 0;
    uint64_t flagged[MAXJOBS][MAXMEM] = {{0}};
    uint64_t end = t0 + (uint64_t)secs * SHP_NSEC_PER_SEC;
    pause_ms(5000); /* the jobs begin */
    while (now_ns() < end) {
        if (chaos) {
            chaos_once(&seed);
        }
        pause_ms(2000 + (int)(rand_r(&seed) % 3000));
        for (int j = 0; j < njobs; j++) {
            for (int r = 0; r < nmem; r++) {
                mstat_t *m = &sh->m[j][r];
                uint64_t p = __atomic_load_n(&m->progress_ns, __ATOMIC_RELAXED);
                if (m->busy && p && now_ns() - p > HANG_S * SHP_NSEC_PER_SEC &&
                    flagged[j][r] != p) {
                    flagged[j][r] = p;
                    hangs++;
                    fprintf(stderr,
                            "soak: job %d rank %d: no progress for %d s\n", j,
                            r, HANG_S);
                }
            }
        }
    }
    /* the end: every member leaves at its next stop flag */
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELAXED);
    int stuck = 0;
    uint64_t grace = now_ns() + 40 * SHP_NSEC_PER_SEC;
    for (int j = 0; j < njobs; j++) {
        int st;
        while (waitpid(runners[j], &st, WNOHANG) == 0) {
            if (now_ns() > grace) {
                stuck++;
                fprintf(stderr, "soak: job %d did not end; killed\n", j);
                kill(runners[j], SIGKILL); /* its members die with the hub */
                waitpid(runners[j], &st, 0);
                break;
            }
            pause_ms(100);
        }
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;
    /* jobs and groups left behind: the manager and the ANs have a few
     * seconds (revocations, the ANs' counters polled every second) */
    int jobs = -1, groups = -1, an_groups = -1;
    for (int t = 0; t < 15; t++) {
        pause_ms(1000);
        held(&jobs, &groups, &an_groups);
        if (jobs == 0 && groups == 0 && an_groups == 0) {
            pause_ms(1500); /* one more poll of the ANs */
            held(&jobs, &groups, &an_groups);
            break;
        }
    }
    sample_memory(1);

    mstat_t tot = {0};
    for (int j = 0; j < njobs; j++) {
        for (int r = 0; r < nmem; r++) {
            mstat_t *m = &sh->m[j][r];
            tot.ops += m->ops;
            tot.verified += m->verified;
            tot.wrong += m->wrong;
            tot.fails += m->fails;
            tot.setup_fails += m->setup_fails;
            tot.incarnations += m->incarnations;
            tot.failovers += m->failovers;
            tot.no_standby += m->no_standby;
            tot.rep_sum_ms += m->rep_sum_ms;
            tot.rep_over += m->rep_over;
            tot.unexplained += m->unexplained;
            for (int q = 0; q < 4; q++) {
                tot.kind_n[q] += m->kind_n[q];
                tot.kind_max_ms[q] = m->kind_max_ms[q] > tot.kind_max_ms[q]
                                         ? m->kind_max_ms[q]
                                         : tot.kind_max_ms[q];
            }
            tot.rep_max_ms =
                m->rep_max_ms > tot.rep_max_ms ? m->rep_max_ms : tot.rep_max_ms;
        }
    }
    long grow_max[3] = {0}, rss0[3] = {0}, rss1[3] = {0};
    int grow_bad = 0;
    for (int i = 0; i < ndaemons; i++) {
        daemon_t *d = &daemons[i];
        int k = !strcmp(d->kind, "am") ? 0 : !strcmp(d->kind, "an") ? 1 : 2;
        rss0[k] = d->rss0 > rss0[k] ? d->rss0 : rss0[k];
        rss1[k] = d->rss1 > rss1[k] ? d->rss1 : rss1[k];
        if (d->restarts == 0 && d->rss1 - d->rss0 > grow_max[k]) {
            grow_max[k] = d->rss1 - d->rss0;
        }
        if (d->restarts == 0 && d->rss1 - d->rss0 > MEM_BOUND_KIB) {
            grow_bad = 1;
        }
    }
    double load[3] = {0};
    (void)getloadavg(load, 3);
    int bad = tot.wrong || hangs || stuck || tot.rep_over || tot.unexplained ||
              jobs || groups || an_groups || grow_bad;
    printf("\n%-44s %12s\n", "chaos soak", "");
    printf("%-44s %12.0f\n", "seconds", elapsed);
    printf("%-44s %12" PRIu64 "\n", "operations done (member calls)", tot.ops);
    printf("%-44s %12" PRIu64 "\n", "  verified against the local fold",
           tot.verified);
    printf("%-44s %12" PRIu64 "  (must be 0)\n", "  wrong", tot.wrong);
    printf("%-44s %12" PRIu64 "\n", "job incarnations (init + communicator)",
           tot.incarnations / (uint64_t)nmem);
    printf("%-44s %12" PRIu64 "\n", "init/communicator refused (per member)",
           tot.setup_fails);
    printf("%-44s %12" PRIu64 "\n", "failures reported (per member)",
           tot.fails);
    printf("%-44s %12" PRIu64 "\n", "  failovers to the standby (per member)",
           tot.failovers);
    printf("%-44s %12" PRIu64 "\n",
           "communicators without a standby (per member)", tot.no_standby);
    printf("%-44s %9.0f ms\n", "  mean time from the fault to the report",
           tot.fails > tot.unexplained
               ? (double)tot.rep_sum_ms / (double)(tot.fails - tot.unexplained)
               : 0.0);
    printf("%-44s %9" PRIu64 " ms  (must be <= %d; %d after a manager kill)\n",
           "  longest", tot.rep_max_ms, REPORT_BOUND_MS, REPORT_BOUND_AM_MS);
    static const char *fault[4] = {"an AN killed", "a sharpd killed",
                                   "the manager killed", "a link cut"};
    for (int q = 0; q < 4; q++) {
        char label[80];
        snprintf(label, sizeof(label), "    after %s: reports, longest",
                 fault[q]);
        printf("%-44s %6" PRIu64 " %6" PRIu64 " ms\n", label, tot.kind_n[q],
               tot.kind_max_ms[q]);
    }
    char late[64];
    snprintf(late, sizeof(late),
             "  later than %d s (%d s after a manager kill)",
             REPORT_BOUND_MS / 1000, REPORT_BOUND_AM_MS / 1000);
    printf("%-44s %12" PRIu64 "  (must be 0)\n", late, tot.rep_over);
    printf("%-44s %12" PRIu64 "  (must be 0)\n", "  with no fault before them",
           tot.unexplained);
    printf("%-44s %12d  (must be 0)\n", "hangs (no progress for 30 s)",
           hangs + stuck);
    printf("%-44s %12d  (must be 0)\n", "jobs held at the manager at the end",
           jobs);
    printf("%-44s %12d  (must be 0)\n", "groups held at the manager at the end",
           groups);
    printf("%-44s %12d  (must be 0)\n", "groups held at the ANs at the end",
           an_groups);
    printf("%-44s %5d am %3d an %3d sharpd\n", "daemons killed and restarted",
           n_restarts[0], n_restarts[1], n_restarts[2]);
    printf("%-44s %12d\n", "link cuts", n_cuts);
    printf("%-44s %5d of %d\n", "manager kills: jobs that kept their offload",
           n_am_kept, n_am_jobs);
    static const char *kinds[3] = {"sharp_am", "sharp_an", "sharpd"};
    for (int k = 0; k < 3; k++) {
        char label[80];
        snprintf(label, sizeof(label), "memory %s (largest, KiB) start/end",
                 kinds[k]);
        printf("%-44s %6ld/%-6ld growth %ld (not restarted; bound %d)\n", label,
               rss0[k], rss1[k], grow_max[k], MEM_BOUND_KIB);
    }
    printf("%-44s %12.2f\n", "load average (1 min) at the end", load[0]);
    printf("RESULT soak_ops=%" PRIu64 " wrong=%" PRIu64 " hangs=%d "
           "report_max_ms=%" PRIu64 " held=%d failovers=%" PRIu64 " %s\n",
           tot.ops, tot.wrong, hangs + stuck, tot.rep_max_ms,
           jobs + groups + an_groups, tot.failovers, bad ? "FAIL" : "ok");
    fflush(stdout);

    char down_log[128];
    snprintf(down_log, sizeof(down_log), ">>%s/logs/chaos.log 2>&1", dir);
    test_fabric_down(&fab, down_log);
    if (getenv("SOAK_KEEP") == NULL && !bad) {
        test_fabric_sh("rm -rf %s", dir);
    } else {
        printf("soak: logs in %s\n", dir);
    }
    return bad ? 1 : 0;
}
