/*
 * sharpd's local clients: a connection accepted is who the kernel says it
 * is (SO_PEERCRED), within max_clients and its user's uid_max_clients (one
 * more is told why and closed).  hello answers who and where; every other
 * request has the caller's uid stamped on it and goes to the manager, or
 * waits for it (am_wait, at most SD_MAX_HELD and SD_CLIENT_MAX_HELD of a
 * connection) when it begins, attaches to or ends a job; a connection
 * takes part in at most client_max_jobs jobs.  A close detaches its jobs
 * (job_detach to the manager for a job's last process here).  The sweep
 * closes clients that began a frame and did not complete it within
 * frame_timeout, fails held requests past am_wait, and tells the manager
 * the counts of refusals when they changed.
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
#include "core/plant.h"
#include "core/time.h"
#include "protocol/ctl.h"

/* who am I: the host name the AM knows this host by, and the caller as the
 * kernel says (SO_PEERCRED) */
static void sd_client_hello(client_t *c, int64_t id)
{
    sd_t *sd = c->sd;
    c->conn.max_frame = SHP_CTL_MAX_FRAME; /* said hello: full-sized requests */
    json_t *r = shp_sharpd_ack("hello", id, SHP_OK, NULL);
    json_object_set_new(r, "host", json_string(sd->cfg.host));
    json_object_set_new(r, "am_up",
                        json_boolean(sd->am_state == SHP_SHARPD_AM_REGISTERED));
    json_object_set_new(r, "uid", json_integer(c->uid));
    json_object_set_new(r, "pid", json_integer(c->pid));
    json_object_set_new(r, "am", json_string(sd->cfg.am));
    if (sd->am_state == SHP_SHARPD_AM_REGISTERED) {
        json_object_set_new(r, "am_active",
                            json_string(shp_sharpd_am_addr(sd)));
        json_object_set_new(r, "epoch",
                            json_integer((json_int_t)sd->ams.epoch));
    }
    json_object_set_new(
        r, "stats",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "clients",
                  (json_int_t)sd->nclients, "clients_refused",
                  (json_int_t)sd->stats.clients_refused, "frames_timed_out",
                  (json_int_t)sd->stats.frames_timed_out, "jobs_refused",
                  (json_int_t)sd->stats.jobs_refused, "queue_overflows",
                  (json_int_t)sd->stats.queue_overflows, "frames_refused",
                  (json_int_t)sd->stats.frames_refused));
    if (sd->am_state != SHP_SHARPD_AM_REGISTERED)
        json_object_set_new(r, "am_error",
                            json_string(sd->am_error[0]
                                            ? sd->am_error
                                            : "connecting to the "
                                              "aggregation manager"));
    shp_sharpd_send(&c->conn, r);
}

/* a request for the AM, the caller's identity stamped on it */
static void sd_client_relay(client_t *c, json_t *msg, const char *type,
                            int64_t id, uint64_t jid)
{
    sd_t *sd = c->sd;
    pending_t *p = calloc(1, sizeof(*p));
    if (!p) {
        shp_sharpd_send(
            &c->conn, shp_sharpd_ack(type, id, SHP_ERR_NO_MEMORY, "no memory"));
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
    shp_sharpd_send(&sd->am, json_incref(msg));
}

static unsigned sd_client_held(const sd_t *sd, const client_t *c)
{
    unsigned n = 0;
    for (const pending_t *p = sd->held; p; p = p->hnext)
        n += p->client == c;
    return n;
}

/* Requests that waited am_wait for the AM fail (now: all of them). */
void shp_sharpd_held_expire(sd_t *sd, int all)
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
            p->client->asked -= (unsigned)shp_sharpd_pending_joins(p);
            shp_sharpd_send(
                &p->client->conn,
                shp_sharpd_ack(p->type, p->client_id, SHP_ERR_UNREACHABLE,
                               "the aggregation manager is unreachable (waited "
                               "am_wait for it); retry"));
        }
        shp_sharpd_pending_free(p);
    }
}

/* One more job for the client would pass client_max_jobs (those it asked
 * for and has no answer yet counted). */
static int sd_client_jobs_full(const client_t *c, uint64_t jid)
{
    unsigned max = c->sd->cfg.client_max_jobs;
    return max && !shp_sharpd_client_has_job(c, jid) &&
           c->njobs + c->asked >= max;
}

/* Whether c may make request `type` (an answer sent if not): the fields
 * it needs are there (a request without them is refused whole: a
 * group_destroy without its group_id ended every group of the job), and
 * a job sharpd holds for its processes is the caller's own (root's
 * requests, the scheduler's, excepted), whether or not the AM is
 * reachable: nothing here changes another user's state.  *jid: the job. */
