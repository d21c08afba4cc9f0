/*
 * The control plane end to end, with real processes: sharp_am over a
 * generated 2-level fat-tree (2 spines, 4 leaves, 8 hosts), a sharp_an per
 * switch on 127.0.1.x, sharpds for four hosts, and this test as the local
 * processes (blocking clients of the sharpds' Unix sockets) and as the admin
 * (the AM's admin socket).
 *
 * Covers: job begin/attach/end, group create (trimmed sub-tree, descriptor)
 * and a real allreduce through it (tests/an/an_member), group destroy, uid
 * enforcement (a client running as nobody), refusals, a wrong cluster
 * secret, kill -9 of an AN (only the groups through it are revoked), an
 * AM restart (ANs and sharpds come back, the job and its group are taken
 * back), the AM's own state kept across kill -9 (reservations, the
 * topology loaded, group ids, the epoch), and an administrator's drained
 * ANs and frozen trees (placement around them, kept across kill -9).
 */
#include "tests/support/test_util.h"
#include "tests/support/notice_client.h"

#include "am/am_store.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/net.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSW 6
#define NSD 4

static const char *sw_names[NSW] = {"spine01", "spine02", "leaf01",
                                    "leaf02",  "leaf03",  "leaf04"};
static const char *sd_hosts[NSD] = {"n00001", "n00003", "n00005", "n00006"};
static pid_t am_pid, an_pid[NSW], sd_pid[NSD];
static char bindir[400], testdir[400], dir[512], am_addr[64], secret[600];

/* --- processes ------------------------------------------------------------ */

static void path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void start_am(const char *listen)
{
    char exe[500], topo[600], sock[600], log[600], state[600];
    snprintf(exe, sizeof(exe), "%s/sharp_am", bindir);
    path(topo, sizeof(topo), "topo.ibnd");
    path(sock, sizeof(sock), "am.sock");
    path(log, sizeof(log), "am.log");
    path(state, sizeof(state), "am-state"); /* kept across its restarts */
    char *argv[] = {exe, "--topology", topo, "--listen", (char *)listen,
                    "--admin-socket", sock, "--secret-file", secret,
                    "--state-dir", state, "--keepalive", "1s", "--tree-settle",
                    "100ms", "--group-timeout", "5s",
                    /* a sharpd lost is held this long (test_sharpd_grace) */
                    "--sharpd-grace", "3s",
                    /* the tests below plan groups over tree levels */
                    "--flat-max", "0",
                    /* its 6 ANs and 4 sharpds, and one more sharpd at a
                     * time (test_node_keys, test_max_peers) */
                    "--max-peers", "11", NULL};
    am_pid = test_spawn(argv, log);
    /* the address it listens on */
    char line[256];
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(log, "r");
        while (f && fgets(line, sizeof(line), f))
            if (sscanf(line, "sharp_am listening on %63s", am_addr) == 1) {
                fclose(f);
                return;
            }
        if (f)
            fclose(f);
        usleep(25000);
    }
    fail_msg("sharp_am did not start (see %s)", log);
}

/* The node secret of ROLE NAME (protocol/auth.h), made from the cluster
 * secret as `sharp_am --node-secret` makes it, in a file of dir: its path
 * (a static buffer of four, used in turn). */
static const char *node_key(const char *role, const char *name)
{
    static char paths[4][600];
    static int next;
    char *p = paths[next++ % 4], err[300], s[SHP_AUTH_NODE_SECRET_MAX];
    shp_auth_key_t cluster;
    assert_int_equal(shp_auth_key_load(secret, &cluster, err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(shp_auth_node_secret(&cluster, role, name, s), SHP_OK);
    snprintf(p, 600, "%s/key-%s-%s", dir, role, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", s);
    fclose(f);
    chmod(p, 0600);
    return p;
}

/* AN i, with key_file or (NULL) its own node secret */
static void start_an(int i, const char *key_file)
{
    if (key_file == NULL)
        key_file = node_key("an", sw_names[i]);
    char exe[500], listen[64], log[600];
    snprintf(exe, sizeof(exe), "%s/sharp_an", bindir);
    snprintf(listen, sizeof(listen), "127.0.1.%d:0", i + 1);
    snprintf(log, sizeof(log), "%s/an-%s.log", dir, sw_names[i]);
    char *argv[] = {exe,
                    "--name",
                    (char *)sw_names[i],
                    "--listen",
                    listen,
                    "--am",
                    am_addr,
                    "--secret-file",
                    (char *)key_file,
                    "--am-keepalive",
                    "1s",
                    NULL};
    an_pid[i] = test_spawn(argv, log);
}

/* the sharpd of host, with key_file or (NULL) its own node secret */
static pid_t start_sharpd(const char *host, const char *key_file)
{
    if (key_file == NULL)
        key_file = node_key("sharpd", host);
    char exe[500], sock[600], log[600];
    snprintf(exe, sizeof(exe), "%s/sharpd", bindir);
    snprintf(sock, sizeof(sock), "%s/sd-%s.sock", dir, host);
    snprintf(log, sizeof(log), "%s/sd-%s.log", dir, host);
    char *argv[] = {
        exe,     "--host",        (char *)host,     "--socket",    sock, "--am",
        am_addr, "--secret-file", (char *)key_file, "--keepalive", "1s", NULL};
    return test_spawn(argv, log);
}

static int stop(pid_t pid)
{
    int st;
    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 400; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* --- blocking control clients (tests/support/notice_client.h) ------------- */

static client_t *client_open(const char *sockname)
{
    char p[600];
    path(p, sizeof(p), sockname);
    return client_connect(p, 100);
}

/* Waits for a notice of `type` (and group_id if >= 0). */
static json_t *wait_notice(client_t *c, const char *type, int64_t gid, int ms)
{
    uint64_t end = shp_time_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        size_t i;
        json_t *n;
        json_array_foreach(c->notices, i, n)
        {
            if (!strcmp(shp_ctl_type(n), type) &&
                (gid < 0 ||
                 json_integer_value(json_object_get(n, "group_id")) == gid)) {
                json_incref(n);
                json_array_remove(c->notices, i);
                return n;
            }
        }
        uint64_t now = shp_time_ns();
        if (now >= end)
            return NULL;
        json_t *r = client_read(c, (int)((end - now) / 1000000u) + 1);
        if (!r)
            return NULL;
        json_array_append_new(c->notices, r);
    }
}

static json_t *admin(const char *type)
{
    client_t *a = client_open("am.sock");
    json_t *r = call(a, json_pack("{s:s}", "type", type));
    client_close(a);
    assert_int_equal(status_of(r), 0);
    return r;
}

/* entries of an admin listing whose state is "up" */
static int count_up(const char *type)
{
    json_t *r = admin(type), *v;
    size_t i;
    int up = 0;
    json_array_foreach(json_object_get(r, type), i, v)
    {
        up += !strcmp(json_string_value(json_object_get(v, "state")), "up");
    }
    json_decref(r);
    return up;
}

static int ans_up(void)
{
    return count_up("ans");
}

static int count_of(const char *type, const char *key)
{
    json_t *r = admin(type);
    int n = (int)json_array_size(json_object_get(r, key));
    json_decref(r);
    return n;
}

static const char *an_addr(const char *name, char *buf, size_t len)
{
    json_t *r = admin("ans"), *v;
    size_t i;
    buf[0] = '\0';
    json_array_foreach(json_object_get(r, "ans"), i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "name")), name))
            snprintf(buf, len, "%s",
                     json_string_value(json_object_get(v, "addr")));
    }
    json_decref(r);
    return buf;
}

static int trees_up(void)
{
    return count_up("trees");
}

/* up trees that span every leaf: a spine and the nans - 2 leaves (trees
 * built while ANs were still registering have fewer, and the manager
 * rebuilds them once registrations settle) */
static int trees_full(int nans)
{
    json_t *r = admin("trees"), *v;
    size_t i;
    int full = 0;
    json_array_foreach(json_object_get(r, "trees"), i, v)
    {
        full += !strcmp(json_string_value(json_object_get(v, "state")), "up") &&
                json_integer_value(json_object_get(v, "ans")) == nans - 1;
    }
    json_decref(r);
    return full;
}

/* the fabric is ready when every AN is up and both trees are up, whole */
static void wait_ready(int nans)
{
    for (int i = 0; i < 400; i++) {
        if (ans_up() == nans && trees_up() == 2 && trees_full(nans) == 2)
            return;
        usleep(25000);
    }
    fail_msg("fabric not ready: %d ANs up (logs in %s)", ans_up(), dir);
}

static json_t *job_begin_json(uint64_t job, const char *const *hosts, int n)
{
    json_t *h = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(h, json_string(hosts[i]));
    char s[24];
    snprintf(s, sizeof(s), "%llu", (unsigned long long)job);
    return json_pack("{s:s, s:s, s:o}", "type", "job_begin", "job_id", s,
                     "hosts", h);
}

static json_t *job_msg(const char *type, uint64_t job)
{
    char s[24];
    snprintf(s, sizeof(s), "%llu", (unsigned long long)job);
    return json_pack("{s:s, s:s}", "type", type, "job_id", s);
}

/* dist NULL: the manager's default */
static json_t *group_create_dist(client_t *c, uint64_t job,
                                 const char *const *members, int n,
                                 const char *dist)
{
    json_t *msg = job_msg("group_create", job), *m = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(m, json_string(members[i]));
    json_object_set_new(msg, "members", m);
    if (dist != NULL)
        json_object_set_new(msg, "dist", json_string(dist));
    return call(c, msg);
}

/* results over RC: this test's members are made by hand and take them
 * from their leaf AN only */
static json_t *group_create(client_t *c, uint64_t job,
                            const char *const *members, int n)
{
    return group_create_dist(c, job, members, n, "rc");
}

static int64_t group_id(const json_t *r)
{
    return json_integer_value(
        json_object_get(json_object_get(r, "group"), "group_id"));
}

