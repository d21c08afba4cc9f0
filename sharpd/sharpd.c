/*
 * sharpd: the per-host daemon, the privileged control path of local
 * processes.
 *
 * Local processes connect to a Unix socket; sharpd learns who they are
 * with SO_PEERCRED (never from what they say), stamps their uid on every
 * request and relays it to the AM over an authenticated TCP connection:
 *
 *   client -> sharpd  hello {id} -> hello_ack {host, am_up}
 *                     job_begin {id, job_id, hosts, req?}   job_attach {id,
 *                     job_id}   job_end {id, job_id}   group_create {id,
 *                     job_id, members, dist?}   group_destroy {id, job_id,
 *                     group_id}   job_reserve {id, job_id, owner, req?}
 *                     job_release {id, job_id} (root: a scheduler)
 *   sharpd -> client  <request>_ack {id, status, error?, ...the AM's answer}
 *                     group_revoked / job_killed {job_id, ...} for the jobs
 *                     the client takes part in (group_revoked with "all":
 *                     true when sharpd lost the AM: every group of the job)
 *
 * When the last local process of a job exits without job_end, sharpd tells
 * the AM (job_detach), which revokes the job's groups.  It reconnects to a
 * lost AM with backoff and re-announces its jobs; the groups that AM knew
 * are reported revoked to their processes (a new AM does not have them).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

#include "protocol/auth.h"
#include "core/config.h"
#include "core/conn.h"
#include "protocol/ctl.h"
#include "core/log.h"
#include "core/paths.h"
#include "core/net.h"

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

typedef struct cfg {
    char *socket;
    char *am;
    char *host;
    char *secret_file;
    int log_level;
    int64_t keepalive_ms;
} cfg_t;

typedef struct client client_t;

#define MAX_CLIENT_JOBS 16

struct client {
    shp_conn_t conn;
    uid_t uid;
    pid_t pid;
    uint64_t jobs[MAX_CLIENT_JOBS];
    int njobs;
    client_t *next;
};

/* a request relayed to the AM */
typedef struct pending {
    int64_t am_id;
    client_t *client;
    int64_t client_id;
    char type[32];
    uint64_t job_id;
    UT_hash_handle hh;
} pending_t;

/* a job with local processes */
typedef struct job {
    uint64_t id;
    uid_t uid;
    int nclients;
    uint32_t groups[64];
    int ngroups;
    UT_hash_handle hh;
} job_t;

static struct {
    cfg_t cfg;
    struct ev_loop *loop;
    shp_auth_key_t key;
    shp_auth_client_t auth;
    shp_conn_t am;
    int am_state;   /* 0 down, 1 connecting/authenticating, 2 registered */
    int am_proved;  /* this connection's AM proved the cluster secret */
    int am_reached; /* this connection got through to the AM */
    /* why the AM is not registered (what hello tells sharp-hello), set
     * once per connection attempt; empty once registered */
    char am_error[400];
    int am_error_set;
    double backoff;
    ev_timer am_timer;
    shp_listener_t listener;
    client_t *clients;
    pending_t *pending;
    job_t *jobs;
    int64_t next_id;
    int stopping;
} d;

/* the first reason of this connection attempt (hello reports it) */
static void __attribute__((format(printf, 1, 2))) am_fail(const char *fmt, ...)
{
    va_list ap;
    if (d.am_error_set)
        return;
    d.am_error_set = 1;
    va_start(ap, fmt);
    vsnprintf(d.am_error, sizeof(d.am_error), fmt, ap);
    va_end(ap);
}

static void send_msg(shp_conn_t *c, json_t *m)
{
    if (!m)
        return;
    if (shp_conn_is_open(c) && shp_ctl_send(c, m) != SHP_OK)
        shp_warn("cannot send %s to %s", shp_ctl_type(m), c->peer);
    json_decref(m);
}

static json_t *ack(const char *req_type, int64_t id, shp_status_t st,
                   const char *error)
{
    char type[48];
    snprintf(type, sizeof(type), "%.32s_ack", req_type);
    return shp_ctl_reply(type, id, st, error);
}

