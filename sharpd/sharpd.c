/*
 * sharpd: the per-host daemon, the privileged control path of local
 * processes.
 *
 * Local processes connect to a Unix socket; sharpd learns who they are
 * with SO_PEERCRED (never from what they say), stamps their uid on every
 * request and relays it to the AM over an authenticated TCP connection:
 *
 *   client -> sharpd  hello {id} -> hello_ack {host, am_up, stats}
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
 * the AM (job_detach), which revokes the job's groups (and ends the job
 * when no host has processes of it and none holds a reservation): every
 * job a connection began or attached to is tracked, at most
 * client_max_jobs.  Connections are bounded (uid_max_clients per user,
 * max_clients in all: one more is told why and closed), and one that
 * began a frame and has not completed it in frame_timeout is closed; one
 * idle between requests is not (MPI processes keep theirs for the job).
 * The counts of these refusals go to the AM when they change
 * (sharpd_stats), for sharpctl stats and the metrics.  It reconnects to a
 * lost AM with backoff and reports its jobs (key, quotas, hosts, the
 * groups created here with their members) and its host's reservations,
 * which a restarted AM takes back (am/am_adopt.c): when the AM closed the
 * connection the processes are told nothing, their groups run on; when it
 * went silent (keepalives: this host may be cut off) they hear their
 * groups are gone.  Meanwhile requests that begin, attach to
 * or end a job wait for the AM (am_wait); group requests fail at once.
 * With several managers (am = a list) it tries them in turn and stays with
 * the active one, refusing one whose epoch is older than one it was
 * registered with (protocol/am_list.h).
 */
#include "sharpd/sharpd.h"

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

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "protocol/ctl.h"

typedef shp_sharpd_t sd_t;
typedef shp_sharpd_client_t client_t;
typedef shp_sharpd_pending_t pending_t;
typedef shp_sharpd_job_t job_t;

struct shp_sharpd_client {
    shp_conn_t conn;
    sd_t *sd;
    uid_t uid;
    pid_t pid;
    /* the jobs it began or attached to, every one (at most client_max_jobs
     * with those asked for and not answered yet): its close detaches them */
    uint64_t *jobs;
    unsigned njobs, capjobs, asked;
    /* a frame begun and not completed: since when, and the frames received
     * then (frame_timeout) */
    uint64_t partial_ns, partial_frames;
    client_t *next;
};

/* a request relayed to the AM, or waiting for it (sd->held, am_wait) */
struct shp_sharpd_pending {
    int64_t am_id;
    client_t *client;
    int64_t client_id;
    char type[32];
    uint64_t job_id;
    json_t *req;          /* the request as relayed (uid stamped) */
    uint64_t deadline_ns; /* held: when it fails */
    shp_sharpd_pending_t *hnext;
    UT_hash_handle hh;
};

/* groups of a job remembered for a restarted AM, at most */
#define SD_JOB_MAX_GROUPS 256
/* requests waiting for the AM, at most: in all, and of one connection */
#define SD_MAX_HELD 1024
#define SD_CLIENT_MAX_HELD 8
/* reservations of this host remembered, at most */
#define SD_MAX_RESERVED 4096

/* a job with local processes, and what a restarted AM needs to take it
 * back (sd_am_register): its key, quotas and hosts as the AM answered,
 * the groups created through this host with their members */
struct shp_sharpd_job {
    uint64_t id;
    uid_t uid;
    int nclients;
    int have_key;
    uint8_t key[32];
    int64_t max_groups, osts, payload; /* 0: not known here */
    json_t *hosts;                     /* job_begin's, or NULL */
    json_t *groups;                    /* [{group_id, members?}] */
    UT_hash_handle hh;
};

static void sd_job_free(job_t *j)
{
    json_decref(j->hosts);
    json_decref(j->groups);
    free(j);
}

static void sd_pending_free(pending_t *p)
{
    json_decref(p->req);
    free(p);
}

/* the first reason of this connection attempt (hello reports it) */
static void __attribute__((format(printf, 2, 3)))
sd_am_fail(sd_t *sd, const char *fmt, ...)
{
    va_list ap;
    if (sd->am_error_set)
        return;
    sd->am_error_set = 1;
    va_start(ap, fmt);
    vsnprintf(sd->am_error, sizeof(sd->am_error), fmt, ap);
    va_end(ap);
}

static void sd_send(shp_conn_t *c, json_t *m)
{
    if (!m)
        return;
    if (shp_conn_is_open(c) && shp_ctl_send(c, m) != SHP_OK)
        shp_warn("cannot send %s to %s", shp_ctl_type(m), c->peer);
    json_decref(m);
}

static json_t *sd_ack(const char *req_type, int64_t id, shp_status_t st,
                      const char *error)
{
    char type[48];
    snprintf(type, sizeof(type), "%.32s_ack", req_type);
    return shp_ctl_reply(type, id, st, error);
}

static job_t *sd_job_get(sd_t *sd, uint64_t id)
{
    job_t *j;
    HASH_FIND(hh, sd->jobs, &id, sizeof(id), j);
    return j;
}

/* 1 for a request that makes its client one of a job's (job_begin,
 * job_attach): counted in client->asked until answered */
static int sd_pending_joins(const pending_t *p)
{
    return !strcmp(p->type, "job_begin") || !strcmp(p->type, "job_attach");
}

static int sd_client_has_job(const client_t *c, uint64_t id)
{
    for (unsigned i = 0; i < c->njobs; i++)
        if (c->jobs[i] == id)
            return 1;
    return 0;
}

/* The client takes part in job id (the AM admitted or attached it): it is
 * tracked until the job ends or the client goes.  SHP_ERR_NO_MEMORY: not
 * tracked. */
