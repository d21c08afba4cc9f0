/*
 * The aggregation node's control connection to the aggregation manager:
 * register, then answer tree_config / group_add / group_remove / stats_req;
 * report failed groups.  Reconnects with exponential backoff (0.1 s to 5 s)
 * and registers again, reporting the groups it still serves, which it
 * keeps serving meanwhile (a restarted manager adopts them: am_adopt.c).
 *
 * The connection first proves the cluster secret (protocol/auth.h: hello,
 * challenge, auth); the AN registers only once the AM has proved it too.
 *
 * Dependencies point one way: this file drives the AN core (shp_an_tree_set,
 * shp_an_group_add / _remove, shp_an_stats_json) and hears of the core's
 * events through the table it hands it (shp_an_set_events: a group failed,
 * a pending group_add is done); the core never calls in here by name.
 *
 * Messages (JSON, protocol/ctl.h):
 *   AN -> AM  an_register {name, data_addr, transport, mcast,
 *                          caps {max_trees, max_groups, max_osts,
 *                          max_payload}, groups [{group_id, tree_id,
 *                          job_id, key_fp, top, parent_index, children
 *                          ("am..": an AN, a member), dist, mcast_addr,
 *                          osts, payload, parent, failed}], epoch?,
 *                          epoch_proof?}
 *   AM -> AN  an_register_ack {status, epoch, epoch_proof}  (a standby:
 *                          status SHP_ERR_STANDBY, active?, retry_ms?)
 *   AN -> AM  am_refused {status, epoch, epoch_proof}  (a stale manager)
 *   AM -> AN  tree_config {id, tree_id, parent: "ip:port" | null}
 *   AN -> AM  tree_config_ack {id, status, error?}
 *   AM -> AN  group_add {id, group_id, tree_id, job_id, join_key, mcast_key (hex),
 *                        children [{kind: "member"|"an"}], top,
 *                        parent_index, dist: rc|mcast|both, mcast_addr,
 *                        osts, payload}
 *   AN -> AM  group_add_ack {id, status, error?}   (a non-top AN answers
 *                        once it has joined its parent)
 *   AM -> AN  group_remove {id, group_id}  ->  group_remove_ack
 *   AM -> AN  stats_req {id}               ->  stats {id, ...counters}
 *   AN -> AM  group_failed {group_id, job_id, status, reason}
 */
#include "an/an.h"

#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

#define an_of_conn(_c) ((shp_an_t *)((char *)(_c)-offsetof(shp_an_t, am)))

static void an_ctl_send(shp_an_t *an, json_t *msg)
{
    if (msg == NULL) {
        return;
    }
    if (an->am_up && shp_ctl_send(&an->am, msg) != SHP_OK) {
        shp_warn("cannot send %s to the aggregation manager",
                 shp_ctl_type(msg));
    }
    /* at once, not before the loop sleeps: over shm the data path runs in
     * the loop's prepare step (runs_free), where a flush queued for that
     * step would wait for the next wake-up */
    if (an->am_up) {
        shp_conn_flush(&an->am);
    }
    json_decref(msg);
}

static void an_ctl_reply(shp_an_t *an, const char *type, int64_t id,
                         shp_status_t status, const char *error)
{
    an_ctl_send(an, shp_ctl_reply(type, id, status, error));
}

/* The core's events (shp_an_events_t) ------------------------------------ */

static void an_ctl_group_failed(void *arg, const shp_an_group_t *g,
                                const char *reason)
{
    shp_an_t *an = arg;

    /* job ids are u64: they travel as decimal strings */
    an_ctl_send(an, json_pack("{s:s, s:I, s:o, s:i, s:s}", "type",
                              "group_failed", "group_id", (json_int_t)g->id,
                              "job_id", shp_json_u64(g->job_id), "status",
                              (int)g->fail_status, "reason", reason));
}

/* a group_add that waited for the parent join is answered now */
static void an_ctl_group_add_done(void *arg, int64_t req_id,
                                  shp_status_t status, const char *error)
{
    an_ctl_reply(arg, "group_add_ack", req_id, status, error);
}

static const shp_an_events_t an_ctl_events = {
    .group_failed = an_ctl_group_failed,
    .group_add_done = an_ctl_group_add_done,
};

/* Registration and the AM's requests ------------------------------------- */

/* What a manager that restarted needs to take a group this AN serves
 * back (am/am_adopt.c): its place here (top, parent index, the kinds of
 * its children in order: 'a' an AN, 'm' a member), its tree and job, how
 * it distributes results, its quotas, and its keys' fingerprint, never
 * the keys.  A failed group says so: the manager removes it. */
