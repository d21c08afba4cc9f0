/*
 * sharp-hello: "why does my job not get sharp?", answered on a compute node,
 * as the user.  It checks, one step after the other, what a job needs, and
 * stops at the first that fails with its cause and a remedy:
 *
 *   1 sharpd   this host's sharpd answers, and who it takes the caller for
 *   2 manager  sharpd is registered with the manager (reached, the cluster
 *              secret proved both ways, this host in its topology)
 *   3 tree     the manager admits a job on this host: a tree covers it
 *   4 quota    ... within its quotas (jobs, groups)
 *   5 group    a group of this one process is created and joined at its
 *              leaf aggregation node
 *   6 allreduce  an allreduce through the fabric returns the right result
 *
 * The exit status is the number of the step that failed (0: all passed,
 * 64: usage).  --json prints one JSON object instead of text.
 */
#include "common/ctl.h"
#include "common/net.h"
#include "common/paths.h"
#include "common/status.h"

#include <sharp/api/sharp_coll.h>

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

enum { EXIT_USAGE_ = 64 };

static const char *const step_names[] = {"",      "sharpd", "manager",  "tree",
                                         "quota", "group",  "allreduce"};

static int json_out;
static json_t *steps;

/* one step's outcome: printed, and kept for --json */
static void report(int step, int ok, const char *detail, const char *cause,
                   const char *remedy)
{
    if (json_out) {
        json_t *s = json_pack("{s:i, s:s, s:b}", "step", step, "name",
                              step_names[step], "ok", ok);
        if (detail)
            json_object_set_new(s, "detail", json_string(detail));
        if (cause)
            json_object_set_new(s, "cause", json_string(cause));
        if (remedy)
            json_object_set_new(s, "remedy", json_string(remedy));
        json_array_append_new(steps, s);
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

/* out-of-band collectives of a job of one process: nothing to exchange */
static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    (void)ctx, (void)buf, (void)len, (void)root;
    return 0;
}
static int oob_barrier(void *ctx)
{
    (void)ctx;
    return 0;
}
static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    (void)ctx, (void)root;
    memcpy(rbuf, sbuf, (size_t)len);
    return 0;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static const char usage_text[] =
    "Usage: sharp-hello [--socket PATH] [--json] [--count N] [--hold S]\n"
    "\n"
    "Why does my job not get sharp?  Run on a compute node, as the user:\n"
    "checks step by step that this host's sharpd answers (and who it takes\n"
    "you for), that it is registered with the manager, that the manager\n"
    "admits a job here (a tree covers this host, quota is left), and runs\n"
    "an allreduce of one member through the fabric.  Each failed step\n"
    "prints its cause and a remedy.\n"
    "\n"
    "Options:\n"
    "  --socket PATH   this host's sharpd (default $SHARP_COLL_SHARPD_SOCKET,\n"
    "                  else " SHP_PATH_SHARPD_SOCK ")\n"
    "  --count N       elements of the test allreduce (default 1000)\n"
    "  --hold S        keep the job and its group S seconds after the\n"
    "                  allreduce (to see them in sharpctl jobs, groups)\n"
    "  --json          one JSON object: {\"ok\", \"failed_step\", \"steps\": "
    "[...]}\n"
    "  --help          this text\n"
    "  --version       the version\n"
    "\n"
    "Exit status: 0 every step passed; 1 sharpd, 2 manager, 3 tree, 4 quota,\n"
    "5 group, 6 allreduce: the step that failed; 64 usage.\n";

static int finish(int failed)
{
    if (json_out) {
        json_t *o = json_pack("{s:b, s:i, s:o}", "ok", failed == 0,
                              "failed_step", failed, "steps", steps);
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s)
            puts(s);
        free(s);
        json_decref(o);
    } else if (failed == 0) {
        printf("sharp works on this host.\n");
    } else {
        json_decref(steps);
    }
    return failed;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"count", required_argument, NULL, 'n'},
        {"hold", required_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    const char *sock = getenv("SHARP_COLL_SHARPD_SOCKET");
    long count = 1000, hold = 0;
    int c;

    if (sock == NULL || *sock == '\0')
        sock = SHP_PATH_SHARPD_SOCK;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock = optarg; break;
        case 'j': json_out = 1; break;
        case 'n':
            count = strtol(optarg, NULL, 10);
            if (count < 1 || count > (1 << 20)) {
                fprintf(stderr, "sharp-hello: --count: 1 to 1048576\n");
                return EXIT_USAGE_;
            }
            break;
        case 'H':
            hold = strtol(optarg, NULL, 10);
            if (hold < 0 || hold > 86400) {
                fprintf(stderr, "sharp-hello: --hold: 0 to 86400\n");
                return EXIT_USAGE_;
            }
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("sharp-hello %s\n", SHP_VERSION); return 0;
        default: fputs(usage_text, stderr); return EXIT_USAGE_;
        }
    }
    if (optind < argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE_;
    }
    steps = json_array();

    /* 1: sharpd answers, and says who we are */
    const char *why = NULL;
    json_t *hello =
        sharpd_call(sock, json_pack("{s:s}", "type", "hello"), &why);
    if (hello == NULL) {
        report(1, 0, fmt("no answer on %s", sock), why,
               fmt("start sharpd on this host (as root: systemctl start "
                   "sharpd; its log: journalctl -u sharpd), or point "
                   "SHARP_COLL_SHARPD_SOCKET (--socket) at the socket it "
                   "listens on"));
        return finish(1);
    }
    const char *host = shp_json_opt_str(hello, "host", "?");
    long long uid =
        (long long)shp_json_opt_int(hello, "uid", -1, INT64_MAX, -1);
    if (uid != (long long)getuid()) {
        report(1, 0, fmt("sharpd at %s answers for host %s", sock, host),
               fmt("it takes this process for uid %lld, the kernel says %u",
                   uid, (unsigned)getuid()),
               "sharpd is older than this program or not sharp's: install "
               "the same version on every node");
        json_decref(hello);
        return finish(1);
    }
    report(
        1, 1,
        fmt("sharpd at %s: this host is %s, you are uid %lld", sock, host, uid),
        NULL, NULL);

    /* 2: registered with the manager (reached, authenticated, known) */
    const char *am = shp_json_opt_str(hello, "am", "?");
    if (!json_is_true(json_object_get(hello, "am_up"))) {
        const char *err = shp_json_opt_str(hello, "am_error", "not registered");
        const char *remedy;
        if (strstr(err, "secret"))
            remedy = "copy the manager's cluster secret (" SHP_PATH_SECRET
                     ", mode 0600) to this host and restart sharpd "
                     "(systemctl restart sharpd)";
        else if (strstr(err, "not in the topology"))
            remedy = "the manager's topology has no host by this name: set "
                     "host = NAME in sharpd.conf (the name of this host's "
                     "adapter in the topology), or load a topology that has "
                     "it (ibnetdiscover; sharpctl topology load FILE)";
        else
            remedy = "start the manager (on its host: systemctl start "
                     "sharp_am), or correct am = HOST:PORT in sharpd.conf and "
                     "restart sharpd";
        report(2, 0,
               fmt("sharpd of %s is not registered with the manager at %s",
                   host, am),
               err, remedy);
        json_decref(hello);
        return finish(2);
    }
    report(2, 1,
           fmt("sharpd of %s is registered with the manager at %s (both "
               "proved the cluster secret)",
               host, am),
           NULL, NULL);

    /* 3, 4: a job of this host, asked for as the library does, to hear the
     * manager's reason when it refuses; then ended */
    struct timeval tv;
    gettimeofday(&tv, NULL);
    uint64_t probe = ((uint64_t)tv.tv_sec << 20 ^ (uint64_t)tv.tv_usec << 8 ^
                      (uint64_t)getpid()) &
                     ((1ull << 52) - 1);
    json_t *r = sharpd_call(
        sock,
        json_pack("{s:s, s:o, s:[s], s:{}}", "type", "job_begin", "job_id",
                  shp_json_u64(probe), "hosts", host, "req"),
        &why);
    int64_t st =
        r ? shp_json_opt_int(r, "status", INT32_MIN, INT32_MAX, SHP_ERR_PROTO)
          : SHP_ERR_IO;
    const char *err =
        r ? shp_json_opt_str(r, "error", shp_status_str(st)) : why;
    if (st != SHP_OK) {
        /* the manager refuses a job_begin with SHP_ERR_JOB_REFUSED and its
         * reason (am/am.c job_begin): quota reasons say "maximum" */
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
        report(quota ? 4 : 3, 0, fmt("the manager admits no job on %s", host),
               err, remedy);
        json_decref(r);
        json_decref(hello);
        return finish(quota ? 4 : 3);
    }
    json_decref(r);
    report(3, 1, fmt("a tree covers %s", host), NULL, NULL);
    r = sharpd_call(sock,
                    json_pack("{s:s, s:o}", "type", "job_end", "job_id",
                              shp_json_u64(probe)),
                    &why);
    json_decref(r);
    json_decref(hello);
    report(4, 1, "the manager admitted a job within its quotas", NULL, NULL);

    /* 5, 6: the library, as a job of one process: a group, an allreduce */
    struct sharp_coll_init_spec spec = {0};
    struct sharp_coll_context *ctx = NULL;
    struct sharp_coll_comm *comm = NULL;
    spec.job_id = probe + 1;
    spec.world_rank = 0;
    spec.world_size = 1;
    spec.world_local_rank = 0;
    spec.config = sharp_coll_default_config;
    spec.config.flags |= SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = oob_bcast;
    spec.oob_colls.barrier = oob_barrier;
    spec.oob_colls.gather = oob_gather;
    setenv("SHARP_COLL_SHARPD_SOCKET", sock, 1);
    int rc = sharp_coll_init(&spec, &ctx);
    if (rc == SHARP_COLL_SUCCESS) {
        struct sharp_coll_comm_init_spec cs = {.rank = 0, .size = 1};
        rc = sharp_coll_comm_init(ctx, &cs, &comm);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        report(5, 0, "no group of one member", sharp_coll_strerror(rc),
               rc == SHARP_COLL_ECONN_TREE || rc == SHARP_COLL_EGROUP_JOIN
                   ? "the leaf aggregation node cannot be reached from this "
                     "host: check its advertise address and firewalls "
                     "(sharpctl ans shows the address)"
                   : "see sharpd's and the manager's logs; "
                     "SHARP_COLL_LOG_LEVEL=4 shows the library's steps");
        if (ctx)
            sharp_coll_finalize(ctx);
        return finish(5);
    }
    report(5, 1, "a group of one member, joined at its leaf aggregation node",
           NULL, NULL);

    int32_t *in = malloc((size_t)count * sizeof(*in));
    int32_t *out = calloc((size_t)count, sizeof(*out));
    struct sharp_coll_reduce_spec rs = {0};
    for (long i = 0; in && i < count; i++)
        in[i] = (int32_t)(i * 7 - 3);
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
    rc = in && out ? sharp_coll_do_allreduce(comm, &rs) : SHARP_COLL_ENOMEM;
    double us = now_us() - t0;
    int wrong = 0;
    for (long i = 0; rc == SHARP_COLL_SUCCESS && i < count; i++)
        wrong += out[i] != in[i];
    if (rc != SHARP_COLL_SUCCESS || wrong) {
        report(6, 0, fmt("allreduce of %ld int32", count),
               rc != SHARP_COLL_SUCCESS
                   ? sharp_coll_strerror(rc)
                   : fmt("%d of %ld elements wrong", wrong, count),
               "see the aggregation nodes' logs (journalctl -u "
               "'sharp_an@*'); sharpctl groups shows the group's state");
    } else {
        report(6, 1,
               fmt("allreduce of %ld int32 through the fabric: right, "
                   "%.0f us",
                   count, us),
               NULL, NULL);
    }
    free(in);
    free(out);
    if (hold > 0) {
        fflush(stdout);
        sleep((unsigned)hold);
    }
    sharp_coll_comm_destroy(comm);
    sharp_coll_finalize(ctx);
    return finish(rc != SHARP_COLL_SUCCESS || wrong ? 6 : 0);
}
