/*
 * sharp-hello's checks, one function a step, in the order a job needs
 * them; each reports its outcome and, when it fails, the cause (what
 * sharpd, the manager or the library said) and a remedy:
 *
 *   1 sharpd     this host's sharpd answers, and who it takes the caller
 *                for (SO_PEERCRED)
 *   2 manager    sharpd is registered with the manager (reached, the
 *                cluster secret proved both ways, this host in its
 *                topology)
 *   3 tree       the manager admits a job on this host: a tree covers it
 *   4 quota      ... within its quotas (jobs, groups)
 *   5 group      a group (of this one process, or of every copy with
 *                --peers) is created and joined at its leaf aggregation
 *                node
 *   6 allreduce  an allreduce through the fabric returns the right result
 *
 * Steps 3 and 4 ask sharpd for a job as the library does, to hear the
 * manager's reason when it refuses, and end it at once; steps 5 and 6 go
 * through libsharp_coll as a job of their own.
 */
#include "cli/hello/hello.h"

#include "core/net.h"
#include "core/paths.h"
#include "core/status.h"
#include "protocol/ctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *const step_names[] = {"",      "sharpd", "manager",  "tree",
                                         "quota", "group",  "allreduce"};

/* one step's outcome: printed, and kept for --json */
static void report(shp_hello_t *h, int step, int ok, const char *detail,
                   const char *cause, const char *remedy)
{
    if (h->cfg.json) {
        json_t *s = json_pack("{s:i, s:s, s:b}", "step", step, "name",
                              step_names[step], "ok", ok);
        if (detail)
            json_object_set_new(s, "detail", json_string(detail));
        if (cause)
            json_object_set_new(s, "cause", json_string(cause));
        if (remedy)
            json_object_set_new(s, "remedy", json_string(remedy));
        json_array_append_new(h->steps, s);
        return;
    }
    printf("[%d/6] %-9s %s", step, step_names[step], ok ? "ok" : "FAILED");
    if (detail)
        printf(": %s", detail);
    printf("\n");
    if (cause)
        printf("      cause:  %s\n", cause);
    if (remedy)
        printf("      remedy: %s\n", remedy);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    static char bufs[4][1024];
    static int n;
    char *b = bufs[n++ % 4];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof(bufs[0]), f, ap);
    va_end(ap);
    return b;
}

/* one request to sharpd on a connection of its own; NULL: *why says */
static json_t *sharpd_call(const char *sock, json_t *req, const char **why)
{
    shp_status_t st;
    int fd = shp_unix_connect(sock);
    json_t *r = NULL;
    static char err[512];

    json_object_set_new(req, "id", json_integer(1));
    if (fd < 0) {
        snprintf(err, sizeof(err), "%s", strerror(errno));
        *why = err;
    } else {
        r = shp_ctl_call_fd(fd, req, &st, why);
        close(fd);
    }
    json_decref(req);
    return r;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int shp_hello_finish(shp_hello_t *h, int failed)
{
    if (h->cfg.json) {
        json_t *o = json_pack("{s:b, s:i, s:o}", "ok", failed == 0,
                              "failed_step", failed, "steps", h->steps);
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s)
            puts(s);
        free(s);
        json_decref(o);
    } else {
        if (failed == 0)
            printf("sharp works on this host.\n");
        json_decref(h->steps);
    }
    h->steps = NULL;
    return failed;
}

/* 1: sharpd answers, and says who we are */
int shp_hello_sharpd(shp_hello_t *h)
{
    const char *why = NULL, *sock = h->sock;
    json_t *hello =
        sharpd_call(sock, json_pack("{s:s}", "type", "hello"), &why);
    if (hello == NULL) {
        report(h, 1, 0, fmt("no answer on %s", sock), why,
               fmt("start sharpd on this host (as root: systemctl start "
                   "sharpd; its log: journalctl -u sharpd), or point "
                   "SHARP_COLL_SHARPD_SOCKET (--socket) at the socket it "
                   "listens on"));
        return 1;
    }
    h->hello = hello;
    h->host = shp_json_opt_str(hello, "host", "?");
    long long uid =
        (long long)shp_json_opt_int(hello, "uid", -1, INT64_MAX, -1);
    if (uid != (long long)getuid()) {
        report(h, 1, 0, fmt("sharpd at %s answers for host %s", sock, h->host),
               fmt("it takes this process for uid %lld, the kernel says %u",
                   uid, (unsigned)getuid()),
               "sharpd is older than this program or not sharp's: install "
               "the same version on every node");
        return 1;
    }
    report(h, 1, 1,
           fmt("sharpd at %s: this host is %s, you are uid %lld", sock, h->host,
               uid),
           NULL, NULL);
    return 0;
}

