/*
 * Listeners and peers: the control listener (ANs, sharpds) and the admin
 * socket (sharpctl), one peer per connection.
 *
 * Every TCP peer first proves the cluster secret (protocol/auth.h), with
 * small frames only until it has; then it says what it is with its first
 * message: an_register (an AN, am_ans.c), sharpd_register (a host daemon,
 * am_sharpds.c) or am_state (another manager, am_ha.c), and its later
 * messages go to that role's handler; a standby manager answers a node's
 * registration with SHP_ERR_STANDBY and closes (am_ha.c).  It
 * has auth_timeout to prove and register; at most max_peers ANs and
 * sharpds are connected at once (one that replaces its own earlier
 * connection is not refused for it).  An admin
 * peer is known by its SO_PEERCRED and each request goes to the handler
 * the admin interface installed (am->admin_handler).  A peer that goes
 * takes its AN, or its host's share of jobs, with it.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/net.h"

/* A peer that proved the secret, before it registers, is past max_peers:
 * the ANs and sharpds connected and proved, other than itself and than
 * the one connection of its own name and role it would replace. */
static int am_peer_over_cap(shp_am_t *am, const shp_am_peer_t *p)
{
    unsigned n = 0;
    int same = 0;
    for (const shp_am_peer_t *q = am->peers; q; q = q->next) {
        if (q == p || q->role == AM_PEER_ADMIN || q->auth.state < 2)
            continue;
        if (!same && !strcmp(q->auth.role, p->auth.role) &&
            !strcmp(q->auth.name, p->auth.name)) {
            same = 1; /* replaced, or refused as a duplicate, not counted */
            continue;
        }
        n++;
    }
    return n >= am->cfg.max_peers;
}

/* The first message after the handshake says the peer's role: an AN's
 * or a sharpd's registration, within max_peers; from then on the peer
 * has no deadline. */
static void am_peer_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    if (!strcmp(type, "am_state")) { /* another manager (am_ha.c) */
        shp_am_ha_peer_register(am, p, msg);
        if (p->role != AM_PEER_NEW)
            ev_timer_stop(am->loop, &p->auth_timer);
        return;
    }
    int an = !strcmp(type, "an_register") && !strcmp(p->auth.role, "an");
    int sd =
        !strcmp(type, "sharpd_register") && !strcmp(p->auth.role, "sharpd");
    if (!an && !sd) {
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    /* a standby, or a stale manager, answers and closes (am_ha.c) */
    if (!shp_am_ha_admit(am, p, msg,
                         an ? "an_register_ack" : "sharpd_register_ack"))
        return;
    if (am_peer_over_cap(am, p)) {
        char why[300];
        am->stats.peers_refused++;
        snprintf(why, sizeof(why),
                 "the manager has its maximum of %u ANs and sharpds "
                 "connected (max_peers)",
                 am->cfg.max_peers);
        shp_error_id("AM0105", "refusing %s %s (%s): %s", p->auth.role,
                     p->auth.name, p->conn.peer, why);
        shp_am_send(
            p, shp_ctl_reply(an ? "an_register_ack" : "sharpd_register_ack", 0,
                             SHP_ERR_QUOTA, why));
        shp_conn_push(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_QUOTA);
        return;
    }
    if (an)
        shp_am_an_register(am, p, msg);
    else
        shp_am_sharpd_register(am, p, msg);
    /* what it reports of a running fabric (a restart): am_adopt.c */
    if (p->role == AM_PEER_AN)
        shp_am_adopt_an(am, p, msg);
    else if (p->role == AM_PEER_SHARPD)
        shp_am_adopt_sharpd(am, p, msg);
    if (p->role != AM_PEER_NEW)
        ev_timer_stop(am->loop, &p->auth_timer);
}

/* One message from a peer: an admin's goes to the installed handler;
 * before the secret is proved, the handshake; then the first message says
 * the peer's role, and the later ones go to that role's handler. */