static shp_status_t sd_client_add_job(client_t *c, uint64_t id, uid_t uid)
{
    sd_t *sd = c->sd;
    if (sd_client_has_job(c, id))
        return SHP_OK;
    if (c->njobs == c->capjobs) {
        unsigned cap = c->capjobs ? 2 * c->capjobs : 4;
        uint64_t *a = realloc(c->jobs, sizeof(*a) * cap);
        if (!a)
            return SHP_ERR_NO_MEMORY;
        c->jobs = a;
        c->capjobs = cap;
    }
    job_t *j = sd_job_get(sd, id);
    if (!j) {
        j = calloc(1, sizeof(*j));
        if (!j)
            return SHP_ERR_NO_MEMORY;
        j->id = id;
        j->uid = uid;
        j->groups = json_array();
        if (!j->groups) {
            free(j);
            return SHP_ERR_NO_MEMORY;
        }
        HASH_ADD(hh, sd->jobs, id, sizeof(j->id), j);
    }
    c->jobs[c->njobs++] = id;
    j->nclients++;
    return SHP_OK;
}

static void sd_job_drop(sd_t *sd, job_t *j)
{
    for (client_t *c = sd->clients; c; c = c->next)
        for (unsigned i = 0; i < c->njobs; i++)
            if (c->jobs[i] == j->id) {
                c->jobs[i] = c->jobs[--c->njobs];
                break;
            }
    HASH_DEL(sd->jobs, j);
    sd_job_free(j);
}

/* forward an AM notification to the local processes of its job */
static void sd_notify_job(sd_t *sd, uint64_t id, const json_t *msg)
{
    for (client_t *c = sd->clients; c; c = c->next)
        if (sd_client_has_job(c, id))
            sd_send(&c->conn, json_incref((json_t *)msg));
}

/* remember groups created for local processes, with their members, to
 * report them to a restarted AM (sd_am_register) */
static void sd_track_group(sd_t *sd, const json_t *req, const json_t *reply)
{
    json_t *g = json_object_get(reply, "group");
    json_t *members = json_object_get(req, "members");
    uint64_t jid, gid;
    if (!g || shp_json_get_u64(g, "job_id", &jid, NULL) != SHP_OK ||
        shp_json_get_u64(g, "group_id", &gid, NULL) != SHP_OK)
        return;
    job_t *j = sd_job_get(sd, jid);
    if (!j || json_array_size(j->groups) >= SD_JOB_MAX_GROUPS)
        return;
    json_t *e = json_pack("{s:I}", "group_id", (json_int_t)gid);
    if (e && json_is_array(members))
        json_object_set(e, "members", members);
    json_array_append_new(j->groups, e);
}

/* a group of job jid is gone (destroyed, or revoked: all of them when
 * gid < 0) */
static void sd_untrack_group(sd_t *sd, uint64_t jid, int64_t gid)
{
    job_t *j = sd_job_get(sd, jid);
    size_t i;
    json_t *e;
    if (!j)
        return;
    if (gid < 0) {
        json_array_clear(j->groups);
        return;
    }
    json_array_foreach(j->groups, i, e)
    {
        if (json_integer_value(json_object_get(e, "group_id")) == gid) {
            json_array_remove(j->groups, i);
            return;
        }
    }
}

/* what the AM answered a job_begin or job_attach: the job's key and
 * quotas, and job_begin's hosts, for a restarted AM */
static void sd_job_learn(sd_t *sd, const pending_t *p, const json_t *reply)
{
    job_t *j = sd_job_get(sd, p->job_id);
    json_t *hosts = json_object_get(p->req, "hosts");
    if (!j)
        return;
    if (shp_json_get_hex(reply, "job_key", j->key, sizeof(j->key), NULL) ==
        SHP_OK)
        j->have_key = 1;
    j->max_groups = shp_json_opt_int(reply, "max_groups", 1, 1 << 20, 0);
    j->osts = shp_json_opt_int(reply, "osts", 1, 1 << 20, 0);
    j->payload = shp_json_opt_int(reply, "payload", 1, 1 << 30, 0);
    if (!strcmp(p->type, "job_begin") && json_is_array(hosts)) {
        json_decref(j->hosts);
        j->hosts = json_incref(hosts);
    }
}

/* a reservation of this host made or released (job_reserve and
 * job_release answered), for a restarted AM */
static void sd_track_reservation(sd_t *sd, const pending_t *p)
{
    char k[24];
    snprintf(k, sizeof(k), "%" PRIu64, p->job_id);
    if (!strcmp(p->type, "job_release")) {
        json_object_del(sd->reserved, k);
    } else if (json_object_size(sd->reserved) < SD_MAX_RESERVED) {
        json_t *r =
            json_pack("{s:o, s:O?, s:O?}", "job_id", shp_json_u64(p->job_id),
                      "owner", json_object_get(p->req, "owner"), "req",
                      json_object_get(p->req, "req"));
        json_object_set_new(sd->reserved, k, r);
    }
}

/* AM connection ------------------------------------------------------------- */

/* the next manager of the list after a failure, the same after the loss
 * of a registered one (protocol/am_list.h) */
static void sd_am_schedule(sd_t *sd)
{
    double d =
        sd->am_had ? shp_am_list_lost(&sd->ams) : shp_am_list_failed(&sd->ams);
    sd->am_had = 0;
    if (sd->stopping)
        return;
    ev_timer_set(&sd->am_timer, d, 0.);
    ev_timer_start(sd->loop, &sd->am_timer);
}

/* the manager of the list connected to now */
static const char *sd_am_addr(const sd_t *sd)
{
    return shp_am_list_current(&sd->ams);
}

