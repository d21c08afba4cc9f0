/*
 * A restarted manager takes the running fabric back (am/am_adopt.c): the
 * manager's core in this process, its peers fake ANs and sharpds on
 * socketpairs handed to its accept callback (shp_listener_start is wrapped
 * at link time and binds nothing; the peers count as having proved the
 * secret).  A first manager makes a job and a group and its group_add
 * messages say what each AN holds; a second manager hears the ANs and the
 * sharpd report it: what agrees is taken back, what does not is revoked
 * with its reason, and reports that pass the bounds are cut.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "am/am.h"
#include "am/am_int.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/log.h"

shp_status_t __wrap_shp_listener_start(shp_listener_t *l, struct ev_loop *lp,
                                       const shp_sockaddr_t *addr,
                                       shp_accept_cb_t on_accept, void *arg);
shp_status_t __wrap_shp_listener_start(shp_listener_t *l, struct ev_loop *lp,
                                       const shp_sockaddr_t *addr,
                                       shp_accept_cb_t on_accept, void *arg)
{
    memset(l, 0, sizeof(*l));
    l->loop = lp;
    l->fd = -1;
    l->on_accept = on_accept;
    l->arg = arg;
    l->addr = *addr;
    return SHP_OK;
}
void __wrap_shp_listener_stop(shp_listener_t *l);
void __wrap_shp_listener_stop(shp_listener_t *l)
{
    l->on_accept = NULL;
}

#define NPEERS 16
typedef struct peer {
    int fd;
    char name[64];
    uint8_t *buf;
    size_t len;
    json_t *inbox; /* every message the manager sent it */
} peer_t;

static struct ev_loop *loop;
static char dir[] = "/tmp/sharp-test-adopt-XXXXXX";
static char topo[128], secret[128];
static shp_am_t am;
static peer_t peers[NPEERS];
static char *switches[16], *hosts[16];
static int nswitches, nhosts;

static void peer_read(peer_t *p)
{
    uint8_t b[65536];
    ssize_t n;
    size_t off = 0, len;
    while (p->fd >= 0 && (n = recv(p->fd, b, sizeof(b), MSG_DONTWAIT)) > 0) {
        p->buf = realloc(p->buf, p->len + (size_t)n);
        memcpy(p->buf + p->len, b, (size_t)n);
        p->len += (size_t)n;
    }
    if (p->buf == NULL)
        return;
    while (p->len - off >= SHP_CTL_HDR_LEN &&
           shp_ctl_frame_len(NULL, p->buf + off, p->len - off, &len) ==
               SHP_OK &&
           len <= p->len - off) {
        uint8_t type;
        json_t *msg = NULL;
        const char *why;
        assert_int_equal(shp_ctl_decode(p->buf + off, len, &type, &msg, &why),
                         SHP_OK);
        if (msg)
            json_array_append_new(p->inbox, msg);
        off += len;
    }
    memmove(p->buf, p->buf + off, p->len - off);
    p->len -= off;
}

static void pump(void)
{
    for (int r = 0; r < 10; r++) {
        ev_run(loop, EVRUN_NOWAIT);
        for (int i = 0; i < NPEERS; i++)
            peer_read(&peers[i]);
    }
}

static void send_msg(peer_t *p, json_t *m)
{
    uint8_t *frame;
    size_t len, off = 0;
    assert_int_equal(shp_ctl_encode(m, &frame, &len), SHP_OK);
    while (off < len) {
        ssize_t n = send(p->fd, frame + off, len - off, MSG_NOSIGNAL);
        assert_true(n > 0);
        off += (size_t)n;
        pump();
    }
    free(frame);
    json_decref(m);
    pump();
}

/* a peer that proved role and name */
static peer_t *peer_new(const char *role, const char *name)
{
    int sv[2], i = 0;
    while (peers[i].fd >= 0)
        i++;
    peer_t *p = &peers[i];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    am.listener.on_accept(&am.listener, sv[0], &am.listener.addr);
    shp_am_peer_t *ap = am.peers;
    ap->auth.state = 2;
    snprintf(ap->auth.role, sizeof(ap->auth.role), "%s", role);
    snprintf(ap->auth.name, sizeof(ap->auth.name), "%s", name);
    p->fd = sv[1];
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->inbox = json_array();
    return p;
}

