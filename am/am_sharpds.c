/*
 * The sharpds, one per host.  A sharpd registers for its host (the name
 * it proved) and reports the jobs it still has processes of and its
 * reservations (am_adopt.c takes them back or tells it they are gone).
 * While the trees of a fabric taken back are not built, its requests
 * wait here (am->requests_held).  Its requests are dispatched here to the jobs
 * (am_jobs.c), reservations (am_reserve.c) and groups (am_groups.c); a
 * job_detach says a job's processes on its host exited; sharpd_stats
 * brings its counts of local clients refused at its limits.  A sharpd that
 * goes (not replaced by a new one of its host) takes its host's share of
 * every job with it, after sharpd_grace: the data path does not need it,
 * and one that comes back within the grace reports the jobs it still has
 * processes of (the others lose the host then).
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

/* A sharpd (re)registers: it announces the jobs it has processes of. */
void shp_am_sharpd_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *host, *w;
    json_t *jobs;
    if (shp_json_get_str(msg, "host", &host, &w) ||
        shp_json_get_array(msg, "jobs", &jobs, &w) ||
        strcmp(host, p->auth.name) != 0) {
        shp_am_send(p, shp_ctl_reply("sharpd_register_ack", 0, SHP_ERR_PROTO,
                                     "malformed sharpd_register"));
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    int node = shp_topo_find(am->topo, host);
    if (node < 0 || shp_topo_node(am->topo, node)->type != SHP_NODE_CA) {
        char e[300];
        snprintf(e, sizeof(e), "host %s is not in the topology", host);
        shp_error_id("AM0103", "refusing sharpd: %s", e);
        shp_am_send(
            p, shp_ctl_reply("sharpd_register_ack", 0, SHP_ERR_NOT_FOUND, e));
        shp_conn_push(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_NOT_FOUND);
        return;
    }
    shp_am_peer_t *old = shp_am_sharpd_of_host(am, host);
    if (old)
        shp_conn_close(&old->conn, SHP_ERR_EXISTS); /* replaced */
    if (shp_am_sharpd_unhold(am, host)) {
        am->stats.sharpds_back++;
        shp_info("the sharpd of %s is back within sharpd_grace: its jobs' "
                 "groups run on (the jobs it does not report lose the host)",
                 host);
    }
    p->role = AM_PEER_SHARPD;
    snprintf(p->host, sizeof(p->host), "%s", host);
    shp_am_send(
        p, json_pack("{s:s, s:i}", "type", "sharpd_register_ack", "status", 0));
    shp_info("sharpd of host %s registered", host);
    /* its jobs and reservations: am_adopt.c */
}

/* Requests wait while the trees of a fabric taken back are not built yet
 * (am->requests_held, at most adopt_timeout): a job begun then gets its
 * groups once they are. */
#define AM_MAX_DEFERRED 4096
static int am_sharpd_defer(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                           int64_t id)
{
    shp_am_deferred_t *d;
    if (!am->requests_held)
        return 0;
    if (am->ndeferred >= AM_MAX_DEFERRED || !(d = calloc(1, sizeof(*d)))) {
        shp_am_send(p, shp_ctl_reply("error", id, SHP_ERR_UNREACHABLE,
                                     "the aggregation manager is taking the "
                                     "fabric back; retry"));
        return 1;
    }
    d->peer = p;
    d->msg = json_incref((json_t *)msg);
    shp_am_deferred_t **pp = &am->deferred;
    while (*pp)
        pp = &(*pp)->next;
    *pp = d;
    am->ndeferred++;
    return 1;
}

void shp_am_sharpd_replay(shp_am_t *am)
{
    while (am->deferred && !am->requests_held) {
        shp_am_deferred_t *d = am->deferred;
        am->deferred = d->next;
        am->ndeferred--;
        shp_am_sharpd_message(am, d->peer, d->msg);
        json_decref(d->msg);
        free(d);
    }
}

void shp_am_sharpd_forget(shp_am_t *am, shp_am_peer_t *p)
{
    for (shp_am_deferred_t **pp = &am->deferred; *pp;) {
        shp_am_deferred_t *d = *pp;
        if (d->peer != p) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        am->ndeferred--;
        json_decref(d->msg);
        free(d);
    }
}

/* A registered sharpd's message: job_detach (not answered), or a request
 * with an id, answered by the handler of its type. */