static job_t *job_get(uint64_t id)
{
    job_t *j;
    HASH_FIND(hh, d.jobs, &id, sizeof(id), j);
    return j;
}

static int client_has_job(const client_t *c, uint64_t id)
{
    for (int i = 0; i < c->njobs; i++)
        if (c->jobs[i] == id)
            return 1;
    return 0;
}

static void client_add_job(client_t *c, uint64_t id, uid_t uid)
{
    if (client_has_job(c, id) || c->njobs == MAX_CLIENT_JOBS)
        return;
    c->jobs[c->njobs++] = id;
    job_t *j = job_get(id);
    if (!j) {
        j = calloc(1, sizeof(*j));
        if (!j)
            return;
        j->id = id;
        j->uid = uid;
        HASH_ADD(hh, d.jobs, id, sizeof(j->id), j);
    }
    j->nclients++;
}

static void job_drop(job_t *j)
{
    for (client_t *c = d.clients; c; c = c->next)
        for (int i = 0; i < c->njobs; i++)
            if (c->jobs[i] == j->id)
                c->jobs[i--] = c->jobs[--c->njobs];
    HASH_DEL(d.jobs, j);
    free(j);
}

/* forward an AM notification to the local processes of its job */
static void notify_job(uint64_t id, const json_t *msg)
{
    for (client_t *c = d.clients; c; c = c->next)
        if (client_has_job(c, id))
            send_msg(&c->conn, json_incref((json_t *)msg));
}

static void track_group(const json_t *reply);

/* AM connection ------------------------------------------------------------- */

static void am_schedule(void)
{
    if (d.stopping)
        return;
    ev_timer_set(&d.am_timer, d.backoff, 0.);
    ev_timer_start(d.loop, &d.am_timer);
    d.backoff = d.backoff * 2 > 5.0 ? 5.0 : d.backoff * 2;
}

static void am_register(void)
{
    json_t *jobs = json_array();
    job_t *j, *tmp;
    HASH_ITER(hh, d.jobs, j, tmp)
    {
        json_array_append_new(jobs, json_pack("{s:o, s:i}", "job_id",
                                              shp_json_u64(j->id), "uid",
                                              (int)j->uid));
    }
    send_msg(&d.am, json_pack("{s:s, s:s, s:o}", "type", "sharpd_register",
                              "host", d.cfg.host, "jobs", jobs));
}

