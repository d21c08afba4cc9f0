/*
 * The aggregation node in a 2-level tree of real processes on loopback:
 * 4 leaf sharp_an x 4 members + 1 root.  This program plays the aggregation
 * manager over the AN control protocol, starts the ANs and the members
 * (tests/an/an_member.c) and checks what happens:
 *   every dtype x op, 0 to several fragments; determinism under random
 *   delays; multicast distribution with 5% loss; two jobs on one tree;
 *   wrong keys and malformed input; kill -9 of a leaf or of the root.
 */
#include "tests/support/test_util.h"
#include "tests/support/group_keys.h"

#include "core/conn.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/time.h"
#include "protocol/wire.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NLEAF 4
#define PER_LEAF 4
#define NANS (NLEAF + 1)
#define NMEMBERS (NLEAF * PER_LEAF)

typedef struct {
    shp_conn_t conn;
    int open;
    int an; /* index, -1 until registered */
    shp_auth_server_t auth;
} am_peer_t;

typedef struct {
    pid_t pid;
    char name[16];
    char ip[32];
    char data_addr[64];
    am_peer_t *peer;
    int registrations;
} an_proc_t;

static struct ev_loop *loop;
static shp_listener_t am_listener;
static char am_addr[64];
static an_proc_t ans[NANS];
static am_peer_t peers[64];
static int npeers;
static char bindir[400], logdir[400], secret_file[450];
/* SHARP_TEST_TRANSPORT=verbs SHARP_TEST_IP=addr: the same tests over verbs
 * (in the soft-RoCE guest, every process on that one address) */
static const char *tr_name = "tcp", *tr_ip;
/* SHARP_TEST_KEEPALIVE: the ANs' AM keepalive (1s; an emulated guest needs
 * more) */
static const char *keepalive = "1s";
static const char *an_log_level = "info"; /* SHARP_TEST_AN_LOG_LEVEL */
/* The long streams run a twentieth of their operations over verbs: the
 * soft-RoCE guest is emulated (TCG), some 30 operations a second through
 * the tree. */
static int ops_divisor = 1;
/* a member gives up after this long without progress (seconds) */
static const char *member_timeout = "10";

static const char *scaled(int ops, char buf[16])
{
    snprintf(buf, 16, "%d", ops / ops_divisor);
    return buf;
}
static shp_auth_key_t am_key;
static int64_t next_id = 1;
static struct {
    int64_t id;
    int status;
    json_t *msg;
} replies[256];
static int nreplies;
static int groups_failed;
static int done_pipe[2] = {-1, -1};

/* --- the fake AM ------------------------------------------------------------ */

static void am_send(am_peer_t *p, json_t *msg)
{
    assert_int_equal(shp_ctl_send(&p->conn, msg), SHP_OK);
    json_decref(msg);
}

static void am_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    am_peer_t *p = conn->arg;
    json_t *msg = NULL;
    const char *type, *name, *addr, *why = NULL;
    int64_t id, st;
    int i;

    /* sealed after the handshake: opened (and pings answered) here */
    msg = shp_ctl_recv(conn, frame, len, &why);
    if (msg == NULL) {
        assert_null(why); /* a ping or a pong, never a bad frame */
        return;
    }
    type = shp_ctl_type(msg);
    if (p->auth.state < 2) {
        /* the AM's side of the cluster-secret handshake */
        json_t *chal = NULL;
        if (p->auth.state == 0) {
            assert_int_equal(
                shp_auth_server_hello(&p->auth, &am_key, msg, &chal, &why),
                SHP_OK);
            am_send(p, chal);
        } else {
            assert_int_equal(
                shp_auth_server_verify(&p->auth, &am_key, msg, &why), SHP_OK);
            shp_ctl_seal(conn, p->auth.session.s2c, p->auth.session.c2s);
        }
        json_decref(msg);
        return;
    }
    if (!strcmp(type, "an_register")) {
        assert_int_equal(shp_json_get_str(msg, "name", &name, NULL), SHP_OK);
        assert_int_equal(shp_json_get_str(msg, "data_addr", &addr, NULL),
                         SHP_OK);
        for (i = 0; i < NANS; i++) {
            if (!strcmp(ans[i].name, name)) {
                snprintf(ans[i].data_addr, sizeof(ans[i].data_addr), "%s",
                         addr);
                ans[i].peer = p;
                ans[i].registrations++;
                p->an = i;
            }
        }
        am_send(
            p, json_pack("{s:s, s:i}", "type", "an_register_ack", "status", 0));
    } else if (!strcmp(type, "group_failed")) {
        groups_failed++;
    } else if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL) == SHP_OK) {
        st = 0;
        if (json_object_get(msg, "status") != NULL) {
            assert_int_equal(
                shp_json_get_int(msg, "status", -32768, 32767, &st, NULL),
                SHP_OK);
        }
        assert_true(nreplies < 256);
        replies[nreplies].id = id;
        replies[nreplies].status = (int)st;
        replies[nreplies].msg = json_incref(msg);
        nreplies++;
    }
    json_decref(msg);
}

static void am_close(shp_conn_t *conn, shp_status_t reason)
{
    am_peer_t *p = conn->arg;
    int i;

    (void)reason;
    p->open = 0;
    for (i = 0; i < NANS; i++) {
        if (ans[i].peer == p) {
            ans[i].peer = NULL;
        }
    }
}

static const shp_conn_ops_t am_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = am_frame,
    .on_close = am_close,
};

static void am_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    am_peer_t *p = NULL;
    int i;

    (void)l;
    (void)peer;
    for (i = 0; i < npeers; i++) {
        if (!peers[i].open) {
            p = &peers[i];
        }
    }
    if (p == NULL) {
        assert_true(npeers < 64);
        p = &peers[npeers++];
    }
    memset(p, 0, sizeof(*p));
    p->an = -1;
    p->open = 1;
    shp_conn_init(&p->conn, loop, &am_ops, p, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&p->conn, fd), SHP_OK);
}

/* Send a request to AN i and wait for its answer; returns the reply and
 * its status. */