/* 2: registered with the manager (reached, authenticated, known) */
int shp_hello_manager(shp_hello_t *h)
{
    const char *am = shp_json_opt_str(h->hello, "am", "?");
    if (!json_is_true(json_object_get(h->hello, "am_up"))) {
        const char *err =
            shp_json_opt_str(h->hello, "am_error", "not registered");
        const char *remedy;
        if (strstr(err, "secret"))
            remedy = "install this host's node secret as " SHP_PATH_SECRET
                     " (mode 0600): on the manager's host, sharp_am "
                     "--node-secret sharpd:HOST prints it (HOST: this "
                     "host's name above; or the manager's cluster secret "
                     "itself, which proves any name); then systemctl "
                     "restart sharpd";
        else if (strstr(err, "not in the topology"))
            remedy = "the manager's topology has no host by this name: set "
                     "host = NAME in sharpd.conf (the name of this host's "
                     "adapter in the topology), or load a topology that has "
                     "it (ibnetdiscover; sharpctl topology load FILE)";
        else
            remedy = "start the manager (on its host: systemctl start "
                     "sharp_am), or correct am = HOST:PORT in sharpd.conf and "
                     "restart sharpd";
        report(h, 2, 0,
               fmt("sharpd of %s is not registered with the manager at %s",
                   h->host, am),
               err, remedy);
        return 2;
    }
    report(h, 2, 1,
           fmt("sharpd of %s is registered with the manager at %s (each "
               "proved its secret to the other)",
               h->host, am),
           NULL, NULL);
    return 0;
}

/* the manager's refusal of the probe job: quota (4) or tree (3) */
static int admission_refused(shp_hello_t *h, int64_t st, const char *err)
{
    /* the manager refuses a job_begin with SHP_ERR_JOB_REFUSED and its
     * reason (am/am_jobs.c, job admission): quota reasons say "maximum" */
    int quota = st == SHP_ERR_QUOTA || st == SHP_ERR_NO_RESOURCE ||
                (err && strstr(err, "maximum"));
    int tree = !quota && err &&
               (strstr(err, "tree") || strstr(err, "aggregation node"));
    const char *remedy =
        quota  ? "the fabric's quota is used up: wait for jobs to end, or "
                 "raise max_jobs (job_max_groups, group_osts) in "
                 "sharp_am.conf; sharpctl jobs lists who holds them"
        : tree ? "no aggregation tree covers this host: the aggregation "
                 "node of its switch must run and be registered "
                 "(sharpctl ans and sharpctl trees on the manager's "
                 "host; systemctl start sharp_an@SWITCH there)"
               : "see the manager's log (journalctl -u sharp_am)";
    report(h, quota ? 4 : 3, 0, fmt("the manager admits no job on %s", h->host),
           err, remedy);
    return quota ? 4 : 3;
}

/* 3, 4: a job of this host, asked for as the library does, to hear the
 * manager's reason when it refuses; then ended */
int shp_hello_admission(shp_hello_t *h)
{
    const char *why = NULL;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    h->probe = ((uint64_t)tv.tv_sec << 20 ^ (uint64_t)tv.tv_usec << 8 ^
                (uint64_t)getpid()) &
               ((1ull << 52) - 1);
    json_t *r = sharpd_call(
        h->sock,
        json_pack("{s:s, s:o, s:[s], s:{}}", "type", "job_begin", "job_id",
                  shp_json_u64(h->probe), "hosts", h->host, "req"),
        &why);
    int64_t st =
        r ? shp_json_opt_int(r, "status", INT32_MIN, INT32_MAX, SHP_ERR_PROTO)
          : SHP_ERR_IO;
    const char *err =
        r ? shp_json_opt_str(r, "error", shp_status_str(st)) : why;
    if (st != SHP_OK) {
        int failed = admission_refused(h, st, err);
        json_decref(r);
        return failed;
    }
    json_decref(r);
    report(h, 3, 1, fmt("a tree covers %s", h->host), NULL, NULL);
    r = sharpd_call(h->sock,
                    json_pack("{s:s, s:o}", "type", "job_end", "job_id",
                              shp_json_u64(h->probe)),
                    &why);
    json_decref(r);
    report(h, 4, 1, "the manager admitted a job within its quotas", NULL, NULL);
    return 0;
}

/* with --peers: the star, and rank 0's job id for all; 0 or 5 */
static int group_peers(shp_hello_t *h, struct sharp_coll_init_spec *spec)
{
    const char *perr = shp_hello_peers_connect(h->cfg.peers, 30);
    if (perr) {
        report(h, 5, 0,
               fmt("rank %d of %d: no job across the peers", shp_hello_rank,
                   shp_hello_size),
               perr,
               "start one copy per host with the same --peers HOST:PORT "
               "(rank 0's address, reachable from every host) and "
               "--size, each with its own --rank");
        return 5;
    }
    /* one job id for all: rank 0's */
    if (shp_hello_oob_bcast(NULL, &spec->job_id, sizeof(spec->job_id), 0))
        return 5;
    return 0;
}