static json_t *an_ctl_group_report(const shp_an_t *an, const shp_an_group_t *g)
{
    char fp[SHP_AUTH_FP_HEX];
    char *kinds = malloc(g->nchildren + 1);
    json_t *r;

    if (kinds == NULL) {
        return NULL;
    }
    for (unsigned c = 0; c < g->nchildren; c++) {
        kinds[c] = g->children[c].is_an ? 'a' : 'm';
    }
    kinds[g->nchildren] = '\0';
    shp_auth_group_fp(g->join_key, g->mac_key, g->job_id, fp);
    r = json_pack("{s:I, s:i, s:o, s:s, s:b, s:i, s:s, s:s, s:s, s:i, s:I, "
                  "s:s, s:b}",
                  "group_id", (json_int_t)g->id, "tree_id", (int)g->tree_id,
                  "job_id", shp_json_u64(g->job_id), "key_fp", fp, "top",
                  g->is_top, "parent_index", (int)g->parent_index, "children",
                  kinds, "dist", shp_dist_names[g->dist], "mcast_addr",
                  g->mcast_addr, "osts", (int)g->osts, "payload",
                  (json_int_t)g->payload, "parent",
                  an->trees[g->tree_id].parent, "failed", g->failed != 0);
    free(kinds);
    return r;
}

static void an_ctl_register(shp_an_t *an)
{
    json_t *groups = json_array(), *msg;
    shp_an_group_t *g, *tmp;

    HASH_ITER(hh, an->groups, g, tmp)
    {
        json_t *r = an_ctl_group_report(an, g);
        /* no memory for the report: the bare id, which the manager removes */
        json_array_append_new(groups, r ? r : json_integer(g->id));
    }
    msg = json_pack("{s:s, s:s, s:s, s:s, s:b, s:{s:i, s:i, s:i, s:I}, s:o}",
                    "type", "an_register", "name", an->cfg.name, "data_addr",
                    an->data_addr, "transport", an->tp.ops->name, "mcast",
                    an->have_mcast, "caps", "max_trees", (int)an->cfg.max_trees,
                    "max_groups", (int)an->cfg.max_groups, "max_osts",
                    (int)an->cfg.max_osts, "max_payload",
                    (json_int_t)an->cfg.max_payload, "groups", groups);
    shp_am_list_stamp(&an->ams, msg);
    an_ctl_send(an, msg);
}

/* The AM's side of the handshake: answered, then register */
static void an_ctl_authenticate(shp_an_t *an, const json_t *msg)
{
    const char *why = "malformed request";
    json_t *answer = NULL;
    shp_status_t status;

    status = shp_auth_client_answer(&an->auth, &an->key, msg, &answer, &why);
    if (status != SHP_OK) {
        shp_error_id("AN0009", "refusing the aggregation manager at %s: %s",
                     shp_am_list_current(&an->ams), why);
        shp_conn_close(&an->am, status);
        return;
    }
    an->authenticated = 1;
    an_ctl_send(an, answer);
    /* everything after the handshake is sealed (protocol/ctl.h) */
    shp_ctl_seal(&an->am, an->auth.session.c2s, an->auth.session.s2c);
    an_ctl_register(an);
}

static void an_ctl_register_ack(shp_an_t *an, const json_t *msg)
{
    char why[300];
    shp_status_t st = shp_am_list_ack(&an->ams, msg, why, sizeof(why));

    if (st == SHP_OK) {
        an->registered = 1;
        shp_info("%s", why);
    } else if (st == SHP_ERR_STANDBY) {
        shp_info("%s: trying the next one", why);
        shp_conn_close(&an->am, st);
    } else if (st == SHP_ERR_STALE_EPOCH) {
        shp_error_id("AN0010", "%s", why);
        an_ctl_send(an, shp_am_list_refusal(&an->ams));
        shp_conn_close(&an->am, st);
    } else {
        shp_error_id("AN0003",
                     "the aggregation manager refused the "
                     "registration (status %d): %s",
                     (int)st, why);
    }
}

/* A request with its id: each is answered (a group_add below the top
 * once its parent join is done: an_ctl_group_add_done) */
static void an_ctl_request(shp_an_t *an, const char *type, int64_t id,
                           const json_t *msg)
{
    const char *why = "malformed request";
    shp_status_t status;
    int64_t gid;

    if (!strcmp(type, "tree_config")) {
        status = shp_an_tree_set(an, msg, &why);
        an_ctl_reply(an, "tree_config_ack", id, status,
                     status == SHP_OK ? NULL : why);
    } else if (!strcmp(type, "group_add")) {
        status = shp_an_group_add(an, msg, id, &why);
        if (status != SHP_INPROGRESS) {
            an_ctl_reply(an, "group_add_ack", id, status,
                         status == SHP_OK ? NULL : why);
        }
        if (status < 0) {
            shp_warn_id("AN0005", "group_add refused: %s", why);
        }
    } else if (!strcmp(type, "group_remove")) {
        status = shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, &why);
        if (status == SHP_OK) {
            status = shp_an_group_remove(an, (uint32_t)gid);
        }
        an_ctl_reply(an, "group_remove_ack", id, status,
                     status == SHP_OK ? NULL : shp_status_str(status));
    } else if (!strcmp(type, "stats_req")) {
        json_t *st = shp_an_stats_json(an);
        json_object_set_new(st, "type", json_string("stats"));
        json_object_set_new(st, "id", json_integer(id));
        json_object_set_new(st, "name", json_string(an->cfg.name));
        an_ctl_send(an, st);
    } else {
        an_ctl_reply(an, "error", id, SHP_ERR_UNSUPPORTED, "unknown request");
    }
}