static json_t *am_call(int i, json_t *msg, int *status)
{
    int64_t id = next_id++;
    uint64_t end;
    int r;

    json_object_set_new(msg, "id", json_integer(id));
    assert_non_null(ans[i].peer);
    am_send(ans[i].peer, msg);
    end = shp_time_ns() + 10 * SHP_NSEC_PER_SEC;
    while (shp_time_ns() < end) {
        for (r = 0; r < nreplies; r++) {
            if (replies[r].id == id) {
                *status = replies[r].status;
                return replies[r].msg;
            }
        }
        ev_run(loop, EVRUN_NOWAIT);
        usleep(200);
    }
    fail_msg("AN %s did not answer request %lld", ans[i].name, (long long)id);
    return NULL;
}

static int am_call_status(int i, json_t *msg)
{
    int status;

    am_call(i, msg, &status);
    return status;
}

/* --- processes ---------------------------------------------------------- */

static void start_an(int i)
{
    char exe[600], listen[64], log[600];
    char *argv[] = {exe,
                    "--name",
                    ans[i].name,
                    "--listen",
                    listen,
                    "--am",
                    am_addr,
                    "--log-level",
                    (char *)an_log_level,
                    "--am-keepalive",
                    (char *)keepalive,
                    "--secret-file",
                    secret_file,
                    "--transport",
                    (char *)tr_name,
                    NULL};

    snprintf(exe, sizeof(exe), "%s/sharp_an", bindir);
    snprintf(listen, sizeof(listen), "%s:0", ans[i].ip);
    snprintf(log, sizeof(log), "%s/%s.log", logdir, ans[i].name);
    ans[i].pid = test_spawn(argv, log);
}

static void start_fabric(void)
{
    shp_sockaddr_t a;
    int i, ok;

    loop = ev_loop_new(EVFLAG_AUTO);
    if (done_pipe[0] < 0) {
        assert_int_equal(pipe(done_pipe), 0);
        fcntl(done_pipe[0], F_SETFL, O_NONBLOCK);
    }
    memset(ans, 0, sizeof(ans));
    memset(peers, 0, sizeof(peers));
    npeers = 0;
    nreplies = 0;
    groups_failed = 0;
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:0", 0, &a), SHP_OK);
    assert_int_equal(
        shp_listener_start(&am_listener, loop, &a, am_accept, NULL), SHP_OK);
    shp_sockaddr_str(&am_listener.addr, am_addr, sizeof(am_addr));
    for (i = 0; i < NANS; i++) {
        snprintf(ans[i].name, sizeof(ans[i].name), i ? "leaf%d" : "root", i);
        if (tr_ip != NULL) {
            snprintf(ans[i].ip, sizeof(ans[i].ip), "%s", tr_ip);
        } else {
            snprintf(ans[i].ip, sizeof(ans[i].ip), "127.0.1.%d", i + 1);
        }
        start_an(i);
    }
    {
        uint64_t end = shp_time_ns() + 10 * SHP_NSEC_PER_SEC;
        do {
            for (ok = 1, i = 0; i < NANS; i++) {
                ok &= ans[i].registrations > 0;
            }
            ev_run(loop, EVRUN_NOWAIT);
            usleep(500);
        } while (!ok && shp_time_ns() < end);
    }
    assert_true(ok);
    /* tree 1: the root over the four leaves */
    for (i = 0; i < NANS; i++) {
        json_t *m =
            json_pack("{s:s, s:i}", "type", "tree_config", "tree_id", 1);
        json_object_set_new(m, "parent",
                            i ? json_string(ans[0].data_addr) : json_null());
        assert_int_equal(am_call_status(i, m), 0);
    }
}

static int stop_fabric(void)
{
    int i, bad = 0;

    for (i = 0; i < NANS; i++) {
        if (ans[i].pid > 0) {
            int st;
            kill(ans[i].pid, SIGTERM);
            waitpid(ans[i].pid, &st, 0);
            ans[i].pid = 0;
            /* a clean shutdown; under SAN=1 also no leak, no bad access */
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                print_error("sharp_an %s did not stop cleanly (status 0x%x, "
                            "see %s/%s.log)\n",
                            ans[i].name, st, logdir, ans[i].name);
                bad = 1;
            }
        }
    }
    for (i = 0; i < npeers; i++) {
        if (peers[i].open) {
            shp_conn_close(&peers[i].conn, SHP_OK);
        }
    }
    for (i = 0; i < nreplies; i++) {
        json_decref(replies[i].msg);
    }
    nreplies = 0;
    shp_listener_stop(&am_listener);
    ev_loop_destroy(loop);
    return bad ? -1 : 0;
}

static const char *key_a =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static const char *key_b =
    "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

typedef struct {
    uint32_t gid;
    uint64_t job;
    const char *key, *dist, *mcast;
    unsigned osts, payload;
} group_t;

static void create_group(const group_t *g)
{
    json_t *children;
    char job[24];
    int i, j;

    snprintf(job, sizeof(job), "%llu", (unsigned long long)g->job);
    /* top first: the leaves join it */
    children = json_array();
    for (j = 0; j < NLEAF; j++) {
        json_array_append_new(children, json_pack("{s:s}", "kind", "an"));
    }
    assert_int_equal(
        am_call_status(
            0, group_keys(json_pack("{s:s, s:I, s:i, s:s, s:s, s:o, s:b, s:s, "
                                    "s:s, s:i, s:i}",
                                    "type", "group_add", "group_id",
                                    (json_int_t)g->gid, "tree_id", 1, "job_id",
                                    job, "job_key", g->key, "children",
                                    children, "top", 1, "dist", g->dist,
                                    "mcast_addr", g->mcast ? g->mcast : "",
                                    "osts", g->osts, "payload", g->payload))),
        0);
    for (i = 1; i < NANS; i++) {
        children = json_array();
        for (j = 0; j < PER_LEAF; j++) {
            json_array_append_new(children,
                                  json_pack("{s:s}", "kind", "member"));
        }
        assert_int_equal(
            am_call_status(
                i,
                group_keys(json_pack(
                    "{s:s, s:I, s:i, s:s, s:s, s:o, s:b, "
                    "s:i, s:s, s:i, s:i}",
                    "type", "group_add", "group_id", (json_int_t)g->gid,
                    "tree_id", 1, "job_id", job, "job_key", g->key, "children",
                    children, "top", 0, "parent_index", i - 1, "dist", g->dist,
                    "osts", g->osts, "payload", g->payload))),
            0);
    }
}

