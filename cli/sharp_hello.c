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
 * With --peers HOST:PORT --rank R --size N (or the rank and size a launcher
 * sets: SLURM_PROCID/SLURM_NPROCS, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/
 * PMI_SIZE) N copies, one per host, make steps 5 and 6 one job and one
 * group of N members: rank 0 listens on HOST:PORT, the others connect to it,
 * and the out-of-band collectives go through rank 0.
 *
 * The exit status is the number of the step that failed (0: all passed,
 * 64: usage).  --json prints one JSON object instead of text.
 */
#include "protocol/ctl.h"
#include "core/net.h"
#include "core/paths.h"
#include "core/status.h"

#include <sharp/api/sharp_coll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
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

/* Out-of-band collectives: nothing to exchange for one process; with
 * --peers, a star through rank 0 (every collective of libsharp_coll is
 * rooted at 0, and every rank calls them in the same order). */
static struct {
    int rank, size;
    int *fds; /* rank 0: one connection per other rank; else fds[0]: to 0 */
} peers = {0, 1, NULL};

static int xfer(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (peers.rank != 0)
        return xfer(peers.fds[0], sbuf, (size_t)len, 1);
    memmove(rbuf, sbuf, (size_t)len);
    for (int r = 1; r < peers.size; r++)
        if (xfer(peers.fds[r], (char *)rbuf + (size_t)r * (size_t)len,
                 (size_t)len, 0))
            return -1;
    return 0;
}

static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (peers.rank != 0)
        return xfer(peers.fds[0], buf, (size_t)len, 0);
    for (int r = 1; r < peers.size; r++)
        if (xfer(peers.fds[r], buf, (size_t)len, 1))
            return -1;
    return 0;
}

static int oob_barrier(void *ctx)
{
    char b = 0, one[1];
    if (peers.size == 1)
        return 0;
    char *rb = peers.rank == 0 ? malloc((size_t)peers.size) : one;
    int rc = rb ? oob_gather(ctx, 0, &b, rb, 1) : -1;
    if (peers.rank == 0)
        free(rb);
    return rc ? rc : oob_bcast(ctx, &b, 1, 0);
}

/* the star: rank 0 accepts size-1 connections on addr:port (each says its
 * rank), the others connect (retrying for `wait_s`); NULL or why not */
/* Whether a TCP connection reached itself: before rank 0 listens, a
 * connect to a port of the ephemeral range on this host can be given that
 * very port as its own and "succeed" (simultaneous open). */
static int self_connected(int fd)
{
    struct sockaddr_in a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    return getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
           getpeername(fd, (struct sockaddr *)&b, &lb) == 0 &&
           a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

static const char *peers_connect(const char *where, int wait_s)
{
    static char why[300];
    char host[256];
    const char *colon = strrchr(where, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int one = 1;

    if (!colon || (size_t)(colon - where) >= sizeof(host))
        return "--peers wants HOST:PORT (an IPv4 address)";
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = '\0';
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 || sa.sin_port == 0)
        return "--peers wants HOST:PORT (an IPv4 address)";
    peers.fds = calloc((size_t)peers.size, sizeof(int));
    if (!peers.fds)
        return "no memory";
    if (peers.rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (l >= 0)
            setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) ||
            listen(l, peers.size)) {
            snprintf(why, sizeof(why), "rank 0 cannot listen on %s: %s", where,
                     strerror(errno));
            return why;
        }
        struct timeval tv = {.tv_sec = wait_s};
        setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        for (int n = 1; n < peers.size; n++) {
            int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
            int32_t r = -1;
            if (fd < 0 || xfer(fd, &r, sizeof(r), 0) || r < 1 ||
                r >= peers.size || peers.fds[r]) {
                snprintf(why, sizeof(why),
                         "rank 0: %d of the %d peers came within %d s to %s",
                         n - 1, peers.size - 1, wait_s, where);
                close(l);
                return why;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            peers.fds[r] = fd;
        }
        close(l);
        return NULL;
    }
    for (int t = 0; t < wait_s * 10; t++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int32_t r = peers.rank;
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            !self_connected(fd) && xfer(fd, &r, sizeof(r), 1) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            peers.fds[0] = fd;
            return NULL;
        }
        if (fd >= 0)
            close(fd);
        usleep(100000);
    }
    snprintf(why, sizeof(why), "rank %d cannot reach rank 0 at %s within %d s",
             peers.rank, where, wait_s);
    return why;
}