/* The registration's answer as the epoch rules see it: 1 registered; 0
 * handled here (a standby, or a stale manager refused: closed, the next
 * one tried) */
static int sd_am_epoch_ok(sd_t *sd, json_t *msg)
{
    char why[300];
    shp_status_t st = shp_am_list_ack(&sd->ams, msg, why, sizeof(why));
    if (st == SHP_ERR_STANDBY) {
        shp_info("%s: trying the next one", why);
        sd_am_fail(sd, "%s", why);
        shp_conn_close(&sd->am, st);
        return 0;
    }
    if (st == SHP_ERR_STALE_EPOCH) {
        shp_error_id("SD0004", "%s", why);
        sd_am_fail(sd, "%s", why);
        sd_send(&sd->am, shp_am_list_refusal(&sd->ams));
        shp_conn_flush(&sd->am);
        shp_conn_close(&sd->am, st);
        return 0;
    }
    if (st == SHP_OK)
        shp_info("%s", why);
    return 1;
}

/* One job as a (restarted) AM takes it back: its id and uid, the key and
 * quotas it was given, job_begin's hosts, the groups created here with
 * their members (am/am_adopt.c). */
static json_t *sd_job_report(const job_t *j)
{
    json_t *r = json_pack("{s:o, s:i, s:O}", "job_id", shp_json_u64(j->id),
                          "uid", (int)j->uid, "groups", j->groups);
    if (!r)
        return NULL;
    if (j->have_key)
        json_object_set_new(r, "key", shp_json_hex(j->key, sizeof(j->key)));
    if (j->max_groups && j->osts && j->payload)
        json_object_set_new(r, "req",
                            json_pack("{s:I, s:I, s:I}", "max_groups",
                                      (json_int_t)j->max_groups, "osts",
                                      (json_int_t)j->osts, "payload",
                                      (json_int_t)j->payload));
    if (j->hosts)
        json_object_set(r, "hosts", j->hosts);
    return r;
}

static void sd_am_register(sd_t *sd)
{
    json_t *jobs = json_array(), *res = json_array(), *v;
    const char *k;
    job_t *j, *tmp;
    HASH_ITER(hh, sd->jobs, j, tmp)
    {
        json_array_append_new(jobs, sd_job_report(j));
    }
    json_object_foreach(sd->reserved, k, v)
    {
        json_array_append(res, v);
    }
    json_t *reg =
        json_pack("{s:s, s:s, s:o, s:o}", "type", "sharpd_register", "host",
                  sd->cfg.host, "jobs", jobs, "reservations", res);
    shp_am_list_stamp(&sd->ams, reg);
    sd_send(&sd->am, reg);
}

/* The requests that waited for the AM go now, oldest first. */
static void sd_held_relay(sd_t *sd)
{
    while (sd->held) {
        pending_t *p = sd->held;
        sd->held = p->hnext;
        sd->nheld--;
        p->hnext = NULL;
        p->am_id = sd->next_id++;
        json_object_set_new(p->req, "id", json_integer(p->am_id));
        HASH_ADD(hh, sd->pending, am_id, sizeof(p->am_id), p);
        sd_send(&sd->am, json_incref(p->req));
    }
}

/* the AM's answer to the registration */
static void sd_am_registered(sd_t *sd, json_t *msg)
{
    if (!sd->am_proved) {
        /* nothing counts before the AM proved the secret */
        shp_error_id("SD0001",
                     "refusing the aggregation manager at %s: it "
                     "answers the registration without proving the "
                     "cluster secret",
                     sd_am_addr(sd));
        sd_am_fail(sd,
                   "the aggregation manager at %s answered without "
                   "proving the cluster secret",
                   sd_am_addr(sd));
        shp_conn_close(&sd->am, SHP_ERR_AUTH);
        return;
    }
    if (!sd_am_epoch_ok(sd, msg))
        return;
    if (shp_json_opt_int(msg, "status", -32768, 32767, -1) != 0) {
        shp_error_id("SD0002",
                     "the aggregation manager refused this "
                     "host: %s",
                     shp_json_opt_str(msg, "error", "?"));
        sd_am_fail(sd,
                   "the aggregation manager at %s refused this host "
                   "(%s): %s",
                   sd_am_addr(sd), sd->cfg.host,
                   shp_json_opt_str(msg, "error", "?"));
        shp_conn_close(&sd->am, SHP_ERR_AUTH);
        return;
    }
    sd->am_state = SHP_SHARPD_AM_REGISTERED;
    ev_timer_stop(sd->loop, &sd->am_grace);             /* the groups go on */
    memset(&sd->stats_told, 0, sizeof(sd->stats_told)); /* a new AM peer */
    sd->am_error[0] = '\0';
    sd->am_had = 1;
    shp_info("registered with the aggregation manager as %s", sd->cfg.host);
    sd_held_relay(sd);
}

/* before registration: the AM's challenge, then its answer */
static void sd_am_handle_auth(sd_t *sd, json_t *msg)
{
    const char *why = NULL;
    json_t *answer = NULL;

    if (!strcmp(shp_ctl_type(msg), "sharpd_register_ack")) {
        sd_am_registered(sd, msg);
        return;
    }
    shp_status_t st =
        shp_auth_client_answer(&sd->auth, &sd->key, msg, &answer, &why);
    if (st != SHP_OK) {
        shp_error_id("SD0001", "refusing the aggregation manager at %s: %s",
                     sd_am_addr(sd), why);
        sd_am_fail(sd,
                   "refusing the aggregation manager at %s: %s (is %s this "
                   "host's node secret, or the manager's cluster secret?)",
                   sd_am_addr(sd), why, sd->cfg.secret_file);
        shp_conn_close(&sd->am, st);
        return;
    }
    sd->am_proved = 1;
    sd_send(&sd->am, answer);
    /* everything after the handshake is sealed (protocol/ctl.h) */
    shp_ctl_seal(&sd->am, sd->auth.session.c2s, sd->auth.session.s2c);
    sd_am_register(sd);
}