static void am_handle(json_t *msg)
{
    const char *type = shp_ctl_type(msg), *why = NULL;
    if (d.am_state == 1) {
        if (!strcmp(type, "sharpd_register_ack") && !d.am_proved) {
            /* nothing counts before the AM proved the secret */
            shp_error_id("SD0001",
                         "refusing the aggregation manager at %s: it "
                         "answers the registration without proving the "
                         "cluster secret",
                         d.cfg.am);
            am_fail("the aggregation manager at %s answered without "
                    "proving the cluster secret",
                    d.cfg.am);
            shp_conn_close(&d.am, SHP_ERR_AUTH);
            return;
        }
        if (!strcmp(type, "sharpd_register_ack")) {
            if (shp_json_opt_int(msg, "status", -32768, 32767, -1) != 0) {
                shp_error_id("SD0002",
                             "the aggregation manager refused this "
                             "host: %s",
                             shp_json_opt_str(msg, "error", "?"));
                am_fail("the aggregation manager at %s refused this host "
                        "(%s): %s",
                        d.cfg.am, d.cfg.host,
                        shp_json_opt_str(msg, "error", "?"));
                shp_conn_close(&d.am, SHP_ERR_AUTH);
                return;
            }
            d.am_state = 2;
            d.am_error[0] = '\0';
            d.backoff = 0.1;
            shp_info("registered with the aggregation manager as %s",
                     d.cfg.host);
            return;
        }
        json_t *answer = NULL;
        shp_status_t st =
            shp_auth_client_answer(&d.auth, &d.key, msg, &answer, &why);
        if (st != SHP_OK) {
            shp_error_id("SD0001", "refusing the aggregation manager at %s: %s",
                         d.cfg.am, why);
            am_fail("refusing the aggregation manager at %s: %s (is the "
                    "cluster secret %s the same as the manager's?)",
                    d.cfg.am, why, d.cfg.secret_file);
            shp_conn_close(&d.am, st);
            return;
        }
        d.am_proved = 1;
        send_msg(&d.am, answer);
        am_register();
        return;
    }
    if (!strcmp(type, "group_revoked") || !strcmp(type, "job_killed")) {
        uint64_t jid;
        if (shp_json_get_u64(msg, "job_id", &jid, &why) != SHP_OK)
            return;
        notify_job(jid, msg);
        job_t *j = job_get(jid);
        if (j && !strcmp(type, "job_killed"))
            job_drop(j);
        return;
    }
    int64_t id = shp_json_opt_int(msg, "id", 0, INT64_MAX, -1);
    pending_t *p;
    HASH_FIND(hh, d.pending, &id, sizeof(id), p);
    if (!p)
        return;
    HASH_DEL(d.pending, p);
    int64_t st = shp_json_opt_int(msg, "status", -32768, 32767, SHP_ERR_PROTO);
    if (p->client) {
        if (st == SHP_OK &&
            (!strcmp(p->type, "job_begin") || !strcmp(p->type, "job_attach")))
            client_add_job(p->client, p->job_id, p->client->uid);
        if (st == SHP_OK && !strcmp(p->type, "group_create"))
            track_group(msg);
        if (st == SHP_OK && !strcmp(p->type, "job_end")) {
            job_t *j = job_get(p->job_id);
            if (j)
                job_drop(j);
        }
        json_object_set_new(msg, "id", json_integer(p->client_id));
        send_msg(&p->client->conn, json_incref(msg));
    }
    free(p);
}

static void am_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_error("bad message from the aggregation manager: %s", why);
    if (msg) {
        am_handle(msg);
        json_decref(msg);
    }
}

static void am_connected(shp_conn_t *conn)
{
    (void)conn;
    d.am_reached = 1;
    d.am_state = 1;
    d.am_proved = 0;
    shp_info("connected to the aggregation manager at %s", d.cfg.am);
    send_msg(&d.am, shp_auth_client_hello(&d.auth, "sharpd", d.cfg.host));
}

static void am_closed(shp_conn_t *conn, shp_status_t reason)
{
    (void)conn;
    if (d.am_state == 2)
        am_fail("lost the aggregation manager at %s: %s", d.cfg.am,
                shp_status_str(reason));
    else if (!d.am_reached)
        am_fail("cannot connect to the aggregation manager at %s: %s", d.cfg.am,
                shp_status_str(reason));
    else
        am_fail("the aggregation manager at %s closed the connection "
                "before this host was registered (%s): is the cluster "
                "secret %s the same as the manager's?",
                d.cfg.am, shp_status_str(reason), d.cfg.secret_file);
    if (d.am_state == 2)
        shp_warn_id("SD0003",
                    "lost the aggregation manager: %s; "
                    "reconnecting",
                    shp_status_str(reason));
    d.am_state = 0;
    /* requests in flight fail now, not never */
    pending_t *p, *tmp;
    HASH_ITER(hh, d.pending, p, tmp)
    {
        HASH_DEL(d.pending, p);
        if (p->client)
            send_msg(&p->client->conn,
                     ack(p->type, p->client_id, SHP_ERR_UNREACHABLE,
                         "lost the aggregation manager"));
        free(p);
    }
    /* a restarted AM has none of the groups: their processes learn now
     * (every group of the job, also those created through other hosts) */
    job_t *j, *jt;
    HASH_ITER(hh, d.jobs, j, jt)
    {
        json_t *all = json_pack("{s:s, s:o, s:b, s:i, s:s}", "type",
                                "group_revoked", "job_id", shp_json_u64(j->id),
                                "all", 1, "status", (int)SHP_ERR_GROUP_REVOKED,
                                "reason", "lost the aggregation manager");
        notify_job(j->id, all);
        json_decref(all);
        for (int g = 0; g < j->ngroups; g++) {
            json_t *m = json_pack(
                "{s:s, s:o, s:I, s:i, s:s}", "type", "group_revoked", "job_id",
                shp_json_u64(j->id), "group_id", (json_int_t)j->groups[g],
                "status", (int)SHP_ERR_GROUP_REVOKED, "reason",
                "lost the aggregation manager");
            notify_job(j->id, m);
            json_decref(m);
        }
        j->ngroups = 0;
    }
    am_schedule();
}