/* a launcher's rank and size, if it set them */
static void launcher_rank(int *rank, int *size)
{
    static const char *const vars[][2] = {
        {"SLURM_PROCID", "SLURM_NPROCS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"}};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i][0]), *n = getenv(vars[i][1]);
        if (r && n) {
            *rank = atoi(r);
            *size = atoi(n);
            return;
        }
    }
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static const char usage_text[] =
    "Usage: sharp-hello [--socket PATH] [--json] [--count N] [--hold S]\n"
    "                   [--peers HOST:PORT [--rank R --size N]]\n"
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
    "  --peers HOST:PORT  N copies, one per host, make steps 5 and 6 one job\n"
    "                  of N hosts: rank 0 listens on HOST:PORT (IPv4), the\n"
    "                  others connect to it\n"
    "  --rank R, --size N  this copy's rank and the number of copies "
    "(default:\n"
    "                  SLURM_PROCID/SLURM_NPROCS, OMPI_COMM_WORLD_RANK/SIZE "
    "or\n"
    "                  PMI_RANK/PMI_SIZE)\n"
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
        {"peers", required_argument, NULL, 'P'},
        {"rank", required_argument, NULL, 'r'},
        {"size", required_argument, NULL, 'z'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    const char *sock = getenv("SHARP_COLL_SHARPD_SOCKET");
    long count = 1000, hold = 0;
    const char *peers_at = NULL;
    int rank = -1, size = -1;
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
        case 'P': peers_at = optarg; break;
        case 'r': rank = atoi(optarg); break;
        case 'z': size = atoi(optarg); break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("sharp-hello %s\n", SHP_VERSION); return 0;
        default: fputs(usage_text, stderr); return EXIT_USAGE_;
        }
    }
    if (optind < argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE_;
    }
    if (peers_at) {
        int lr = -1, ls = -1;
        launcher_rank(&lr, &ls);
        peers.rank = rank >= 0 ? rank : lr;
        peers.size = size >= 0 ? size : ls;
        if (peers.size < 1 || peers.rank < 0 || peers.rank >= peers.size) {
            fprintf(stderr, "sharp-hello: --peers needs --rank R --size N "
                            "(0 <= R < N) or a launcher's rank and size\n");
            return EXIT_USAGE_;
        }
    } else if (rank >= 0 || size >= 0) {
        fprintf(stderr, "sharp-hello: --rank and --size go with --peers\n");
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
        report(2, 0,
               fmt("sharpd of %s is not registered with the manager at %s",
                   host, am),
               err, remedy);
        json_decref(hello);
        return finish(2);
    }
    report(2, 1,
           fmt("sharpd of %s is registered with the manager at %s (each "
               "proved its secret to the other)",
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
    spec.world_rank = peers.rank;
    spec.world_size = peers.size;
    spec.world_local_rank = 0;
    spec.config = sharp_coll_default_config;
    spec.config.flags |= SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = oob_bcast;
    spec.oob_colls.barrier = oob_barrier;
    spec.oob_colls.gather = oob_gather;
    setenv("SHARP_COLL_SHARPD_SOCKET", sock, 1);
    if (peers.size > 1) {
        const char *perr = peers_connect(peers_at, 30);
        if (perr) {
            report(5, 0,
                   fmt("rank %d of %d: no job across the peers", peers.rank,
                       peers.size),
                   perr,
                   "start one copy per host with the same --peers HOST:PORT "
                   "(rank 0's address, reachable from every host) and "
                   "--size, each with its own --rank");
            return finish(5);
        }
        /* one job id for all: rank 0's */
        if (oob_bcast(NULL, &spec.job_id, sizeof(spec.job_id), 0))
            return finish(5);
    }
    int rc = sharp_coll_init(&spec, &ctx);
    if (rc == SHARP_COLL_SUCCESS) {
        struct sharp_coll_comm_init_spec cs = {.rank = peers.rank,
                                               .size = peers.size};
        rc = sharp_coll_comm_init(ctx, &cs, &comm);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        report(5, 0,
               fmt("no group of %d member%s", peers.size,
                   peers.size > 1 ? "s (one per host)" : ""),
               sharp_coll_strerror(rc),
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
    report(5, 1,
           peers.size > 1
               ? fmt("rank %d: a group of %d members (one per host), joined "
                     "at this host's leaf aggregation node",
                     peers.rank, peers.size)
               : "a group of one member, joined at its leaf aggregation node",
           NULL, NULL);

    int32_t *in = malloc((size_t)count * sizeof(*in));
    int32_t *out = calloc((size_t)count, sizeof(*out));
    struct sharp_coll_reduce_spec rs = {0};
    for (long i = 0; in && i < count; i++)
        in[i] = (int32_t)(i * 7 - 3 + peers.rank);
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
    /* rank r contributes i * 7 - 3 + r */
    int64_t ranks = (int64_t)peers.size * (peers.size - 1) / 2;
    for (long i = 0; rc == SHARP_COLL_SUCCESS && i < count; i++)
        wrong += out[i] != (int32_t)((i * 7 - 3) * peers.size + ranks);
    if (rc != SHARP_COLL_SUCCESS || wrong) {
        report(6, 0,
               fmt("allreduce of %ld int32 over %d host%s", count, peers.size,
                   peers.size > 1 ? "s" : ""),
               rc != SHARP_COLL_SUCCESS
                   ? sharp_coll_strerror(rc)
                   : fmt("%d of %ld elements wrong", wrong, count),
               "see the aggregation nodes' logs (journalctl -u "
               "'sharp_an@*'); sharpctl groups shows the group's state");
    } else {
        report(6, 1,
               fmt("allreduce of %ld int32 over %d host%s through the "
                   "fabric: right, %.0f us",
                   count, peers.size, peers.size > 1 ? "s" : "", us),
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