static void am_peer_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    shp_am_peer_t *p = conn->arg;
    shp_am_t *am = p->am;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_warn_id("AM0104", "bad message from %s: %s", conn->peer, why);
    if (!msg)
        return;
    if (p->role == AM_PEER_ADMIN) {
        shp_am_send(p, am->admin_handler(am, p, msg));
    } else if (p->auth.state < 2) {
        json_t *chal = NULL;
        shp_status_t st =
            p->auth.state == 0
                ? shp_auth_server_hello(&p->auth, &am->key, msg, &chal, &why)
                : shp_auth_server_verify(&p->auth, &am->key, msg, &why);
        if (st != SHP_OK) {
            am->stats.auth_failures++;
            shp_error_id("AM0101", "refusing %s (%s %s): %s", conn->peer,
                         p->auth.role[0] ? p->auth.role : "peer", p->auth.name,
                         why);
            shp_am_send(p, shp_ctl_reply("auth_failed", 0, st, why));
            shp_conn_push(conn);
            shp_conn_close(conn, st);
        } else if (chal) {
            shp_am_send(p, chal);
        }
        if (p->auth.state >= 2) { /* proved: full-sized frames from now */
            p->conn.max_frame = SHP_CTL_MAX_FRAME;
            /* and sealed both ways (protocol/ctl.h) */
            shp_ctl_seal(conn, p->auth.session.s2c, p->auth.session.c2s);
        }
    } else if (p->role == AM_PEER_MANAGER) {
        shp_am_ha_peer_message(am, p, msg);
    } else if (!strcmp(shp_ctl_type(msg), "am_refused")) {
        shp_am_ha_refused(am, p, msg); /* a node: this manager is stale */
        shp_conn_close(conn, SHP_ERR_STALE_EPOCH);
    } else if (p->role == AM_PEER_NEW) {
        am_peer_register(am, p, msg);
    } else if (p->role == AM_PEER_AN) {
        shp_am_an_message(am, p, msg);
    } else {
        shp_am_sharpd_message(am, p, msg);
    }
    json_decref(msg);
}

static void am_peer_close(shp_conn_t *conn, shp_status_t reason)
{
    shp_am_peer_t *p = conn->arg;
    shp_am_t *am = p->am;
    ev_timer_stop(am->loop, &p->auth_timer);
    if (conn->overflowed) {
        am->stats.queue_overflows++;
        shp_warn_sparse(1000,
                        "closed %s (%s %s): it did not read what the manager "
                        "sent it",
                        conn->peer, p->auth.role[0] ? p->auth.role : "peer",
                        p->auth.name);
    }
    for (shp_am_peer_t **pp = &am->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    /* requests it was waiting for lose their requester */
    shp_am_group_t *g, *tmp;
    HASH_ITER(hh, am->groups, g, tmp)
    {
        if (g->req_peer == p)
            g->req_peer = NULL;
    }
    shp_am_sharpd_forget(am, p); /* its requests waiting, if any */
    if (p->role == AM_PEER_AN && am->ans[p->an].peer == p) {
        shp_am_an_lost(am, p->an, shp_status_str(reason));
    } else if (p->role == AM_PEER_SHARPD && reason != SHP_ERR_EXISTS) {
        shp_am_sharpd_hold(am, p->host, reason);
    }
    free(p);
}

static const shp_conn_ops_t am_peer_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = am_peer_frame,
    .on_close = am_peer_close,
    .on_idle = shp_ctl_on_idle,
};

static shp_am_peer_t *am_peer_new(shp_am_t *am, int fd, am_role_t role)
{
    shp_am_peer_t *p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        return NULL;
    }
    p->am = am;
    p->role = role;
    p->an = -1;
    /* until a TCP peer proves the cluster secret, only small frames */
    shp_conn_init(&p->conn, am->loop, &am_peer_ops, p,
                  role == AM_PEER_ADMIN ? SHP_CTL_MAX_FRAME
                                        : SHP_CTL_PREAUTH_MAX_FRAME);
    if (shp_conn_open_fd(&p->conn, fd) != SHP_OK) {
        free(p);
        return NULL;
    }
    p->next = am->peers;
    am->peers = p;
    return p;
}

/* A TCP peer that has not proved the cluster secret and registered in
 * auth_timeout: it holds a descriptor and a connection (and, proved, a
 * place among max_peers) for nothing (answering pings keeps a connection
 * alive, not this). */
static void am_auth_expired(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_peer_t *p = w->data;
    (void)loop;
    (void)revents;
    p->am->stats.auth_failures++;
    shp_warn_sparse(1000,
                    "disconnecting %s: no proof of the cluster secret "
                    "and registration within auth_timeout",
                    p->conn.peer);
    shp_conn_close(&p->conn, SHP_ERR_TIMED_OUT);
}

/* the address part of "ip:port" (its length) */
static size_t am_source_len(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    return colon ? (size_t)(colon - addr) : strlen(addr);
}

/* TCP peers that have not registered are bounded (each a descriptor, a
 * connection and a frame of at most SHP_CTL_PREAUTH_MAX_FRAME): from one
 * address at most source_max_unauth (one more is refused: 0 here), of
 * everyone max_unauth (the oldest, nearest its auth_timeout, is closed to
 * make room).  p is the new one, already listed (first). */
