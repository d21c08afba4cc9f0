/*
 * A standby manager and epoch fencing (docs/am.md, "A standby manager").
 *
 * A manager with `peers` (the other managers' addresses) keeps a link to
 * each of them: it connects as role "manager" under its own `address`
 * (the cluster-secret handshake of protocol/auth.h: only a holder of the
 * cluster secret proves that role), and every beat (takeover_after / 5)
 * sends its state, am_state {address, active, epoch, epoch_proof, since,
 * next_group}; the peer answers each with its own.  So every manager
 * hears every other one at least once a beat while both run.  The active
 * one adds its administrator's settings (am_settings.c) on a link when
 * they changed since it last sent them there, or the link is new; a
 * standby takes them as its own.
 *
 * Roles.  A manager without peers is active from the start (as before).
 * One with peers starts as standby and listens: it answers a node's
 * registration with SHP_ERR_STANDBY (the active one's address and when it
 * expects to take over) and closes.  It becomes active when no peer has
 * said it is active for takeover_after (a manager started with `standby
 * no` sooner: as soon as every peer was reached or failed once and none is
 * active).  Becoming active runs the start path of a fresh manager
 * (am->serve, installed by am.c) with a new epoch, max(every epoch known)
 * + 1, committed before any node hears it (am_epoch_commit).
 *
 * Never two active managers: every node keeps the highest epoch it was
 * registered with and refuses a lower one (protocol/am_list.h); a manager
 * told of a higher epoch, by a node's registration or refusal (with the
 * manager's proof of it: a node cannot invent one) or by an active peer,
 * steps down: it becomes standby, closes its nodes' connections and drops
 * its jobs and groups without a word to anyone (nothing is revoked: the
 * new active one has them).  Two active peers of the same epoch: the one
 * with the greater address steps down.  And a manager that finds it has
 * not run for most of takeover_after (stopped, swapped out) steps down
 * before it handles anything else (the check watcher runs first in the
 * loop's iteration), since a standby may have taken over meanwhile.
 */
#include "am/am_int.h"
#include "am/am_ha_lost.h"
#include "am/am_ids.h"
#include "am/am_store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <time.h>

#include "protocol/am_list.h"
#include "protocol/ctl.h"
#include "core/log.h"
#include "core/net.h"
#include "core/plant.h"
#include "core/time.h"

#define AM_HA_MAX_PEERS (SHP_AM_LIST_MAX - 1)

typedef struct am_ha_link {
    struct shp_am_ha *ha;
    char addr[SHP_AM_LIST_ADDR];
    /* our connection to it */
    shp_conn_t conn;
    int state;      /* 0 down, 1 connecting or proving, 2 proved */
    int tried;      /* reached (and heard) or failed at least once */
    int clash_told; /* it hands out our stripe's ids: logged */
    shp_auth_client_t auth;
    ev_timer retry;
    /* what it said last, on either connection */
    int heard;
    int active;
    uint64_t epoch;
    double since;
    uint64_t heard_ns;
    uint64_t settings_sent; /* am->settings_gen + 1 sent last; 0 none */
} am_ha_link_t;

struct shp_am_ha {
    shp_am_t *am;
    char addr[SHP_AM_LIST_ADDR]; /* ours */
    int n;
    am_ha_link_t link[AM_HA_MAX_PEERS];
    int fresh; /* never active, never heard an active one */
    int stopping;
    uint64_t beat_ns;  /* between two states sent */
    uint64_t quiet_ns; /* since when no active peer was heard */
    uint64_t last_check_ns;
    uint64_t epoch_known; /* the highest proved epoch heard */
    uint32_t next_group_heard;
    am_ha_lost_t *lost; /* nodes that lost the active one (am_ha_lost.h) */
    ev_timer beat;
    ev_timer due; /* a standby's takeover, when it falls between beats */
    ev_check stall;
};

