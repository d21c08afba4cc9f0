/* The tcp transport: reliable, ordered connections, framed by wire headers,
 * on shp_conn (batched reads, write queue flushed before the loop sleeps). */
#include "core/conn.h"
#include "core/log.h"
#include "transport/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    shp_tp_ep_t base;
    shp_conn_t conn;
} tcp_ep_t;

typedef struct {
    shp_listener_t listener;
    int listening;
    shp_tp_accept_cb_t on_accept;
    char listen_addr[64];
} tcp_priv_t;

#define tcp_ep_of(_conn)                                                       \
    ((tcp_ep_t *)((char *)(_conn)-offsetof(tcp_ep_t, conn)))

/* The owner's rx_limit on the connection: a data path keeps its read
 * buffer between messages; a link limited to small messages reads into a
 * small one and keeps none (conn.h) */
static void tcp_ep_limits(tcp_ep_t *ep)
{
    size_t full = SHP_WIRE_HDR_LEN + (size_t)ep->base.tp->max_payload;

    ep->conn.max_frame = ep->base.rx_limit > 0 && ep->base.rx_limit < full
                             ? ep->base.rx_limit
                             : full;
    ep->conn.rbuf_keep = ep->base.rx_limit > 0      ? 0
                         : full > SHP_CONN_RBUF_MIN ? full
                                                    : SHP_CONN_RBUF_MIN;
}

static shp_status_t tcp_frame_len(shp_conn_t *conn, const void *buf,
                                  size_t avail, size_t *len)
{
    tcp_ep_t *ep = tcp_ep_of(conn);
    shp_status_t status;

    status = shp_wire_frame_len(buf, avail, ep->base.tp->max_payload, len);
    if (status == SHP_OK && ep->base.rx_limit > 0 && *len > ep->base.rx_limit) {
        status = SHP_ERR_TOO_LARGE; /* more than the owner takes now */
    }
    if (status < 0) {
        ep->base.tp->stats.malformed++;
    }
    return status;
}

static void tcp_on_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    tcp_ep_t *ep = tcp_ep_of(conn);
    shp_status_t status;

    status = shp_tp_deliver(&ep->base, frame, len);
    if (status != SHP_OK) {
        shp_conn_close(conn, status);
    }
    tcp_ep_limits(ep);
}

static void tcp_on_connect(shp_conn_t *conn)
{
    tcp_ep_t *ep = tcp_ep_of(conn);

    if (ep->base.cbs->on_connect != NULL) {
        ep->base.cbs->on_connect(&ep->base);
    }
}

static void tcp_on_close(shp_conn_t *conn, shp_status_t reason)
{
    tcp_ep_t *ep = tcp_ep_of(conn);

    if (ep->base.cbs != NULL && ep->base.cbs->on_close != NULL) {
        ep->base.cbs->on_close(&ep->base, reason);
    }
    free(ep);
}

static const shp_conn_ops_t tcp_conn_ops = {
    .frame_len = tcp_frame_len,
    .on_frame = tcp_on_frame,
    .on_connect = tcp_on_connect,
    .on_close = tcp_on_close,
};

static tcp_ep_t *tcp_ep_new(shp_tp_t *tp)
{
    tcp_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL) {
        return NULL;
    }
    ep->base.tp = tp;
    shp_conn_init(&ep->conn, tp->loop, &tcp_conn_ops, ep,
                  SHP_WIRE_HDR_LEN + (size_t)tp->max_payload);
    tcp_ep_limits(ep); /* a data path: its buffers kept, as before */
    return ep;
}

static shp_status_t tcp_init(shp_tp_t *tp)
{
    tp->priv = calloc(1, sizeof(tcp_priv_t));
    return tp->priv ? SHP_OK : SHP_ERR_NO_MEMORY;
}

static void tcp_cleanup(shp_tp_t *tp)
{
    tcp_priv_t *priv = tp->priv;

    if (priv != NULL && priv->listening) {
        shp_listener_stop(&priv->listener);
    }
    free(priv);
    tp->priv = NULL;
}

/* A data link whose peer went silent (a link cut, a host that froze:
 * nothing closes the connection) fails within about TCP_DEAD_MS: data not
 * acknowledged for that long, or an idle link whose keepalive probes go
 * unanswered, close it (TCP_USER_TIMEOUT and the kernel's keepalive: no
 * CPU of the process is needed, the kernel answers for a live peer).
 * Without it the kernel retransmits for many minutes and an operation
 * waits for a result that cannot come (the control plane may still be
 * up: a data address cut alone is never noticed by the manager). */
#define TCP_DEAD_MS 20000
#define TCP_KA_IDLE_S 5
#define TCP_KA_INTVL_S 2
#define TCP_KA_CNT 5