/* --- setup ------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "%s/am-XXXXXX", testdir);
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0755); /* the uid test's client runs as nobody */
    path(secret, sizeof(secret), "secret");
    FILE *f = fopen(secret, "w");
    fputs("am-test-cluster-secret-0123456789\n", f);
    fclose(f);
    chmod(secret, 0600);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd),
             "%s/sharp-topo fat-tree --levels 2 --radix 4 --hosts 8 > "
             "%s/topo.ibnd",
             bindir, dir);
    assert_int_equal(system(cmd), 0);
    start_am("127.0.0.1:0");
    for (int i = 0; i < NSW; i++)
        start_an(i, NULL);
    for (int i = 0; i < NSD; i++)
        sd_pid[i] = start_sharpd(sd_hosts[i], NULL);
    wait_ready(NSW);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < NSD; i++)
        bad |= stop(sd_pid[i]) != 0;
    for (int i = 0; i < NSW; i++)
        bad |= stop(an_pid[i]) != 0;
    bad |= stop(am_pid) != 0;
    if (bad)
        fprintf(stderr, "a daemon did not exit cleanly; logs in %s\n", dir);
    return bad ? -1 : 0;
}

/* --- tests ------------------------------------------------------------------ */

/* Members report success on done_fd and stay (keeping the group whole)
 * until every one has: a member that left early would fail the group under
 * the others. */
static pid_t start_member(const json_t *group, int rank, int nmembers,
                          int done_fd)
{
    char done[12];
    snprintf(done, sizeof(done), "%d", done_fd);
    json_t *m = json_array_get(json_object_get(group, "members"), rank);
    char exe[500], gid[16], tree[16], child[16], r[16], leaves[16], osts[16],
        payload[16], log[600];
    snprintf(exe, sizeof(exe), "%s/../tests/an/an_member", bindir);
    snprintf(gid, sizeof(gid), "%lld",
             (long long)json_integer_value(json_object_get(group, "group_id")));
    snprintf(tree, sizeof(tree), "%lld",
             (long long)json_integer_value(json_object_get(group, "tree_id")));
    snprintf(child, sizeof(child), "%lld",
             (long long)json_integer_value(json_object_get(m, "child_index")));
    snprintf(r, sizeof(r), "%d", rank);
    snprintf(leaves, sizeof(leaves), "%d", nmembers);
    snprintf(osts, sizeof(osts), "%lld",
             (long long)json_integer_value(json_object_get(group, "osts")));
    snprintf(payload, sizeof(payload), "%lld",
             (long long)json_integer_value(json_object_get(group, "payload")));
    snprintf(log, sizeof(log), "%s/member-%d.log", dir, rank);
    char *argv[] = {
        exe,
        "--leaf",
        (char *)json_string_value(json_object_get(m, "addr")),
        "--group",
        gid,
        "--tree",
        tree,
        "--job",
        (char *)json_string_value(json_object_get(group, "job_id")),
        "--key",
        (char *)json_string_value(json_object_get(group, "job_key")),
        "--child",
        child,
        "--rank",
        r,
        "--leaves",
        leaves,
        "--per-leaf",
        "1",
        "--osts",
        osts,
        "--payload",
        payload,
        "--plan",
        "stream",
        "--ops",
        "300",
        "--done-fd",
        done,
        "--timeout",
        "20",
        NULL};
    return test_spawn(argv, log);
}

static void test_job_and_group(void **state)
{
    (void)state;
    client_t *a = client_open("sd-n00001.sock"),
             *b = client_open("sd-n00003.sock"),
             *c = client_open("sd-n00005.sock");
    static const char *hosts[] = {"n00001", "n00003", "n00005"};
    json_t *r = call(a, job_begin_json(42, hosts, 3));
    assert_int_equal(status_of(r), 0);
    const char *key = json_string_value(json_object_get(r, "job_key"));
    assert_int_equal(strlen(key), 64);
    char keep[65];
    snprintf(keep, sizeof(keep), "%s", key);
    json_decref(r);

    r = call(b, job_msg("job_attach", 42));
    assert_int_equal(status_of(r), 0);
    assert_string_equal(json_string_value(json_object_get(r, "job_key")), keep);
    json_decref(r);
    assert_int_equal(call_status(c, job_msg("job_attach", 42)), 0);

    /* a group over one host of each of three leaves: the spine is the top */
    r = group_create(a, 42, hosts, 3);
    assert_int_equal(status_of(r), 0);
    json_t *g = json_object_get(r, "group");
    json_t *ans = json_object_get(g, "ans");
    assert_int_equal(json_array_size(ans), 4);
    assert_true(
        strncmp(json_string_value(json_array_get(ans, 0)), "spine", 5) == 0);
    char addr[64];
    for (int i = 0; i < 3; i++) {
        json_t *m = json_array_get(json_object_get(g, "members"), i);
        char leaf[16];
        snprintf(leaf, sizeof(leaf), "leaf0%d", i + 1);
        assert_string_equal(json_string_value(json_object_get(m, "an")), leaf);
        assert_string_equal(json_string_value(json_object_get(m, "addr")),
                            an_addr(leaf, addr, sizeof(addr)));
        assert_int_equal(json_integer_value(json_object_get(m, "child_index")),
                         0);
    }
    assert_string_equal(json_string_value(json_object_get(g, "job_key")), keep);
    assert_string_equal(json_string_value(json_object_get(g, "dist")), "rc");

    /* the admin view */
    json_t *gl = admin("groups");
    json_t *g0 = json_array_get(json_object_get(gl, "groups"), 0);
    assert_int_equal(json_array_size(json_object_get(gl, "groups")), 1);
    assert_string_equal(json_string_value(json_object_get(g0, "state")), "up");
    assert_int_equal(json_integer_value(json_object_get(g0, "members")), 3);
    json_decref(gl);

    /* members on one leaf: trimmed to that leaf */
    static const char *same[] = {"n00005", "n00005"};
    json_t *r2 = group_create_dist(c, 42, same, 2, NULL);
    assert_int_equal(status_of(r2), 0);
    ans = json_object_get(json_object_get(r2, "group"), "ans");
    assert_int_equal(json_array_size(ans), 1);
    /* the default, dist auto: its AN speaks tcp and multicasts */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(r2, "group"), "dist")),
                        "mcast");
    assert_string_equal(json_string_value(json_array_get(ans, 0)), "leaf03");

    /* the ANs really hold the group: 300 sums through it, checked */
    pid_t pids[3];
    int done[2], ndone = 0, st, codes[3] = {-1, -1, -1}, early = 0;
    assert_int_equal(pipe(done), 0);
    for (int i = 0; i < 3; i++)
        pids[i] = start_member(g, i, 3, done[1]);
    close(done[1]);
    uint64_t end = shp_time_ns() + 60 * SHP_NSEC_PER_SEC;
    while (ndone < 3 && !early && shp_time_ns() < end) {
        char byte;
        struct pollfd pf = {done[0], POLLIN, 0};
        if (poll(&pf, 1, 100) == 1 && read(done[0], &byte, 1) == 1)
            ndone++;
        for (int i = 0; i < 3; i++)
            if (codes[i] < 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
                early = 1; /* a member gave up before the barrier */
            }
    }
    close(done[0]);
    for (int i = 0; i < 3; i++) {
        if (codes[i] < 0) {
            kill(pids[i], SIGTERM);
            assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
            codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        }
        if (codes[i] != 0)
            fail_msg("member %d exited %d (logs in %s)", i, codes[i], dir);
    }
    assert_int_equal(ndone, 3);

    /* members leaving close their links: the AN fails the group and every
     * process of the job hears of it */
    json_t *n = wait_notice(b, "group_revoked", group_id(r), 10000);
    assert_non_null(n);
    assert_non_null(strstr(json_string_value(json_object_get(n, "reason")),
                           "lost the child link"));
    json_decref(n);

    /* destroy what is left, end the job: nothing left */
    json_t *d = job_msg("group_destroy", 42);
    json_object_set_new(d, "group_id", json_integer(group_id(r)));
    assert_int_equal(call_status(b, d), SHP_ERR_GROUP_UNKNOWN);
    d = job_msg("group_destroy", 42);
    json_object_set_new(d, "group_id", json_integer(group_id(r2)));
    assert_int_equal(call_status(c, d), 0);
    d = job_msg("group_destroy", 42);
    json_object_set_new(d, "group_id", json_integer(group_id(r2)));
    assert_int_equal(call_status(c, d), SHP_ERR_GROUP_UNKNOWN);
    n = wait_notice(a, "group_revoked", group_id(r2), 100);
    assert_null(n); /* a destroyed group is not "revoked" */
    assert_int_equal(count_of("groups", "groups"), 0);
    assert_int_equal(call_status(a, job_msg("job_end", 42)), 0);
    assert_int_equal(count_of("jobs", "jobs"), 0);
    json_decref(r);
    json_decref(r2);
    client_close(a);
    client_close(b);
    client_close(c);
}

static void test_refusals(void **state)
{
    (void)state;
    client_t *a = client_open("sd-n00001.sock");
    static const char *bad[] = {"n00001", "nosuchhost"};
    json_t *r = call(a, job_begin_json(7, bad, 2));
    assert_int_equal(status_of(r), SHP_ERR_JOB_REFUSED);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
                           "unknown host \"nosuchhost\""));
    json_decref(r);
    static const char *ok[] = {"n00001", "n00003"};
    assert_int_equal(call_status(a, job_begin_json(7, ok, 2)), 0);
    assert_int_equal(call_status(a, job_begin_json(7, ok, 2)),
                     SHP_ERR_JOB_REFUSED);
    static const char *outside[] = {"n00001", "n00008"};
    r = group_create(a, 7, outside, 2);
    assert_int_equal(status_of(r), SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
                           "not a host of job 7"));
    json_decref(r);
    assert_int_equal(call_status(a, job_msg("job_end", 999)),
                     SHP_ERR_JOB_UNKNOWN);
    json_t *m = json_pack("{s:s, s:i}", "type", "frobnicate", "job_id", 7);
    assert_int_equal(call_status(a, m), SHP_ERR_UNSUPPORTED);
    /* a client that exits without job_end: the job goes with it */
    client_close(a);
    for (int i = 0; i < 200 && count_of("jobs", "jobs") > 0; i++)
        usleep(20000);
    assert_int_equal(count_of("jobs", "jobs"), 0);
}