/* Start member `rank` of group g with a plan; extra args may follow. */
static pid_t start_member(const group_t *g, int rank, const char *plan,
                          const char *const *extra, const char *key_override)
{
    char exe[600], grp[16], job[24], child[16], rk[16], osts[16], payload[16],
        local[32], log[600], done_fd[12];
    char *argv[48];
    int n = 0;

    snprintf(exe, sizeof(exe), "%s/../tests/an/an_member", bindir);
    snprintf(grp, sizeof(grp), "%u", g->gid);
    snprintf(job, sizeof(job), "%llu", (unsigned long long)g->job);
    snprintf(child, sizeof(child), "%d", rank % PER_LEAF);
    snprintf(rk, sizeof(rk), "%d", rank);
    snprintf(osts, sizeof(osts), "%u", g->osts);
    snprintf(payload, sizeof(payload), "%u", g->payload);
    if (tr_ip != NULL) {
        snprintf(local, sizeof(local), "%s", tr_ip);
    } else {
        snprintf(local, sizeof(local), "127.0.2.%d", rank + 1);
    }
    snprintf(done_fd, sizeof(done_fd), "%d", done_pipe[1]);
    snprintf(log, sizeof(log), "%s/member-%u-%d.log", logdir, g->gid, rank);
    argv[n++] = exe;
    argv[n++] = "--leaf";
    argv[n++] = ans[1 + rank / PER_LEAF].data_addr;
    argv[n++] = "--group";
    argv[n++] = grp;
    argv[n++] = "--tree";
    argv[n++] = "1";
    argv[n++] = "--job";
    argv[n++] = job;
    argv[n++] = "--key";
    argv[n++] = (char *)(key_override ? key_override : g->key);
    argv[n++] = "--child";
    argv[n++] = child;
    argv[n++] = "--rank";
    argv[n++] = rk;
    argv[n++] = "--leaves";
    argv[n++] = "4";
    argv[n++] = "--per-leaf";
    argv[n++] = "4";
    argv[n++] = "--osts";
    argv[n++] = osts;
    argv[n++] = "--payload";
    argv[n++] = payload;
    argv[n++] = "--plan";
    argv[n++] = (char *)plan;
    argv[n++] = "--local";
    argv[n++] = local;
    argv[n++] = "--transport";
    argv[n++] = (char *)tr_name;
    if (g->mcast != NULL && strcmp(g->dist, "rc")) {
        argv[n++] = "--mcast";
        argv[n++] = (char *)g->mcast;
    }
    argv[n++] = "--done-fd";
    argv[n++] = done_fd;
    argv[n++] = "--timeout"; /* the extra arguments may say otherwise */
    argv[n++] = (char *)member_timeout;
    while (extra != NULL && *extra != NULL && n < 46) {
        argv[n++] = (char *)*extra++;
    }
    argv[n] = NULL;
    return test_spawn(argv, log);
}

/* Wait for processes, keeping the fake AM responsive.  A member that
 * finished says so on the done pipe and waits; when every process has
 * either finished or exited, the finished ones are released (SIGTERM, exit
 * 0).  Exit codes go to codes[]; -1 for one still running at the deadline
 * (then killed). */
static void wait_all(pid_t *pids, int n, int *codes, double secs)
{
    uint64_t end = shp_time_ns() + (uint64_t)(secs * 1e9);
    int exited = 0, done = 0, dumped = 0, i, st;
    char buf[64];
    ssize_t r;

    for (i = 0; i < n; i++) {
        codes[i] = -1;
    }
    while (exited + done < n && shp_time_ns() < end) {
        for (i = 0; i < n; i++) {
            if (codes[i] == -1 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                exited++;
                if (codes[i] == 4 && !dumped) {
                    /* a member saw no progress: every AN logs its groups'
                     * state, for whoever reads the logs */
                    dumped = 1;
                    for (int a = 0; a < NANS; a++) {
                        if (ans[a].pid > 0) {
                            kill(ans[a].pid, SIGUSR1);
                        }
                    }
                }
            }
        }
        while ((r = read(done_pipe[0], buf, sizeof(buf))) > 0) {
            done += (int)r;
        }
        ev_run(loop, EVRUN_NOWAIT);
        usleep(1000);
    }
    for (i = 0; i < n; i++) {
        if (codes[i] == -1) {
            kill(pids[i], SIGTERM);
        }
    }
    end = shp_time_ns() + 5 * SHP_NSEC_PER_SEC;
    for (i = 0; i < n; i++) {
        while (codes[i] == -1 && shp_time_ns() < end) {
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            } else {
                usleep(1000);
            }
        }
        if (codes[i] == -1) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &st, 0);
        }
    }
    while (read(done_pipe[0], buf, sizeof(buf)) > 0) {
    }
}

static void run_members(const group_t *g, const char *plan,
                        const char *const *extra, int want_code, double secs)
{
    pid_t pids[NMEMBERS];
    int codes[NMEMBERS], i;

    for (i = 0; i < NMEMBERS; i++) {
        pids[i] = start_member(g, i, plan, extra, NULL);
    }
    wait_all(pids, NMEMBERS, codes, secs);
    for (i = 0; i < NMEMBERS; i++) {
        if (codes[i] != want_code) {
            fail_msg("member %d of group %u exited %d, want %d (logs in %s)", i,
                     g->gid, codes[i], want_code, logdir);
        }
    }
}

static json_t *an_stats(int i)
{
    int status;

    return am_call(i, json_pack("{s:s}", "type", "stats_req"), &status);
}

static int64_t stat_of(json_t *st, const char *key)
{
    return json_integer_value(json_object_get(st, key));
}

/* One counter of AN i, its reply not kept (for polling loops: the fake
 * AM keeps at most 256 replies) */
static int64_t an_stat_now(int i, const char *key)
{
    json_t *st = an_stats(i);
    int64_t v = stat_of(st, key);

    for (int r = 0; r < nreplies; r++) {
        if (replies[r].msg == st) {
            json_decref(st);
            replies[r] = replies[--nreplies];
            break;
        }
    }
    return v;
}