/* the AM's answer to a relayed request: to the process that asked */
static void sd_am_handle_reply(sd_t *sd, json_t *msg)
{
    int64_t id = shp_json_opt_int(msg, "id", 0, INT64_MAX, -1);
    pending_t *p;
    HASH_FIND(hh, sd->pending, &id, sizeof(id), p);
    if (!p)
        return;
    HASH_DEL(sd->pending, p);
    int64_t st = shp_json_opt_int(msg, "status", -32768, 32767, SHP_ERR_PROTO);
    int joins = sd_pending_joins(p);
    if (p->client) {
        if (joins)
            p->client->asked--;
        if (st == SHP_OK && joins &&
            sd_client_add_job(p->client, p->job_id, p->client->uid) != SHP_OK) {
            /* not tracked, it would outlive the client: undone */
            shp_error("job %" PRIu64 " of pid %d: no memory to track it",
                      p->job_id, (int)p->client->pid);
            if (!sd_job_get(sd, p->job_id))
                sd_send(&sd->am, json_pack("{s:s, s:o}", "type", "job_detach",
                                           "job_id", shp_json_u64(p->job_id)));
            sd_send(&p->client->conn,
                    sd_ack(p->type, p->client_id, SHP_ERR_NO_MEMORY,
                           "sharpd has no memory to track the job"));
            sd_pending_free(p);
            return;
        }
        if (st == SHP_OK && joins)
            sd_job_learn(sd, p, msg);
        if (st == SHP_OK && !strcmp(p->type, "group_create"))
            sd_track_group(sd, p->req, msg);
        if (st == SHP_OK && !strcmp(p->type, "group_destroy"))
            sd_untrack_group(
                sd, p->job_id,
                shp_json_opt_int(p->req, "group_id", 0, UINT32_MAX, -2));
        if (st == SHP_OK && !strcmp(p->type, "job_end")) {
            job_t *j = sd_job_get(sd, p->job_id);
            if (j)
                sd_job_drop(sd, j);
        }
        json_object_set_new(msg, "id", json_integer(p->client_id));
        sd_send(&p->client->conn, json_incref(msg));
    }
    if (st == SHP_OK &&
        (!strcmp(p->type, "job_reserve") || !strcmp(p->type, "job_release")))
        sd_track_reservation(sd, p);
    sd_pending_free(p);
}

static void sd_am_handle(sd_t *sd, json_t *msg)
{
    const char *type = shp_ctl_type(msg), *why = NULL;
    if (sd->am_state == SHP_SHARPD_AM_AUTH) {
        sd_am_handle_auth(sd, msg);
        return;
    }
    if (!strcmp(type, "group_revoked") || !strcmp(type, "job_killed")) {
        uint64_t jid;
        if (shp_json_get_u64(msg, "job_id", &jid, &why) != SHP_OK)
            return;
        sd_notify_job(sd, jid, msg);
        job_t *j = sd_job_get(sd, jid);
        if (!strcmp(type, "group_revoked"))
            sd_untrack_group(
                sd, jid,
                json_is_true(json_object_get(msg, "all"))
                    ? -1
                    : shp_json_opt_int(msg, "group_id", 0, UINT32_MAX, -2));
        if (!strcmp(type, "job_killed")) {
            char k[24];
            snprintf(k, sizeof(k), "%" PRIu64, jid);
            json_object_del(sd->reserved, k);
            if (j)
                sd_job_drop(sd, j);
        }
        return;
    }
    sd_am_handle_reply(sd, msg);
}

static void sd_am_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_error("bad message from the aggregation manager: %s", why);
    if (msg) {
        sd_am_handle(conn->arg, msg);
        json_decref(msg);
    }
}

static void sd_am_connected(shp_conn_t *conn)
{
    sd_t *sd = conn->arg;
    sd->am_reached = 1;
    sd->am_state = SHP_SHARPD_AM_AUTH;
    sd->am_proved = 0;
    shp_info("connected to the aggregation manager at %s", sd_am_addr(sd));
    sd_send(&sd->am, shp_auth_client_hello(&sd->auth, "sharpd", sd->cfg.host));
}

/* why the AM is gone, for hello and the log */
static void sd_am_lost_reason(sd_t *sd, shp_status_t reason)
{
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
        sd_am_fail(sd, "lost the aggregation manager at %s: %s", sd_am_addr(sd),
                   shp_status_str(reason));
    else if (!sd->am_reached)
        sd_am_fail(sd, "cannot connect to the aggregation manager at %s: %s",
                   sd_am_addr(sd), shp_status_str(reason));
    else
        sd_am_fail(sd,
                   "the aggregation manager at %s closed the connection "
                   "before this host was registered (%s): is %s this "
                   "host's node secret, or the manager's cluster secret?",
                   sd_am_addr(sd), shp_status_str(reason), sd->cfg.secret_file);
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
        shp_warn_id("SD0003",
                    "lost the aggregation manager: %s; "
                    "reconnecting",
                    shp_status_str(reason));
}

/* The AM went silent (keepalives): this host may be cut off from the
 * fabric, and its processes must not wait on groups that the AM, alive
 * elsewhere, revokes: they learn now that every group of their jobs is
 * gone, also those created through other hosts. */