static void peer_close(peer_t *p)
{
    if (p->fd >= 0)
        close(p->fd);
    free(p->buf);
    json_decref(p->inbox);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

/* the last message of `type` (with group_id gid when gid >= 0) */
static json_t *got(peer_t *p, const char *type, int64_t gid)
{
    size_t i;
    json_t *m, *r = NULL;
    json_array_foreach(p->inbox, i, m)
    {
        if (!strcmp(shp_ctl_type(m), type) &&
            (gid < 0 ||
             json_integer_value(json_object_get(m, "group_id")) == gid))
            r = m;
    }
    return r;
}

static int count_type(peer_t *p, const char *type)
{
    size_t i;
    json_t *m;
    int n = 0;
    json_array_foreach(p->inbox, i, m)
    {
        n += !strcmp(shp_ctl_type(m), type);
    }
    return n;
}

static void am_up(int64_t adopt_ms)
{
    static char listen[] = "127.0.0.1:0", empty[] = "", mp[] = "239.77";
    char err[300];
    memset(&am, 0, sizeof(am));
    am.cfg.listen = listen;
    am.cfg.admin_socket = empty;
    am.cfg.admin_group = empty;
    am.cfg.topology = topo;
    am.cfg.an_hosts = empty;
    am.cfg.secret_file = secret;
    am.cfg.max_trees = 2;
    am.cfg.radix = 4;
    am.cfg.flat_max = 0; /* groups over the levels */
    am.cfg.max_jobs = 8;
    am.cfg.max_list = 64;
    am.cfg.uid_max_jobs = 8;
    am.cfg.uid_max_groups = 16;
    am.cfg.max_peers = 64;
    am.cfg.job_max_groups = 4;
    am.cfg.group_osts = 4;
    am.cfg.group_payload = 1024;
    am.cfg.mcast_prefix = mp;
    am.cfg.mcast_port = 20000;
    am.cfg.tree_settle_ms = 1000000; /* fired by the test */
    am.cfg.group_timeout_ms = 1000000;
    am.cfg.stats_interval_ms = 0;
    am.cfg.auth_timeout_ms = 1000000;
    am.cfg.adopt_timeout_ms = adopt_ms;
    assert_int_equal(shp_am_start(&am, loop, err, sizeof(err)), SHP_OK);
}

static void am_down(void)
{
    for (int i = 0; i < NPEERS; i++)
        peer_close(&peers[i]);
    pump();
    shp_am_stop(&am);
}

static void settle(void)
{
    if (ev_is_active(&am.settle)) {
        ev_timer_stop(loop, &am.settle);
        ev_invoke(loop, &am.settle, EV_TIMER);
    }
    pump();
}

/* the adoption's deadline: the loop runs until it passed */
static int adoption_over(void)
{
    json_t *a = shp_am_adopt_json(&am);
    int over = !strcmp(json_string_value(json_object_get(a, "state")), "over");
    json_decref(a);
    return over;
}

static void wait_deadline(void)
{
    while (!adoption_over())
        ev_run(loop, EVRUN_ONCE);
    pump();
}

static json_t *an_register(const char *name, json_t *groups)
{
    return json_pack("{s:s, s:s, s:s, s:{s:i, s:i, s:i, s:i}, s:o}", "type",
                     "an_register", "name", name, "data_addr", "127.0.0.1:1",
                     "caps", "max_trees", 8, "max_groups", 4, "max_osts", 64,
                     "max_payload", 65536, "groups",
                     groups ? groups : json_array());
}

/* What the first manager gave: the job key, and per AN the group_add */
typedef struct world {
    uint64_t job;
    char key[65];
    json_t *adds;    /* {AN name: group_add} */
    json_t *members; /* the group's hosts */
    int64_t gid;
} world_t;

static void world_free(world_t *w)
{
    json_decref(w->adds);
    json_decref(w->members);
}

/* Manager 1: every AN, n00001's sharpd, job 7 over hosts 1..4 with one
 * group over them; what each AN was told is kept. */
static void make_world(world_t *w)
{
    peer_t *ans[16], *sd;
    am_up(0);
    for (int i = 0; i < nswitches; i++) {
        ans[i] = peer_new("an", switches[i]);
        send_msg(ans[i], an_register(switches[i], NULL));
    }
    settle();
    sd = peer_new("sharpd", hosts[0]);
    send_msg(sd, json_pack("{s:s, s:s, s:[]}", "type", "sharpd_register",
                           "host", hosts[0], "jobs"));
    w->job = 7;
    w->members =
        json_pack("[s, s, s, s]", hosts[0], hosts[1], hosts[2], hosts[3]);
    send_msg(sd, json_pack("{s:s, s:i, s:o, s:i, s:O}", "type", "job_begin",
                           "id", 1, "job_id", shp_json_u64(w->job), "uid", 1000,
                           "hosts", w->members));
    json_t *ack = got(sd, "job_begin_ack", -1);
    assert_non_null(ack);
    assert_int_equal(json_integer_value(json_object_get(ack, "status")), 0);
    snprintf(w->key, sizeof(w->key), "%s",
             json_string_value(json_object_get(ack, "job_key")));
    send_msg(sd,
             json_pack("{s:s, s:i, s:o, s:i, s:O, s:s}", "type", "group_create",
                       "id", 2, "job_id", shp_json_u64(w->job), "uid", 1000,
                       "members", w->members, "dist", "rc"));
    w->adds = json_object();
    for (int i = 0; i < nswitches; i++) {
        json_t *m = got(ans[i], "group_add", -1);
        if (!m)
            continue;
        json_object_set(w->adds, switches[i], m);
        send_msg(ans[i],
                 shp_ctl_reply("group_add_ack",
                               json_integer_value(json_object_get(m, "id")),
                               SHP_OK, NULL));
    }
    json_t *g = got(sd, "group_create_ack", -1);
    assert_non_null(g);
    assert_int_equal(json_integer_value(json_object_get(g, "status")), 0);
    w->gid = json_integer_value(
        json_object_get(json_object_get(g, "group"), "group_id"));
    assert_true(json_object_size(w->adds) >= 3); /* over the levels */
    am_down();
}

/* an AN's report of the group as the first manager made it */
static json_t *report_of(const world_t *w, const json_t *add)
{
    uint8_t jk[32], mk[32];
    char fp[SHP_AUTH_FP_HEX], kinds[64];
    size_t i, n = 0;
    json_t *c;
    /* the group's keys, never the job key (the AN fingerprints them) */
    assert_null(json_object_get(add, "job_key"));
    assert_int_equal(shp_json_get_hex(add, "join_key", jk, 32, NULL), SHP_OK);
    assert_int_equal(shp_json_get_hex(add, "mcast_key", mk, 32, NULL), SHP_OK);
    shp_auth_group_fp(jk, mk, w->job, fp);
    json_array_foreach(json_object_get(add, "children"), i, c)
    {
        kinds[n++] =
            !strcmp(json_string_value(json_object_get(c, "kind")), "an") ? 'a'
                                                                         : 'm';
    }
    kinds[n] = '\0';
    return json_pack("{s:O, s:O, s:O, s:s, s:O, s:O, s:s, s:O, s:O, s:O, "
                     "s:O}",
                     "group_id", json_object_get(add, "group_id"), "tree_id",
                     json_object_get(add, "tree_id"), "job_id",
                     json_object_get(add, "job_id"), "key_fp", fp, "top",
                     json_object_get(add, "top"), "parent_index",
                     json_object_get(add, "parent_index"), "children", kinds,
                     "dist", json_object_get(add, "dist"), "mcast_addr",
                     json_object_get(add, "mcast_addr"), "osts",
                     json_object_get(add, "osts"), "payload",
                     json_object_get(add, "payload"));
}

/* the job as host's sharpd reports it (key: NULL the true one) */
static json_t *job_report(const world_t *w, const char *key, int uid,
                          int with_group)
{
    json_t *groups = json_array();
    if (with_group)
        json_array_append_new(groups, json_pack("{s:I, s:O}", "group_id",
                                                (json_int_t)w->gid, "members",
                                                w->members));
    return json_pack("{s:o, s:i, s:s, s:{s:i, s:i, s:i}, s:O, s:o}", "job_id",
                     shp_json_u64(w->job), "uid", uid, "key",
                     key ? key : w->key, "req", "max_groups", 4, "osts", 4,
                     "payload", 1024, "hosts", w->members, "groups", groups);
}

/* Manager 2: the ANs register with their reports (`skip`: one that comes
 * back without its groups; mangle: a report changed), the hosts' sharpds
 * with the job (sd_count of the 4). */
static peer_t *ans2[16], *sds2[4];
static void restart(const world_t *w, int64_t adopt_ms, const char *skip,
                    void (*mangle)(const char *an, json_t *rep), int sd_count)
{
    am_up(adopt_ms);
    for (int i = 0; i < nswitches; i++) {
        json_t *groups = json_array();
        json_t *add = json_object_get(w->adds, switches[i]);
        if (add && !(skip && !strcmp(skip, switches[i]))) {
            json_t *rep = report_of(w, add);
            if (mangle)
                mangle(switches[i], rep);
            json_array_append_new(groups, rep);
        }
        ans2[i] = peer_new("an", switches[i]);
        send_msg(ans2[i], an_register(switches[i], groups));
    }
    for (int h = 0; h < sd_count; h++) {
        sds2[h] = peer_new("sharpd", hosts[h]);
        send_msg(sds2[h],
                 json_pack("{s:s, s:s, s:[o], s:[]}", "type", "sharpd_register",
                           "host", hosts[h], "jobs",
                           job_report(w, NULL, 1000, h == 0), "reservations"));
    }
    settle();
}

static int removed_anywhere(int64_t gid)
{
    int n = 0;
    for (int i = 0; i < nswitches; i++)
        n += got(ans2[i], "group_remove", gid) != NULL;
    return n;
}

/* the reason the manager gives for a group it revoked, or NULL */
static char *revoked_why(int64_t gid)
{
    json_t *a = shp_am_adopt_json(&am), *v;
    size_t i;
    char *r = NULL;
    json_array_foreach(json_object_get(a, "revoked"), i, v)
    {
        if (json_integer_value(json_object_get(v, "group_id")) == gid)
            r = strdup(json_string_value(json_object_get(v, "reason")));
    }
    json_decref(a);
    return r;
}

/* Everything agrees: the job and the group are taken back, nothing is
 * removed or revoked, the job keeps its key (a new process attaching gets
 * it), and a new group gets another id. */
static void test_adopt_consistent(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    restart(&w, 1000000, NULL, NULL, 4);
    shp_am_group_t *g = shp_am_group_find(&am, (uint32_t)w.gid);
    assert_non_null(g);
    assert_int_equal(g->state, AM_GROUP_UP);
    assert_int_equal(removed_anywhere(w.gid), 0);
    assert_null(got(sds2[0], "group_revoked", -1));
    assert_null(got(sds2[0], "job_killed", -1));
    shp_am_job_t *j = shp_am_job_find(&am, w.job);
    assert_non_null(j);
    assert_int_equal(j->uid, 1000);
    assert_int_equal(j->ngroups, 1);
    send_msg(sds2[1],
             json_pack("{s:s, s:i, s:o, s:i}", "type", "job_attach", "id", 5,
                       "job_id", shp_json_u64(w.job), "uid", 1000));
    json_t *ack = got(sds2[1], "job_attach_ack", -1);
    assert_non_null(ack);
    assert_string_equal(json_string_value(json_object_get(ack, "job_key")),
                        w.key);
    send_msg(sds2[0],
             json_pack("{s:s, s:i, s:o, s:i, s:O, s:s}", "type", "group_create",
                       "id", 6, "job_id", shp_json_u64(w.job), "uid", 1000,
                       "members", w.members, "dist", "rc"));
    json_t *add = NULL;
    for (int i = 0; i < nswitches && !add; i++)
        add = got(ans2[i], "group_add", -1);
    assert_non_null(add);
    assert_true(json_integer_value(json_object_get(add, "group_id")) != w.gid);
    world_free(&w);
    am_down();
}

/* An AN of the group's sub-tree came back without it (restarted): the
 * group is revoked with that reason, the others remove it, the job's
 * sharpd hears it; the job stays. */
static void test_adopt_an_restarted(void **state)
{
    world_t w = {0};
    const char *key, *skip = NULL;
    json_t *v;
    (void)state;
    make_world(&w);
    json_object_foreach(w.adds, key, v)
    {
        if (!json_is_true(json_object_get(v, "top")))
            skip = key; /* a leaf of it */
    }
    restart(&w, 1000000, skip, NULL, 4);
    assert_null(shp_am_group_find(&am, (uint32_t)w.gid));
    char *why = revoked_why(w.gid);
    assert_non_null(why);
    assert_non_null(strstr(why, "came back without it"));
    free(why);
    assert_int_equal(removed_anywhere(w.gid),
                     (int)json_object_size(w.adds) - 1);
    assert_non_null(got(sds2[0], "group_revoked", w.gid));
    assert_non_null(shp_am_job_find(&am, w.job));
    world_free(&w);
    am_down();
}

/* A member host's processes are gone (its sharpd does not report the
 * job): at adopt_timeout the group is revoked, naming the host. */
static void test_adopt_processes_gone(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    restart(&w, 50, NULL, NULL, 3);
    assert_null(shp_am_group_find(&am, (uint32_t)w.gid)); /* waits */
    wait_deadline();
    assert_null(shp_am_group_find(&am, (uint32_t)w.gid));
    char *why = revoked_why(w.gid);
    assert_non_null(why);
    assert_non_null(strstr(why, "processes on member host"));
    assert_non_null(strstr(why, hosts[3]));
    free(why);
    assert_true(removed_anywhere(w.gid) > 0);
    world_free(&w);
    am_down();
}

/* The job destroys a group its ANs reported and the manager has not taken
 * back yet (a member host's sharpd is not back: it waits): the destroy is
 * acknowledged, not answered "no such group" (a partition's nemesis run
 * found that), every AN that reported it is told to remove it, and it is
 * not revoked later. */
static void test_adopt_destroy_pending(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    restart(&w, 1000000, NULL, NULL, 3);
    assert_null(shp_am_group_find(&am, (uint32_t)w.gid)); /* waits */
    assert_int_equal(removed_anywhere(w.gid), 0);
    send_msg(sds2[0],
             json_pack("{s:s, s:i, s:o, s:i, s:I}", "type", "group_destroy",
                       "id", 7, "job_id", shp_json_u64(w.job), "uid", 1000,
                       "group_id", (json_int_t)w.gid));
    json_t *ack = got(sds2[0], "group_destroy_ack", -1);
    assert_non_null(ack);
    assert_int_equal(json_integer_value(json_object_get(ack, "status")), 0);
    assert_int_equal(removed_anywhere(w.gid), (int)json_object_size(w.adds));
    /* again: now it is gone, as any destroyed group */
    send_msg(sds2[0],
             json_pack("{s:s, s:i, s:o, s:i, s:I}", "type", "group_destroy",
                       "id", 8, "job_id", shp_json_u64(w.job), "uid", 1000,
                       "group_id", (json_int_t)w.gid));
    ack = got(sds2[0], "group_destroy_ack", -1);
    assert_int_equal(json_integer_value(json_object_get(ack, "status")),
                     SHP_ERR_GROUP_UNKNOWN);
    assert_null(revoked_why(w.gid));
    assert_null(got(sds2[0], "group_revoked", w.gid));
    world_free(&w);
    am_down();
}

/* No sharpd reports the job at all: the job is not made, the group is
 * revoked at adopt_timeout. */
static void test_adopt_job_gone(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    restart(&w, 50, NULL, NULL, 0);
    wait_deadline();
    char *why = revoked_why(w.gid);
    assert_non_null(why);
    assert_non_null(strstr(why, "no sharpd reported job"));
    free(why);
    assert_null(shp_am_job_find(&am, w.job));
    assert_int_equal(removed_anywhere(w.gid), (int)json_object_size(w.adds));
    world_free(&w);
    am_down();
}

static void mangle_fp(const char *an, json_t *rep)
{
    (void)an;
    json_object_set_new(rep, "key_fp",
                        json_string("00000000000000000000000000000000"));
}

static const char *mangled_an;
static void mangle_place(const char *an, json_t *rep)
{
    if (!json_is_true(json_object_get(rep, "top")) && !mangled_an) {
        mangled_an = an;
        json_object_set_new(
            rep, "parent_index",
            json_integer(
                json_integer_value(json_object_get(rep, "parent_index")) + 1));
    }
}

static void mangle_tree(const char *an, json_t *rep)
{
    if (json_is_true(json_object_get(rep, "top")))
        return;
    (void)an;
    json_object_set_new(
        rep, "tree_id",
        json_integer(1 - json_integer_value(json_object_get(rep, "tree_id"))));
}

/* Reports that do not agree: another key than the job's, an AN at another
 * place than the tree gives, ANs on another tree than the top's. */
static void test_adopt_disagreements(void **state)
{
    static const struct {
        void (*mangle)(const char *, json_t *);
        const char *why;
    } cases[] = {{mangle_fp, "another key"},
                 {mangle_place, "at another place"},
                 {mangle_tree, "reports another tree"}};
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        world_t w = {0};
        mangled_an = NULL;
        make_world(&w);
        restart(&w, 1000000, NULL, cases[c].mangle, 4);
        assert_null(shp_am_group_find(&am, (uint32_t)w.gid));
        char *why = revoked_why(w.gid);
        assert_non_null(why);
        if (!strstr(why, cases[c].why))
            fail_msg("case %zu: %s", c, why);
        free(why);
        assert_non_null(got(sds2[0], "group_revoked", w.gid));
        world_free(&w);
        am_down();
    }
}