static void an_ctl_handle(shp_an_t *an, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id = -1;

    if (!an->authenticated) {
        an_ctl_authenticate(an, msg);
    } else if (!strcmp(type, "an_register_ack")) {
        an_ctl_register_ack(an, msg);
    } else if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL) != SHP_OK) {
        shp_warn_id("AN0004", "request %s without an id: ignored", type);
    } else {
        an_ctl_request(an, type, id, msg);
    }
}

static void an_ctl_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    shp_an_t *an = an_of_conn(conn);
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);

    if (why != NULL) {
        shp_error_id("AN0006", "bad message from the aggregation manager: %s",
                     why);
    }
    if (msg != NULL) {
        an_ctl_handle(an, msg);
        json_decref(msg);
    }
}

static void an_ctl_connected(shp_conn_t *conn)
{
    shp_an_t *an = an_of_conn(conn);

    an->am_up = 1;
    an->authenticated = 0;
    shp_info("connected to the aggregation manager at %s",
             shp_am_list_current(&an->ams));
    an_ctl_send(an, shp_auth_client_hello(&an->auth, "an", an->cfg.name));
}

static void an_ctl_schedule(shp_an_t *an, double delay)
{
    ev_timer_set(&an->am_timer, delay, 0.);
    ev_timer_start(an->loop, &an->am_timer);
}

static void an_ctl_closed(shp_conn_t *conn, shp_status_t reason)
{
    shp_an_t *an = an_of_conn(conn);

    int was_registered = an->registered;

    if (was_registered) {
        shp_warn_id("AN0007",
                    "lost the aggregation manager: %s; "
                    "reconnecting",
                    shp_status_str(reason));
    }
    an->am_up = 0;
    an->authenticated = 0;
    an->registered = 0;
    if (!an->stopping) {
        an_ctl_schedule(an, was_registered ? shp_am_list_lost(&an->ams)
                                           : shp_am_list_failed(&an->ams));
    }
}

static const shp_conn_ops_t an_ctl_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = an_ctl_frame,
    .on_connect = an_ctl_connected,
    .on_close = an_ctl_closed,
    .on_idle = shp_ctl_on_idle,
};

static void an_ctl_connect(shp_an_t *an)
{
    shp_sockaddr_t addr;
    shp_status_t status;

    status = shp_sockaddr_parse(shp_am_list_current(&an->ams), 0, &addr);
    if (status != SHP_OK) {
        shp_error_id("AN0008", "bad aggregation manager address '%s'",
                     shp_am_list_current(&an->ams));
        an_ctl_schedule(an, shp_am_list_failed(&an->ams));
        return;
    }
    shp_conn_init(&an->am, an->loop, &an_ctl_ops, an, SHP_CTL_MAX_FRAME);
    status = shp_conn_connect(&an->am, &addr, NULL);
    if (status != SHP_OK) {
        an_ctl_schedule(an, shp_am_list_failed(&an->ams));
        return;
    }
    shp_conn_set_keepalive(&an->am, (double)an->cfg.am_keepalive_ms / 1000.0,
                           3);
    /* a manager cut off (SYNs dropped) is passed over after one interval,
     * not three: the next one may be the one to take over */
    shp_conn_set_connect_misses(&an->am, 1);
}

static void an_ctl_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    an_ctl_connect(w->data);
}

void shp_an_ctl_start(shp_an_t *an)
{
    shp_an_set_events(an, &an_ctl_events, an);
    ev_timer_init(&an->am_timer, an_ctl_timer_cb, 0., 0.);
    an->am_timer.data = an;
    char err[200];
    if (shp_am_list_parse(&an->ams, an->cfg.am, err, sizeof(err)) != SHP_OK) {
        shp_error_id("AN0008", "%s", err);
        return;
    }
    if (an->ams.n > 0) {
        an_ctl_connect(an);
    } else {
        shp_warn("no aggregation manager configured (--am): waiting for "
                 "nothing");
    }
}

void shp_an_ctl_stop(shp_an_t *an)
{
    ev_timer_stop(an->loop, &an->am_timer);
    if (shp_conn_is_open(&an->am)) {
        shp_conn_push(&an->am);
        shp_conn_close(&an->am, SHP_ERR_CANCELED);
    }
}