static void sd_am_lost_groups(sd_t *sd)
{
    job_t *j, *jt;
    HASH_ITER(hh, sd->jobs, j, jt)
    {
        json_t *all = json_pack(
            "{s:s, s:o, s:b, s:i, s:s}", "type", "group_revoked", "job_id",
            shp_json_u64(j->id), "all", 1, "status", (int)SHP_ERR_GROUP_REVOKED,
            "reason", "the aggregation manager stopped answering");
        sd_notify_job(sd, j->id, all);
        json_decref(all);
        json_array_clear(j->groups);
    }
}

/* A silent manager's grace: time to try every manager of the list, each
 * attempt at a silent one ending with its keepalives (3), and one more
 * keepalive to register */
static double sd_am_grace_s(const sd_t *sd)
{
    return (3.0 * sd->ams.n + 1.0) * (double)sd->cfg.keepalive_ms / 1000.0;
}

static void sd_am_closed(shp_conn_t *conn, shp_status_t reason)
{
    sd_t *sd = conn->arg;
    sd_am_lost_reason(sd, reason);
    sd->am_state = SHP_SHARPD_AM_DOWN;
    /* requests in flight fail now, not never */
    pending_t *p, *tmp;
    HASH_ITER(hh, sd->pending, p, tmp)
    {
        HASH_DEL(sd->pending, p);
        if (p->client) {
            p->client->asked -= sd_pending_joins(p);
            sd_send(&p->client->conn,
                    sd_ack(p->type, p->client_id, SHP_ERR_UNREACHABLE,
                           "lost the aggregation manager while it was "
                           "asked; retry"));
        }
        sd_pending_free(p);
    }
    /* The manager closed or reset the connection (its host answered: the
     * process is gone, killed or restarting): the groups keep running on
     * the ANs, the jobs here, and a restarted manager takes them back
     * (sd_am_register); the processes are told nothing.  Silence is
     * another matter (sd_am_lost_groups). */
    if (reason == SHP_ERR_KEEPALIVE || reason == SHP_ERR_TIMED_OUT) {
        /* With other managers listed, a silent one is most likely a
         * manager host lost or paused while a standby takes over: the
         * groups go on if one of them registers this host within the
         * grace (the new active takes them back); a host cut off reaches
         * none and its processes learn then (sd_am_grace_cb). */
        if (sd->ams.n > 1) {
            if (!ev_is_active(&sd->am_grace)) {
                ev_timer_set(&sd->am_grace, sd_am_grace_s(sd), 0.);
                ev_timer_start(sd->loop, &sd->am_grace);
            }
        } else {
            sd_am_lost_groups(sd);
        }
    }
    sd_am_schedule(sd);
}

static void sd_am_grace_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    sd_t *sd = w->data;
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
        return;
    shp_warn_id("SD0005",
                "no aggregation manager registered this host within %.1f s "
                "of the silence: the processes' groups are given up",
                sd_am_grace_s(sd));
    sd_am_lost_groups(sd);
}

static const shp_conn_ops_t sd_am_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = sd_am_frame,
    .on_connect = sd_am_connected,
    .on_close = sd_am_closed,
    .on_idle = shp_ctl_on_idle,
};

static void sd_am_connect(sd_t *sd)
{
    shp_sockaddr_t addr;
    if (sd->ams.n == 0 ||
        shp_sockaddr_parse(sd_am_addr(sd), 0, &addr) != SHP_OK) {
        shp_error("bad aggregation manager address '%s'", sd_am_addr(sd));
        sd_am_fail(sd, "bad aggregation manager address '%s' (option am)",
                   sd_am_addr(sd));
        if (sd->ams.n > 0)
            sd_am_schedule(sd);
        return;
    }
    shp_conn_init(&sd->am, sd->loop, &sd_am_ops, sd, SHP_CTL_MAX_FRAME);
    sd->am_state = SHP_SHARPD_AM_AUTH;
    sd->am_reached = 0;
    sd->am_error_set = 0;
    if (shp_conn_connect(&sd->am, &addr, NULL) != SHP_OK) {
        sd_am_fail(sd, "cannot connect to the aggregation manager at %s",
                   sd_am_addr(sd));
        sd->am_state = SHP_SHARPD_AM_DOWN;
        sd_am_schedule(sd);
        return;
    }
    shp_conn_set_keepalive(&sd->am, (double)sd->cfg.keepalive_ms / 1000.0, 3);
}

static void sd_am_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    sd_am_connect(w->data);
}

shp_status_t shp_sharpd_am_attach(sd_t *sd, int fd)
{
    ev_timer_stop(sd->loop, &sd->am_timer); /* what sd_am_connect would do */
    shp_conn_init(&sd->am, sd->loop, &sd_am_ops, sd, SHP_CTL_MAX_FRAME);
    shp_status_t st = shp_conn_open_fd(&sd->am, fd);
    if (st == SHP_OK)
        sd_am_connected(&sd->am);
    return st;
}

/* Local clients ------------------------------------------------------------- */

/* who am I: the host name the AM knows this host by, and the caller as the
 * kernel says (SO_PEERCRED) */
static void sd_client_hello(client_t *c, int64_t id)
{
    sd_t *sd = c->sd;
    json_t *r = sd_ack("hello", id, SHP_OK, NULL);
    json_object_set_new(r, "host", json_string(sd->cfg.host));
    json_object_set_new(r, "am_up",
                        json_boolean(sd->am_state == SHP_SHARPD_AM_REGISTERED));
    json_object_set_new(r, "uid", json_integer(c->uid));
    json_object_set_new(r, "pid", json_integer(c->pid));
    json_object_set_new(r, "am", json_string(sd->cfg.am));
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED) {
        json_object_set_new(r, "am_active", json_string(sd_am_addr(sd)));
        json_object_set_new(r, "epoch",
                            json_integer((json_int_t)sd->ams.epoch));
    }
    json_object_set_new(
        r, "stats",
        json_pack("{s:I, s:I, s:I, s:I}", "clients", (json_int_t)sd->nclients,
                  "clients_refused", (json_int_t)sd->stats.clients_refused,
                  "frames_timed_out", (json_int_t)sd->stats.frames_timed_out,
                  "jobs_refused", (json_int_t)sd->stats.jobs_refused));
    if (sd->am_state != SHP_SHARPD_AM_REGISTERED)
        json_object_set_new(r, "am_error",
                            json_string(sd->am_error[0]
                                            ? sd->am_error
                                            : "connecting to the "
                                              "aggregation manager"));
    sd_send(&c->conn, r);
}

