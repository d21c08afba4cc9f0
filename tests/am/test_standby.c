/*
 * A standby manager, with real processes: two sharp_am on 127.44.0.1 and
 * 127.44.0.2 (peers of each other, takeover_after 1 s), a sharp_an per
 * switch of a generated 2-level fat-tree (2 spines, 4 leaves) and two
 * sharpds, every node given both managers (am = a list).  This test is
 * the local processes (blocking clients of the sharpds' sockets) and the
 * admin of both managers.
 *
 * Covers (docs/am.md, "A standby manager"): the pair comes up with one
 * active (epoch 1) and one standby that refuses nodes; kill -9 of the
 * active: the standby takes over (epoch 2), the nodes follow and a new
 * group is created through it, with an id its predecessor never gave; the
 * old one restarted comes back as standby; SIGSTOP of the active: the
 * standby takes over, and the old one, resumed, steps down without
 * revoking anything (the new active's group stays, its ANs too, no id is
 * given twice); a manager that a node has seen outlived (a higher epoch,
 * with its proof) steps down when the node registers; a manager restarted
 * alone learns the nodes' epoch while standby and takes over above it.
 */
#include "tests/support/test_util.h"
#include "tests/support/notice_client.h"

#include "protocol/am_list.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/net.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSW 6
#define NSD 2
#define NAM 3

static const char *sw_names[NSW] = {"spine01", "spine02", "leaf01",
                                    "leaf02",  "leaf03",  "leaf04"};
static const char *sd_hosts[NSD] = {"n00001", "n00003"};
static const char *am_addrs[NAM] = {"127.44.0.1:6126", "127.44.0.2:6126",
                                    "127.44.0.3:6126"};
static const char *pair = "127.44.0.1:6126,127.44.0.2:6126";
static pid_t am_pid[NAM], an_pid[NSW], sd_pid[NSD];
/* test_stale_refused's own sharpd: stopped by teardown too, should the
 * test fail first (a leaked one fences every later run's managers) */
static pid_t sd_extra;
static char bindir[400], testdir[400], dir[512], secret[600];

/* --- processes ------------------------------------------------------------ */

static void path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* manager i, its log am-i.log (appended: a restart keeps the first life's
 * lines), its admin socket am-i.sock */
static void kill9(int i)
{
    kill(am_pid[i], SIGKILL);
    waitpid(am_pid[i], NULL, 0);
    am_pid[i] = 0;
}

static void start_am(int i, const char *peers, const char *standby,
                     const char *takeover)
{
    char exe[500], topo[600], sock[600], log[600], name[32], state[600];
    snprintf(exe, sizeof(exe), "%s/sharp_am", bindir);
    path(topo, sizeof(topo), "topo.ibnd");
    /* each manager its own state database (as on its own host), kept
     * across its restarts */
    snprintf(name, sizeof(name), "am-%d.state", i);
    path(state, sizeof(state), name);
    snprintf(name, sizeof(name), "am-%d.sock", i);
    path(sock, sizeof(sock), name);
    snprintf(name, sizeof(name), "am-%d.log", i);
    path(log, sizeof(log), name);
    char *argv[] = {exe,
                    "--state-dir",
                    state,
                    "--topology",
                    topo,
                    "--listen",
                    (char *)am_addrs[i],
                    "--admin-socket",
                    sock,
                    "--secret-file",
                    secret,
                    "--keepalive",
                    "1s",
                    "--tree-settle",
                    "100ms",
                    "--peers",
                    (char *)peers,
                    "--standby",
                    (char *)standby,
                    "--takeover-after",
                    (char *)takeover,
                    NULL};
    if (am_pid[i] > 0) /* a test that failed before it went: not leaked */
        kill9(i);
    am_pid[i] = test_start(argv, log);
    assert_true(am_pid[i] > 0);
}

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

static void start_an(int i)
{
    char exe[500], listen[64], log[600];
    snprintf(exe, sizeof(exe), "%s/sharp_an", bindir);
    snprintf(listen, sizeof(listen), "127.44.1.%d:0", i + 1);
    snprintf(log, sizeof(log), "%s/an-%s.log", dir, sw_names[i]);
    char *argv[] = {exe,
                    "--name",
                    (char *)sw_names[i],
                    "--listen",
                    listen,
                    "--am",
                    (char *)pair,
                    "--secret-file",
                    (char *)node_key("an", sw_names[i]),
                    "--am-keepalive",
                    "1s",
                    NULL};
    an_pid[i] = test_spawn(argv, log);
}

