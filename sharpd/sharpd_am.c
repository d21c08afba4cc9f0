/*
 * sharpd's link to the manager: connect (to each manager of the list in
 * turn, protocol/am_list.h), the handshake that proves the cluster secret,
 * the registration that reports the jobs, groups and reservations held
 * here (sharpd_jobs.c), the epoch that refuses a stale manager, then the
 * manager's answers relayed to the process that asked and its
 * notifications (group_revoked, job_killed) to the processes of the job.
 * A manager that closed the connection leaves the groups running (a
 * restarted one takes them back); one gone silent (keepalives) revokes
 * them, after a grace when other managers are listed.  The requests held
 * meanwhile (sharpd_clients.c) go once registered.
 */
#include "sharpd/sharpd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "protocol/ctl.h"

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
const char *shp_sharpd_am_addr(const sd_t *sd)
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
        shp_sharpd_send(&sd->am, shp_am_list_refusal(&sd->ams));
        shp_conn_push(&sd->am);
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
    shp_sharpd_send(&sd->am, reg);
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
        shp_sharpd_send(&sd->am, json_incref(p->req));
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
                     shp_sharpd_am_addr(sd));
        sd_am_fail(sd,
                   "the aggregation manager at %s answered without "
                   "proving the cluster secret",
                   shp_sharpd_am_addr(sd));
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
                   shp_sharpd_am_addr(sd), sd->cfg.host,
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
                     shp_sharpd_am_addr(sd), why);
        sd_am_fail(sd,
                   "refusing the aggregation manager at %s: %s (is %s this "
                   "host's node secret, or the manager's cluster secret?)",
                   shp_sharpd_am_addr(sd), why, sd->cfg.secret_file);
        shp_conn_close(&sd->am, st);
        return;
    }
    sd->am_proved = 1;
    shp_sharpd_send(&sd->am, answer);
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
    int joins = shp_sharpd_pending_joins(p);
    if (p->client) {
        if (joins)
            p->client->asked--;
        if (st == SHP_OK && joins &&
            shp_sharpd_client_add_job(p->client, p->job_id, p->client->uid) !=
                SHP_OK) {
            /* not tracked, it would outlive the client: undone */
            shp_error("job %" PRIu64 " of pid %d: no memory to track it",
                      p->job_id, (int)p->client->pid);
            if (!shp_sharpd_job_get(sd, p->job_id))
                shp_sharpd_send(&sd->am,
                                json_pack("{s:s, s:o}", "type", "job_detach",
                                          "job_id", shp_json_u64(p->job_id)));
            shp_sharpd_send(
                &p->client->conn,
                shp_sharpd_ack(p->type, p->client_id, SHP_ERR_NO_MEMORY,
                               "sharpd has no memory to track the job"));
            shp_sharpd_pending_free(p);
            return;
        }
        if (st == SHP_OK && joins)
            shp_sharpd_job_learn(sd, p, msg);
        if (st == SHP_OK && !strcmp(p->type, "group_create"))
            shp_sharpd_track_group(sd, p->req, msg);
        if (st == SHP_OK && !strcmp(p->type, "group_destroy"))
            shp_sharpd_untrack_group(
                sd, p->job_id,
                shp_json_opt_int(p->req, "group_id", 0, UINT32_MAX, -2));
        if (st == SHP_OK && !strcmp(p->type, "job_end")) {
            job_t *j = shp_sharpd_job_get(sd, p->job_id);
            if (j)
                shp_sharpd_job_drop(sd, j);
        }
        json_object_set_new(msg, "id", json_integer(p->client_id));
        shp_sharpd_send(&p->client->conn, json_incref(msg));
    }
    if (st == SHP_OK &&
        (!strcmp(p->type, "job_reserve") || !strcmp(p->type, "job_release")))
        shp_sharpd_track_reservation(sd, p);
    shp_sharpd_pending_free(p);
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
        shp_sharpd_notify_job(sd, jid, msg);
        job_t *j = shp_sharpd_job_get(sd, jid);
        if (!strcmp(type, "group_revoked"))
            shp_sharpd_untrack_group(
                sd, jid,
                json_is_true(json_object_get(msg, "all"))
                    ? -1
                    : shp_json_opt_int(msg, "group_id", 0, UINT32_MAX, -2));
        if (!strcmp(type, "job_killed")) {
            char k[24];
            snprintf(k, sizeof(k), "%" PRIu64, jid);
            json_object_del(sd->reserved, k);
            if (j)
                shp_sharpd_job_drop(sd, j);
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
    shp_info("connected to the aggregation manager at %s",
             shp_sharpd_am_addr(sd));
    shp_sharpd_send(&sd->am,
                    shp_auth_client_hello(&sd->auth, "sharpd", sd->cfg.host));
}

/* why the AM is gone, for hello and the log */
static void sd_am_lost_reason(sd_t *sd, shp_status_t reason)
{
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
        sd_am_fail(sd, "lost the aggregation manager at %s: %s",
                   shp_sharpd_am_addr(sd), shp_status_str(reason));
    else if (!sd->am_reached)
        sd_am_fail(sd, "cannot connect to the aggregation manager at %s: %s",
                   shp_sharpd_am_addr(sd), shp_status_str(reason));
    else
        sd_am_fail(sd,
                   "the aggregation manager at %s closed the connection "
                   "before this host was registered (%s): is %s this "
                   "host's node secret, or the manager's cluster secret?",
                   shp_sharpd_am_addr(sd), shp_status_str(reason),
                   sd->cfg.secret_file);
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
        shp_sharpd_notify_job(sd, j->id, all);
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
            p->client->asked -= shp_sharpd_pending_joins(p);
            shp_sharpd_send(
                &p->client->conn,
                shp_sharpd_ack(p->type, p->client_id, SHP_ERR_UNREACHABLE,
                               "lost the aggregation manager while it was "
                               "asked; retry"));
        }
        shp_sharpd_pending_free(p);
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
         * none and its processes learn then (shp_sharpd_am_grace_cb). */
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

void shp_sharpd_am_grace_cb(struct ev_loop *loop, ev_timer *w, int revents)
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

void shp_sharpd_am_connect(sd_t *sd)
{
    shp_sockaddr_t addr;
    if (sd->ams.n == 0 ||
        shp_sockaddr_parse(shp_sharpd_am_addr(sd), 0, &addr) != SHP_OK) {
        shp_error("bad aggregation manager address '%s'",
                  shp_sharpd_am_addr(sd));
        sd_am_fail(sd, "bad aggregation manager address '%s' (option am)",
                   shp_sharpd_am_addr(sd));
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
                   shp_sharpd_am_addr(sd));
        sd->am_state = SHP_SHARPD_AM_DOWN;
        sd_am_schedule(sd);
        return;
    }
    shp_conn_set_keepalive(&sd->am, (double)sd->cfg.keepalive_ms / 1000.0, 3);
    shp_conn_set_connect_misses(&sd->am, 1); /* as an AN's (an_ctl.c) */
}

void shp_sharpd_am_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    shp_sharpd_am_connect(w->data);
}

shp_status_t shp_sharpd_am_attach(sd_t *sd, int fd)
{
    ev_timer_stop(sd->loop,
                  &sd->am_timer); /* what shp_sharpd_am_connect would do */
    shp_conn_init(&sd->am, sd->loop, &sd_am_ops, sd, SHP_CTL_MAX_FRAME);
    shp_status_t st = shp_conn_open_fd(&sd->am, fd);
    if (st == SHP_OK)
        sd_am_connected(&sd->am);
    return st;
}