static void tcp_dead_after(int fd)
{
    int one = 1, idle = TCP_KA_IDLE_S, intvl = TCP_KA_INTVL_S, cnt = TCP_KA_CNT;
    unsigned dead = TCP_DEAD_MS;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &dead, sizeof(dead));
}

static void tcp_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    shp_tp_t *tp = l->arg;
    tcp_priv_t *priv = tp->priv;
    tcp_ep_t *ep = tcp_ep_new(tp);

    (void)peer;
    if (ep == NULL || shp_conn_open_fd(&ep->conn, fd) != SHP_OK) {
        shp_warn_sparse(1000, "cannot accept a connection: out of memory");
        free(ep);
        close(fd);
        return;
    }
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", ep->conn.peer);
    tcp_dead_after(fd);
    priv->on_accept(tp, &ep->base);
    if (ep->base.cbs == NULL) { /* refused by the owner */
        shp_conn_close(&ep->conn, SHP_ERR_CANCELED);
        return;
    }
    tcp_ep_limits(ep);
}

static shp_status_t tcp_listen(shp_tp_t *tp, const char *addr,
                               shp_tp_accept_cb_t on_accept)
{
    tcp_priv_t *priv = tp->priv;
    shp_sockaddr_t sa;
    shp_status_t status;

    status = shp_sockaddr_parse(addr, 0, &sa);
    if (status != SHP_OK) {
        return status;
    }
    status = shp_listener_start(&priv->listener, tp->loop, &sa, tcp_accept, tp);
    if (status != SHP_OK) {
        return status;
    }
    priv->listening = 1;
    priv->on_accept = on_accept;
    shp_sockaddr_str(&priv->listener.addr, priv->listen_addr,
                     sizeof(priv->listen_addr));
    return SHP_OK;
}

static const char *tcp_listen_addr(shp_tp_t *tp)
{
    tcp_priv_t *priv = tp->priv;

    return priv->listening ? priv->listen_addr : NULL;
}

static shp_status_t tcp_connect(shp_tp_t *tp, const char *addr,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **ep_out)
{
    shp_sockaddr_t sa, local, *bind_addr = NULL;
    tcp_ep_t *ep;
    shp_status_t status;

    status = shp_sockaddr_parse(addr, 0, &sa);
    if (status != SHP_OK) {
        return status;
    }
    if (tp->local_ip[0] != '\0') {
        char buf[80];
        snprintf(buf, sizeof(buf), "%s:0", tp->local_ip);
        if (shp_sockaddr_parse(buf, 0, &local) == SHP_OK &&
            local.ss.ss_family == sa.ss.ss_family) {
            bind_addr = &local;
        }
    }
    ep = tcp_ep_new(tp);
    if (ep == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    ep->base.cbs = cbs;
    ep->base.arg = arg;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", addr);
    status = shp_conn_connect(&ep->conn, &sa, bind_addr);
    if (status != SHP_OK) {
        free(ep);
        return status;
    }
    tcp_dead_after(ep->conn.fd);
    *ep_out = &ep->base;
    return SHP_OK;
}

static shp_status_t tcp_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    tcp_ep_t *ep = (tcp_ep_t *)base;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    shp_status_t status;

    shp_wire_hdr_pack(hdr, raw);
    status =
        shp_conn_send(&ep->conn, raw, sizeof(raw), payload, hdr->payload_len);
    if (status == SHP_OK) {
        base->tp->stats.msgs_out++;
        base->tp->stats.bytes_out += SHP_WIRE_HDR_LEN + hdr->payload_len;
    }
    return status;
}

static void tcp_close(shp_tp_ep_t *base)
{
    tcp_ep_t *ep = (tcp_ep_t *)base;

    /* what was queued (a last error, a leave) goes out first, if the
     * socket takes it now; push, not flush: a failed write must not close
     * (and on_close free ep) before the close below */
    shp_conn_push(&ep->conn);
    shp_conn_close(&ep->conn, SHP_ERR_CANCELED);
}

static shp_status_t tcp_quiet(shp_tp_ep_t *base, int on)
{
    return shp_conn_set_quiet(&((tcp_ep_t *)base)->conn, on);
}

static void tcp_pull(shp_tp_ep_t *base)
{
    shp_conn_pull(&((tcp_ep_t *)base)->conn);
}

const shp_tp_ops_t shp_tp_tcp_ops = {
    .name = "tcp",
    .init = tcp_init,
    .cleanup = tcp_cleanup,
    .listen = tcp_listen,
    .listen_addr = tcp_listen_addr,
    .connect = tcp_connect,
    .send = tcp_send,
    .close = tcp_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
    .dump = shp_tp_stub_dump,
    .quiet = tcp_quiet,
    .pull = tcp_pull,
};