static pid_t start_sharpd(const char *host, const char *ams)
{
    char exe[500], sock[600], log[600];
    snprintf(exe, sizeof(exe), "%s/sharpd", bindir);
    snprintf(sock, sizeof(sock), "%s/sd-%s.sock", dir, host);
    snprintf(log, sizeof(log), "%s/sd-%s.log", dir, host);
    char *argv[] = {exe,
                    "--host",
                    (char *)host,
                    "--socket",
                    sock,
                    "--am",
                    (char *)ams,
                    "--secret-file",
                    (char *)node_key("sharpd", host),
                    "--keepalive",
                    "1s",
                    NULL};
    return test_spawn(argv, log);
}

static int stop(pid_t pid)
{
    int st;
    if (pid <= 0)
        return 0;
    kill(pid, SIGCONT);
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

/* --- blocking control clients --------------------------------------------- */

static client_t *client_open(const char *sockname)
{
    char p[600];
    path(p, sizeof(p), sockname);
    return client_connect(p, 200);
}

/* a group_revoked notice for group gid among those read so far, after
 * reading what arrived within ms */
static int revoked(client_t *c, int64_t gid, int ms)
{
    json_t *r;
    while ((r = client_read(c, ms)) != NULL)
        json_array_append_new(c->notices, r);
    size_t i;
    json_t *n;
    json_array_foreach(c->notices, i, n)
    {
        if (!strcmp(shp_ctl_type(n), "group_revoked") &&
            (json_is_true(json_object_get(n, "all")) ||
             json_integer_value(json_object_get(n, "group_id")) == gid))
            return 1;
    }
    return 0;
}

/* manager i's admin reply to msg (NULL if it does not answer); want:
 * its status */
static json_t *admin_want(int i, json_t *msg, int want)
{
    char name[32], p[600];
    snprintf(name, sizeof(name), "am-%d.sock", i);
    path(p, sizeof(p), name);
    int fd = shp_unix_connect(p);
    if (fd < 0) {
        json_decref(msg);
        return NULL;
    }
    client_t a = {.fd = fd, .notices = json_array(), .next_id = 1};
    json_t *r = call(&a, msg);
    close(fd);
    json_decref(a.notices);
    assert_int_equal(status_of(r), want);
    return r;
}

static json_t *admin_msg(int i, json_t *msg)
{
    return admin_want(i, msg, 0);
}

static json_t *admin(int i, const char *type)
{
    return admin_msg(i, json_pack("{s:s}", "type", type));
}

/* the row of manager i's listing `what` whose `key` is `value`, its
 * boolean `flag` ("drained", "frozen"), with its reason */
static int flag_of(int i, const char *what, const char *key, json_t *value,
                   const char *flag, const char **reason)
{
    static char why[256];
    json_t *r = admin(i, what), *row;
    size_t k;
    int on = -1;
    why[0] = 0;
    json_array_foreach(json_object_get(r, what), k, row)
    {
        if (json_equal(json_object_get(row, key), value)) {
            on = json_is_true(json_object_get(row, flag));
            snprintf(why, sizeof(why), "%s",
                     json_string_value(json_object_get(
                         row, !strcmp(flag, "drained") ? "drain_reason"
                                                       : "freeze_reason"))
                         ?: "");
        }
    }
    json_decref(r);
    json_decref(value);
    *reason = why;
    return on;
}

/* manager i's role ("active", "standby", "" if it does not answer) and
 * epoch */
static const char *role_of(int i, int64_t *epoch)
{
    static char role[16];
    json_t *r = admin(i, "status");
    role[0] = '\0';
    if (r) {
        json_t *m = json_object_get(r, "manager");
        snprintf(role, sizeof(role), "%s",
                 json_string_value(json_object_get(m, "role")));
        if (epoch)
            *epoch = json_integer_value(json_object_get(m, "epoch"));
        json_decref(r);
    }
    return role;
}

static int64_t wait_role(int i, const char *want, int ms)
{
    int64_t e = 0;
    for (int t = 0; t < ms; t += 20) {
        if (!strcmp(role_of(i, &e), want))
            return e;
        usleep(20000);
    }
    fail_msg("manager %d is not %s after %d ms (logs in %s)", i, want, ms, dir);
    return -1;
}

static int count_up(int i, const char *type)
{
    json_t *r = admin(i, type), *v;
    size_t k;
    int up = 0;
    json_array_foreach(json_object_get(r, type), k, v)
    {
        up += !strcmp(json_string_value(json_object_get(v, "state")), "up");
    }
    json_decref(r);
    return up;
}

/* manager i has every AN and both trees */
static void wait_ready(int i)
{
    for (int t = 0; t < 600; t++) {
        if (count_up(i, "ans") == NSW && count_up(i, "trees") == 2)
            return;
        usleep(25000);
    }
    fail_msg("manager %d: %d ANs up (logs in %s)", i, count_up(i, "ans"), dir);
}

/* the sharpd of c is registered with a manager */
static void wait_sd_up(client_t *c)
{
    for (int t = 0; t < 500; t++) {
        json_t *r = call(c, json_pack("{s:s}", "type", "hello"));
        int up = json_is_true(json_object_get(r, "am_up"));
        json_decref(r);
        if (up)
            return;
        usleep(20000);
    }
    fail_msg("the sharpd did not register with a manager (logs in %s)", dir);
}

static json_t *job_msg(const char *type, uint64_t job)
{
    char s[24];
    snprintf(s, sizeof(s), "%llu", (unsigned long long)job);
    return json_pack("{s:s, s:s}", "type", type, "job_id", s);
}

static json_t *job_begin(uint64_t job)
{
    json_t *m = job_msg("job_begin", job), *h = json_array();
    for (int i = 0; i < NSD; i++)
        json_array_append_new(h, json_string(sd_hosts[i]));
    json_object_set_new(m, "hosts", h);
    return m;
}

/* a job and a group of both hosts through c: the group's id */
static int64_t job_and_group(client_t *c, uint64_t job)
{
    assert_int_equal(call_status(c, job_begin(job)), 0);
    json_t *m = job_msg("group_create", job), *h = json_array();
    for (int i = 0; i < NSD; i++)
        json_array_append_new(h, json_string(sd_hosts[i]));
    json_object_set_new(m, "members", h);
    json_object_set_new(m, "dist", json_string("rc"));
    json_t *r = call(c, m);
    assert_int_equal(status_of(r), 0);
    int64_t gid = json_integer_value(
        json_object_get(json_object_get(r, "group"), "group_id"));
    json_decref(r);
    assert_true(gid > 0);
    return gid;
}

/* group gid is up at manager i */
static int group_up(int i, int64_t gid)
{
    json_t *r = admin(i, "groups"), *v;
    size_t k;
    int up = 0;
    json_array_foreach(json_object_get(r, "groups"), k, v)
    {
        if (json_integer_value(json_object_get(v, "group_id")) == gid)
            up = !strcmp(json_string_value(json_object_get(v, "state")), "up");
    }
    json_decref(r);
    return up;
}

static int file_has(const char *name, const char *what)
{
    char p[600], line[1024];
    path(p, sizeof(p), name);
    FILE *f = fopen(p, "r");
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* --- setup ------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "%s/standby-XXXXXX", testdir);
    assert_non_null(mkdtemp(dir));
    path(secret, sizeof(secret), "secret");
    FILE *f = fopen(secret, "w");
    fputs("standby-test-cluster-secret-0123456789\n", f);
    fclose(f);
    chmod(secret, 0600);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd),
             "%s/sharp-topo fat-tree --levels 2 --radix 4 --hosts 8 > "
             "%s/topo.ibnd",
             bindir, dir);
    assert_int_equal(system(cmd), 0);
    start_am(0, pair, "no", "1s");
    start_am(1, pair, "yes", "1s");
    for (int i = 0; i < NSW; i++)
        start_an(i);
    for (int i = 0; i < NSD; i++)
        sd_pid[i] = start_sharpd(sd_hosts[i], pair);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < NSD; i++)
        bad |= stop(sd_pid[i]) != 0;
    if (sd_extra > 0)
        bad |= stop(sd_extra) != 0;
    for (int i = 0; i < NSW; i++)
        bad |= stop(an_pid[i]) != 0;
    for (int i = 0; i < NAM; i++)
        bad |= stop(am_pid[i]) != 0;
    if (bad)
        fprintf(stderr, "a daemon did not exit cleanly; logs in %s\n", dir);
    return bad ? -1 : 0;
}