static const shp_conn_ops_t am_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = am_frame,
    .on_connect = am_connected,
    .on_close = am_closed,
    .on_idle = shp_ctl_on_idle,
};

static void am_connect(void)
{
    shp_sockaddr_t addr;
    if (shp_sockaddr_parse(d.cfg.am, 0, &addr) != SHP_OK) {
        shp_error("bad aggregation manager address '%s'", d.cfg.am);
        am_fail("bad aggregation manager address '%s' (option am)", d.cfg.am);
        return;
    }
    shp_conn_init(&d.am, d.loop, &am_ops, NULL, SHP_CTL_MAX_FRAME);
    d.am_state = 1;
    d.am_reached = 0;
    d.am_error_set = 0;
    if (shp_conn_connect(&d.am, &addr, NULL) != SHP_OK) {
        am_fail("cannot connect to the aggregation manager at %s", d.cfg.am);
        d.am_state = 0;
        am_schedule();
        return;
    }
    shp_conn_set_keepalive(&d.am, (double)d.cfg.keepalive_ms / 1000.0, 3);
}

static void am_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    am_connect();
}

/* Local clients ------------------------------------------------------------- */

static void client_request(client_t *c, json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id;
    uint64_t jid = 0;
    /* job_reserve / job_release: a scheduler's prolog and epilog (the AM
     * takes them from root only); they do not make the caller a process of
     * the job */
    static const char *const relayed[] = {
        "job_begin",     "job_attach",  "job_end",     "group_create",
        "group_destroy", "job_reserve", "job_release", NULL};
    if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL) != SHP_OK) {
        send_msg(&c->conn,
                 ack("error", 0, SHP_ERR_PROTO, "request without an id"));
        return;
    }
    if (!strcmp(type, "hello")) {
        /* who am I: the host name the AM knows this host by, and the
         * caller as the kernel says (SO_PEERCRED) */
        json_t *r = ack("hello", id, SHP_OK, NULL);
        json_object_set_new(r, "host", json_string(d.cfg.host));
        json_object_set_new(r, "am_up", json_boolean(d.am_state == 2));
        json_object_set_new(r, "uid", json_integer(c->uid));
        json_object_set_new(r, "pid", json_integer(c->pid));
        json_object_set_new(r, "am", json_string(d.cfg.am));
        if (d.am_state != 2)
            json_object_set_new(r, "am_error",
                                json_string(d.am_error[0]
                                                ? d.am_error
                                                : "connecting to the "
                                                  "aggregation manager"));
        send_msg(&c->conn, r);
        return;
    }
    int k = 0;
    while (relayed[k] && strcmp(relayed[k], type))
        k++;
    if (!relayed[k]) {
        send_msg(&c->conn,
                 ack(type, id, SHP_ERR_UNSUPPORTED, "unknown request"));
        return;
    }
    if (shp_json_get_u64(msg, "job_id", &jid, NULL) != SHP_OK) {
        send_msg(&c->conn, ack(type, id, SHP_ERR_PROTO, "job_id required"));
        return;
    }
    if (d.am_state != 2) {
        send_msg(&c->conn, ack(type, id, SHP_ERR_UNREACHABLE,
                               "the aggregation manager is unreachable"));
        return;
    }
    pending_t *p = calloc(1, sizeof(*p));
    if (!p) {
        send_msg(&c->conn, ack(type, id, SHP_ERR_NO_MEMORY, "no memory"));
        return;
    }
    p->am_id = d.next_id++;
    p->client = c;
    p->client_id = id;
    p->job_id = jid;
    snprintf(p->type, sizeof(p->type), "%s", type);
    HASH_ADD(hh, d.pending, am_id, sizeof(p->am_id), p);
    /* the identity is the kernel's, whatever the message claims */
    json_object_set_new(msg, "uid", json_integer(c->uid));
    json_object_set_new(msg, "id", json_integer(p->am_id));
    if (!strcmp(type, "job_begin") || !strcmp(type, "group_create"))
        json_object_set_new(msg, "pid", json_integer(c->pid));
    send_msg(&d.am, json_incref(msg));
}