/* 0.0.0.0 or [::]: not an address a peer can reach */
static int am_ha_is_any(const shp_sockaddr_t *a)
{
    if (a->ss.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    if (a->ss.ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(
            &((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
    return 0;
}

static double am_ha_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The epoch, persisted: the highest of the state database's last one
 * (loaded at start into am->epoch, am_persist.c) and every proved epoch
 * heard from a peer or a node; a new one is committed to the database
 * before any node hears it (without a state_dir: in memory only).  After
 * a database reset the nodes' memory puts it right: a manager alone moves
 * past the highest epoch a node shows it, one with peers steps down. */
uint64_t am_epoch_load(shp_am_t *am)
{
    uint64_t e = am->epoch; /* the database's, or the last committed */
    if (am->ha && am->ha->epoch_known > e)
        e = am->ha->epoch_known;
    return e;
}

int am_epoch_commit(shp_am_t *am, uint64_t epoch)
{
    if (am->store) {
        uint64_t got;
        if (shp_am_store_epoch_advance(am->store, epoch, &got) != SHP_OK) {
            shp_error_id("AM0501", "epoch: %s", shp_am_store_error(am->store));
            return -1;
        }
        epoch = got;
    }
    am->epoch = epoch;
    shp_auth_epoch_proof(&am->key, epoch, am->epoch_proof);
    return 0;
}

static void am_ha_learn(shp_am_ha_t *ha, uint64_t epoch)
{
    if (epoch > ha->epoch_known)
        ha->epoch_known = epoch;
}

static json_t *am_ha_state(shp_am_t *am)
{
    return json_pack("{s:s, s:s, s:b, s:I, s:s, s:f, s:I}", "type", "am_state",
                     "address", am->ha->addr, "active", am->active, "epoch",
                     (json_int_t)am->epoch, "epoch_proof", am->epoch_proof,
                     "since", am->active_since, "next_group",
                     (json_int_t)am->next_group);
}

/* Stepping down ------------------------------------------------------------ */

/* Everything of the active role goes, silently: the nodes' connections
 * (closed with fault handling off), jobs and groups (no revocation sent),
 * trees, the AN table, the timers. */
static void am_ha_drop_active_state(shp_am_t *am)
{
    ev_timer_stop(am->loop, &am->settle);
    ev_timer_stop(am->loop, &am->stats_timer);
    /* the adoption in progress and the requests held for it name the
     * peers closed below: they go first (becoming active again starts a
     * new adoption, am_serve) */
    shp_am_adopt_stop(am);
    shp_am_sharpd_holds_clear(am);
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        while (j->groups)
            shp_am_group_free(am, j->groups);
        shp_am_job_free(am, j);
    }
    for (shp_am_peer_t *p = am->peers, *next; p; p = next) {
        next = p->next;
        if (p->role == AM_PEER_ADMIN || p->role == AM_PEER_MANAGER)
            continue;
        shp_am_sharpd_forget(am, p); /* its requests held, if any */
        p->role = AM_PEER_NEW;       /* no fault handling: nothing revoked */
        shp_conn_push(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_STALE_EPOCH);
    }
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        if (am->trees[t].used)
            shp_tree_free(&am->trees[t].t);
        memset(&am->trees[t], 0, sizeof(am->trees[t]));
    }
    for (int a = 0; a < am->nans; a++)
        json_decref(am->ans[a].counters);
    am->nans = 0;
    size_t n = shp_topo_count(am->topo);
    for (size_t i = 0; i < n; i++)
        am->leaf[i] = -1;
}

void shp_am_ha_step_down(shp_am_t *am, const char *why)
{
    shp_am_ha_t *ha = am->ha;
    if (!am->active)
        return;
    shp_warn_id("AM0110",
                "stepping down to standby (epoch %" PRIu64 "): %s; its "
                "nodes go to the active manager, nothing is revoked",
                am->epoch, why);
    am->active = 0;
    am->active_since = am_ha_wall();
    am->stats.step_downs++;
    ha->quiet_ns = shp_time_ns();
    ha->fresh = 0;
    am_ha_drop_active_state(am);
}

/* Becoming active ------------------------------------------------------------ */

static void am_ha_send_all(shp_am_ha_t *ha);
static void am_ha_check_takeover(shp_am_ha_t *ha);

static void am_ha_become_active(shp_am_ha_t *ha, const char *why)
{
    shp_am_t *am = ha->am;
    uint64_t e = am_epoch_load(am) + !shp_planted("same_epoch");
    if (am_epoch_commit(am, e) != 0) {
        shp_error_id("AM0111",
                     "cannot commit epoch %" PRIu64 ": staying standby", e);
        return;
    }
    am->active = 1;
    am->active_since = am_ha_wall();
    ha->fresh = 0;
    if (ha->n > 0) {
        am->stats.takeovers++;
        /* its own stripe of ids (am_ids.h); planted: its predecessor's */
        if (shp_planted("group_ids") && ha->next_group_heard > am->next_group)
            am->next_group = ha->next_group_heard;
        shp_info("active, epoch %" PRIu64 ": %s", e, why);
        am_ha_send_all(ha);
    }
    am->serve(am);
}

/* What a peer said ------------------------------------------------------------ */

static am_ha_link_t *am_ha_link_of(shp_am_ha_t *ha, const char *addr)
{
    for (int i = 0; i < ha->n; i++)
        if (!strcmp(ha->link[i].addr, addr))
            return &ha->link[i];
    return NULL;
}

/* Our state for a link: with our settings when we are active and they
 * changed since they were last sent there. */
static json_t *am_ha_link_state(am_ha_link_t *l)
{
    shp_am_t *am = l->ha->am;
    json_t *m = am_ha_state(am);
    if (m && am->active && l->settings_sent != am->settings_gen + 1) {
        json_object_set_new(m, "settings", shp_am_settings_rows(am));
        l->settings_sent = am->settings_gen + 1;
    }
    return m;
}

/* am_state from the peer at `from` (the address it proved); 0, or -1 if
 * malformed or from no peer of ours. */
static int am_ha_heard(shp_am_ha_t *ha, const char *from, const json_t *msg)
{
    shp_am_t *am = ha->am;
    am_ha_link_t *l = am_ha_link_of(ha, from);
    const char *addr = shp_json_opt_str(msg, "address", "");
    if (!l || strcmp(addr, from) != 0)
        return -1;
    uint64_t e = (uint64_t)shp_json_opt_int(msg, "epoch", 0, INT64_MAX, 0);
    const char *proof = shp_json_opt_str(msg, "epoch_proof", "");
    if (e > 0 && !shp_auth_epoch_check(&am->key, e, proof)) {
        shp_warn_sparse(1000,
                        "the manager at %s sends epoch %" PRIu64
                        " without its proof: ignored",
                        from, e);
        return -1;
    }
    am_ha_learn(ha, e);
    l->heard = 1;
    l->tried = 1;
    l->active = json_is_true(json_object_get(msg, "active"));
    l->epoch = e;
    l->since = json_is_number(json_object_get(msg, "since"))
                   ? json_number_value(json_object_get(msg, "since"))
                   : 0.;
    l->heard_ns = shp_time_ns();
    if (!l->active) {
        if (ha->fresh)
            am_ha_check_takeover(ha);
        return 0;
    }
    ha->fresh = 0;
    /* the settings of the active one of the newest epoch: a standby's */
    json_t *settings = json_object_get(msg, "settings");
    if (settings && !am->active && e == ha->epoch_known) {
        char what[SHP_AM_LIST_ADDR + 40];
        snprintf(what, sizeof(what), "the active manager at %s", from);
        shp_am_settings_replace(am, settings, what);
    }
    int64_t ng = shp_json_opt_int(msg, "next_group", 0, (1 << 24) - 1, 0);
    if ((uint32_t)ng > ha->next_group_heard)
        ha->next_group_heard = (uint32_t)ng;
    if (shp_am_ids_clash(am, (uint32_t)ng) && !l->clash_told++)
        shp_error_id("AM0115",
                     "the manager at %s hands out the group ids of this "
                     "one's stripe: give every manager the same addresses "
                     "in `address` and `peers`",
                     from);
    if (am->active && !shp_planted("stay_active") &&
        (e > am->epoch || (e == am->epoch && strcmp(from, ha->addr) < 0))) {
        char why[200];
        snprintf(why, sizeof(why),
                 "the manager at %s is active with epoch %" PRIu64, from, e);
        shp_am_ha_step_down(am, why);
    }
    return 0;
}

/* Our links to the peers ------------------------------------------------------ */

static void am_ha_link_send(am_ha_link_t *l, json_t *msg)
{
    if (msg && l->state > 0 && shp_ctl_send(&l->conn, msg) == SHP_OK)
        shp_conn_flush(&l->conn);
    json_decref(msg);
}

static void am_ha_link_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    am_ha_link_t *l = conn->arg;
    shp_am_t *am = l->ha->am;
    const char *why = NULL;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (!msg)
        return;
    if (l->state == 1) {
        json_t *answer = NULL;
        shp_status_t st =
            shp_auth_client_answer(&l->auth, &am->key, msg, &answer, &why);
        if (st != SHP_OK) {
            shp_error_id("AM0112", "refusing the manager at %s: %s", l->addr,
                         why);
            shp_conn_close(conn, st);
        } else {
            am_ha_link_send(l, answer);
            shp_ctl_seal(conn, l->auth.session.c2s, l->auth.session.s2c);
            l->state = 2;
            l->settings_sent = 0;
            am_ha_link_send(l, am_ha_link_state(l));
        }
    } else if (!strcmp(shp_ctl_type(msg), "am_state")) {
        if (am_ha_heard(l->ha, l->addr, msg) != 0)
            shp_conn_close(conn, SHP_ERR_PROTO);
    }
    json_decref(msg);
}

static void am_ha_link_connected(shp_conn_t *conn)
{
    am_ha_link_t *l = conn->arg;
    l->state = 1;
    am_ha_link_send(l, shp_auth_client_hello(&l->auth, "manager", l->ha->addr));
}

static void am_ha_link_closed(shp_conn_t *conn, shp_status_t reason)
{
    am_ha_link_t *l = conn->arg;
    shp_am_ha_t *ha = l->ha;
    if (l->state == 2)
        shp_info("link to the manager at %s lost: %s", l->addr,
                 shp_status_str(reason));
    l->state = 0;
    l->tried = 1;
    if (ha->fresh)
        am_ha_check_takeover(ha); /* a primary need not wait for a beat */
    if (!ha->stopping) {
        /* a restarted peer is found within a beat */
        ev_timer_set(&l->retry, (double)ha->beat_ns / 1e9, 0.);
        ev_timer_start(ha->am->loop, &l->retry);
    }
}

static const shp_conn_ops_t am_ha_link_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = am_ha_link_frame,
    .on_connect = am_ha_link_connected,
    .on_close = am_ha_link_closed,
    .on_idle = shp_ctl_on_idle,
};

static void am_ha_link_connect(am_ha_link_t *l)
{
    shp_am_t *am = l->ha->am;
    shp_sockaddr_t addr;
    if (shp_sockaddr_parse(l->addr, 0, &addr) != SHP_OK) {
        l->tried = 1;
        return; /* checked at start */
    }
    shp_conn_init(&l->conn, am->loop, &am_ha_link_ops, l, SHP_CTL_MAX_FRAME);
    l->state = 1;
    if (shp_conn_connect(&l->conn, &addr, NULL) != SHP_OK) {
        l->state = 0;
        l->tried = 1;
        ev_timer_set(&l->retry, (double)l->ha->beat_ns / 1e9, 0.);
        ev_timer_start(am->loop, &l->retry);
        return;
    }
    shp_conn_set_keepalive(&l->conn, (double)am->cfg.keepalive_ms / 1000.0, 3);
}

static void am_ha_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    am_ha_link_connect(w->data);
}