/* --- tests ------------------------------------------------------------------ */

/* One active (epoch 1), one standby that sends nodes on; kill -9 of the
 * active: the standby takes over with epoch 2, every node follows and a
 * group is created through it with a new id; the old one, restarted,
 * is standby. */
static void test_kill_active(void **state)
{
    (void)state;
    assert_int_equal(wait_role(0, "active", 5000), 1);
    /* the standby (its admin socket up once it has read the topology) */
    assert_int_equal(wait_role(1, "standby", 10000), 0);
    wait_ready(0);
    assert_int_equal(count_up(1, "ans"), 0);
    client_t *c = client_open("sd-n00001.sock");
    wait_sd_up(c);
    int64_t g1 = job_and_group(c, 1);
    /* an administrator's settings on the active one reach the standby */
    json_t *tl = admin(0, "trees");
    json_int_t t0 = json_integer_value(
        json_object_get(json_array_get(json_object_get(tl, "trees"), 0), "id"));
    json_decref(tl);
    json_decref(
        admin_msg(0, json_pack("{s:s, s:s, s:s}", "type", "an_drain", "name",
                               "leaf04", "reason", "fan replaced")));
    json_decref(
        admin_msg(0, json_pack("{s:s, s:I, s:s}", "type", "tree_freeze",
                               "tree_id", t0, "reason", "cable check")));
    /* (both: a sync may carry the drain before the freeze) */
    for (int t = 0; t < 250 && !file_has("am-1.log", "1 trees frozen"); t++)
        usleep(20000);
    /* (a standby takes them only from the active one) */
    json_decref(admin_want(
        1, json_pack("{s:s, s:s}", "type", "an_undrain", "name", "leaf04"),
        SHP_ERR_STANDBY));

    kill9(0);
    assert_int_equal(wait_role(1, "active", 5000), 2);
    wait_ready(1);
    /* the new active holds them */
    const char *why;
    assert_int_equal(
        flag_of(1, "ans", "name", json_string("leaf04"), "drained", &why), 1);
    assert_string_equal(why, "fan replaced");
    assert_int_equal(
        flag_of(1, "trees", "id", json_integer(t0), "frozen", &why), 1);
    assert_string_equal(why, "cable check");
    json_decref(admin_msg(
        1, json_pack("{s:s, s:s}", "type", "an_undrain", "name", "leaf04")));
    json_decref(admin_msg(
        1, json_pack("{s:s, s:I}", "type", "tree_thaw", "tree_id", t0)));
    assert_int_equal(
        flag_of(1, "ans", "name", json_string("leaf04"), "drained", &why), 0);
    wait_sd_up(c);
    int64_t g2 = job_and_group(c, 2);
    assert_true(g2 != g1);
    /* of the other manager's stripe: whatever the old one still gives
     * (cut off, not dead), never this id (am/am_ids.h) */
    assert_int_not_equal(g2 % SHP_AM_LIST_MAX, g1 % SHP_AM_LIST_MAX);
    assert_true(group_up(1, g2));

    /* restarted as systemd would: standby, the active one stays; it
     * remembers the epoch it was active in (its state database) */
    int copies = file_has("am-0.log", "settings taken from");
    start_am(0, pair, "no", "1s");
    assert_int_equal(wait_role(0, "standby", 5000), 1);
    usleep(1500000); /* more than takeover_after */
    /* it had the drain and the freeze in its database: the active one's
     * settings (none now) replaced them */
    assert_true(file_has("am-0.log", "settings taken from") > copies);
    assert_string_equal(role_of(0, NULL), "standby");
    int64_t e;
    assert_string_equal(role_of(1, &e), "active");
    assert_int_equal(e, 2);
    assert_true(group_up(1, g2));
    assert_int_equal(call_status(c, job_msg("job_end", 2)), 0);
    client_close(c);
}