/* a request for the AM, the caller's identity stamped on it */
static void sd_client_relay(client_t *c, json_t *msg, const char *type,
                            int64_t id, uint64_t jid)
{
    sd_t *sd = c->sd;
    pending_t *p = calloc(1, sizeof(*p));
    if (!p) {
        sd_send(&c->conn, sd_ack(type, id, SHP_ERR_NO_MEMORY, "no memory"));
        return;
    }
    p->client = c;
    p->client_id = id;
    p->job_id = jid;
    p->req = json_incref(msg);
    snprintf(p->type, sizeof(p->type), "%s", type);
    /* the identity is the kernel's, whatever the message claims */
    json_object_set_new(msg, "uid", json_integer(c->uid));
    if (!strcmp(type, "job_begin") || !strcmp(type, "group_create"))
        json_object_set_new(msg, "pid", json_integer(c->pid));
    if (sd->am_state != SHP_SHARPD_AM_REGISTERED) {
        /* waits for the AM (sd_held_relay), at most am_wait */
        pending_t **pp = &sd->held;
        while (*pp)
            pp = &(*pp)->hnext;
        *pp = p;
        sd->nheld++;
        p->deadline_ns =
            shp_time_ns() + (uint64_t)sd->cfg.am_wait_ms * 1000000u;
        return;
    }
    p->am_id = sd->next_id++;
    HASH_ADD(hh, sd->pending, am_id, sizeof(p->am_id), p);
    json_object_set_new(msg, "id", json_integer(p->am_id));
    sd_send(&sd->am, json_incref(msg));
}

static unsigned sd_client_held(const sd_t *sd, const client_t *c)
{
    unsigned n = 0;
    for (const pending_t *p = sd->held; p; p = p->hnext)
        n += p->client == c;
    return n;
}

/* Requests that waited am_wait for the AM fail (now: all of them). */
static void sd_held_expire(sd_t *sd, int all)
{
    uint64_t now = shp_time_ns();
    for (pending_t **pp = &sd->held; *pp;) {
        pending_t *p = *pp;
        if (!all && p->deadline_ns > now) {
            pp = &p->hnext;
            continue;
        }
        *pp = p->hnext;
        sd->nheld--;
        if (p->client) {
            p->client->asked -= (unsigned)sd_pending_joins(p);
            sd_send(&p->client->conn,
                    sd_ack(p->type, p->client_id, SHP_ERR_UNREACHABLE,
                           "the aggregation manager is unreachable (waited "
                           "am_wait for it); retry"));
        }
        sd_pending_free(p);
    }
}

/* One more job for the client would pass client_max_jobs (those it asked
 * for and has no answer yet counted). */
static int sd_client_jobs_full(const client_t *c, uint64_t jid)
{
    unsigned max = c->sd->cfg.client_max_jobs;
    return max && !sd_client_has_job(c, jid) && c->njobs + c->asked >= max;
}

static void sd_client_request(client_t *c, json_t *msg)
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
        sd_send(&c->conn,
                sd_ack("error", 0, SHP_ERR_PROTO, "request without an id"));
        return;
    }
    if (!strcmp(type, "hello")) {
        sd_client_hello(c, id);
        return;
    }
    int k = 0;
    while (relayed[k] && strcmp(relayed[k], type))
        k++;
    if (!relayed[k]) {
        sd_send(&c->conn,
                sd_ack(type, id, SHP_ERR_UNSUPPORTED, "unknown request"));
        return;
    }
    if (shp_json_get_u64(msg, "job_id", &jid, NULL) != SHP_OK) {
        sd_send(&c->conn, sd_ack(type, id, SHP_ERR_PROTO, "job_id required"));
        return;
    }
    /* a group's creation or end does not wait for the AM: the job runs
     * meanwhile (its communicators on MPI); a group destroyed then is
     * forgotten here, so a restarted AM removes it from the ANs */
    int waits = strcmp(type, "group_create") && strcmp(type, "group_destroy");
    if (c->sd->am_state != SHP_SHARPD_AM_REGISTERED &&
        !strcmp(type, "group_destroy"))
        sd_untrack_group(c->sd, jid,
                         shp_json_opt_int(msg, "group_id", 0, UINT32_MAX, -2));
    if (c->sd->am_state != SHP_SHARPD_AM_REGISTERED &&
        (!waits || c->sd->cfg.am_wait_ms <= 0 || c->sd->stopping ||
         c->sd->nheld >= SD_MAX_HELD ||
         sd_client_held(c->sd, c) >= SD_CLIENT_MAX_HELD)) {
        sd_send(&c->conn, sd_ack(type, id, SHP_ERR_UNREACHABLE,
                                 "the aggregation manager is unreachable"));
        return;
    }
    int joins = !strcmp(type, "job_begin") || !strcmp(type, "job_attach");
    if (joins && sd_client_jobs_full(c, jid)) {
        char why[200];
        c->sd->stats.jobs_refused++;
        snprintf(why, sizeof(why),
                 "this connection takes part in its maximum of %u jobs "
                 "(client_max_jobs)",
                 c->sd->cfg.client_max_jobs);
        shp_warn_sparse(1000, "%s of pid %d refused: %s", type, (int)c->pid,
                        why);
        sd_send(&c->conn, sd_ack(type, id, SHP_ERR_QUOTA, why));
        return;
    }
    c->asked += (unsigned)joins; /* until answered (sd_pending_joins) */
    sd_client_relay(c, msg, type, id, jid);
}