/* The bounds: an AN reports more groups than its max_groups, children that
 * are neither AN nor member, 1025 children, a group id out of range; a
 * sharpd reports the job under another uid or key than another's. */
static void test_adopt_bounds(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    am_up(1000000);
    json_t *rep =
        report_of(&w, json_object_get(w.adds, switches[0])
                          ? json_object_get(w.adds, switches[0])
                          : json_object_iter_value(json_object_iter(w.adds)));
    json_t *groups = json_array();
    char big[1100];
    memset(big, 'm', 1025);
    big[1025] = '\0';
    for (int k = 0; k < 8; k++) {
        json_t *r = json_deep_copy(rep);
        json_object_set_new(r, "group_id", json_integer(100 + k));
        if (k == 0)
            json_object_set_new(r, "children", json_string("max"));
        if (k == 1)
            json_object_set_new(r, "children", json_string(big));
        if (k == 2)
            json_object_set_new(r, "group_id", json_integer(1 << 24));
        json_array_append_new(groups, r);
    }
    json_decref(rep);
    peer_t *an = peer_new("an", switches[0]);
    send_msg(an, an_register(switches[0], groups));
    /* max_groups 4: the last 4 removed at once, and the 3 malformed */
    assert_int_equal(count_type(an, "group_remove"), 7);
    assert_non_null(got(an, "group_remove", 100));
    assert_non_null(got(an, "group_remove", 101));
    assert_non_null(got(an, "group_remove", 1 << 24));
    assert_null(got(an, "group_remove", 103));
    peer_t *a = peer_new("sharpd", hosts[0]), *b = peer_new("sharpd", hosts[1]),
           *c = peer_new("sharpd", hosts[2]);
    send_msg(a, json_pack("{s:s, s:s, s:[o], s:[]}", "type", "sharpd_register",
                          "host", hosts[0], "jobs",
                          job_report(&w, NULL, 1000, 1), "reservations"));
    send_msg(b, json_pack("{s:s, s:s, s:[o], s:[]}", "type", "sharpd_register",
                          "host", hosts[1], "jobs",
                          job_report(&w, NULL, 1001, 0), "reservations"));
    send_msg(c, json_pack("{s:s, s:s, s:[o], s:[]}", "type", "sharpd_register",
                          "host", hosts[2], "jobs",
                          job_report(&w,
                                     "00000000000000000000000000000000"
                                     "00000000000000000000000000000000",
                                     1000, 0),
                          "reservations"));
    assert_null(got(a, "job_killed", -1));
    assert_non_null(got(b, "job_killed", -1));
    assert_non_null(got(c, "job_killed", -1));
    world_free(&w);
    am_down();
}