/* As nobody: may not touch root's job; root may touch anybody's. */
static void test_uid_enforcement(void **state)
{
    (void)state;
    client_t *root = client_open("sd-n00001.sock");
    static const char *hosts[] = {"n00001", "n00003"};
    assert_int_equal(call_status(root, job_begin_json(50, hosts, 2)), 0);
    int pipefd[2], gofd[2];
    assert_int_equal(pipe(pipefd), 0);
    assert_int_equal(pipe(gofd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("sd-n00003.sock");
        int st = call_status(c, job_msg("job_attach", 50));
        int st2 = call_status(c, job_begin_json(51, hosts, 2));
        int res[2] = {st, st2};
        if (write(pipefd[1], res, sizeof(res)) != sizeof(res))
            _exit(91);
        /* stay until told, so that job 51 keeps a process */
        char x;
        if (read(gofd[0], &x, 1) < 0)
            _exit(92);
        client_close(c);
        _exit(0);
    }
    int res[2];
    assert_int_equal(read(pipefd[0], res, sizeof(res)), sizeof(res));
    assert_int_equal(res[0], SHP_ERR_PERM);
    assert_int_equal(res[1], 0);
    /* root may attach to nobody's job */
    client_t *r3 = client_open("sd-n00003.sock");
    assert_int_equal(call_status(r3, job_msg("job_attach", 51)), 0);
    json_t *jobs = admin("jobs"), *j;
    size_t i;
    int seen = 0;
    json_array_foreach(json_object_get(jobs, "jobs"), i, j)
    {
        if (!strcmp(json_string_value(json_object_get(j, "job_id")), "51")) {
            assert_int_equal(json_integer_value(json_object_get(j, "uid")),
                             65534);
            seen = 1;
        }
    }
    assert_true(seen);
    json_decref(jobs);
    assert_int_equal(write(gofd[1], "x", 1), 1);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(call_status(r3, job_msg("job_end", 51)), 0);
    assert_int_equal(call_status(root, job_msg("job_end", 50)), 0);
    close(pipefd[0]);
    close(pipefd[1]);
    close(gofd[0]);
    close(gofd[1]);
    client_close(r3);
    client_close(root);

    /* the admin socket is not for nobody (mode 0660 root:root) */
    pid = fork();
    if (pid == 0) {
        char p[600];
        if (setgid(65534) || setuid(65534))
            _exit(90);
        path(p, sizeof(p), "am.sock");
        _exit(shp_unix_connect(p) < 0 && errno == EACCES ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* job_reserve / job_release (a scheduler's prolog and epilog, as root
 * through sharpd): only root; the job belongs to its owner, gathers the
 * reserving hosts, outlives its processes, ends at the first release; a
 * lost sharpd drops its host's hold. */
static json_t *reserve_json(uint64_t job, int owner, int osts)
{
    json_t *m = job_msg("job_reserve", job);
    json_object_set_new(m, "owner", json_integer(owner));
    json_object_set_new(m, "req", json_pack("{s:i}", "osts", osts));
    return m;
}

static json_t *job_row(uint64_t job)
{
    json_t *jobs = admin("jobs"), *j, *row = NULL;
    size_t i;
    char s[24];
    snprintf(s, sizeof(s), "%llu", (unsigned long long)job);
    json_array_foreach(json_object_get(jobs, "jobs"), i, j)
    {
        if (!strcmp(json_string_value(json_object_get(j, "job_id")), s))
            row = json_incref(j);
    }
    json_decref(jobs);
    return row;
}

static void test_reservation(void **state)
{
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("sd-n00003.sock");
        int res[2] = {call_status(c, reserve_json(60, 65534, 2)),
                      call_status(c, job_msg("job_release", 60))};
        _exit(write(pipefd[1], res, sizeof(res)) == sizeof(res) ? 0 : 91);
    }
    int res[4], st;
    assert_int_equal(read(pipefd[0], res, 2 * sizeof(int)), 2 * sizeof(int));
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(res[0], SHP_ERR_PERM); /* not root */
    assert_int_equal(res[1], SHP_ERR_PERM);
    assert_null(job_row(60));

    client_t *a = client_open("sd-n00001.sock");
    client_t *b = client_open("sd-n00003.sock");
    json_t *r = call(a, reserve_json(60, 65534, 2));
    assert_int_equal(status_of(r), 0);
    assert_int_equal(json_integer_value(json_object_get(r, "osts")), 2);
    json_decref(r);
    assert_int_equal(call_status(a, reserve_json(60, 65534, 2)), 0); /* again */
    assert_int_equal(call_status(b, reserve_json(60, 65534, 2)), 0);
    /* the same id for another owner, or begun as an ordinary job: no */
    assert_int_equal(call_status(b, reserve_json(60, 0, 2)),
                     SHP_ERR_JOB_REFUSED);
    static const char *hosts[] = {"n00001", "n00003"};
    assert_int_equal(call_status(a, job_begin_json(60, hosts, 2)),
                     SHP_ERR_JOB_REFUSED);
    json_t *row = job_row(60);
    assert_non_null(row);
    assert_true(json_is_true(json_object_get(row, "reserved")));
    assert_int_equal(json_integer_value(json_object_get(row, "uid")), 65534);
    assert_int_equal(json_array_size(json_object_get(row, "hosts")), 2);
    json_decref(row);

    /* its owner attaches on a reserved host (the quotas come along), makes
     * a group and exits: the group goes, the job stays */
    pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("sd-n00003.sock");
        json_t *ar = call(c, job_msg("job_attach", 60));
        static const char *m[] = {"n00003"};
        json_t *g = group_create(c, 60, m, 1);
        int out[4] = {
            status_of(ar), (int)json_integer_value(json_object_get(ar, "osts")),
            json_is_true(json_object_get(ar, "reserved")), status_of(g)};
        client_t *e = client_open("sd-n00005.sock"); /* not reserved there */
        out[1] = call_status(e, job_msg("job_attach", 60)) == SHP_ERR_PERM
                     ? out[1]
                     : -1;
        _exit(write(pipefd[1], out, sizeof(out)) == sizeof(out) ? 0 : 91);
    }
    assert_int_equal(read(pipefd[0], res, sizeof(res)), sizeof(res));
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 2);
    assert_int_equal(res[2], 1);
    assert_int_equal(res[3], 0);
    for (int i = 0; i < 200 && count_of("groups", "groups") > 0; i++)
        usleep(20000);
    assert_int_equal(count_of("groups", "groups"), 0);
    assert_non_null((row = job_row(60)));
    json_decref(row);

    /* the first release ends it; the next finds it gone */
    r = call(b, job_msg("job_release", 60));
    assert_int_equal(status_of(r), 0);
    assert_true(json_is_true(json_object_get(r, "released")));
    json_decref(r);
    assert_null(job_row(60));
    r = call(a, job_msg("job_release", 60));
    assert_int_equal(status_of(r), 0);
    assert_true(json_is_false(json_object_get(r, "released")));
    json_decref(r);
    /* an ordinary job is not released by a scheduler */
    assert_int_equal(call_status(a, job_begin_json(61, hosts, 2)), 0);
    assert_int_equal(call_status(a, job_msg("job_release", 61)),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(call_status(a, job_msg("job_end", 61)), 0);

    /* a host whose sharpd is lost no longer holds the job: with no other
     * holder and no processes, it ends */
    client_t *d = client_open("sd-n00006.sock");
    assert_int_equal(call_status(d, reserve_json(62, 0, 2)), 0);
    client_close(d);
    assert_non_null((row = job_row(62)));
    json_decref(row);
    assert_int_equal(stop(sd_pid[3]), 0);
    /* (after sharpd_grace, 3 s) */
    for (int i = 0; i < 400 && (row = job_row(62)) != NULL; i++) {
        json_decref(row);
        usleep(20000);
    }
    assert_null(job_row(62));
    sd_pid[3] = start_sharpd(sd_hosts[3], NULL);
    usleep(100000);
    int up = 0; /* registered again, for the tests after this one */
    for (int i = 0; i < 100 && !up; i++) {
        d = client_open("sd-n00006.sock");
        r = call(d, json_pack("{s:s}", "type", "hello"));
        up = json_is_true(json_object_get(r, "am_up"));
        json_decref(r);
        client_close(d);
        if (!up)
            usleep(50000);
    }
    assert_true(up);
    client_close(a);
    client_close(b);
    close(pipefd[0]);
    close(pipefd[1]);
}

/* An AN listening on every address must be told what to advertise; the
 * AM then hands that address to members. */
/* An unprivileged user begins a job with the id Slurm will give its next
 * job (a squat): the scheduler's reservation of that id, as root, ends the
 * squatter's job (its process is told) and succeeds for the real owner,
 * where before it failed ("job exists") and, with required=1, drained the
 * node.  A job of root's with the id is still not taken over. */
static void test_squat(void **state)
{
    (void)state;
    int go[2], res[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("sd-n00001.sock");
        static const char *h[] = {"n00001"};
        int out[2] = {call_status(c, job_begin_json(9001, h, 1)), -1};
        if (write(res[1], out, sizeof(out)) != sizeof(out))
            _exit(91);
        char x;
        if (read(go[0], &x, 1) != 1) /* the reservation was made */
            _exit(92);
        json_t *k = wait_notice(c, "job_killed", -1, 5000);
        out[1] = k ? status_of(k) : -1;
        json_decref(k);
        _exit(write(res[1], out, sizeof(out)) == sizeof(out) ? 0 : 93);
    }
    int out[2], st;
    assert_int_equal(read(res[0], out, sizeof(out)), (ssize_t)sizeof(out));
    assert_int_equal(out[0], 0); /* the squat */
    json_t *row = job_row(9001);
    assert_non_null(row);
    assert_int_equal(json_integer_value(json_object_get(row, "uid")), 65534);
    json_decref(row);
    json_t *stats = admin("stats");
    json_int_t ended0 = json_integer_value(
        json_object_get(json_object_get(stats, "stats"), "squats_ended"));
    json_decref(stats);

    /* the prolog's reservation for the real owner (uid 1000) */
    client_t *a = client_open("sd-n00001.sock");
    int reserved = call_status(a, reserve_json(9001, 1000, 2));
    assert_int_equal(write(go[1], "x", 1), 1); /* the squatter ends */
    assert_int_equal(read(res[0], out, sizeof(out)), (ssize_t)sizeof(out));
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(reserved, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(out[1], SHP_ERR_JOB_KILLED); /* the squatter is told */
    assert_non_null((row = job_row(9001)));
    assert_true(json_is_true(json_object_get(row, "reserved")));
    assert_int_equal(json_integer_value(json_object_get(row, "uid")), 1000);
    json_decref(row);
    stats = admin("stats");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(stats, "stats"), "squats_ended")),
                     ended0 + 1);
    json_decref(stats);
    assert_int_equal(call_status(a, job_msg("job_release", 9001)), 0);
    assert_null(job_row(9001));

    /* root's own job of that id is not a squat: the reservation is refused */
    static const char *h1[] = {"n00001"};
    assert_int_equal(call_status(a, job_begin_json(9002, h1, 1)), 0);
    assert_int_equal(call_status(a, reserve_json(9002, 1000, 2)),
                     SHP_ERR_JOB_REFUSED);
    assert_int_equal(call_status(a, job_msg("job_end", 9002)), 0);
    client_close(a);
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
}