/* 5, 6: the library, as a job of one process: a group, an allreduce */
int shp_hello_group(shp_hello_t *h)
{
    struct sharp_coll_init_spec spec = {0};
    spec.job_id = h->probe + 1;
    spec.world_rank = shp_hello_rank;
    spec.world_size = shp_hello_size;
    spec.world_local_rank = 0;
    spec.config = sharp_coll_default_config;
    spec.config.flags |= SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = shp_hello_oob_bcast;
    spec.oob_colls.barrier = shp_hello_oob_barrier;
    spec.oob_colls.gather = shp_hello_oob_gather;
    setenv("SHARP_COLL_SHARPD_SOCKET", h->sock, 1);
    if (shp_hello_size > 1 && group_peers(h, &spec))
        return 5;
    int rc = sharp_coll_init(&spec, &h->ctx);
    if (rc == SHARP_COLL_SUCCESS) {
        struct sharp_coll_comm_init_spec cs = {.rank = shp_hello_rank,
                                               .size = shp_hello_size};
        rc = sharp_coll_comm_init(h->ctx, &cs, &h->comm);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        report(h, 5, 0,
               fmt("no group of %d member%s", shp_hello_size,
                   shp_hello_size > 1 ? "s (one per host)" : ""),
               sharp_coll_strerror(rc),
               rc == SHARP_COLL_ECONN_TREE || rc == SHARP_COLL_EGROUP_JOIN
                   ? "the leaf aggregation node cannot be reached from this "
                     "host: check its advertise address and firewalls "
                     "(sharpctl ans shows the address)"
                   : "see sharpd's and the manager's logs; "
                     "SHARP_COLL_LOG_LEVEL=4 shows the library's steps");
        if (h->ctx)
            sharp_coll_finalize(h->ctx);
        h->ctx = NULL;
        return 5;
    }
    report(h, 5, 1,
           shp_hello_size > 1
               ? fmt("rank %d: a group of %d members (one per host), joined "
                     "at this host's leaf aggregation node",
                     shp_hello_rank, shp_hello_size)
               : "a group of one member, joined at its leaf aggregation node",
           NULL, NULL);
    return 0;
}

/* the allreduce of count int32 (rank r contributes i * 7 - 3 + r): its
 * status, and the elements wrong in *wrong, the time it took in *us */
static int allreduce_run(shp_hello_t *h, long count, int *wrong, double *us)
{
    int32_t *in = malloc((size_t)count * sizeof(*in));
    int32_t *out = calloc((size_t)count, sizeof(*out));
    struct sharp_coll_reduce_spec rs = {0};
    for (long i = 0; in && i < count; i++)
        in[i] = (int32_t)(i * 7 - 3 + shp_hello_rank);
    rs.sbuf_desc.type = SHARP_DATA_BUFFER;
    rs.sbuf_desc.mem_type = SHARP_MEM_TYPE_HOST;
    rs.sbuf_desc.buffer.ptr = in;
    rs.sbuf_desc.buffer.length = (size_t)count * sizeof(*in);
    rs.rbuf_desc = rs.sbuf_desc;
    rs.rbuf_desc.buffer.ptr = out;
    rs.dtype = SHARP_DTYPE_INT;
    rs.length = (size_t)count;
    rs.op = SHARP_OP_SUM;
    double t0 = now_us();
    int rc =
        in && out ? sharp_coll_do_allreduce(h->comm, &rs) : SHARP_COLL_ENOMEM;
    *us = now_us() - t0;
    *wrong = 0;
    int64_t ranks = (int64_t)shp_hello_size * (shp_hello_size - 1) / 2;
    for (long i = 0; rc == SHARP_COLL_SUCCESS && i < count; i++)
        *wrong += out[i] != (int32_t)((i * 7 - 3) * shp_hello_size + ranks);
    free(in);
    free(out);
    return rc;
}

/* 6: the allreduce, checked; then held --hold seconds, the group and the
 * job ended */
int shp_hello_allreduce(shp_hello_t *h)
{
    long count = (long)h->cfg.count;
    int wrong;
    double us;
    int rc = allreduce_run(h, count, &wrong, &us);
    if (rc != SHARP_COLL_SUCCESS || wrong) {
        report(h, 6, 0,
               fmt("allreduce of %ld int32 over %d host%s", count,
                   shp_hello_size, shp_hello_size > 1 ? "s" : ""),
               rc != SHARP_COLL_SUCCESS
                   ? sharp_coll_strerror(rc)
                   : fmt("%d of %ld elements wrong", wrong, count),
               "see the aggregation nodes' logs (journalctl -u "
               "'sharp_an@*'); sharpctl groups shows the group's state");
    } else {
        report(h, 6, 1,
               fmt("allreduce of %ld int32 over %d host%s through the "
                   "fabric: right, %.0f us",
                   count, shp_hello_size, shp_hello_size > 1 ? "s" : "", us),
               NULL, NULL);
    }
    if (h->cfg.hold > 0) {
        fflush(stdout);
        sleep(h->cfg.hold);
    }
    sharp_coll_comm_destroy(h->comm);
    sharp_coll_finalize(h->ctx);
    h->comm = NULL;
    h->ctx = NULL;
    return rc != SHARP_COLL_SUCCESS || wrong ? 6 : 0;
}