/* While the trees wait for the ANs, a new job waits too, and is admitted
 * once every AN is back. */
static void test_adopt_requests_wait(void **state)
{
    world_t w = {0};
    (void)state;
    make_world(&w);
    am_up(1000000);
    peer_t *sd = peer_new("sharpd", hosts[0]);
    send_msg(sd, json_pack("{s:s, s:s, s:[o], s:[]}", "type", "sharpd_register",
                           "host", hosts[0], "jobs",
                           job_report(&w, NULL, 1000, 1), "reservations"));
    send_msg(sd,
             json_pack("{s:s, s:i, s:i, s:i, s:[s]}", "type", "job_begin", "id",
                       9, "job_id", 8, "uid", 1000, "hosts", hosts[0]));
    settle();
    assert_null(got(sd, "job_begin_ack", -1)); /* no AN yet: it waits */
    for (int i = 0; i < nswitches; i++) {
        ans2[i] = peer_new("an", switches[i]);
        send_msg(ans2[i], an_register(switches[i], NULL));
        settle();
        if (i + 1 < nswitches)
            assert_null(got(sd, "job_begin_ack", -1));
    }
    json_t *ack = got(sd, "job_begin_ack", -1);
    assert_non_null(ack);
    assert_int_equal(json_integer_value(json_object_get(ack, "status")), 0);
    world_free(&w);
    am_down();
}