/* SIGSTOP of the active (manager 1 now): manager 0 takes over; the old
 * one, resumed, steps down: the new active's group stays up with its
 * ANs, its process hears no revocation, and ids are not given twice. */
static void test_pause_active(void **state)
{
    (void)state;
    assert_int_equal(wait_role(1, "active", 100), 2);
    wait_ready(1);
    client_t *c = client_open("sd-n00001.sock");
    wait_sd_up(c);
    int64_t g1 = job_and_group(c, 3);

    kill(am_pid[1], SIGSTOP);
    assert_int_equal(wait_role(0, "active", 5000), 3);
    wait_ready(0);
    wait_sd_up(c);
    int64_t g2 = job_and_group(c, 4);
    /* another manager's stripe: never an id the paused one gave */
    assert_int_not_equal(g2 % SHP_AM_LIST_MAX, g1 % SHP_AM_LIST_MAX);
    /* the paused manager's silence revokes nothing at the hosts: each
     * sharpd lists both managers and found the new active within its
     * grace (SD0005 otherwise), so its processes were not told their
     * groups are gone (what the new active then takes back is the
     * adoption's, docs/am.md) */
    revoked(c, g1, 200);
    size_t k;
    json_t *n;
    json_array_foreach(c->notices, k, n)
    {
        const char *why = shp_json_opt_str(n, "reason", "");
        assert_null(strstr(why, "stopped answering"));
    }
    assert_int_equal(file_has("sd-n00001.log", "SD0005"), 0);
    json_array_clear(c->notices);

    kill(am_pid[1], SIGCONT);
    assert_int_equal(wait_role(1, "standby", 5000), 2);
    assert_true(file_has("am-1.log", "AM0110") >= 1); /* stepped down */
    /* nothing of the new active's was disturbed */
    usleep(1500000);
    int64_t e;
    assert_string_equal(role_of(0, &e), "active");
    assert_int_equal(e, 3);
    assert_true(group_up(0, g2));
    assert_int_equal(count_up(0, "ans"), NSW);
    assert_false(revoked(c, g2, 200));
    int64_t g3 = job_and_group(c, 5);
    assert_true(g3 != g2 && g3 % SHP_AM_LIST_MAX == g2 % SHP_AM_LIST_MAX);
    assert_true(group_up(0, g2));
    client_close(c);
}