static void sd_client_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    client_t *c = conn->arg;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_warn_id("SD0101", "bad message from pid %d: %s", (int)c->pid, why);
    if (msg) {
        sd_client_request(c, msg);
        json_decref(msg);
    }
}

static void sd_client_closed(shp_conn_t *conn, shp_status_t reason)
{
    (void)reason;
    client_t *c = conn->arg;
    sd_t *sd = c->sd;
    for (client_t **pp = &sd->clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pending_t *p, *tmp;
    HASH_ITER(hh, sd->pending, p, tmp)
    {
        if (p->client == c)
            p->client = NULL;
    }
    for (pending_t **pp = &sd->held; *pp;) { /* it waits for nobody now */
        p = *pp;
        if (p->client != c) {
            pp = &p->hnext;
            continue;
        }
        *pp = p->hnext;
        sd->nheld--;
        sd_pending_free(p);
    }
    sd->nclients--;
    for (unsigned i = 0; i < c->njobs; i++) {
        job_t *j = sd_job_get(sd, c->jobs[i]);
        if (j && --j->nclients == 0 && !sd->stopping) {
            shp_info("job %" PRIu64 ": its last process here (pid %d) is gone",
                     j->id, (int)c->pid);
            if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
                sd_send(&sd->am, json_pack("{s:s, s:o}", "type", "job_detach",
                                           "job_id", shp_json_u64(j->id)));
            HASH_DEL(sd->jobs, j);
            sd_job_free(j);
        }
    }
    free(c->jobs);
    free(c);
}

static const shp_conn_ops_t sd_client_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = sd_client_frame,
    .on_close = sd_client_closed,
};

/* A user at its uid_max_clients: one more connection is refused, so that no
 * user holds every descriptor sharpd has (root's are not counted). */
static int sd_uid_full(const sd_t *sd, uid_t uid)
{
    unsigned n = 0;

    if (uid == 0 || sd->cfg.uid_max_clients == 0)
        return 0;
    for (const client_t *c = sd->clients; c; c = c->next)
        n += c->uid == uid;
    return n >= sd->cfg.uid_max_clients;
}

/* Whether a new connection of cred is refused (max_clients, then its
 * user's uid_max_clients): if so, it is told why in one frame, unless its
 * socket is full, and the refusal is logged and counted. */
static int sd_refused(sd_t *sd, int fd, const struct ucred *cred)
{
    char why[200];
    if (sd->cfg.max_clients && sd->nclients >= sd->cfg.max_clients)
        snprintf(why, sizeof(why),
                 "sharpd has its maximum of %u local connections open "
                 "(max_clients)",
                 sd->cfg.max_clients);
    else if (sd_uid_full(sd, cred->uid))
        snprintf(why, sizeof(why),
                 "uid %u has its maximum of %u connections open "
                 "(uid_max_clients)",
                 (unsigned)cred->uid, sd->cfg.uid_max_clients);
    else
        return 0;
    sd->stats.clients_refused++;
    shp_warn_sparse(1000, "refusing a connection of pid %d: %s", (int)cred->pid,
                    why);
    json_t *m = shp_ctl_reply("refused", 0, SHP_ERR_QUOTA, why);
    char *body = m ? json_dumps(m, JSON_COMPACT) : NULL;
    if (body) {
        uint8_t frame[SHP_CTL_HDR_LEN + 300];
        size_t n = strlen(body);
        if (n <= sizeof(frame) - SHP_CTL_HDR_LEN) {
            shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, (uint32_t)n, frame);
            memcpy(frame + SHP_CTL_HDR_LEN, body, n);
            (void)!send(fd, frame, SHP_CTL_HDR_LEN + n,
                        MSG_DONTWAIT | MSG_NOSIGNAL);
        }
    }
    free(body);
    json_decref(m);
    return 1;
}

/* The AM learns the counts of limits reached when they changed
 * (sharpd_stats; sharpctl stats and the metrics sum them). */
static void sd_tell_stats(sd_t *sd)
{
    if (sd->am_state != SHP_SHARPD_AM_REGISTERED ||
        !memcmp(&sd->stats, &sd->stats_told, sizeof(sd->stats)))
        return;
    sd->stats_told = sd->stats;
    sd_send(&sd->am,
            json_pack("{s:s, s:I, s:I, s:I}", "type", "sharpd_stats",
                      "clients_refused", (json_int_t)sd->stats.clients_refused,
                      "frames_timed_out",
                      (json_int_t)sd->stats.frames_timed_out, "jobs_refused",
                      (json_int_t)sd->stats.jobs_refused));
}

/* Every second or so: a client that began a frame and has not completed
 * one for frame_timeout is disconnected (a slow sender pins its buffer);
 * a client with nothing begun is left alone however long it is idle.
 * Then the counts go to the AM if they changed. */