static void test_an_advertise(void **state)
{
    (void)state;
    char exe[500], log[600], line[256];
    snprintf(exe, sizeof(exe), "%s/sharp_an", bindir);
    path(log, sizeof(log), "an-wild.log");
    char *argv[] = {exe, "--name", "leaf04", "--listen", "0.0.0.0:0", NULL};
    pid_t pid = test_spawn(argv, log);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 1);
    FILE *f = fopen(log, "r");
    int said = 0;
    while (f && fgets(line, sizeof(line), f))
        said |= strstr(line, "AN0010") && strstr(line, "--advertise");
    if (f)
        fclose(f);
    assert_true(said);

    /* leaf04 again, on every address, advertising 127.0.1.6 */
    stop(an_pid[5]);
    for (int i = 0; i < 200 && ans_up() != NSW - 1; i++)
        usleep(20000);
    char *argv2[] = {exe,         "--name",        "leaf04",    "--listen",
                     "0.0.0.0:0", "--advertise",   "127.0.1.6", "--am",
                     am_addr,     "--secret-file", NULL,        NULL};
    argv2[10] = (char *)node_key("an", "leaf04");
    path(log, sizeof(log), "an-leaf04.log");
    an_pid[5] = test_spawn(argv2, log);
    wait_ready(NSW);
    char addr[64];
    an_addr("leaf04", addr, sizeof(addr));
    assert_true(strncmp(addr, "127.0.1.6:", 10) == 0);
}

static void test_wrong_secret(void **state)
{
    (void)state;
    char bad[600];
    path(bad, sizeof(bad), "bad-secret");
    FILE *f = fopen(bad, "w");
    fputs("not-the-cluster-secret-987654321\n", f);
    fclose(f);
    chmod(bad, 0600);
    /* a sharpd with the wrong secret: it finds the AM is not its AM */
    pid_t pid = start_sharpd("n00008", bad);
    char log[600], line[512];
    snprintf(log, sizeof(log), "%s/sd-n00008.log", dir);
    int refused = 0;
    for (int i = 0; i < 200 && !refused; i++) {
        usleep(25000);
        FILE *lf = fopen(log, "r");
        while (lf && fgets(line, sizeof(line), lf))
            refused |= strstr(line, "SD0001") != NULL;
        if (lf)
            fclose(lf);
    }
    assert_true(refused);
    assert_int_equal(stop(pid), 0);

    /* a raw peer that cannot prove the secret: the AM refuses it */
    shp_sockaddr_t sa;
    assert_int_equal(shp_sockaddr_parse(am_addr, 0, &sa), SHP_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    client_t raw = {.fd = fd, .notices = json_array()};
    shp_auth_client_t ac;
    client_send(&raw, shp_auth_client_hello(&ac, "an", "leaf04"));
    json_t *chal = client_read(&raw, 5000);
    assert_non_null(chal);
    assert_string_equal(shp_ctl_type(chal), "challenge");
    json_decref(chal);
    client_send(&raw, json_pack("{s:s, s:s}", "type", "auth", "proof",
                                "0000000000000000000000000000000000000000000000"
                                "000000000000000000"));
    json_t *no = client_read(&raw, 5000);
    assert_non_null(no);
    assert_string_equal(shp_ctl_type(no), "auth_failed");
    assert_int_equal(status_of(no), SHP_ERR_AUTH);
    json_decref(no);
    assert_null(client_read(&raw, 5000)); /* and closed */
    close(fd);
    json_decref(raw.notices);

    /* before it proves the secret a peer may send no large frame: one that
     * announces 1 MiB is dropped at once (the AM used to make room for it
     * and wait) */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    uint8_t hdr[SHP_CTL_HDR_LEN];
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, 1u << 20, hdr);
    assert_int_equal(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char c;
    assert_int_equal(poll(&pf, 1, 5000), 1);
    assert_int_equal(recv(fd, &c, 1, 0), 0); /* EOF */
    close(fd);
    json_t *st = admin("stats");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(st, "stats"), "auth_failures")),
                     1);
    json_decref(st);
    assert_int_equal(ans_up(), NSW);
}

/* the lines of the file at path with needle */
static int file_count(const char *path, const char *needle)
{
    char line[512];
    int n = 0;
    FILE *lf = fopen(path, "r");
    while (lf && fgets(line, sizeof(line), lf))
        n += strstr(line, needle) != NULL;
    if (lf)
        fclose(lf);
    return n;
}

/* whether the file at path has more than `before` lines with needle
 * within 5 s */
static int file_says(const char *path, const char *needle, int before)
{
    for (int i = 0; i < 200; i++) {
        usleep(25000);
        if (file_count(path, needle) > before)
            return 1;
    }
    return 0;
}

/* a sharpd refused at its first step (SD0001 in its log): the AM's proof
 * was made with another key than its file's */
static int sharpd_refused(const char *host, const char *key_file)
{
    pid_t pid = start_sharpd(host, key_file);
    char log[600];
    snprintf(log, sizeof(log), "%s/sd-%s.log", dir, host);
    int refused = file_says(log, "SD0001", 0);
    stop(pid);
    unlink(log);
    return refused;
}

/* whether a raw peer holding key_file's secret, claiming ROLE NAME, gets
 * past the AM's challenge and is accepted by it (raw: the cluster key used
 * as it is, as if it were the node key of ROLE NAME) */