/* A scheduler's reservation (Slurm's prolog) outlives the manager: the
 * hosts' sharpds report it, the job is reserved again with every reporting
 * host holding it, a later step attaches (its quotas and a key with it),
 * and the epilog's release ends it. */
static void test_adopt_reservation(void **state)
{
    peer_t *sd[2];
    (void)state;
    am_up(1000000);
    for (int i = 0; i < nswitches; i++) {
        ans2[i] = peer_new("an", switches[i]);
        send_msg(ans2[i], an_register(switches[i], NULL));
    }
    for (int h = 0; h < 2; h++) {
        sd[h] = peer_new("sharpd", hosts[h]);
        send_msg(sd[h], json_pack("{s:s, s:s, s:[], s:[{s:i, s:i, s:{s:i}}]}",
                                  "type", "sharpd_register", "host", hosts[h],
                                  "jobs", "reservations", "job_id", 11, "owner",
                                  1000, "req", "max_groups", 2));
    }
    settle();
    shp_am_job_t *j = shp_am_job_find(&am, 11);
    assert_non_null(j);
    assert_true(j->reserved);
    assert_int_equal(j->uid, 1000);
    assert_int_equal(j->nhosts, 2);
    assert_true(j->held[0] && j->held[1]);
    assert_int_equal(j->max_groups, 2);
    send_msg(sd[1], json_pack("{s:s, s:i, s:i, s:i}", "type", "job_attach",
                              "id", 3, "job_id", 11, "uid", 1000));
    json_t *ack = got(sd[1], "job_attach_ack", -1);
    assert_non_null(ack);
    assert_int_equal(json_integer_value(json_object_get(ack, "status")), 0);
    assert_true(json_is_true(json_object_get(ack, "reserved")));
    send_msg(sd[0], json_pack("{s:s, s:i, s:i, s:i}", "type", "job_release",
                              "id", 4, "job_id", 11, "uid", 0));
    ack = got(sd[0], "job_release_ack", -1);
    assert_non_null(ack);
    assert_true(json_is_true(json_object_get(ack, "released")));
    assert_null(shp_am_job_find(&am, 11));
    am_down();
}