/* remember groups created for local processes, to report them if the AM
 * is lost */
static void track_group(const json_t *reply)
{
    json_t *g = json_object_get(reply, "group");
    uint64_t jid, gid;
    if (!g || shp_json_get_u64(g, "job_id", &jid, NULL) != SHP_OK ||
        shp_json_get_u64(g, "group_id", &gid, NULL) != SHP_OK)
        return;
    job_t *j = job_get(jid);
    if (j && j->ngroups < 64)
        j->groups[j->ngroups++] = (uint32_t)gid;
}

static void client_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    client_t *c = conn->arg;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_warn_id("SD0101", "bad message from pid %d: %s", (int)c->pid, why);
    if (msg) {
        client_request(c, msg);
        json_decref(msg);
    }
}

static void client_closed(shp_conn_t *conn, shp_status_t reason)
{
    (void)reason;
    client_t *c = conn->arg;
    for (client_t **pp = &d.clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pending_t *p, *tmp;
    HASH_ITER(hh, d.pending, p, tmp)
    {
        if (p->client == c)
            p->client = NULL;
    }
    for (int i = 0; i < c->njobs; i++) {
        job_t *j = job_get(c->jobs[i]);
        if (j && --j->nclients == 0 && !d.stopping) {
            shp_info("job %" PRIu64 ": its last process here (pid %d) is gone",
                     j->id, (int)c->pid);
            if (d.am_state == 2)
                send_msg(&d.am, json_pack("{s:s, s:o}", "type", "job_detach",
                                          "job_id", shp_json_u64(j->id)));
            HASH_DEL(d.jobs, j);
            free(j);
        }
    }
    free(c);
}

static const shp_conn_ops_t client_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = client_frame,
    .on_close = client_closed,
};

static void on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    (void)l;
    (void)peer;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        close(fd);
        return;
    }
    client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->uid = cred.uid;
    c->pid = cred.pid;
    shp_conn_init(&c->conn, d.loop, &client_ops, c, SHP_CTL_MAX_FRAME);
    if (shp_conn_open_fd(&c->conn, fd) != SHP_OK) {
        free(c);
        return;
    }
    c->next = d.clients;
    d.clients = c;
}

/* Options and main ------------------------------------------------------------ */

static const shp_config_opt_t opts[] = {
    {"socket", SHP_PATH_SHARPD_SOCK, "Unix socket for local processes",
     offsetof(cfg_t, socket), &shp_cfg_string},
    {"am", "127.0.0.1:6126", "ip:port of the aggregation manager",
     offsetof(cfg_t, am), &shp_cfg_string},
    {"host", "",
     "this host's name in the topology (default: the short host name)",
     offsetof(cfg_t, host), &shp_cfg_string},
    {"secret_file", SHP_PATH_SECRET,
     "cluster secret shared with the AM (mode 0600)",
     offsetof(cfg_t, secret_file), &shp_cfg_string},
    {"log_level", "info", "log level", offsetof(cfg_t, log_level),
     &shp_cfg_loglevel},
    {"keepalive", "2s", "keepalive interval of the AM connection",
     offsetof(cfg_t, keepalive_ms), &shp_cfg_time},
    {NULL}};