static int raw_auth(const char *role, const char *name, const char *key_file,
                    int raw_key)
{
    shp_sockaddr_t sa;
    shp_auth_key_t key;
    shp_auth_client_t ac;
    char err[300];
    const char *why = NULL;
    json_t *auth = NULL;
    assert_int_equal(shp_auth_key_load(key_file, &key, err, sizeof(err)),
                     SHP_OK);
    if (raw_key) {
        key.node = 1;
        snprintf(key.role, sizeof(key.role), "%s", role);
        snprintf(key.name, sizeof(key.name), "%s", name);
    }
    assert_int_equal(shp_sockaddr_parse(am_addr, 0, &sa), SHP_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    client_t raw = {.fd = fd, .notices = json_array()};
    client_send(&raw, shp_auth_client_hello(&ac, role, name));
    json_t *chal = client_read(&raw, 5000);
    assert_non_null(chal);
    int ok = shp_auth_client_answer(&ac, &key, chal, &auth, &why) == SHP_OK;
    json_decref(chal);
    if (ok) { /* proved both ways: the AM says nothing until registered */
        client_send(&raw, auth);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ok = poll(&pf, 1, 300) == 0;
    }
    close(fd);
    json_decref(raw.notices);
    return ok;
}

/* Node keys: an AN's or sharpd's node secret proves its own role and name
 * only (every daemon of this test holds its own), and the cluster key is
 * never a node's key as it is */
static void test_node_keys(void **state)
{
    (void)state;
    const char *mine = node_key("sharpd", "n00008");
    assert_true(raw_auth("sharpd", "n00008", mine, 0));
    /* another host's, or an AN's, with that node secret */
    assert_false(raw_auth("sharpd", "n00007", mine, 0));
    assert_false(raw_auth("an", "n00008", mine, 0));
    assert_false(raw_auth("an", "leaf04", mine, 0));
    /* the cluster key itself, not derived, proves nothing */
    assert_false(raw_auth("sharpd", "n00008", secret, 1));
    assert_false(raw_auth("an", "leaf04", secret, 1));
    /* the same through a real sharpd: n00008 with n00007's file is
     * refused; with its own it registers; with the cluster secret (the
     * manager's own host) it derives its key and registers too */
    assert_true(sharpd_refused("n00008", node_key("sharpd", "n00007")));
    char log[600];
    snprintf(log, sizeof(log), "%s/am.log", dir);
    const char *files[] = {node_key("sharpd", "n00008"), secret};
    for (int k = 0; k < 2; k++) {
        const char *reg = "sharpd of host n00008 registered";
        int before = file_count(log, reg);
        pid_t pid = start_sharpd("n00008", files[k]);
        assert_true(file_says(log, reg, before));
        assert_int_equal(stop(pid), 0);
    }
    assert_int_equal(ans_up(), NSW);
}

static void test_kill_an(void **state)
{
    (void)state;
    client_t *a = client_open("sd-n00001.sock"),
             *b = client_open("sd-n00003.sock"),
             *c = client_open("sd-n00005.sock");
    static const char *hosts[] = {"n00001", "n00003", "n00005"};
    assert_int_equal(call_status(a, job_begin_json(60, hosts, 3)), 0);
    assert_int_equal(call_status(b, job_msg("job_attach", 60)), 0);
    assert_int_equal(call_status(c, job_msg("job_attach", 60)), 0);
    static const char *via3[] = {"n00001", "n00005"};
    static const char *not3[] = {"n00001", "n00003"};
    json_t *g1 = group_create(a, 60, via3, 2),
           *g2 = group_create(a, 60, not3, 2);
    assert_int_equal(status_of(g1), 0);
    assert_int_equal(status_of(g2), 0);

    kill(an_pid[4], SIGKILL); /* leaf03 */
    waitpid(an_pid[4], NULL, 0);
    an_pid[4] = 0;
    /* revoked by whoever notices first: the AM (AN lost) or the spine (its
     * child link to leaf03 lost) */
    json_t *n = wait_notice(a, "group_revoked", group_id(g1), 10000);
    assert_non_null(n);
    json_decref(n);
    /* every process of the job hears it, and only about g1 */
    n = wait_notice(b, "group_revoked", group_id(g1), 5000);
    assert_non_null(n);
    json_decref(n);
    assert_null(wait_notice(a, "group_revoked", group_id(g2), 500));
    json_t *gl = admin("groups");
    assert_int_equal(json_array_size(json_object_get(gl, "groups")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(
            json_array_get(json_object_get(gl, "groups"), 0), "group_id")),
        group_id(g2));
    json_decref(gl);
    /* new groups avoid the dead AN: its switch still forwards, so n00005
     * hangs off a spine on the rebuilt tree */
    json_t *r = NULL;
    for (int i = 0; i < 100; i++) {
        json_decref(r);
        r = group_create(a, 60, via3, 2);
        if (status_of(r) == 0)
            break;
        usleep(20000);
    }
    assert_int_equal(status_of(r), 0);
    json_t *ans = json_object_get(json_object_get(r, "group"), "ans"), *v;
    size_t k;
    json_array_foreach(ans, k, v)
    {
        assert_string_not_equal(json_string_value(v), "leaf03");
    }
    json_t *d0 = job_msg("group_destroy", 60);
    json_object_set_new(d0, "group_id", json_integer(group_id(r)));
    assert_int_equal(call_status(a, d0), 0);
    json_decref(r);

    /* leaf03 back: once g2 is gone the trees are rebuilt with it */
    start_an(4, NULL);
    json_t *d = job_msg("group_destroy", 60);
    json_object_set_new(d, "group_id", json_integer(group_id(g2)));
    assert_int_equal(call_status(a, d), 0);
    wait_ready(NSW);
    r = group_create(a, 60, via3, 2);
    assert_int_equal(status_of(r), 0);
    json_decref(r);
    assert_int_equal(call_status(a, job_msg("job_end", 60)), 0);
    json_decref(g1);
    json_decref(g2);
    client_close(a);
    client_close(b);
    client_close(c);
}

static void test_am_restart(void **state)
{
    (void)state;
    client_t *a = client_open("sd-n00001.sock");
    static const char *hosts[] = {"n00001", "n00003"};
    assert_int_equal(call_status(a, job_begin_json(70, hosts, 2)), 0);
    json_t *g = group_create(a, 70, hosts, 2);
    assert_int_equal(status_of(g), 0);
    /* a process of the job on the other member host too */
    client_t *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(b, job_msg("job_attach", 70)), 0);

    char listen[64];
    snprintf(listen, sizeof(listen), "%s", am_addr);
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    /* the processes are told nothing: the group keeps running */
    json_t *n = wait_notice(a, "group_revoked", group_id(g), 500);
    assert_null(n);

    start_am(listen);
    wait_ready(NSW);
    /* the new AM takes job 70 and its group back from the reports of the
     * ANs and the sharpd (docs/am.md, Faults): nobody is told anything */
    for (int t = 0; t < 100 && count_of("groups", "groups") < 1; t++)
        usleep(50000);
    assert_int_equal(count_of("jobs", "jobs"), 1);
    assert_int_equal(count_of("groups", "groups"), 1);
    assert_null(wait_notice(a, "job_killed", -1, 200));
    assert_null(wait_notice(a, "group_revoked", -1, 10));
    json_t *r = admin("groups"), *v;
    size_t i;
    json_array_foreach(json_object_get(r, "groups"), i, v)
    {
        assert_int_equal(json_integer_value(json_object_get(v, "group_id")),
                         group_id(g));
    }
    json_decref(r);
    /* and work goes on: the job ends in order, a new one begins */
    assert_int_equal(call_status(a, job_msg("job_end", 70)), 0);
    assert_int_equal(call_status(a, job_begin_json(71, hosts, 2)), 0);
    json_t *g2 = group_create(a, 71, hosts, 2);
    assert_int_equal(status_of(g2), 0);
    assert_int_equal(call_status(a, job_msg("job_end", 71)), 0);
    json_decref(g);
    json_decref(g2);
    client_close(b);
    client_close(a);
}

static json_int_t stat_of(const char *name)
{
    json_t *st = admin("stats");
    json_int_t v =
        json_integer_value(json_object_get(json_object_get(st, "stats"), name));
    json_decref(st);
    return v;
}

/* the manager's counter NAME above v within ms */
static int stat_above(const char *name, json_int_t v, int ms)
{
    for (int t = 0; t < ms / 50; t++) {
        if (stat_of(name) > v)
            return 1;
        usleep(50000);
    }
    return stat_of(name) > v;
}

/* A sharpd the manager loses is held for sharpd_grace (docs/am.md,
 * Faults): one paused past the manager's keepalives (dropped by it) that
 * comes back reports its job, and the job's group runs on (nobody is told
 * anything); one killed and started again registers without the job, and
 * the job's group is revoked with that reason. */
static void test_sharpd_grace(void **state)
{
    (void)state;
    client_t *a = client_open("sd-n00001.sock");
    client_t *b = client_open("sd-n00003.sock");
    static const char *hosts[] = {"n00001", "n00003"};
    assert_int_equal(call_status(a, job_begin_json(85, hosts, 2)), 0);
    assert_int_equal(call_status(b, job_msg("job_attach", 85)), 0);
    json_t *g = group_create(a, 85, hosts, 2);
    assert_int_equal(status_of(g), 0);

    /* paused for more than 3 keepalives of 1 s: the manager drops it */
    json_int_t held = stat_of("sharpds_held"), back = stat_of("sharpds_back");
    kill(sd_pid[1], SIGSTOP);
    int dropped = stat_above("sharpds_held", held, 10000);
    kill(sd_pid[1], SIGCONT);
    assert_true(dropped);
    assert_true(stat_above("sharpds_back", back, 10000));
    /* back within the grace: its job's group was kept */
    assert_null(wait_notice(a, "group_revoked", group_id(g), 4000));
    assert_int_equal(count_of("groups", "groups"), 1);
    json_t *row = job_row(85);
    assert_non_null(row);
    json_decref(row);

    /* killed and started again: the new sharpd has no process of the job
     * (b is closed after the kill: closed before, its sharpd could say
     * job_detach first) */
    kill(sd_pid[1], SIGKILL);
    waitpid(sd_pid[1], NULL, 0);
    client_close(b);
    back = stat_of("sharpds_back");
    sd_pid[1] = start_sharpd(sd_hosts[1], NULL);
    assert_true(stat_above("sharpds_back", back, 10000));
    json_t *n = wait_notice(a, "group_revoked", group_id(g), 5000);
    assert_non_null(n);
    const char *why = json_string_value(json_object_get(n, "reason"));
    if (!why || !strstr(why, "registered without the job"))
        fail_msg("group revoked for another reason: %s", why ? why : "(none)");
    json_decref(n);
    assert_int_equal(count_of("groups", "groups"), 0);
    assert_int_equal(call_status(a, job_msg("job_end", 85)), 0);
    json_decref(g);
    client_close(a);
}

/* The manager's own state survives kill -9 (its state database, kept in
 * state_dir): a scheduler's reservation comes back with its owner, key,
 * quotas and hosts, and the job's next step attaches to it; the topology
 * an administrator loaded is the one in use again; no group id of the
 * killed manager is handed out again; the epoch grows. */
static void test_state_restart(void **state)
{
    (void)state;
    char topo2[600], cmd[1400], listen[64], key[80];
    static const char *hosts[] = {"n00001", "n00003"};
    path(topo2, sizeof(topo2), "topo2.ibnd");
    snprintf(cmd, sizeof(cmd), "cp %s/topo.ibnd %s", dir, topo2);
    assert_int_equal(system(cmd), 0);
    client_t *ad = client_open("am.sock");
    json_t *r = call(
        ad, json_pack("{s:s, s:s}", "type", "topology_load", "file", topo2));
    client_close(ad);
    assert_int_equal(status_of(r), 0);
    json_decref(r);
    wait_ready(NSW);
    json_int_t epoch0 = stat_of("epoch");
    assert_true(epoch0 > 0);

    /* a reservation of two hosts, a step of it and its group */
    client_t *a = client_open("sd-n00001.sock");
    client_t *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(a, reserve_json(80, 65534, 3)), 0);
    assert_int_equal(call_status(b, reserve_json(80, 65534, 3)), 0);
    r = call(a, job_msg("job_attach", 80));
    assert_int_equal(status_of(r), 0);
    snprintf(key, sizeof(key), "%s",
             json_string_value(json_object_get(r, "job_key")));
    assert_int_equal(strlen(key), 64);
    json_decref(r);
    json_t *g = group_create(a, 80, hosts, 2);
    assert_int_equal(status_of(g), 0);
    int64_t gid0 = group_id(g);
    json_decref(g);

    snprintf(listen, sizeof(listen), "%s", am_addr);
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    /* the group goes on while the manager is away (adoption) */
    assert_null(wait_notice(a, "group_revoked", gid0, 300));
    client_close(a);
    start_am(listen);
    wait_ready(NSW);

    /* the reservation is there as it was */
    json_t *row = job_row(80);
    assert_non_null(row);
    assert_true(json_is_true(json_object_get(row, "reserved")));
    assert_int_equal(json_integer_value(json_object_get(row, "uid")), 65534);
    assert_int_equal(json_array_size(json_object_get(row, "hosts")), 2);
    json_decref(row);
    /* the topology in use is the one loaded, not the configuration's */
    r = admin("topology");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(r, "topology"), "file")),
                        topo2);
    json_decref(r);
    assert_true(stat_of("epoch") > epoch0);

    /* the job's next step (as its owner) attaches: same key, same quotas */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("sd-n00003.sock");
        json_t *ar = call(c, job_msg("job_attach", 80));
        static const char *m[] = {"n00003"};
        json_t *g1 = group_create(c, 80, m, 1);
        const char *k = json_string_value(json_object_get(ar, "job_key"));
        int64_t out[6] = {status_of(ar),
                          json_integer_value(json_object_get(ar, "osts")),
                          json_is_true(json_object_get(ar, "reserved")),
                          k && !strcmp(k, key),
                          status_of(g1),
                          group_id(g1)};
        _exit(write(pipefd[1], out, sizeof(out)) == sizeof(out) ? 0 : 91);
    }
    int64_t res[6];
    int st;
    assert_int_equal(read(pipefd[0], res, sizeof(res)), sizeof(res));
    assert_int_equal(waitpid(pid, &st, 0), pid);
    close(pipefd[0]);
    close(pipefd[1]);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 3);
    assert_int_equal(res[2], 1);
    assert_int_equal(res[3], 1);
    assert_int_equal(res[4], 0);
    /* a group id after the killed manager's, not one it handed out (ids
     * go round 1 .. 2^24 - 1) */
    int64_t ahead = ((res[5] - gid0) % 16777215 + 16777215) % 16777215;
    assert_true(ahead > 0 && ahead < (1 << 23));

    /* released: gone, and gone after a restart too */
    r = call(b, job_msg("job_release", 80));
    assert_int_equal(status_of(r), 0);
    assert_true(json_is_true(json_object_get(r, "released")));
    json_decref(r);
    client_close(b);
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    start_am(listen);
    wait_ready(NSW);
    assert_null(job_row(80));
}