/* The beat: our state to the peers, and a standby's takeover ---------------- */

static void am_ha_send_all(shp_am_ha_t *ha)
{
    for (int i = 0; i < ha->n; i++)
        if (ha->link[i].state == 2)
            am_ha_link_send(&ha->link[i], am_ha_link_state(&ha->link[i]));
}

/* the peer heard active most recently within takeover_after, or NULL */
static am_ha_link_t *am_ha_active_peer(shp_am_ha_t *ha, uint64_t now)
{
    uint64_t t = (uint64_t)ha->am->cfg.takeover_after_ms * 1000000u;
    am_ha_link_t *best = NULL;
    for (int i = 0; i < ha->n; i++) {
        am_ha_link_t *l = &ha->link[i];
        if (l->heard && l->active && now - l->heard_ns < t &&
            (!best || l->heard_ns > best->heard_ns))
            best = l;
    }
    return best;
}

/* ns until a standby takes over (0: now) */
static uint64_t am_ha_takeover_in(shp_am_ha_t *ha, uint64_t now)
{
    uint64_t t = (uint64_t)ha->am->cfg.takeover_after_ms * 1000000u;
    am_ha_link_t *a = am_ha_active_peer(ha, now);
    if (a) {
        ha->quiet_ns = a->heard_ns;
        return a->heard_ns + t - now;
    }
    if (ha->fresh && !ha->am->cfg.standby) {
        int all = 1;
        for (int i = 0; i < ha->n; i++)
            all &= ha->link[i].tried;
        if (all)
            return 0;
    }
    return now - ha->quiet_ns >= t ? 0 : ha->quiet_ns + t - now;
}