/* A sharpd that was away from a manager that ran on (a connection lost)
 * reports a group the manager revoked meanwhile: its processes hear it
 * now; a group the manager still has is not touched. */
static void test_sharpd_back_hears_revoked(void **state)
{
    world_t w = {0};
    (void)state;
    w.job = 7;
    w.members = json_pack("[s, s]", hosts[0], hosts[1]);
    snprintf(w.key, sizeof(w.key), "%064d", 0);
    am_up(0);
    for (int i = 0; i < nswitches; i++) {
        ans2[i] = peer_new("an", switches[i]);
        send_msg(ans2[i], an_register(switches[i], NULL));
    }
    settle();
    peer_t *sd = peer_new("sharpd", hosts[0]);
    send_msg(sd, json_pack("{s:s, s:s, s:[]}", "type", "sharpd_register",
                           "host", hosts[0], "jobs"));
    send_msg(sd, json_pack("{s:s, s:i, s:o, s:i, s:O}", "type", "job_begin",
                           "id", 1, "job_id", shp_json_u64(w.job), "uid", 1000,
                           "hosts", w.members));
    assert_non_null(got(sd, "job_begin_ack", -1));
    w.gid = 999; /* a group the manager does not have (any more) */
    peer_t *again = peer_new("sharpd", hosts[0]);
    send_msg(again, json_pack("{s:s, s:s, s:[o], s:[]}", "type",
                              "sharpd_register", "host", hosts[0], "jobs",
                              job_report(&w, NULL, 1000, 1), "reservations"));
    assert_non_null(got(again, "group_revoked", 999));
    assert_null(got(again, "job_killed", -1));
    assert_non_null(shp_am_job_find(&am, w.job));
    world_free(&w);
    am_down();
}