static void sd_sweep_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    sd_t *sd = w->data;
    uint64_t now = shp_time_ns(),
             limit = (uint64_t)sd->cfg.frame_timeout_ms * 1000000u;
    (void)loop;
    (void)revents;
    for (client_t *c = sd->clients, *next; limit && c; c = next) {
        next = c->next;
        if (c->conn.rlen == 0 || c->conn.stats.frames_in != c->partial_frames) {
            c->partial_frames = c->conn.stats.frames_in;
            c->partial_ns = c->conn.rlen ? now : 0;
            continue;
        }
        if (c->partial_ns == 0)
            c->partial_ns = now;
        if (now - c->partial_ns < limit)
            continue;
        sd->stats.frames_timed_out++;
        shp_warn_sparse(1000,
                        "disconnecting pid %d (uid %u): a request begun "
                        "%.1f s ago is still incomplete (frame_timeout)",
                        (int)c->pid, (unsigned)c->uid,
                        (double)(now - c->partial_ns) / 1e9);
        shp_conn_close(&c->conn, SHP_ERR_TIMED_OUT);
    }
    sd_held_expire(sd, 0);
    sd_tell_stats(sd);
}

shp_status_t shp_sharpd_accept(sd_t *sd, int fd)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    client_t *c = NULL;
    shp_status_t st = SHP_ERR_NO_RESOURCE;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        close(fd);
        goto out;
    }
    if (sd_refused(sd, fd, &cred)) {
        close(fd);
        st = SHP_ERR_QUOTA;
        goto out;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        close(fd);
        goto out;
    }
    c->sd = sd;
    c->uid = cred.uid;
    c->pid = cred.pid;
    shp_conn_init(&c->conn, sd->loop, &sd_client_ops, c, SHP_CTL_MAX_FRAME);
    st = shp_conn_open_fd(&c->conn, fd);
    if (st != SHP_OK)
        goto out;
    c->next = sd->clients;
    sd->clients = c;
    sd->nclients++;
    c = NULL;
out:
    free(c);
    return st;
}

static void sd_on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    (void)peer;
    (void)shp_sharpd_accept(l->arg, fd);
}

/* Start and stop --------------------------------------------------------------- */

void shp_sharpd_init(sd_t *sd, struct ev_loop *loop)
{
    sd->loop = loop;
    sd->next_id = 1;
    sd->backoff = 0.1;
    if (!sd->reserved)
        sd->reserved = json_object();
    char err[200];
    if (shp_am_list_parse(&sd->ams, sd->cfg.am, err, sizeof(err)) != SHP_OK)
        shp_error("%s", err);
    ev_timer_init(&sd->am_timer, sd_am_timer_cb, 0., 0.);
    sd->am_timer.data = sd;
    ev_timer_init(&sd->am_grace, sd_am_grace_cb, 0., 0.);
    sd->am_grace.data = sd;
    /* a quarter of frame_timeout, at most a second, between sweeps */
    double tick = (double)sd->cfg.frame_timeout_ms / 4000.0;
    tick = tick > 1.0 || tick <= 0 ? 1.0 : tick < 0.05 ? 0.05 : tick;
    ev_timer_init(&sd->sweep, sd_sweep_cb, tick, tick);
    sd->sweep.data = sd;
}

/* the short host name, when none is configured */
static shp_status_t sd_default_host(sd_t *sd)
{
    char h[256];
    if (sd->cfg.host[0])
        return SHP_OK;
    if (gethostname(h, sizeof(h)) != 0)
        snprintf(h, sizeof(h), "localhost");
    h[sizeof(h) - 1] = '\0';
    h[strcspn(h, ".")] = '\0';
    free(sd->cfg.host);
    sd->cfg.host = strdup(h);
    return sd->cfg.host ? SHP_OK : SHP_ERR_NO_MEMORY;
}

shp_status_t shp_sharpd_start(sd_t *sd, struct ev_loop *loop, char *msg,
                              size_t len)
{
    shp_sockaddr_t addr;
    shp_status_t st = sd_default_host(sd);

    if (st != SHP_OK) {
        snprintf(msg, len, "no memory");
        goto out;
    }
    snprintf(msg, len, "cannot initialise libsodium");
    st = shp_auth_init();
    if (st == SHP_OK)
        st = shp_auth_key_load(sd->cfg.secret_file, &sd->key, msg, len);
    if (st != SHP_OK)
        goto out;
    shp_sharpd_init(sd, loop);
    st = shp_am_list_parse(&sd->ams, sd->cfg.am, msg, len);
    if (st != SHP_OK)
        goto out;
    st = shp_sockaddr_parse(sd->cfg.socket, 0, &addr);
    if (st == SHP_OK)
        st = shp_listener_start(&sd->listener, sd->loop, &addr, sd_on_accept,
                                sd);
    if (st != SHP_OK) {
        snprintf(msg, len, "cannot listen on %s: %s", sd->cfg.socket,
                 strerror(errno));
        goto out;
    }
    /* any local user may ask; who asks is the kernel's answer */
    chmod(sd->cfg.socket, 0666);
    ev_timer_start(sd->loop, &sd->sweep);
    sd_am_connect(sd);
out:
    return st;
}

void shp_sharpd_stop(sd_t *sd)
{
    sd->stopping = 1;
    ev_timer_stop(sd->loop, &sd->am_timer);
    ev_timer_stop(sd->loop, &sd->am_grace);
    ev_timer_stop(sd->loop, &sd->sweep);
    shp_listener_stop(&sd->listener);
    while (sd->clients)
        shp_conn_close(&sd->clients->conn, SHP_ERR_CANCELED);
    if (shp_conn_is_open(&sd->am)) {
        shp_conn_flush(&sd->am);
        shp_conn_close(&sd->am, SHP_ERR_CANCELED);
    }
    sd_held_expire(sd, 1);
    job_t *j, *jt;
    HASH_ITER(hh, sd->jobs, j, jt)
    {
        HASH_DEL(sd->jobs, j);
        sd_job_free(j);
    }
    json_decref(sd->reserved);
    sd->reserved = NULL;
}