/* a standby takes over now if it is time, else at that time if it comes
 * before the next beat */
static void am_ha_check_takeover(shp_am_ha_t *ha)
{
    if (ha->am->active || ha->stopping)
        return;
    uint64_t in = am_ha_takeover_in(ha, shp_time_ns());
    if (in == 0) {
        ev_timer_stop(ha->am->loop, &ha->due);
        am_ha_become_active(ha, "no active manager among the peers");
    } else if (in < ha->beat_ns) {
        ev_timer_stop(ha->am->loop, &ha->due);
        ev_timer_set(&ha->due, (double)in / 1e9, 0.);
        ev_timer_start(ha->am->loop, &ha->due);
    }
}

static void am_ha_beat_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_ha_t *ha = w->data;
    (void)loop;
    (void)revents;
    am_ha_send_all(ha);
    am_ha_check_takeover(ha);
}

static void am_ha_due_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    am_ha_check_takeover(w->data);
}

/* A manager that did not run for most of takeover_after steps down before
 * it handles anything (this watcher runs first in the loop's iteration): a
 * standby may have taken over.  A standby that did not run gives its peers
 * takeover_after again. */
static void am_ha_stall_cb(struct ev_loop *loop, ev_check *w, int revents)
{
    shp_am_ha_t *ha = w->data;
    shp_am_t *am = ha->am;
    uint64_t now = shp_time_ns(), last = ha->last_check_ns;
    uint64_t t = (uint64_t)am->cfg.takeover_after_ms * 1000000u;
    (void)loop;
    (void)revents;
    ha->last_check_ns = now;
    if (last == 0 || now - last <= t - 2 * ha->beat_ns)
        return;
    if (am->active) {
        char why[160];
        snprintf(why, sizeof(why),
                 "this manager did not run for %.2f s (stopped?): a standby "
                 "may have taken over",
                 (double)(now - last) / 1e9);
        shp_am_ha_step_down(am, why);
    } else {
        ha->quiet_ns = now; /* the peers' beats may wait unread */
    }
}