/* one counter summed over every AN */
static int64_t an_stat_total(const char *key)
{
    int64_t v = 0;

    for (int i = 0; i < NANS; i++) {
        v += an_stat_now(i, key);
    }
    return v;
}

/* 1 if the log `name` (an AN's, member-G-R) holds `needle` */
static int log_has(const char *name, const char *needle)
{
    char path[600], line[1024];
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.log", logdir, name);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        found = strstr(line, needle) != NULL;
    }
    fclose(f);
    return found;
}

static int setup(void **state)
{
    (void)state;
    start_fabric();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return stop_fabric();
}

/* --- the tests -------------------------------------------------------------- */

static void test_all_dtypes_ops(void **state)
{
    group_t g = {1, 7, key_a, "rc", NULL, 8, 256};
    json_t *st;
    int64_t ops = 0;
    int i;

    (void)state;
    create_group(&g);
    run_members(&g, "dtypes", NULL, 0, 120);
    for (i = 0; i < NANS; i++) {
        st = an_stats(i);
        ops += stat_of(st, "ops");
        assert_int_equal(stat_of(st, "err_mismatch"), 0);
        assert_int_equal(stat_of(st, "err_seq_window"), 0);
        assert_int_equal(stat_of(st, "err_protocol"), 0);
    }
    assert_true(ops > 5 * 900); /* every AN folded every operation */
    /* SIGUSR1: a leaf logs its groups' state */
    kill(ans[1].pid, SIGUSR1);
    TEST_RUN_WHILE(loop, !log_has(ans[1].name, "group 1 (job 7, tree 1)"), 5);
    assert_true(log_has(ans[1].name, "group 1 (job 7, tree 1)"));
}

static void test_determinism(void **state)
{
    group_t g = {2, 7, key_a, "rc", NULL, 4, 256};

    (void)state;
    create_group(&g);
    /* 100 rounds of adversarial f32/f64 sums with random delays before each
     * send: every result must equal the fixed-order fold bit for bit */
    run_members(&g, "determinism", NULL, 0, 120);
}

static void test_mcast_loss(void **state)
{
    char nops[16];
    const char *const extra[] = {"--drop", "0.05", "--ops", scaled(10000, nops),
                                 NULL};
    group_t g = {3, 7, key_a, "mcast", "239.77.3.1:17400", 16, 256};

    (void)state;
    create_group(&g);
    /* 5% of datagrams dropped at every member: lost results come back over
     * RC on request, so all 10000 operations still end right */
    run_members(&g, "stream", extra, 0, 180);
    /* the root multicast every result, and losses were recovered */
    assert_int_equal(an_stat_total("mcast_sent"), atoi(nops));
    assert_true(an_stat_total("retransmits") > 0);
}

/* Multicast reaches no member (every datagram dropped): each member has
 * its first results retransmitted, then flags its request rc_only and its
 * leaf AN sends it every later result over RC unasked.  Without that,
 * every operation would wait a retransmit timeout at every member. */
static void test_mcast_unreachable(void **state)
{
    char nops[16];
    /* members ask after 200 ms, not 20: an operation that merely outlasts
     * the timeout on a loaded machine (tests running beside this one) is
     * then rare, and the count below measures the flag, not the load */
    const char *const extra[] = {
        "--drop",       "1",   "--ops", scaled(2000, nops),
        "--retrans-ms", "200", NULL};
    group_t g = {11, 7, key_a, "mcast", "239.77.11.1:17404", 16, 256};
    int i;

    (void)state;
    create_group(&g);
    run_members(&g, "stream", extra, 0, 120);
    int64_t retrans = an_stat_total("retransmits");
    /* per member, about two windows of operations (16 each: those in flight
     * before the first results came back, and before the AN heard of the
     * flag; 32 measured, with six busy loops beside the test too): far from
     * one per operation (2000 per member; 32000 without the flag) */
    print_message("multicast unreachable: %lld retransmit requests\n",
                  (long long)retrans);
    assert_true(retrans > 0);
    /* (in the emulated verbs guest an operation outlasts the retransmit
     * timeout anyway, and members ask for results on their way over RC) */
    if (ops_divisor == 1) {
        assert_true(retrans <= NMEMBERS * 100);
    }
    for (i = NANS - NLEAF; i < NANS; i++) {
        assert_true(log_has(ans[i].name, "AN0204 group 11"));
    }
}

/* Results larger than a datagram (a 64 KiB payload; over verbs, anything
 * above the 1 KiB MTU) go over RC to every member, at once: without that,
 * every member would ask for every result after its retransmit timeout. */
static void test_mcast_unfit(void **state)
{
    char nops[16];
    const char *const extra[] = {"--ops", scaled(400, nops), "--count", "16384",
                                 NULL};
    group_t g = {10, 7, key_a, "mcast", "239.77.10.1:17403", 8, 65536};
    char want[48];

    (void)state;
    create_group(&g);
    run_members(&g, "stream", extra, 0, 120);
    /* every result came over RC unasked (flagged unicast), not only in
     * answer to a member's retransmit request */
    snprintf(want, sizeof(want), "%s flagged unicast", nops);
    assert_true(log_has("member-10-0", want));
    assert_true(log_has("member-10-15", want));
    assert_true(log_has(ans[0].name, "AN0203 group 10"));
}

/* voluntary context switches of process pid so far (its sleeps) */
static long vol_switches(pid_t pid)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) {
            break;
        }
    }
    fclose(f);
    return v;
}

/* The ANs sleep between messages (no socket spin: SHARP_AN_SOCK_SPIN_US=0
 * for this test) and two jobs' members run one operation at a time: a
 * leaf AN is then woken by one of a group's 4 members an operation (the
 * sentinel) and reads the other three from their quiet links, not woken by
 * each.  A third group stays joined and idle (its members ran one
 * operation): its quiet links are not read at every wake-up of the other
 * two.  Every result is still checked by the members. */