/* whether the log of the sharpd started as `name` has a line with `what` */
static int sd_log_has(const char *name, const char *what)
{
    char log[600], line[1024];
    int found = 0;
    snprintf(log, sizeof(log), "%s/sd-%s.log", dir, name);
    FILE *f = fopen(log, "r");
    while (f && fgets(line, sizeof(line), f))
        found |= strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* The manager takes at most max_peers ANs and sharpds (11 here: the 6 ANs
 * and 4 sharpds of this fabric and one more).  With n00008's sharpd the
 * eleventh, n00007's is refused with an answer naming the setting, and
 * counted; a second sharpd of n00001 is no twelfth: it replaces the first
 * (then it goes and the first registers again). */
static void test_max_peers(void **state)
{
    (void)state;
    json_t *st = admin("stats");
    json_int_t refused0 = json_integer_value(
        json_object_get(json_object_get(st, "stats"), "peers_refused"));
    json_decref(st);
    /* the logs of this test's daemons gain lines (their files are
     * appended to): counted before */
    char amlog[600], log7[600];
    snprintf(amlog, sizeof(amlog), "%s/am.log", dir);
    snprintf(log7, sizeof(log7), "%s/sd-n00007.log", dir);
    const char *reg8 = "sharpd of host n00008 registered",
               *reg7 = "registered with the aggregation";
    int before8 = file_count(amlog, reg8), before7 = file_count(log7, reg7),
        refusals7 = file_count(log7, "max_peers");
    pid_t eleventh = start_sharpd("n00008", secret);
    int seen = file_says(amlog, reg8, before8);
    pid_t extra = start_sharpd("n00007", secret);
    int refused = seen && file_says(log7, "max_peers", refusals7);
    int registered = file_count(log7, reg7) > before7;
    assert_int_equal(stop(extra), 0);
    st = admin("stats");
    json_int_t refused1 = json_integer_value(
        json_object_get(json_object_get(st, "stats"), "peers_refused"));
    json_decref(st);

    /* n00001's sharpd again, beside the first (its own socket and log) */
    char exe[500], sock[600], log[600];
    snprintf(exe, sizeof(exe), "%s/sharpd", bindir);
    snprintf(sock, sizeof(sock), "%s/sd-n00001b.sock", dir);
    snprintf(log, sizeof(log), "%s/sd-n00001b.log", dir);
    char *argv[] = {exe,    "--host",      "n00001", "--socket",
                    sock,   "--am",        am_addr,  "--secret-file",
                    secret, "--keepalive", "1s",     NULL};
    extra = test_spawn(argv, log);
    int replaced = 0;
    for (int i = 0; i < 200 && !replaced; i++) {
        usleep(25000);
        replaced = sd_log_has("n00001b", "registered with the aggregation");
    }
    int refused_b = sd_log_has("n00001b", "max_peers");
    assert_int_equal(stop(extra), 0);
    assert_int_equal(stop(eleventh), 0);
    assert_true(seen);
    assert_true(refused);
    assert_false(registered);
    assert_true(refused1 > refused0);
    assert_true(replaced);
    assert_false(refused_b);
    /* the first one is back: a job through it */
    client_t *a = NULL;
    int ok = 0;
    static const char *h[] = {"n00001"};
    for (int i = 0; i < 200 && !ok; i++) {
        usleep(25000);
        a = client_open("sd-n00001.sock");
        ok = call_status(a, job_begin_json(9100, h, 1)) == 0;
        client_close(a);
    }
    assert_true(ok);
    wait_ready(NSW);
}

/* --- an administrator's settings: drain, freeze ------------------------ */

/* an admin request's reply, whatever its status (new reference) */
static json_t *admin_req(json_t *msg)
{
    client_t *a = client_open("am.sock");
    json_t *r = call(a, msg);
    client_close(a);
    return r;
}

static int admin_status(json_t *msg)
{
    json_t *r = admin_req(msg);
    int st = status_of(r);
    json_decref(r);
    return st;
}

static int drain(const char *name, const char *reason)
{
    return admin_status(
        reason ? json_pack("{s:s, s:s, s:s}", "type", "an_drain", "name", name,
                           "reason", reason)
               : json_pack("{s:s, s:s}", "type", "an_undrain", "name", name));
}

static int freeze(int t, const char *reason)
{
    return admin_status(
        reason ? json_pack("{s:s, s:i, s:s}", "type", "tree_freeze", "tree_id",
                           t, "reason", reason)
               : json_pack("{s:s, s:i}", "type", "tree_thaw", "tree_id", t));
}

/* the id of the tree rooted at `root`; -1: none */
static int tree_of(const char *root)
{
    json_t *r = admin("trees"), *v;
    size_t i;
    int id = -1;
    json_array_foreach(json_object_get(r, "trees"), i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "root")), root))
            id = (int)json_integer_value(json_object_get(v, "id"));
    }
    json_decref(r);
    return id;
}

/* the `flag` ("drained", "frozen") of the row of a listing whose `key`
 * is `want`; -1: no row; the reason in `reason` (may be NULL) */
static int flag_of(const char *type, const char *key, const char *want,
                   const char *flag, char *reason, size_t len)
{
    json_t *r = admin(type), *v;
    size_t i;
    int out = -1;
    char buf[32];
    json_array_foreach(json_object_get(r, type), i, v)
    {
        json_t *k = json_object_get(v, key);
        if (json_is_integer(k))
            snprintf(buf, sizeof(buf), "%d", (int)json_integer_value(k));
        else
            snprintf(buf, sizeof(buf), "%s", json_string_value(k));
        if (strcmp(buf, want) != 0)
            continue;
        out = json_is_true(json_object_get(v, flag));
        const char *why = json_string_value(json_object_get(
            v, !strcmp(flag, "drained") ? "drain_reason" : "freeze_reason"));
        if (reason)
            snprintf(reason, len, "%s", why ? why : "");
    }
    json_decref(r);
    return out;
}

static int an_drained(const char *name, char *reason, size_t len)
{
    return flag_of("ans", "name", name, "drained", reason, len);
}

static int tree_frozen(int t, char *reason, size_t len)
{
    char id[16];
    snprintf(id, sizeof(id), "%d", t);
    return flag_of("trees", "id", id, "frozen", reason, len);
}

/* whether the group's ANs (its descriptor) include `name` */
static int group_uses(const json_t *g, const char *name)
{
    json_t *ans = json_object_get(json_object_get(g, "group"), "ans"), *v;
    size_t i;
    json_array_foreach(ans, i, v)
    {
        if (!strcmp(json_string_value(v), name))
            return 1;
    }
    return 0;
}

static int group_tree(const json_t *g)
{
    return (int)json_integer_value(
        json_object_get(json_object_get(g, "group"), "tree_id"));
}

static int group_listed(int64_t gid)
{
    json_t *r = admin("groups"), *v;
    size_t i;
    int up = 0;
    json_array_foreach(json_object_get(r, "groups"), i, v)
    {
        up |= json_integer_value(json_object_get(v, "group_id")) == gid &&
              !strcmp(json_string_value(json_object_get(v, "state")), "up");
    }
    json_decref(r);
    return up;
}

static void restart_am(void)
{
    char listen[64];
    snprintf(listen, sizeof(listen), "%s", am_addr);
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    start_am(listen);
    wait_ready(NSW);
}

/* A drained AN and a frozen tree take no new groups, the groups already
 * on them run on; a group whose sub-tree avoids the drained AN is placed;
 * no tree left: the group fails naming why; both settings survive kill -9
 * of the manager (its state database), a freeze whose tree id now has
 * another root is dropped; unknown names and non-admins are refused. */