/* Nodes and peers at the listener (called by am_peers.c) ------------------- */

/* A node's claim of a higher epoch (with its proof): 1 if this manager is
 * stale (stepped down), 0 if not or the claim is not proved. */
static int am_ha_fenced(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    uint64_t e = (uint64_t)shp_json_opt_int(msg, "epoch", 0, INT64_MAX, 0);
    if (e <= am->epoch || shp_planted("stay_active"))
        return 0;
    if (!shp_auth_epoch_check(&am->key, e,
                              shp_json_opt_str(msg, "epoch_proof", ""))) {
        shp_warn_sparse(1000,
                        "%s %s claims epoch %" PRIu64
                        " without a manager's proof of it: ignored",
                        p->auth.role, p->auth.name, e);
        return 0;
    }
    am_ha_learn(am->ha, e);
    if (am->ha->n == 0) {
        /* alone: the epoch moves past it (a pair reconfigured as one) */
        shp_warn("%s %s has seen epoch %" PRIu64 ": moving to %" PRIu64,
                 p->auth.role, p->auth.name, e, e + 1);
        (void)am_epoch_commit(am, e + 1);
        return 0;
    }
    char why[300];
    snprintf(why, sizeof(why),
             "%s %s refuses it: it has seen epoch %" PRIu64
             " (this manager's is %" PRIu64 ")",
             p->auth.role, p->auth.name, e, am->epoch);
    shp_am_ha_step_down(am, why);
    return 1;
}