static void test_quiet_links(void **state)
{
    char nops[16];
    const char *const extra[] = {"--ops", scaled(1000, nops), NULL};
    const char *const one[] = {"--ops", "1", NULL};
    group_t a = {12, 7, key_a, "mcast", "239.77.12.1:17405", 1, 256};
    group_t b = {13, 300, key_b, "rc", NULL, 1, 256};
    group_t idle = {14, 301, key_b, "rc", NULL, 1, 256};
    pid_t pids[3 * NMEMBERS];
    int codes[3 * NMEMBERS], i;
    long before[NANS];

    (void)state;
    if (strcmp(tr_name, "tcp") != 0) {
        skip(); /* shm wakes on the last contribution its own way */
    }
    create_group(&a);
    create_group(&b);
    create_group(&idle);
    for (i = 0; i < NMEMBERS; i++) { /* one operation, then joined, idle */
        pids[2 * NMEMBERS + i] = start_member(&idle, i, "stream", one, NULL);
    }
    for (i = 0; i < NANS; i++) {
        before[i] = vol_switches(ans[i].pid);
    }
    for (i = 0; i < NMEMBERS; i++) {
        pids[i] = start_member(&a, i, "stream", extra, NULL);
        pids[NMEMBERS + i] = start_member(&b, i, "stream", extra, NULL);
    }
    wait_all(pids, 3 * NMEMBERS, codes, 180);
    for (i = 0; i < 3 * NMEMBERS; i++) {
        if (codes[i] != 0) {
            fail_msg("member %d of job %s exited %d (logs in %s)", i % NMEMBERS,
                     i < NMEMBERS       ? "A"
                     : i < 2 * NMEMBERS ? "B"
                                        : "C (the idle group)",
                     codes[i], logdir);
        }
    }
    for (i = 1; i < NANS; i++) {
        int64_t ops = an_stat_now(i, "ops") - 1, /* the idle group's one */
            quiet = an_stat_now(i, "quiet_msgs"),
                reads = an_stat_now(i, "quiet_reads");
        long sleeps = vol_switches(ans[i].pid) - before[i];
        print_message("%s: %lld operations of two groups, %lld messages read "
                      "from quiet links in %lld reads, %.2f sleeps an "
                      "operation\n",
                      ans[i].name, (long long)ops, (long long)quiet,
                      (long long)reads, (double)sleeps / ops);
        assert_int_equal(ops, 2 * atoi(nops));
        /* most operations: three of the four read without a wake-up */
        assert_true(quiet >= ops * (PER_LEAF - 1) / 2);
        /* woken once for the sentinel, once for the result from the root,
         * sometimes for a wrong guess: not once a member */
        assert_true(sleeps < 3 * ops);
        /* after a sleep, the quiet links of the groups that spoke are
         * read, not the idle group's too (which would be 3 x 3 reads a
         * sleep) */
        assert_true(reads < 2 * (PER_LEAF - 1) * sleeps);
    }
}

static int setup_sleeping(void **state)
{
    setenv("SHARP_AN_SOCK_SPIN_US", "0", 1);
    start_fabric();
    unsetenv("SHARP_AN_SOCK_SPIN_US");
    (void)state;
    return 0;
}

/* the AN's join deadline in test_join_deadline: 1 s, 5 s in the verbs
 * guest, where a member under SAN can take over 1 s from its link's accept
 * to its join (33 processes on 2 emulated CPUs) */
static int join_deadline_s = 1;

static int setup_deadline(void **state)
{
    char v[16];

    snprintf(v, sizeof(v), "%ds", join_deadline_s);
    setenv("SHARP_AN_JOIN_DEADLINE", v, 1);
    start_fabric();
    unsetenv("SHARP_AN_JOIN_DEADLINE");
    (void)state;
    return 0;
}

/* a peer that connects, takes the AN's nonce and never joins */
static int idle_up, idle_nonce, idle_closed;

static void idle_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                     const void *payload)
{
    (void)ep;
    (void)payload;
    idle_nonce += hdr->opcode == SHP_WIRE_OP_JOIN_NONCE;
}

static void idle_connect(shp_tp_ep_t *ep)
{
    (void)ep;
    idle_up = 1;
}

static void idle_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    (void)ep;
    (void)reason;
    idle_closed = 1;
}

static const shp_tp_ep_cbs_t idle_cbs = {idle_msg, idle_connect, idle_close};

/* A peer that connected to an AN (over shm: said hello, its rings mapped)
 * and joins no group is closed after the AN's join_deadline
 * (join_deadline_s here, SHARP_AN_JOIN_DEADLINE); members that join stay,
 * and work. */
static void test_join_deadline(void **state)
{
    static const char *const extra[] = {"--ops", "20", NULL};
    group_t g = {10, 301, key_a, "rc", NULL, 8, 256};
    shp_tp_ep_t *ep = NULL;
    shp_tp_t tp;
    uint64_t t0;
    double took;

    (void)state;
    idle_up = idle_nonce = idle_closed = 0;
    assert_int_equal(
        shp_tp_init(&tp, shp_tp_find(tr_name), loop, 1u << 16, tr_ip), SHP_OK);
    t0 = shp_time_ns();
    assert_int_equal(
        tp.ops->connect(&tp, ans[1].data_addr, &idle_cbs, NULL, &ep), SHP_OK);
    TEST_RUN_WHILE(loop, !idle_nonce && !idle_closed, 5);
    assert_true(idle_up);
    assert_int_equal(idle_nonce, 1); /* the AN took it: hello done */
    assert_false(idle_closed);
    /* members join and run meanwhile, past the deadline */
    create_group(&g);
    run_members(&g, "stream", extra, 0, 60);
    TEST_RUN_WHILE(loop, !idle_closed, 10 + join_deadline_s);
    took = (double)(shp_time_ns() - t0) / 1e9;
    print_message("a peer that never joined closed after %.2f s\n", took);
    assert_true(idle_closed);
    assert_true(took >= 0.9 * join_deadline_s);
    assert_int_equal(stat_of(an_stats(1), "join_deadline"), 1);
    shp_tp_cleanup(&tp);
}