static int sd_client_may(client_t *c, const json_t *msg, const char *type,
                         int64_t id, uint64_t *jid)
{
    char why[200];
    int64_t gid;
    shp_status_t st = SHP_ERR_PROTO;
    if (shp_json_get_u64(msg, "job_id", jid, NULL) != SHP_OK) {
        snprintf(why, sizeof(why), "job_id required");
    } else if (!strcmp(type, "group_destroy") &&
               shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, NULL) !=
                   SHP_OK) {
        snprintf(why, sizeof(why), "group_id required (a number)");
    } else {
        const job_t *j = shp_sharpd_job_get(c->sd, *jid);
        if (!j || c->uid == 0 || j->uid == c->uid)
            return 1;
        st = SHP_ERR_PERM;
        snprintf(why, sizeof(why), "job %" PRIu64 " belongs to another user",
                 *jid);
        shp_warn_sparse(1000, "%s of pid %d (uid %u) refused: %s", type,
                        (int)c->pid, (unsigned)c->uid, why);
    }
    shp_sharpd_send(&c->conn, shp_sharpd_ack(type, id, st, why));
    return 0;
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
        shp_sharpd_send(&c->conn, shp_sharpd_ack("error", 0, SHP_ERR_PROTO,
                                                 "request without an id"));
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
        shp_sharpd_send(&c->conn, shp_sharpd_ack(type, id, SHP_ERR_UNSUPPORTED,
                                                 "unknown request"));
        return;
    }
    if (!sd_client_may(c, msg, type, id, &jid))
        return;
    /* a group's creation or end does not wait for the AM: the job runs
     * meanwhile (its communicators on MPI); a group destroyed then is
     * forgotten here (its owner asked: sd_client_may), so a restarted AM
     * removes it from the ANs.  Nor does a job's end (the job's last call,
     * at finalize: every rank would wait am_wait behind it): a restarted
     * AM ends a job whose processes are gone from every sharpd's report
     * (am_sharpds.c) */
    int waits = strcmp(type, "group_create") && strcmp(type, "group_destroy") &&
                strcmp(type, "job_end");
    if (c->sd->am_state != SHP_SHARPD_AM_REGISTERED &&
        !strcmp(type, "group_destroy"))
        shp_sharpd_untrack_group(
            c->sd, jid, shp_json_opt_int(msg, "group_id", 0, UINT32_MAX, -2));
    if (c->sd->am_state != SHP_SHARPD_AM_REGISTERED &&
        (!waits || c->sd->cfg.am_wait_ms <= 0 || c->sd->stopping ||
         c->sd->nheld >= SD_MAX_HELD ||
         sd_client_held(c->sd, c) >= SD_CLIENT_MAX_HELD)) {
        if (shp_planted("mute_sharpd") && !strcmp(type, "group_create"))
            return;
        shp_sharpd_send(
            &c->conn, shp_sharpd_ack(type, id, SHP_ERR_UNREACHABLE,
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
        shp_sharpd_send(&c->conn, shp_sharpd_ack(type, id, SHP_ERR_QUOTA, why));
        return;
    }
    c->asked += (unsigned)joins; /* until answered (shp_sharpd_pending_joins) */
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

/* a client closed at a limit: counted and named */
static void sd_client_limit(client_t *c, shp_status_t reason)
{
    sd_t *sd = c->sd;
    if (c->conn.overflowed) {
        sd->stats.queue_overflows++;
        shp_warn_sparse(1000,
                        "disconnected pid %d (uid %u): it does not read its "
                        "answers (more than client_max_queued, %zu bytes, "
                        "waited)",
                        (int)c->pid, (unsigned)c->uid,
                        sd->cfg.client_max_queued);
    } else if (reason == SHP_ERR_TOO_LARGE) {
        sd->stats.frames_refused++;
        shp_warn_sparse(
            1000,
            "disconnected pid %d (uid %u): a request larger than "
            "%zu bytes%s",
            (int)c->pid, (unsigned)c->uid, c->conn.max_frame,
            c->conn.max_frame < SHP_CTL_MAX_FRAME ? " before its hello" : "");
    }
}

static void sd_client_closed(shp_conn_t *conn, shp_status_t reason)
{
    client_t *c = conn->arg;
    sd_t *sd = c->sd;
    sd_client_limit(c, reason);
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
        shp_sharpd_pending_free(p);
    }
    sd->nclients--;
    for (unsigned i = 0; i < c->njobs; i++) {
        job_t *j = shp_sharpd_job_get(sd, c->jobs[i]);
        if (j && --j->nclients == 0 && !sd->stopping) {
            shp_info("job %" PRIu64 ": its last process here (pid %d) is gone",
                     j->id, (int)c->pid);
            if (sd->am_state == SHP_SHARPD_AM_REGISTERED)
                shp_sharpd_send(&sd->am,
                                json_pack("{s:s, s:o}", "type", "job_detach",
                                          "job_id", shp_json_u64(j->id)));
            HASH_DEL(sd->jobs, j);
            shp_sharpd_job_free(j);
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
    shp_sharpd_send(
        &sd->am,
        json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "type", "sharpd_stats",
                  "clients_refused", (json_int_t)sd->stats.clients_refused,
                  "frames_timed_out", (json_int_t)sd->stats.frames_timed_out,
                  "jobs_refused", (json_int_t)sd->stats.jobs_refused,
                  "queue_overflows", (json_int_t)sd->stats.queue_overflows,
                  "frames_refused", (json_int_t)sd->stats.frames_refused));
}

/* Every second or so: a client that began a frame and has not completed
 * one for frame_timeout is disconnected (a slow sender pins its buffer);
 * a client with nothing begun is left alone however long it is idle.
 * Then the counts go to the AM if they changed. */
void shp_sharpd_sweep_cb(struct ev_loop *loop, ev_timer *w, int revents)
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
    shp_sharpd_held_expire(sd, 0);
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
    /* until its hello, a user's client sends only what a first message
     * needs (root's, a scheduler's job_reserve with its hosts, any size);
     * answers it does not read wait up to client_max_queued */
    shp_conn_init(&c->conn, sd->loop, &sd_client_ops, c,
                  cred.uid == 0 ? SHP_CTL_MAX_FRAME
                                : SHP_CTL_PREAUTH_MAX_FRAME);
    if (sd->cfg.client_max_queued > 0) /* 0: the default of conn.h */
        c->conn.max_queued = sd->cfg.client_max_queued;
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

void shp_sharpd_on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    (void)peer;
    (void)shp_sharpd_accept(l->arg, fd);
}