static void test_drain_freeze(void **state)
{
    (void)state;
    char why[256];
    static const char *hosts[] = {"n00001", "n00003", "n00005", "n00006"};
    static const char *across[] = {"n00001", "n00003"};   /* two leaves */
    static const char *one_leaf[] = {"n00005", "n00006"}; /* leaf03 */
    client_t *a = client_open("sd-n00001.sock");
    assert_int_equal(call_status(a, job_begin_json(95, hosts, 4)), 0);
    /* a process of the job on the other member host too (a restarted
     * manager takes a group back from its member hosts' reports) */
    client_t *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(b, job_msg("job_attach", 95)), 0);
    json_t *g1 = group_create(a, 95, across, 2);
    assert_int_equal(status_of(g1), 0);
    int t1 = group_tree(g1);
    const char *spine1 = group_uses(g1, "spine01") ? "spine01" : "spine02";
    const char *spine2 = !strcmp(spine1, "spine01") ? "spine02" : "spine01";
    assert_int_equal(tree_of(spine1), t1);
    int t2 = tree_of(spine2);
    assert_true(t2 >= 0 && t2 != t1);

    /* the spine of g1 drained: the next group goes the other way, g1
     * runs on (nobody is told anything) */
    assert_int_equal(an_drained(spine1, NULL, 0), 0);
    assert_int_equal(drain(spine1, "replacing a fan"), 0);
    assert_int_equal(an_drained(spine1, why, sizeof(why)), 1);
    assert_string_equal(why, "replacing a fan");
    json_t *g2 = group_create(a, 95, across, 2);
    assert_int_equal(status_of(g2), 0);
    assert_int_equal(group_tree(g2), t2);
    assert_false(group_uses(g2, spine1));
    assert_true(group_listed(group_id(g1)));
    assert_null(wait_notice(a, "group_revoked", -1, 200));

    /* both spines drained: no tree left for members across leaves, the
     * reason named; members under one leaf need no spine */
    assert_int_equal(drain(spine2, "firmware"), 0);
    json_t *r = group_create(a, 95, across, 2);
    assert_int_equal(status_of(r), SHP_ERR_NO_TREE);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
                           "uses a drained aggregation node"));
    json_decref(r);
    r = group_create(a, 95, one_leaf, 2);
    assert_int_equal(status_of(r), 0);
    assert_true(group_uses(r, "leaf03"));
    assert_false(group_uses(r, "spine01") || group_uses(r, "spine02"));
    assert_int_equal(
        call_status(a, json_pack("{s:s, s:s, s:I}", "type", "group_destroy",
                                 "job_id", "95", "group_id",
                                 (json_int_t)group_id(r))),
        0);
    json_decref(r);
    assert_true(group_listed(group_id(g1)) && group_listed(group_id(g2)));

    /* undrained: spine1's tree takes groups again (the least loaded) */
    assert_int_equal(drain(spine1, NULL), 0);
    assert_int_equal(drain(spine2, NULL), 0);
    assert_int_equal(an_drained(spine1, NULL, 0), 0);
    assert_int_equal(
        call_status(a, json_pack("{s:s, s:s, s:I}", "type", "group_destroy",
                                 "job_id", "95", "group_id",
                                 (json_int_t)group_id(g1))),
        0);
    r = group_create(a, 95, across, 2);
    assert_int_equal(status_of(r), 0);
    assert_int_equal(group_tree(r), t1);
    json_decref(g1);
    g1 = r;

    /* t1 frozen: a new group goes on t2 even though t2 is the more
     * loaded one now; both frozen: none, the reason named */
    assert_int_equal(freeze(t1, "tree under test"), 0);
    assert_int_equal(tree_frozen(t1, why, sizeof(why)), 1);
    assert_string_equal(why, "tree under test");
    assert_int_equal(tree_frozen(t2, NULL, 0), 0);
    json_t *g3 = group_create(a, 95, across, 2);
    assert_int_equal(status_of(g3), 0);
    assert_int_equal(group_tree(g3), t2);
    assert_int_equal(freeze(t2, "also"), 0);
    r = group_create(a, 95, across, 2);
    assert_int_equal(status_of(r), SHP_ERR_NO_TREE);
    assert_non_null(
        strstr(json_string_value(json_object_get(r, "error")), "is frozen"));
    json_decref(r);
    assert_true(group_listed(group_id(g1)) && group_listed(group_id(g3)));
    assert_int_equal(freeze(t2, NULL), 0);

    /* unknown names, no such tree, bad reasons: refused, nothing set */
    assert_int_equal(drain("nosuch", "x"), SHP_ERR_NOT_FOUND);
    assert_int_equal(drain("n00001", "a host, no AN"), SHP_ERR_NOT_FOUND);
    assert_int_equal(freeze(63, "x"), SHP_ERR_NOT_FOUND);
    assert_int_equal(freeze(64, "x"), SHP_ERR_NOT_FOUND);
    assert_int_equal(drain("leaf02", "a\nb"), SHP_ERR_INVALID_PARAM);
    assert_int_equal(an_drained("leaf02", NULL, 0), 0);

    /* not an admin: refused (the socket opened to everyone for this) */
    char sock[600];
    path(sock, sizeof(sock), "am.sock");
    assert_int_equal(chmod(sock, 0666), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(90);
        client_t *c = client_open("am.sock");
        int st =
            call_status(c, json_pack("{s:s, s:s, s:s}", "type", "an_drain",
                                     "name", "leaf02", "reason", "nobody's"));
        int st2 = call_status(
            c, json_pack("{s:s, s:i}", "type", "tree_thaw", "tree_id", t1));
        _exit(st == SHP_ERR_PERM && st2 == SHP_ERR_PERM ? 0 : 1);
    }
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_int_equal(chmod(sock, 0660), 0);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
    assert_int_equal(an_drained("leaf02", NULL, 0), 0);
    assert_int_equal(tree_frozen(t1, NULL, 0), 1);

    /* kill -9 and restart: t1 still frozen, spine2 drained (set now),
     * both with their reasons; no tree is left for a new group */
    assert_int_equal(drain(spine2, "kept across a restart"), 0);
    restart_am();
    assert_int_equal(an_drained(spine2, why, sizeof(why)), 1);
    assert_string_equal(why, "kept across a restart");
    assert_int_equal(an_drained(spine1, NULL, 0), 0);
    assert_int_equal(tree_of(spine1), t1); /* the same trees again */
    assert_int_equal(tree_frozen(t1, why, sizeof(why)), 1);
    assert_string_equal(why, "tree under test");
    assert_int_equal(tree_frozen(t2, NULL, 0), 0);
    r = group_create(a, 95, across, 2);
    assert_int_equal(status_of(r), SHP_ERR_NO_TREE);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")),
                           "is frozen or uses a drained aggregation node"));
    json_decref(r);
    /* the groups of before are taken back (adoption) and run on */
    for (int i = 0;
         i < 100 && !(group_listed(group_id(g1)) && group_listed(group_id(g3)));
         i++)
        usleep(50000);
    assert_true(group_listed(group_id(g1)) && group_listed(group_id(g3)));
    assert_int_equal(drain(spine2, NULL), 0);
    r = group_create(a, 95, across, 2);
    assert_int_equal(status_of(r), 0);
    assert_int_equal(group_tree(r), t2);
    json_decref(r);

    /* a freeze of t1 stored with another root (as a new topology that
     * numbers the trees otherwise would leave it): dropped at start, and
     * said why; gone from the database */
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    char state_dir[600], key[32], err[300], v[512];
    shp_am_store_t *db = NULL;
    path(state_dir, sizeof(state_dir), "am-state");
    snprintf(key, sizeof(key), "tree_freeze:%d", t1);
    assert_int_equal(shp_am_store_open(state_dir, 0, &db, err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(shp_am_store_setting(db, key, v, sizeof(v)), SHP_OK);
    assert_non_null(strstr(v, spine1)); /* as stored by the manager */
    json_t *fz = json_pack("{s:s, s:s}", "root", spine2, "reason", "moved");
    char *fzs = json_dumps(fz, JSON_COMPACT);
    assert_int_equal(shp_am_store_setting_set(db, key, fzs), SHP_OK);
    free(fzs);
    json_decref(fz);
    shp_am_store_close(db);
    char amlog[600], said[200];
    snprintf(amlog, sizeof(amlog), "%s/am.log", dir);
    snprintf(said, sizeof(said), "tree %d thawed: it was frozen with root %s",
             t1, spine2);
    int before = file_count(amlog, said);
    char listen[64];
    snprintf(listen, sizeof(listen), "%s", am_addr);
    start_am(listen);
    wait_ready(NSW);
    assert_int_equal(tree_frozen(t1, NULL, 0), 0);
    assert_true(file_count(amlog, said) > before);
    kill(am_pid, SIGKILL);
    waitpid(am_pid, NULL, 0);
    assert_int_equal(shp_am_store_open(state_dir, 0, &db, err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(shp_am_store_setting(db, key, v, sizeof(v)),
                     SHP_ERR_NOT_FOUND);
    shp_am_store_close(db);
    start_am(listen);
    wait_ready(NSW);

    assert_int_equal(call_status(a, job_msg("job_end", 95)), 0);
    json_decref(g1);
    json_decref(g2);
    json_decref(g3);
    client_close(b);
    client_close(a);
}

/* a group of job over hosts[0..1] (rc) with `key` (standby_of or
 * stripe_of) naming group `of` */
static json_t *related_create(client_t *c, uint64_t job,
                              const char *const *hosts, const char *key,
                              int64_t of)
{
    json_t *msg = job_msg("group_create", job), *m = json_array();
    for (int k = 0; k < 2; k++)
        json_array_append_new(m, json_string(hosts[k]));
    json_object_set_new(msg, "members", m);
    json_object_set_new(msg, "dist", json_string("rc"));
    json_object_set_new(msg, key, json_integer(of));
    return call(c, msg);
}

static int has_error(json_t *r, int st, const char *text)
{
    const char *e = json_string_value(json_object_get(r, "error"));
    int ok = status_of(r) == st && e != NULL && strstr(e, text) != NULL;
    if (!ok)
        fprintf(stderr, "status %d, error %s\n", status_of(r), e ? e : "-");
    json_decref(r);
    return ok;
}

/* a group_destroy of job 98's group gid, said to be a failed group's
 * (failed) or not */
static int destroy_group(client_t *c, int64_t gid, int failed)
{
    json_t *d = job_msg("group_destroy", 98);
    json_object_set_new(d, "group_id", json_integer(gid));
    if (failed >= 0)
        json_object_set_new(d, "failed", json_boolean(failed));
    return call_status(c, d);
}

/* A group its members destroy because it failed (libsharp_coll says so
 * when its group failed before the destroy: a communicator moved onto its
 * standby, before the manager saw the AN's loss) is counted as a revoked
 * one is: a takeover when a standby of it is up, else unguarded; a group
 * destroyed otherwise is not counted */
static void test_failed_destroy_counted(void **state)
{
    (void)state;
    static const char *hosts[] = {"n00001", "n00003"};
    client_t *a = client_open("sd-n00001.sock"),
             *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(a, job_begin_json(98, hosts, 2)), 0);
    assert_int_equal(call_status(b, job_msg("job_attach", 98)), 0);
    json_int_t take0 = stat_of("standby_takeovers"),
               lost0 = stat_of("standbys_lost"),
               ung0 = stat_of("groups_unguarded_lost");
    json_t *g1 = group_create(a, 98, hosts, 2);
    assert_int_equal(status_of(g1), 0);
    json_t *s1 = related_create(a, 98, hosts, "standby_of", group_id(g1));
    assert_int_equal(status_of(s1), 0);
    /* the primary, failed: its standby takes over */
    assert_int_equal(destroy_group(a, group_id(g1), 1), 0);
    assert_int_equal(stat_of("standby_takeovers"), take0 + 1);
    /* the standby, freed as any group is (failed: false, or no flag) */
    assert_int_equal(destroy_group(a, group_id(s1), 0), 0);
    json_t *g2 = group_create(a, 98, hosts, 2),
           *g3 = group_create(a, 98, hosts, 2);
    assert_int_equal(destroy_group(a, group_id(g3), -1), 0);
    assert_int_equal(stat_of("groups_unguarded_lost"), ung0);
    /* a failed group with no standby: unguarded */
    assert_int_equal(destroy_group(a, group_id(g2), 1), 0);
    assert_int_equal(stat_of("groups_unguarded_lost"), ung0 + 1);
    assert_int_equal(stat_of("standby_takeovers"), take0 + 1);
    assert_int_equal(stat_of("standbys_lost"), lost0);
    /* a group gone is not counted twice */
    assert_int_equal(destroy_group(a, group_id(g2), 1), SHP_ERR_GROUP_UNKNOWN);
    assert_int_equal(stat_of("groups_unguarded_lost"), ung0 + 1);
    assert_int_equal(call_status(a, job_msg("job_end", 98)), 0);
    json_decref(g1);
    json_decref(s1);
    json_decref(g2);
    json_decref(g3);
    client_close(b);
    client_close(a);
}

/* A stripe (group_create's stripe_of): on the other spine's tree, its
 * descriptor saying whose stripe it is; a second one, which could only
 * share every AN with the group or its stripe, refused; a standby and a
 * stripe at once refused; and no stripe once the job holds half its
 * max_groups (16), while plain groups still come */
static void test_stripe_placement(void **state)
{
    (void)state;
    static const char *hosts[] = {"n00001", "n00003"}; /* two leaves */
    client_t *a = client_open("sd-n00001.sock"),
             *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(a, job_begin_json(96, hosts, 2)), 0);
    assert_int_equal(call_status(b, job_msg("job_attach", 96)), 0);
    json_t *g[9];
    g[0] = group_create(a, 96, hosts, 2);
    assert_int_equal(status_of(g[0]), 0);
    int64_t g0 = group_id(g[0]);
    const char *spine1 = group_uses(g[0], "spine01") ? "spine01" : "spine02";
    g[1] = related_create(a, 96, hosts, "stripe_of", g0);
    assert_int_equal(status_of(g[1]), 0);
    assert_false(group_uses(g[1], spine1));
    json_t *d = json_object_get(g[1], "group");
    assert_int_equal(json_integer_value(json_object_get(d, "stripe_of")), g0);
    assert_int_equal(json_integer_value(json_object_get(d, "shared_ans")), 2);
    assert_null(json_object_get(d, "standby_of"));
    assert_true(has_error(related_create(a, 96, hosts, "stripe_of", g0),
                          SHP_ERR_NO_TREE, "no tree apart"));
    json_t *msg = job_msg("group_create", 96), *m = json_array();
    json_array_append_new(m, json_string(hosts[0]));
    json_object_set_new(msg, "members", m);
    json_object_set_new(msg, "stripe_of", json_integer(g0));
    json_object_set_new(msg, "standby_of", json_integer(g0));
    assert_true(
        has_error(call(a, msg), SHP_ERR_INVALID_PARAM, "standby or a stripe"));
    assert_true(has_error(related_create(a, 96, hosts, "stripe_of", 999999),
                          SHP_ERR_INVALID_PARAM, "stripe_of names no group"));
    /* 7 groups, then a stripe (the 8th), then a 9th whose stripe is
     * refused */
    for (int i = 2; i < 7; i++) {
        g[i] = group_create(a, 96, hosts, 2);
        assert_int_equal(status_of(g[i]), 0);
    }
    g[7] = related_create(a, 96, hosts, "stripe_of", group_id(g[6]));
    assert_int_equal(status_of(g[7]), 0);
    g[8] = group_create(a, 96, hosts, 2);
    assert_int_equal(status_of(g[8]), 0);
    assert_true(
        has_error(related_create(a, 96, hosts, "stripe_of", group_id(g[8])),
                  SHP_ERR_QUOTA, "half its maximum"));
    assert_int_equal(call_status(a, job_msg("job_end", 96)), 0);
    for (int i = 0; i < 9; i++)
        json_decref(g[i]);
    client_close(b);
    client_close(a);
}

/* A standby group (group_create's standby_of): on the tree that shares the
 * fewest ANs with the group it stands by, whatever the trees' load; the
 * ANs it still shares (here the members' leaves: in every tree) are in
 * its descriptor, and one that names no group of the job is refused */
static void test_standby_placement(void **state)
{
    (void)state;
    static const char *hosts[] = {"n00001", "n00003"}; /* two leaves */
    client_t *a = client_open("sd-n00001.sock"),
             *b = client_open("sd-n00003.sock");
    assert_int_equal(call_status(a, job_begin_json(97, hosts, 2)), 0);
    assert_int_equal(call_status(b, job_msg("job_attach", 97)), 0);
    json_t *g1 = group_create(a, 97, hosts, 2);
    assert_int_equal(status_of(g1), 0);
    const char *spine1 = group_uses(g1, "spine01") ? "spine01" : "spine02";
    const char *spine2 = !strcmp(spine1, "spine01") ? "spine02" : "spine01";
    json_t *s[2];
    for (int i = 0; i < 2; i++) { /* the second with spine2's tree busier */
        s[i] = related_create(a, 97, hosts, "standby_of", group_id(g1));
        assert_int_equal(status_of(s[i]), 0);
        assert_true(group_uses(s[i], spine2));
        assert_false(group_uses(s[i], spine1));
        json_t *d = json_object_get(s[i], "group");
        assert_int_equal(json_integer_value(json_object_get(d, "standby_of")),
                         group_id(g1));
        assert_int_equal(json_integer_value(json_object_get(d, "shared_ans")),
                         2);
    }
    json_t *msg = job_msg("group_create", 97), *m = json_array();
    json_array_append_new(m, json_string(hosts[0]));
    json_object_set_new(msg, "members", m);
    json_object_set_new(msg, "standby_of", json_integer(999999));
    json_t *r = call(a, msg);
    assert_int_equal(status_of(r), SHP_ERR_INVALID_PARAM);
    assert_non_null(
        strstr(json_string_value(json_object_get(r, "error")), "standby_of"));
    json_decref(r);
    /* what guarded each group lost, counted (sharpctl stats): g1's AN
     * killed while its standbys are up, a takeover; then theirs, with
     * nothing left to take over, two unguarded */
    json_int_t take0 = stat_of("standby_takeovers"),
               lost0 = stat_of("standbys_lost"),
               ung0 = stat_of("groups_unguarded_lost");
    const char *order[2] = {spine1, spine2};
    for (int k = 0; k < 2; k++) {
        int i = !strcmp(order[k], "spine01") ? 0 : 1;
        assert_string_equal(sw_names[i], order[k]);
        kill(an_pid[i], SIGKILL);
        waitpid(an_pid[i], NULL, 0);
        an_pid[i] = 0;
        json_t *gs[2] = {k == 0 ? g1 : s[0], k == 0 ? NULL : s[1]};
        for (int q = 0; q < 2 && gs[q] != NULL; q++) {
            json_t *n = wait_notice(a, "group_revoked", group_id(gs[q]), 10000);
            assert_non_null(n);
            json_decref(n);
        }
        if (k == 0) {
            assert_int_equal(stat_of("standby_takeovers"), take0 + 1);
            assert_int_equal(stat_of("groups_unguarded_lost"), ung0);
        }
    }
    assert_int_equal(stat_of("standby_takeovers"), take0 + 1);
    assert_int_equal(stat_of("groups_unguarded_lost"), ung0 + 2);
    assert_int_equal(stat_of("standbys_lost"), lost0);
    assert_int_equal(call_status(a, job_msg("job_end", 97)), 0);
    json_decref(g1);
    json_decref(s[0]);
    json_decref(s[1]);
    client_close(b);
    client_close(a);
}

int main(void)
{
    char self[300];
    assert_int_equal(test_self_dir(self, sizeof(self)), 0);
    snprintf(bindir, sizeof(bindir), "%s/../../bin", self);
    snprintf(testdir, sizeof(testdir), "%s", self);
    signal(SIGPIPE, SIG_IGN);
    shp_log_set_level(SHP_LOG_ERROR);
    assert_int_equal(shp_auth_init(), SHP_OK);
    if (geteuid() != 0) {
        printf("SKIP: the uid tests need root (setuid to nobody)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_and_group),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_uid_enforcement),
        cmocka_unit_test(test_reservation),
        cmocka_unit_test(test_squat),
        cmocka_unit_test(test_an_advertise),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_node_keys),
        cmocka_unit_test(test_kill_an),
        cmocka_unit_test(test_am_restart),
        cmocka_unit_test(test_sharpd_grace),
        cmocka_unit_test(test_state_restart),
        cmocka_unit_test(test_max_peers),
        cmocka_unit_test(test_drain_freeze),
        cmocka_unit_test(test_failed_destroy_counted),
        cmocka_unit_test(test_stripe_placement),
        cmocka_unit_test(test_standby_placement),
    };
    return cmocka_run_group_tests_name("am", tests, setup, teardown);
}