static void test_two_jobs(void **state)
{
    char nops[16];
    const char *const extra[] = {"--ops", scaled(2000, nops), NULL};
    group_t a = {4, 100, key_a, "rc", NULL, 8, 256};
    group_t b = {5, 200, key_b, "both", "239.77.5.1:17401", 8, 256};
    pid_t pids[2 * NMEMBERS + 1];
    int codes[2 * NMEMBERS + 1], i;
    int64_t bad_key = 0;

    (void)state;
    create_group(&a);
    create_group(&b);
    for (i = 0; i < NMEMBERS; i++) {
        pids[i] = start_member(&a, i, "stream", extra, NULL);
        pids[NMEMBERS + i] = start_member(&b, i, "stream", extra, NULL);
    }
    /* a process of job B tries group A's slot with B's key */
    pids[2 * NMEMBERS] = start_member(&a, 0, "stream", extra, key_b);
    wait_all(pids, 2 * NMEMBERS + 1, codes, 180);
    for (i = 0; i < 2 * NMEMBERS; i++) {
        if (codes[i] != 0) {
            fail_msg("member %d of job %s exited %d (logs in %s)", i % NMEMBERS,
                     i < NMEMBERS ? "A" : "B", codes[i], logdir);
        }
    }
    assert_int_equal(codes[2 * NMEMBERS], 3); /* refused */
    for (i = 1; i < NANS; i++) {
        bad_key += stat_of(an_stats(i), "err_bad_key");
    }
    assert_int_equal(bad_key, 1);
}

/* The first message on a link the AN accepted: its nonce, which joins on
 * that link prove the job key over */