static const shp_config_table_t table = {"sharpd", "SHARPD_",
                                         SHP_CONF_DIR "/sharpd.conf", opts};

static void on_stop(void *arg, int signum)
{
    (void)arg;
    shp_info("signal %d: shutting down", signum);
    ev_break(d.loop, EVBREAK_ALL);
}

static void on_reload(void *arg)
{
    cfg_t fresh = {0};
    (void)arg;
    shp_config_reload_log_level(&table, &fresh, offsetof(cfg_t, log_level));
}

int main(int argc, char **argv)
{
    shp_config_action_t action;
    shp_config_err_t err;
    shp_signals_t sig;
    char kerr[512];

    shp_log_set_component("sharpd");
    shp_log_detect_journal();
    if (shp_config_load(&table, &d.cfg, argc, argv,
                        "usage: sharpd [--config FILE] [--OPTION VALUE ...]\n"
                        "\n"
                        "The sharp host daemon: admits local processes "
                        "(identified by SO_PEERCRED)\nto jobs and groups "
                        "through the aggregation manager.",
                        &action, &err) != SHP_OK) {
        fprintf(stderr, "sharpd: %s\n", err.msg);
        shp_config_release(&table, &d.cfg);
        return 2;
    }
    if (action == SHP_CONFIG_VERSION)
        printf("sharpd %s\n", SHP_VERSION);
    if (action != SHP_CONFIG_RUN) {
        shp_config_release(&table, &d.cfg);
        return 0;
    }
    shp_log_set_level(d.cfg.log_level);
    if (!d.cfg.host[0]) {
        char h[256];
        if (gethostname(h, sizeof(h)) != 0)
            snprintf(h, sizeof(h), "localhost");
        h[sizeof(h) - 1] = '\0';
        h[strcspn(h, ".")] = '\0';
        free(d.cfg.host);
        d.cfg.host = strdup(h);
    }
    if (shp_auth_init() != SHP_OK ||
        shp_auth_key_load(d.cfg.secret_file, &d.key, kerr, sizeof(kerr)) !=
            SHP_OK) {
        fprintf(stderr, "sharpd: %s\n", kerr);
        shp_config_release(&table, &d.cfg);
        return 1;
    }
    d.loop = ev_default_loop(EVFLAG_AUTO);
    d.next_id = 1;
    d.backoff = 0.1;
    shp_sockaddr_t addr;
    if (shp_sockaddr_parse(d.cfg.socket, 0, &addr) != SHP_OK ||
        shp_listener_start(&d.listener, d.loop, &addr, on_accept, NULL) !=
            SHP_OK) {
        fprintf(stderr, "sharpd: cannot listen on %s: %s\n", d.cfg.socket,
                strerror(errno));
        shp_config_release(&table, &d.cfg);
        return 1;
    }
    /* any local user may ask; who asks is the kernel's answer */
    chmod(d.cfg.socket, 0666);
    ev_timer_init(&d.am_timer, am_timer_cb, 0., 0.);
    shp_signals_start(&sig, d.loop, on_stop, on_reload, NULL);
    am_connect();
    printf("sharpd %s listening on %s\n", d.cfg.host, d.cfg.socket);
    fflush(stdout);
    ev_run(d.loop, 0);

    d.stopping = 1;
    ev_timer_stop(d.loop, &d.am_timer);
    shp_listener_stop(&d.listener);
    while (d.clients)
        shp_conn_close(&d.clients->conn, SHP_ERR_CANCELED);
    if (shp_conn_is_open(&d.am)) {
        shp_conn_flush(&d.am);
        shp_conn_close(&d.am, SHP_ERR_CANCELED);
    }
    job_t *j, *jt;
    HASH_ITER(hh, d.jobs, j, jt)
    {
        HASH_DEL(d.jobs, j);
        free(j);
    }
    shp_signals_stop(&sig, d.loop);
    shp_config_release(&table, &d.cfg);
    shp_info("stopped");
    return 0;
}