void shp_am_sharpd_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id = 0;
    if (!strcmp(type, "sharpd_stats")) { /* its limits reached, counted */
        uint64_t v[5] = {0, 0, 0, 0, 0};
        const char *w;
        /* (queue_overflows and frames_refused: not from older sharpds) */
        if (!shp_json_get_u64(msg, "clients_refused", &v[0], &w) &&
            !shp_json_get_u64(msg, "frames_timed_out", &v[1], &w) &&
            !shp_json_get_u64(msg, "jobs_refused", &v[2], &w)) {
            v[3] = (uint64_t)shp_json_opt_int(msg, "queue_overflows", 0,
                                              INT64_MAX, 0);
            v[4] = (uint64_t)shp_json_opt_int(msg, "frames_refused", 0,
                                              INT64_MAX, 0);
            memcpy(p->sd_limits, v, sizeof(v));
        }
        return;
    }
    if (!strcmp(type, "job_detach")) {
        uint64_t jid;
        const char *w;
        if (shp_json_get_u64(msg, "job_id", &jid, &w) == SHP_OK) {
            shp_am_job_t *j = shp_am_job_find(am, jid);
            char why[200];
            snprintf(why, sizeof(why), "the job's processes on %s exited",
                     p->host);
            if (j)
                shp_am_job_detach_host(am, j, p->host, why, 0);
        }
        return;
    }
    if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL)) {
        shp_am_send(p, shp_ctl_reply("error", 0, SHP_ERR_PROTO,
                                     "request without an id"));
        return;
    }
    if (am_sharpd_defer(am, p, msg, id))
        return;
    if (!strcmp(type, "job_begin")) {
        shp_am_job_begin(am, p, msg, id);
    } else if (!strcmp(type, "job_attach")) {
        shp_am_job_attach(am, p, msg, id);
    } else if (!strcmp(type, "job_end")) {
        shp_am_job_t *j = shp_am_job_for(am, p, msg, "job_end_ack", id);
        if (j) {
            shp_am_job_end(am, j, SHP_OK, "ended");
            shp_am_send(p, shp_ctl_reply("job_end_ack", id, SHP_OK, NULL));
        }
    } else if (!strcmp(type, "job_reserve")) {
        shp_am_job_reserve(am, p, msg, id);
    } else if (!strcmp(type, "job_release")) {
        shp_am_job_release(am, p, msg, id);
    } else if (!strcmp(type, "group_create")) {
        shp_am_group_create(am, p, msg, id);
    } else if (!strcmp(type, "group_destroy")) {
        shp_am_group_destroy(am, p, msg, id);
    } else {
        shp_am_send(p, shp_ctl_reply("error", id, SHP_ERR_UNSUPPORTED,
                                     "unknown request"));
    }
}

/* The sharpd of `host` is gone (not replaced): the host's share of every
 * job goes, reservations too. */
void shp_am_sharpd_lost(shp_am_t *am, const char *host, shp_status_t reason)
{
    char why[200];
    snprintf(why, sizeof(why), "the sharpd of %s is gone (%s)", host,
             shp_status_str(reason));
    shp_warn_id("AM0202", "%s", why);
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        shp_am_job_detach_host(am, j, host, why, 1);
    }
}

/* A lost sharpd's hold ----------------------------------------------------- */

/* One host whose sharpd was lost, its share of the jobs held: at most one
 * per host of the topology (a second loss of the host's sharpd finds it). */
typedef struct shp_am_sd_hold {
    shp_am_t *am;
    char host[sizeof(((shp_am_peer_t *)0)->host)];
    shp_status_t reason;
    ev_timer timer;
    struct shp_am_sd_hold *next;
} shp_am_sd_hold_t;

static shp_am_sd_hold_t **am_sd_hold_at(shp_am_t *am, const char *host)
{
    shp_am_sd_hold_t **pp = &am->sd_holds;
    while (*pp && strcmp((*pp)->host, host) != 0)
        pp = &(*pp)->next;
    return pp;
}

static void am_sd_hold_free(shp_am_sd_hold_t **pp)
{
    shp_am_sd_hold_t *h = *pp;
    ev_timer_stop(h->am->loop, &h->timer);
    *pp = h->next;
    free(h);
}

static void am_sd_hold_expired(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_sd_hold_t *h = w->data;
    shp_am_t *am = h->am;
    char host[sizeof(h->host)];
    shp_status_t reason = h->reason;
    (void)loop;
    (void)revents;
    snprintf(host, sizeof(host), "%s", h->host);
    am_sd_hold_free(am_sd_hold_at(am, host));
    shp_am_sharpd_lost(am, host, reason);
}

void shp_am_sharpd_hold(shp_am_t *am, const char *host, shp_status_t reason)
{
    shp_am_sd_hold_t **pp = am_sd_hold_at(am, host), *h = *pp;
    if (am->cfg.sharpd_grace_ms <= 0 || (!h && !(h = calloc(1, sizeof(*h))))) {
        shp_am_sharpd_lost(am, host, reason);
        return;
    }
    if (!*pp) {
        h->am = am;
        snprintf(h->host, sizeof(h->host), "%s", host);
        ev_timer_init(&h->timer, am_sd_hold_expired,
                      (double)am->cfg.sharpd_grace_ms / 1000.0, 0.);
        h->timer.data = h;
        h->next = am->sd_holds;
        am->sd_holds = h;
    }
    h->reason = reason;
    ev_timer_stop(am->loop, &h->timer);
    ev_timer_start(am->loop, &h->timer);
    am->stats.sharpds_held++;
    shp_warn_id("AM0203",
                "the sharpd of %s is gone (%s): its jobs' groups are held for "
                "sharpd_grace (%.1f s) for it to come back",
                host, shp_status_str(reason),
                (double)am->cfg.sharpd_grace_ms / 1000.0);
}

int shp_am_sharpd_unhold(shp_am_t *am, const char *host)
{
    shp_am_sd_hold_t **pp = am_sd_hold_at(am, host);
    if (!*pp)
        return 0;
    am_sd_hold_free(pp);
    return 1;
}

void shp_am_sharpd_holds_clear(shp_am_t *am)
{
    while (am->sd_holds)
        am_sd_hold_free(&am->sd_holds);
}

/* The jobs that have processes on `host` by this manager's account and
 * that its sharpd's report (number am->report_gen) did not name: a sharpd
 * started again has none of them. */
void shp_am_sharpd_sweep(shp_am_t *am, const char *host)
{
    char why[200];
    snprintf(why, sizeof(why),
             "the sharpd of %s registered without the job (its processes "
             "there are gone)",
             host);
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        if (j->reported != am->report_gen)
            shp_am_job_detach_host(am, j, host, why, 0);
    }
}