/* A manager alone on its side (its peer list does not reach the others)
 * is active with epoch 1; a sharpd registered at epoch 3 that moves to it
 * refuses it, with the proof of its epoch: it steps down. */
static void test_stale_refused(void **state)
{
    (void)state;
    start_am(2, "127.44.0.3:6126,127.44.0.9:6126", "no", "30s");
    assert_int_equal(wait_role(2, "active", 5000), 1);
    char ams[200];
    snprintf(ams, sizeof(ams), "%s,%s", am_addrs[0], am_addrs[2]);
    pid_t sd = sd_extra = start_sharpd("n00008", ams);
    for (int t = 0; t < 250 && !file_has("sd-n00008.log", "(epoch 3)"); t++)
        usleep(20000);
    assert_true(file_has("sd-n00008.log", "(epoch 3)") > 0);
    /* the active goes: the sharpd tries manager 2 next */
    kill9(0);
    assert_int_equal(wait_role(2, "standby", 5000), 1);
    assert_true(file_has("am-2.log", "has seen epoch 3") > 0);
    sd_extra = 0;
    assert_int_equal(stop(sd), 0);
    /* the pair's standby took over meanwhile */
    assert_int_equal(wait_role(1, "active", 5000), 4);
    wait_ready(1);
}

/* Both managers of the pair gone, one started again (a standby, with its
 * memory empty): it learns from the nodes trying it that they saw epoch 4
 * and takes over above it, without being refused first. */
static void test_both_restarted(void **state)
{
    (void)state;
    kill9(1);
    start_am(0, pair, "yes", "1s");
    assert_int_equal(wait_role(0, "active", 10000), 5);
    json_t *r = admin(0, "status");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "manager"), "step_downs")),
                     0);
    json_decref(r);
    wait_ready(0);
    client_t *c = client_open("sd-n00001.sock");
    wait_sd_up(c);
    job_and_group(c, 6);
    client_close(c);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_active),
        cmocka_unit_test(test_pause_active),
        cmocka_unit_test(test_stale_refused),
        cmocka_unit_test(test_both_restarted),
    };
    return cmocka_run_group_tests_name("standby", tests, setup, teardown);
}