int shp_am_ha_admit(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                    const char *ack_type)
{
    shp_am_ha_t *ha = am->ha;
    if (am->active && !am_ha_fenced(am, p, msg))
        return 1;
    json_t *r;
    if (am->active) { /* cannot be: fenced steps down */
        r = shp_ctl_reply(ack_type, 0, SHP_ERR_STALE_EPOCH, "stale epoch");
    } else {
        /* a standby learns the epochs the nodes saw: it takes over above
         * them even when no peer told it (both managers restarted) */
        uint64_t e = (uint64_t)shp_json_opt_int(msg, "epoch", 0, INT64_MAX, 0);
        if (e > ha->epoch_known &&
            shp_auth_epoch_check(&am->key, e,
                                 shp_json_opt_str(msg, "epoch_proof", "")))
            am_ha_learn(ha, e);
        uint64_t now = shp_time_ns();
        am_ha_link_t *a = am_ha_active_peer(ha, now);
        char why[200];
        if (a && e == a->epoch &&
            !strcmp(shp_json_opt_str(msg, "lost", ""), a->addr) &&
            am_ha_lost_quorum(ha->lost, am, p, now, why, sizeof(why))) {
            am_ha_become_active(ha, why); /* then this node is admitted */
            if (am->active)
                return shp_am_ha_admit(am, p, msg, ack_type);
        }
        uint64_t in = am_ha_takeover_in(ha, now);
        r = shp_ctl_reply(ack_type, 0, SHP_ERR_STANDBY,
                          "this manager is standby");
        if (a)
            json_object_set_new(r, "active", json_string(a->addr));
        json_object_set_new(r, "retry_ms",
                            json_integer((json_int_t)(in / 1000000u) + 10));
    }
    shp_am_send(p, r);
    shp_conn_push(&p->conn);
    shp_conn_close(&p->conn,
                   am->active ? SHP_ERR_STALE_EPOCH : SHP_ERR_STANDBY);
    return 0;
}

void shp_am_ha_refused(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    shp_error_id("AM0113", "%s %s refuses this manager: stale epoch",
                 p->auth.role, p->auth.name);
    if (am->active)
        (void)am_ha_fenced(am, p, msg);
}