static int am_unauth_admit(shp_am_t *am, shp_am_peer_t *p)
{
    size_t n = am_source_len(p->conn.peer);
    unsigned same = 0, all = 0;
    shp_am_peer_t *oldest = NULL;
    for (shp_am_peer_t *q = p->next; q; q = q->next) {
        if (!SHP_AM_PEER_UNREGISTERED(q) || !shp_conn_is_open(&q->conn))
            continue;
        all++;
        oldest = q; /* the list is newest first */
        same += am_source_len(q->conn.peer) == n &&
                !strncmp(q->conn.peer, p->conn.peer, n);
    }
    if (am->cfg.source_max_unauth > 0 && same >= am->cfg.source_max_unauth) {
        am->stats.unauth_refused++;
        shp_warn_sparse(1000,
                        "refusing a connection from %s: %u of its connections "
                        "have not registered yet (source_max_unauth)",
                        p->conn.peer, same);
        return 0;
    }
    if (am->cfg.max_unauth > 0 && all >= am->cfg.max_unauth && oldest) {
        am->stats.unauth_evicted++;
        shp_warn_sparse(1000,
                        "closing %s, not registered yet: %u connections have "
                        "not registered (max_unauth)",
                        oldest->conn.peer, all);
        shp_conn_close(&oldest->conn, SHP_ERR_QUOTA); /* frees it */
    }
    return 1;
}

static void am_on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    (void)peer;
    shp_am_t *am = l->arg;
    shp_am_peer_t *p = am_peer_new(am, fd, AM_PEER_NEW);
    if (p && !am_unauth_admit(am, p)) {
        shp_conn_close(&p->conn, SHP_ERR_QUOTA); /* frees it */
        return;
    }
    if (!p)
        return;
    shp_conn_set_keepalive(&p->conn, (double)am->cfg.keepalive_ms / 1000.0, 3);
    if (am->cfg.auth_timeout_ms > 0) {
        ev_timer_init(&p->auth_timer, am_auth_expired,
                      (double)am->cfg.auth_timeout_ms / 1000.0, 0.);
        p->auth_timer.data = p;
        ev_timer_start(am->loop, &p->auth_timer);
    }
}

static void am_on_admin_accept(shp_listener_t *l, int fd,
                               const shp_sockaddr_t *peer)
{
    (void)peer;
    shp_am_t *am = l->arg;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        close(fd);
        return;
    }
    shp_am_peer_t *p = am_peer_new(am, fd, AM_PEER_ADMIN);
    if (p) {
        p->uid = cred.uid;
        p->gid = cred.gid;
    }
}

/* The control listener and the admin socket (when configured). */
shp_status_t shp_am_listen(shp_am_t *am, char *err, size_t errlen)
{
    shp_status_t st;
    shp_sockaddr_t addr;
    if ((st = shp_sockaddr_parse(am->cfg.listen, 0, &addr)) ||
        (st = shp_listener_start(&am->listener, am->loop, &addr, am_on_accept,
                                 am))) {
        snprintf(err, errlen, "cannot listen on %s: %s", am->cfg.listen,
                 shp_status_str(st));
        return st;
    }
    shp_sockaddr_str(&am->listener.addr, am->listen_addr,
                     sizeof(am->listen_addr));
    if (am->cfg.admin_socket[0]) {
        if ((st = shp_sockaddr_parse(am->cfg.admin_socket, 0, &addr)) ||
            (st = shp_listener_start(&am->admin, am->loop, &addr,
                                     am_on_admin_accept, am))) {
            snprintf(err, errlen, "cannot listen on %s: %s",
                     am->cfg.admin_socket, shp_status_str(st));
            shp_listener_stop(&am->listener);
            return st;
        }
        /* access is checked per request (SO_PEERCRED); the socket itself
         * is open to the admin group */
        chmod(am->cfg.admin_socket, 0660);
    }
    return SHP_OK;
}

void shp_am_unlisten(shp_am_t *am)
{
    shp_listener_stop(&am->listener);
    if (am->cfg.admin_socket[0])
        shp_listener_stop(&am->admin);
}

/* Every peer goes, with fault handling off (shutdown). */
void shp_am_peers_close(shp_am_t *am)
{
    while (am->peers) {
        shp_am_peer_t *p = am->peers;
        p->role = AM_PEER_NEW; /* no fault handling on shutdown */
        shp_conn_push(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_CANCELED);
    }
}