static int setup(void **state)
{
    (void)state;
    shp_log_set_level(getenv("SHARP_TEST_LOG") ? SHP_LOG_DEBUG : SHP_LOG_OFF);
    assert_int_equal(shp_auth_init(), SHP_OK);
    loop = ev_default_loop(EVFLAG_AUTO);
    assert_non_null(mkdtemp(dir));
    snprintf(topo, sizeof(topo), "%s/topo.ibnd", dir);
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    shp_fat_tree_spec_t spec = {2, 4, 8};
    shp_topo_t *t = NULL;
    char err[256];
    assert_int_equal(shp_topo_fat_tree(&spec, &t, err, sizeof(err)), SHP_OK);
    FILE *f = fopen(topo, "w");
    shp_topo_write(t, f, 0);
    fclose(f);
    for (size_t i = 0; i < shp_topo_count(t); i++) {
        const shp_topo_node_t *nd = shp_topo_node(t, (int)i);
        if (nd->type == SHP_NODE_SWITCH && nswitches < 16)
            switches[nswitches++] = strdup(nd->desc);
        else if (nd->type == SHP_NODE_CA && nhosts < 16)
            hosts[nhosts++] = strdup(nd->host);
    }
    shp_topo_free(t);
    f = fopen(secret, "w");
    fputs("a cluster secret for the adoption tests\n", f);
    fclose(f);
    chmod(secret, 0600);
    for (int i = 0; i < NPEERS; i++)
        peers[i].fd = -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return -1;
    for (int i = 0; i < nswitches; i++)
        free(switches[i]);
    for (int i = 0; i < nhosts; i++)
        free(hosts[i]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adopt_consistent),
        cmocka_unit_test(test_adopt_an_restarted),
        cmocka_unit_test(test_adopt_processes_gone),
        cmocka_unit_test(test_adopt_job_gone),
        cmocka_unit_test(test_adopt_destroy_pending),
        cmocka_unit_test(test_adopt_disagreements),
        cmocka_unit_test(test_adopt_bounds),
        cmocka_unit_test(test_adopt_requests_wait),
        cmocka_unit_test(test_adopt_reservation),
        cmocka_unit_test(test_sharpd_back_hears_revoked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