/* A manager's first message: its state, under the address it proved. */
void shp_am_ha_peer_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    if (strcmp(p->auth.role, "manager") != 0 ||
        am_ha_heard(am->ha, p->auth.name, msg) != 0) {
        shp_error_id("AM0114",
                     "refusing %s (%s %s): not a peer of this manager "
                     "(peers %s)",
                     p->conn.peer, p->auth.role, p->auth.name,
                     am->cfg.peers[0] ? am->cfg.peers : "none");
        shp_conn_close(&p->conn, SHP_ERR_AUTH);
        return;
    }
    p->role = AM_PEER_MANAGER;
    shp_am_send(p, am_ha_state(am));
}

void shp_am_ha_peer_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    if (strcmp(shp_ctl_type(msg), "am_state") != 0 ||
        am_ha_heard(am->ha, p->auth.name, msg) != 0) {
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    shp_am_send(p, am_ha_state(am));
}

/* Start, stop, status --------------------------------------------------------- */

shp_status_t shp_am_ha_start(shp_am_t *am, char *err, size_t errlen)
{
    shp_am_list_t peers;
    shp_am_ha_t *ha = calloc(1, sizeof(*ha));
    if (!ha)
        return SHP_ERR_NO_MEMORY;
    am->ha = ha;
    ha->am = am;
    ha->fresh = 1;
    ha->lost = am_ha_lost_new(); /* NULL: no takeover for lost nodes */
    /* the epoch of the last run (its state database), proved as the
     * peers want it: a restarted manager tells them what it was */
    if (am->epoch)
        shp_auth_epoch_proof(&am->key, am->epoch, am->epoch_proof);
    if (shp_am_list_parse(&peers, am->cfg.peers, err, errlen) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    snprintf(ha->addr, sizeof(ha->addr), "%s",
             am->cfg.address && am->cfg.address[0] ? am->cfg.address
                                                   : am->cfg.listen);
    shp_am_ids_stripe(am, ha->addr, &peers);
    if (peers.n == 0) {
        am_ha_become_active(ha, "no peers");
        return SHP_OK;
    }
    if (peers.n > AM_HA_MAX_PEERS) {
        snprintf(err, errlen, "peers: at most %d", AM_HA_MAX_PEERS);
        return SHP_ERR_INVALID_PARAM;
    }
    shp_sockaddr_t a;
    if (shp_sockaddr_parse(ha->addr, 0, &a) != SHP_OK || am_ha_is_any(&a)) {
        snprintf(err, errlen,
                 "address \"%s\": with peers, the address the nodes and the "
                 "peers know this manager by (host:port, not a wildcard)",
                 ha->addr);
        return SHP_ERR_INVALID_PARAM;
    }
    if (am->cfg.takeover_after_ms < 50) {
        snprintf(err, errlen, "takeover_after: 50ms at least");
        return SHP_ERR_INVALID_PARAM;
    }
    for (int i = 0; i < peers.n; i++) {
        am_ha_link_t *l = &ha->link[ha->n];
        if (!strcmp(peers.addr[i], ha->addr))
            continue; /* one list for every manager: itself is skipped */
        if (shp_sockaddr_parse(peers.addr[i], 0, &a) != SHP_OK) {
            snprintf(err, errlen, "peers: bad address \"%s\"", peers.addr[i]);
            return SHP_ERR_INVALID_PARAM;
        }
        l->ha = ha;
        snprintf(l->addr, sizeof(l->addr), "%s", peers.addr[i]);
        ev_timer_init(&l->retry, am_ha_retry_cb, 0., 0.);
        l->retry.data = l;
        ha->n++;
    }
    if (ha->n == 0) {
        am_ha_become_active(ha, "no peers but itself");
        return SHP_OK;
    }
    ha->beat_ns = (uint64_t)am->cfg.takeover_after_ms * 1000000u / 5;
    ha->quiet_ns = shp_time_ns();
    am->active_since = am_ha_wall();
    double beat = (double)ha->beat_ns / 1e9;
    ev_timer_init(&ha->beat, am_ha_beat_cb, beat, beat);
    ha->beat.data = ha;
    ev_timer_start(am->loop, &ha->beat);
    ev_timer_init(&ha->due, am_ha_due_cb, 0., 0.);
    ha->due.data = ha;
    ev_check_init(&ha->stall, am_ha_stall_cb);
    ev_set_priority(&ha->stall, EV_MAXPRI);
    ha->stall.data = ha;
    ev_check_start(am->loop, &ha->stall);
    for (int i = 0; i < ha->n; i++)
        am_ha_link_connect(&ha->link[i]);
    shp_info("standby as %s: waiting %.2f s for an active manager among the "
             "peers (%s)",
             ha->addr, (double)am->cfg.takeover_after_ms / 1000.0,
             am->cfg.peers);
    return SHP_OK;
}

void shp_am_ha_stop(shp_am_t *am)
{
    shp_am_ha_t *ha = am->ha;
    if (!ha)
        return;
    ha->stopping = 1;
    if (ha->n > 0) {
        ev_timer_stop(am->loop, &ha->beat);
        ev_timer_stop(am->loop, &ha->due);
        ev_check_stop(am->loop, &ha->stall);
    }
    for (int i = 0; i < ha->n; i++) {
        ev_timer_stop(am->loop, &ha->link[i].retry);
        if (ha->link[i].state > 0)
            shp_conn_close(&ha->link[i].conn, SHP_ERR_CANCELED);
    }
    am_ha_lost_free(ha->lost);
    free(ha);
    am->ha = NULL;
}

json_t *shp_am_ha_status(shp_am_t *am)
{
    shp_am_ha_t *ha = am->ha;
    uint64_t now = shp_time_ns();
    json_t *peers = json_array();
    const char *active = am->active ? (ha ? ha->addr : am->listen_addr) : "";
    double since = am->active_since;
    uint64_t epoch = am->epoch;
    for (int i = 0; ha && i < ha->n; i++) {
        am_ha_link_t *l = &ha->link[i];
        json_t *o = json_pack("{s:s, s:s}", "address", l->addr, "link",
                              l->state == 2 ? "up" : "down");
        if (l->heard) {
            json_object_set_new(o, "role",
                                json_string(l->active ? "active" : "standby"));
            json_object_set_new(o, "epoch", json_integer((json_int_t)l->epoch));
            json_object_set_new(o, "since", json_real(l->since));
            json_object_set_new(
                o, "heard_ms_ago",
                json_integer((json_int_t)((now - l->heard_ns) / 1000000u)));
        }
        json_array_append_new(peers, o);
    }
    am_ha_link_t *a = ha && !am->active ? am_ha_active_peer(ha, now) : NULL;
    if (a) {
        active = a->addr;
        since = a->since;
        epoch = a->epoch;
    }
    json_t *r =
        json_pack("{s:s, s:s, s:I, s:f, s:I, s:I, s:I, s:o}", "address",
                  ha ? ha->addr : am->listen_addr, "role",
                  am->active ? "active" : "standby", "epoch",
                  (json_int_t)am->epoch, "since", am->active_since,
                  "takeover_after_ms", (json_int_t)am->cfg.takeover_after_ms,
                  "takeovers", (json_int_t)am->stats.takeovers, "step_downs",
                  (json_int_t)am->stats.step_downs, "peers", peers);
    if (active[0]) {
        json_object_set_new(r, "active",
                            json_pack("{s:s, s:f, s:I}", "address", active,
                                      "since", since, "epoch",
                                      (json_int_t)epoch));
    } else {
        json_object_set_new(r, "active", json_null());
    }
    if (ha && !am->active && ha->n > 0)
        json_object_set_new(
            r, "takeover_in_ms",
            json_integer((json_int_t)(am_ha_takeover_in(ha, now) / 1000000u)));
    return r;
}