static void read_nonce(int fd)
{
    uint8_t raw[SHP_WIRE_HDR_LEN + SHP_WIRE_NONCE_LEN];
    shp_wire_hdr_t h;

    assert_int_equal(read(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    shp_wire_hdr_unpack(raw, &h);
    assert_int_equal(h.opcode, SHP_WIRE_OP_JOIN_NONCE);
    assert_int_equal(h.payload_len, SHP_WIRE_NONCE_LEN);
}

static void test_bad_input(void **state)
{
    if (strcmp(tr_name, "tcp") != 0) {
        skip(); /* it writes raw bytes on a TCP socket */
    }
    static const char *const extra[] = {"--ops", "200", NULL};
    group_t g = {6, 7, key_a, "rc", NULL, 8, 256};
    shp_sockaddr_t sa;
    uint8_t raw[SHP_WIRE_HDR_LEN + 4];
    shp_wire_hdr_t h;
    char buf[64];
    int fd;

    (void)state;
    create_group(&g);
    /* a header that lies about its payload: the connection is dropped */
    assert_int_equal(shp_sockaddr_parse(ans[1].data_addr, 0, &sa), SHP_OK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    memset(&h, 0, sizeof(h));
    h.version = SHP_WIRE_VERSION;
    h.opcode = SHP_WIRE_OP_AGG_REQ;
    h.group_id = 6;
    h.dtype = SHP_DTYPE_F32;
    h.op = SHP_OP_BXOR; /* bitwise op on floats */
    h.tag_dtype = SHP_DTYPE_NULL;
    h.count = 1;
    h.payload_len = 4;
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    TEST_RUN_WHILE(loop, 1, 0.2);
    read_nonce(fd);
    assert_int_equal(read(fd, buf, sizeof(buf)), 0); /* closed on us */
    close(fd);
    /* a sender that never joined cannot touch the group */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    h.op = SHP_OP_SUM;
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    TEST_RUN_WHILE(loop, 1, 0.2);
    read_nonce(fd);
    assert_int_equal(read(fd, raw, SHP_WIRE_HDR_LEN), SHP_WIRE_HDR_LEN);
    shp_wire_hdr_unpack(raw, &h);
    assert_int_equal(h.opcode, SHP_WIRE_OP_ERROR);
    assert_int_equal(h.status, SHP_ERR_PERM);
    close(fd);
    assert_true(stat_of(an_stats(1), "err_malformed") >= 1);
    /* the group, the AN and everybody else are untouched */
    assert_int_equal(groups_failed, 0);
    run_members(&g, "stream", extra, 0, 60);
}

/* Whoever reads the data network does not learn a job key: every frame
 * on the loopback while members join a group (at their leaf ANs) and the
 * ANs join each other, captured (AF_PACKET, as root: skipped without
 * CAP_NET_RAW), holds the joins, and no 8 bytes of the key.  Before joins
 * proved the key, each of them carried it. */
static void test_key_not_on_wire(void **state)
{
    static const char *const extra[] = {"--ops", "20", NULL};
    group_t g = {9, 300, key_a, "rc", NULL, 8, 256};
    uint8_t key[32], frame[65536], join_hdr[12];
    shp_wire_hdr_t h;
    int ps, joins = 0, leaks = 0, rcvbuf = 64 << 20;
    ssize_t n;

    (void)state;
    if (strcmp(tr_name, "tcp") != 0) {
        skip(); /* it reads TCP on the loopback */
    }
    ps = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
                htons(ETH_P_ALL));
    if (ps < 0) {
        print_message("no packet socket (%s): skipped\n", strerror(errno));
        skip();
    }
    (void)setsockopt(ps, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
    for (size_t i = 0; i < sizeof(key); i++) {
        assert_int_equal(sscanf(key_a + 2 * i, "%2hhx", &key[i]), 1);
    }
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_JOIN, 1, g.gid, 0);
    h.payload_len = SHP_WIRE_JOIN_LEN;
    shp_wire_hdr_pack(&h, frame);
    memcpy(join_hdr, frame, sizeof(join_hdr)); /* up to the group id */

    create_group(&g);
    run_members(&g, "stream", extra, 0, 60);
    while ((n = recv(ps, frame, sizeof(frame), 0)) > 0) {
        for (ssize_t i = 0; i + 12 <= n; i++) {
            joins += memcmp(frame + i, join_hdr, sizeof(join_hdr)) == 0;
            for (size_t k = 0; k + 8 <= sizeof(key); k++) {
                leaks += memcmp(frame + i, key + k, 8) == 0;
            }
        }
    }
    close(ps);
    print_message("captured %d joins, %d pieces of the job key\n", joins,
                  leaks);
    assert_true(joins >= NMEMBERS); /* the capture saw them */
    assert_int_equal(leaks, 0);
}

static void test_mismatch_fails_group(void **state)
{
    static const char *const extra[] = {"--ops", "200", NULL};
    static const char *const odd[] = {"--ops", "200", "--seed", "1", NULL};
    group_t g = {7, 7, key_a, "rc", NULL, 8, 256};
    group_t h = {8, 7, key_a, "rc", NULL, 8, 256};
    pid_t pids[NMEMBERS];
    int codes[NMEMBERS], i;

    (void)state;
    create_group(&g);
    create_group(&h);
    /* member 5 sends i32 max where the others send u32 sums: every member
     * of the group gets an error, nobody hangs */
    for (i = 0; i < NMEMBERS; i++) {
        pids[i] = start_member(&g, i, i == 5 ? "mismatch" : "stream",
                               i == 5 ? odd : extra, NULL);
    }
    wait_all(pids, NMEMBERS, codes, 30);
    for (i = 0; i < NMEMBERS; i++) {
        if (codes[i] != 3) {
            fail_msg("member %d exited %d, want 3 (an error)", i, codes[i]);
        }
    }
    assert_true(groups_failed >= 1);
    /* another group on the same ANs still works */
    run_members(&h, "stream", extra, 0, 60);
}

/* bcasts from every member in turn, of 1 byte to a whole payload (4 KiB),
 * between sums, over RC, then by multicast with 5% of the datagrams
 * dropped: every result is the root's bytes.  Up the tree go the root's
 * data and headers, never zeros: the ANs' bytes in (up: a sum from every
 * member and leaf, a bcast's data at the root's leaf and the top; down: a
 * result at every leaf; a header each; the joins) stay under what that
 * makes, where a bcast of zeros would add 18 x its size.  The ANs' passes
 * over those bytes: every child's part of a sum folded once, a bcast's
 * data folded never but kept at the root's leaf and the top, every result
 * copied in once at each leaf (and a sum's part that came before its turn
 * copied once more), every multicast result tagged once, at the top. */
static void test_bcast(void **state)
{
    static const char *const rc[] = {"--ops", "600", "--payload", "4096", NULL};
    static const char *const mc[] = {"--ops",     "600",  "--drop", "0.05",
                                     "--payload", "4096", NULL};
    group_t g = {14, 7, key_a, "rc", NULL, 8, 4096};
    group_t h = {15, 7, key_a, "mcast", "239.77.15.1:17406", 8, 4096};
    int64_t data = 0, fold = 0, copy = 0, early = 0, tag = 0,
            headers = 600 * (NMEMBERS + 2 * NLEAF) * SHP_WIRE_HDR_LEN +
                      /* the joins, and the leaves' nonces and join acks */
                      (NMEMBERS + NLEAF) *
                          (2 * SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN) +
                      NLEAF * (2 * SHP_WIRE_HDR_LEN + SHP_WIRE_NONCE_LEN) +
                      16384; /* a leaf's join retried, and such */

    (void)state;
    for (long k = 0; k < 600; k++) {  /* an_member's bcast plan */
        int64_t c = k % 3 == 0   ? 16 /* 4 u32 */
                    : k % 4 == 0 ? 4096
                                 : 1 + (k * 131) % 4096;
        data += c * (k % 3 == 0 ? NMEMBERS + NLEAF : 2) + c * NLEAF;
        fold += k % 3 == 0 ? c * (NMEMBERS + NLEAF) : 0;
        copy += c * (k % 3 == 0 ? NLEAF : 2 + NLEAF);
        early += k % 3 == 0 ? c * (NMEMBERS + NLEAF) : 0;
        tag += c;
    }
    create_group(&g);
    create_group(&h);
    int64_t in0 = an_stat_total("bytes_in");
    int64_t f0 = an_stat_total("pass_fold"), c0 = an_stat_total("pass_copy");
    run_members(&g, "bcast", rc, 0, 60);
    int64_t in = an_stat_total("bytes_in") - in0;
    int64_t f = an_stat_total("pass_fold") - f0;
    int64_t c = an_stat_total("pass_copy") - c0;
    print_message("bytes into the ANs: %lld, at most %lld; folded %lld, "
                  "copied %lld (%lld to %lld)\n",
                  (long long)in, (long long)(data + headers), (long long)f,
                  (long long)c, (long long)copy, (long long)(copy + early));
    assert_true(in <= data + headers);
    assert_true(in >= data);
    assert_true(f == fold);
    assert_true(c >= copy && c <= copy + early);
    int64_t t0 = an_stat_total("pass_tag");
    run_members(&h, "bcast", mc, 0, 120);
    assert_true(an_stat_total("pass_tag") - t0 == tag);
}

/* Free bcasts (only the root sends; docs/an.md, "bcast"): the bcast plan
 * with runs of 8-byte bcasts, members delayed at random so that roots run
 * ahead and results come before a member reaches them, over RC, then by
 * multicast with 5% of the datagrams dropped (retransmit requests before
 * anything of a bcast reached the leaf): every result is the root's bytes.
 * Into the ANs goes, for a free bcast, the root's data and its leaf's, and
 * the results down: no header of any other member or leaf.  A member that
 * sends a header for a bcast the others skip fails the group, no one
 * hangs. */
static void test_bcast_free(void **state)
{
    static const char *const rc[] = {"--ops", "600", "--payload", "4096", NULL};
    static const char *const mc[] = {"--ops",     "600",  "--drop", "0.05",
                                     "--payload", "4096", NULL};
    static const char *const mix[] = {"--ops", "100", "--payload", "256", NULL};
    group_t g = {17, 7, key_a, "rc", NULL, 8, 4096};
    group_t h = {18, 7, key_a, "mcast", "239.77.18.1:17408", 8, 4096};
    group_t m = {19, 7, key_a, "rc", NULL, 8, 256};
    const int64_t H = SHP_WIRE_HDR_LEN;
    /* the joins, the leaves' nonces and join acks, a retried join */
    int64_t most = (NMEMBERS + NLEAF) * (2 * H + SHP_WIRE_JOIN_LEN) +
                   NLEAF * (2 * H + SHP_WIRE_NONCE_LEN) + 16384;
    long nfree = 0;

    (void)state;
    for (long k = 0; k < 600; k++) { /* an_member's free plan */
        int bc = k % 3 != 0 || k % 5 == 0, fr = bc && k % 8 != 0;
        int64_t c = !bc          ? 16
                    : k % 3 == 0 ? 8
                    : k % 4 == 0 ? 4096
                                 : 1 + (k * 131) % 4096;
        int64_t up = !bc ? c * (NMEMBERS + NLEAF) : 2 * c;
        most += up + NLEAF * c + (fr ? 2 + NLEAF : NMEMBERS + 2 * NLEAF) * H;
        nfree += fr;
    }
    create_group(&g);
    create_group(&h);
    create_group(&m);
    int64_t in0 = an_stat_total("bytes_in");
    run_members(&g, "free", rc, 0, 60);
    int64_t in = an_stat_total("bytes_in") - in0;
    print_message("%ld free bcasts; bytes into the ANs: %lld, at most %lld\n",
                  nfree, (long long)in, (long long)most);
    assert_true(nfree > 200);
    assert_true(in <= most);
    run_members(&h, "free", mc, 0, 120);
    run_members(&m, "freemix", mix, 3, 30);
}

/* A member that takes an operation for a bcast where the others reduce:
 * the group fails (every member gets an error), none hangs */
static void test_bcast_mismatch(void **state)
{
    static const char *const extra[] = {"--ops", "50", NULL};
    group_t g = {16, 7, key_a, "rc", NULL, 8, 256};

    (void)state;
    create_group(&g);
    run_members(&g, "bcastmix", extra, 3, 30);
}

/* kill -9 AN `victim` while the members stream: all of them must get an
 * error within 5 s. */
static void kill_during_stream(int victim)
{
    group_t g = {9, 7, key_a, "both", "239.77.9.1:17402", 8, 256};
    static const char *const extra[] = {"--timeout", "30", NULL};
    pid_t pids[NMEMBERS];
    int codes[NMEMBERS], i, st;
    uint64_t t0;
    double secs;

    create_group(&g);
    for (i = 0; i < NMEMBERS; i++) {
        pids[i] = start_member(&g, i, "stream", extra, NULL);
    }
    /* mid-stream: the root has folded operations (members of an emulated
     * guest take seconds to connect) */
    TEST_RUN_WHILE(loop, an_stat_now(0, "ops") < 20, 60);
    t0 = shp_time_ns();
    kill(ans[victim].pid, SIGKILL);
    waitpid(ans[victim].pid, &st, 0);
    ans[victim].pid = 0;
    wait_all(pids, NMEMBERS, codes, 10);
    secs = (double)(shp_time_ns() - t0) / 1e9;
    for (i = 0; i < NMEMBERS; i++) {
        if (codes[i] != 3) {
            fail_msg("member %d exited %d after the kill, want 3 (an error)", i,
                     codes[i]);
        }
    }
    assert_true(secs < 5.0);
    /* the survivors told the AM */
    TEST_RUN_WHILE(loop, groups_failed == 0, 2);
    assert_true(groups_failed >= 1);
    /* a restarted AN registers again */
    start_an(victim);
    TEST_RUN_WHILE(loop, ans[victim].registrations < 2, 10);
    assert_int_equal(ans[victim].registrations, 2);
}

static void test_kill_leaf(void **state)
{
    (void)state;
    kill_during_stream(2);
}

static void test_kill_root(void **state)
{
    (void)state;
    kill_during_stream(0);
}

int main(int argc, char **argv)
{
#define T(_f) cmocka_unit_test_setup_teardown(_f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_all_dtypes_ops),
        T(test_determinism),
        T(test_mcast_loss),
        T(test_mcast_unreachable),
        T(test_mcast_unfit),
        T(test_two_jobs),
        T(test_bad_input),
        T(test_key_not_on_wire),
        T(test_mismatch_fails_group),
        T(test_bcast),
        T(test_bcast_mismatch),
        T(test_bcast_free),
        T(test_kill_leaf),
        T(test_kill_root),
        cmocka_unit_test_setup_teardown(test_quiet_links, setup_sleeping,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_join_deadline, setup_deadline,
                                        teardown),
    };
    char self[300];
    ssize_t n;
    char *slash;

    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    if (getenv("SHARP_TEST_AN_LOG_LEVEL") != NULL) {
        an_log_level = getenv("SHARP_TEST_AN_LOG_LEVEL");
    }
    if (getenv("SHARP_TEST_KEEPALIVE") != NULL) {
        keepalive = getenv("SHARP_TEST_KEEPALIVE");
    }
    if (getenv("SHARP_TEST_TRANSPORT") != NULL) {
        tr_name = getenv("SHARP_TEST_TRANSPORT");
        if (!strcmp(tr_name, "verbs")) {
            ops_divisor = 20;
            member_timeout = "30"; /* 33 processes on 2 emulated CPUs */
            join_deadline_s = 5;
        }
        tr_ip = getenv("SHARP_TEST_IP");
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    slash = strrchr(self, '/');
    *slash = '\0';
    /* build/tests/an -> build/bin */
    snprintf(bindir, sizeof(bindir), "%s/../../bin", self);
    snprintf(logdir, sizeof(logdir), "%s/logs", self);
    mkdir(logdir, 0755);
    { /* this run's logs only (the daemons append; tests read them) */
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "rm -f %s/*.log", logdir);
        if (system(cmd) != 0) {
            return 1;
        }
    }
    /* the cluster secret the ANs and this fake AM share */
    snprintf(secret_file, sizeof(secret_file), "%s/secret", logdir);
    {
        FILE *f = fopen(secret_file, "w");
        char err[256];
        assert_non_null(f);
        fputs("test-cluster-secret-0123456789\n", f);
        fclose(f);
        assert_int_equal(chmod(secret_file, 0600), 0);
        assert_int_equal(shp_auth_init(), SHP_OK);
        assert_int_equal(
            shp_auth_key_load(secret_file, &am_key, err, sizeof(err)), SHP_OK);
    }
    shp_log_set_level(SHP_LOG_ERROR);
    if (getenv("SHARP_TEST_ONLY") != NULL) { /* one test, by name */
        cmocka_set_test_filter(getenv("SHARP_TEST_ONLY"));
    }
    if (getenv("SHARP_TEST_SKIP") != NULL) { /* those it matches (a glob) */
        cmocka_set_skip_filter(getenv("SHARP_TEST_SKIP"));
    }
    return cmocka_run_group_tests_name("an_tree", tests, NULL, NULL);
}
