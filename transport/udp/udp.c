/*
 * The udp transport: IPv4 multicast datagrams, the UD-multicast analogue,
 * used to distribute results.  Unreliable: the protocol above recovers lost
 * results over a reliable connection.  Works on loopback (multicast sent
 * through 127.x with IP_MULTICAST_LOOP) and across network namespaces.
 * For tests, tp->mcast_drop drops that fraction of received datagrams.
 */
#include "core/log.h"
#include "core/net.h"
#include "transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHP_UDP_MAX_DGRAM 65507
/* datagrams taken by one recvmmsg: fewer than this means the socket is
 * empty, which saves the call that would only say EAGAIN (a member
 * usually has one result waiting when it wakes) */
#define SHP_UDP_RX_BATCH 2

typedef struct {
    shp_tp_ep_t base;
    int fd;
    ev_io io;
    int in_cb;
    int closing;
    int is_sender;
    uint8_t *buf;
} udp_ep_t;

static shp_status_t udp_init(shp_tp_t *tp)
{
    if (tp->max_payload > SHP_UDP_MAX_DGRAM - SHP_WIRE_HDR_LEN) {
        tp->max_payload = SHP_UDP_MAX_DGRAM - SHP_WIRE_HDR_LEN;
    }
    return SHP_OK;
}

/* "group:port" -> sockaddr_in; the group must be IPv4 multicast. */
static shp_status_t udp_group(const char *group, struct sockaddr_in *sin)
{
    shp_sockaddr_t sa;
    shp_status_t status = shp_sockaddr_parse(group, 0, &sa);

    if (status != SHP_OK) {
        return status;
    }
    if (sa.ss.ss_family != AF_INET) {
        return SHP_ERR_UNSUPPORTED;
    }
    memcpy(sin, &sa.ss, sizeof(*sin));
    if (!IN_MULTICAST(ntohl(sin->sin_addr.s_addr))) {
        return SHP_ERR_INVALID_PARAM;
    }
    return SHP_OK;
}

static struct in_addr udp_local(const shp_tp_t *tp)
{
    struct in_addr a;

    if (tp->local_ip[0] == '\0' || inet_pton(AF_INET, tp->local_ip, &a) != 1) {
        a.s_addr = htonl(INADDR_LOOPBACK);
    }
    return a;
}

static void udp_finish_close(udp_ep_t *ep, shp_status_t reason)
{
    if (ep->base.cbs != NULL && ep->base.cbs->on_close != NULL) {
        ep->base.cbs->on_close(&ep->base, reason);
    }
    free(ep->buf);
    free(ep);
}

static void udp_close(shp_tp_ep_t *base)
{
    udp_ep_t *ep = (udp_ep_t *)base;

    if (ep->closing) {
        return;
    }
    ep->closing = 1;
    if (!ep->is_sender) {
        ev_io_stop(base->tp->loop, &ep->io);
    }
    close(ep->fd);
    ep->fd = -1;
    if (!ep->in_cb) {
        udp_finish_close(ep, SHP_ERR_CANCELED);
    }
}

static void udp_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    udp_ep_t *ep = w->data;
    shp_tp_t *tp = ep->base.tp;
    ssize_t n;
    int i;

    (void)loop;
    (void)revents;
    struct mmsghdr mm[SHP_UDP_RX_BATCH];
    struct iovec iov[SHP_UDP_RX_BATCH];
    memset(mm, 0, sizeof(mm));
    for (int k = 0; k < SHP_UDP_RX_BATCH; k++) {
        iov[k].iov_base = ep->buf + (size_t)k * SHP_UDP_MAX_DGRAM;
        iov[k].iov_len = SHP_UDP_MAX_DGRAM;
        mm[k].msg_hdr.msg_iov = &iov[k];
        mm[k].msg_hdr.msg_iovlen = 1;
    }
    ep->in_cb = 1;
    for (i = 0; i < 32 && !ep->closing; i++) { /* a batch per wake-up */
        n = recvmmsg(ep->fd, mm, SHP_UDP_RX_BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                errno != EINTR) {
                shp_warn_sparse(1000, "multicast receive: %m");
            }
            break;
        }
        for (int k = 0; k < n && !ep->closing; k++) {
            if (shp_tp_drop_datagram(tp)) {
                continue;
            }
            /* a malformed datagram is dropped (counted), never fatal */
            (void)shp_tp_deliver(&ep->base, iov[k].iov_base, mm[k].msg_len);
        }
        if (n < SHP_UDP_RX_BATCH) {
            break; /* the socket is empty */
        }
    }
    ep->in_cb = 0;
    if (ep->closing) {
        udp_finish_close(ep, SHP_ERR_CANCELED);
    }
}

/* An endpoint around a bound socket; closes the socket on failure. */
static udp_ep_t *udp_ep_new(shp_tp_t *tp, int fd, const char *group,
                            const shp_tp_ep_cbs_t *cbs, void *arg,
                            int is_sender)
{
    udp_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL ||
        (!is_sender && (ep->buf = malloc((size_t)SHP_UDP_RX_BATCH *
                                         SHP_UDP_MAX_DGRAM)) == NULL)) {
        free(ep);
        close(fd);
        return NULL;
    }
    ep->base.tp = tp;
    ep->base.cbs = cbs;
    ep->base.arg = arg;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "mcast %s", group);
    ep->fd = fd;
    ep->is_sender = is_sender;
    return ep;
}

static shp_status_t udp_mcast_join(shp_tp_t *tp, const char *group,
                                   const shp_tp_ep_cbs_t *cbs, void *arg,
                                   shp_tp_ep_t **ep_out)
{
    struct sockaddr_in sin;
    struct ip_mreq mreq;
    udp_ep_t *ep;
    shp_status_t status;
    int one = 1, zero = 0, fd, rcvbuf = 4 << 20;

    status = udp_group(group, &sin);
    if (status != SHP_OK) {
        return status;
    }
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return shp_status_from_errno(errno);
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    /* only the groups this socket joined, not every group of the host */
    (void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
    mreq.imr_multiaddr = sin.sin_addr;
    mreq.imr_interface = udp_local(tp);
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) <
            0) {
        status = shp_status_from_errno(errno);
        shp_debug("joining multicast %s: %m", group);
        close(fd);
        return status;
    }
    ep = udp_ep_new(tp, fd, group, cbs, arg, 0);
    if (ep == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    ev_io_init(&ep->io, udp_read_cb, fd, EV_READ);
    ep->io.data = ep;
    ev_io_start(tp->loop, &ep->io);
    *ep_out = &ep->base;
    return SHP_OK;
}

static shp_status_t udp_mcast_sender(shp_tp_t *tp, const char *group,
                                     const shp_tp_ep_cbs_t *cbs, void *arg,
                                     shp_tp_ep_t **ep_out)
{
    struct sockaddr_in sin, local;
    unsigned char loop_on = 1, ttl = 1;
    struct in_addr ifaddr = udp_local(tp);
    udp_ep_t *ep;
    shp_status_t status;
    int fd, sndbuf = 4 << 20;

    status = udp_group(group, &sin);
    if (status != SHP_OK) {
        return status;
    }
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return shp_status_from_errno(errno);
    }
    memset(&local, 0, sizeof(local));
    local.sin_family = AF_INET;
    local.sin_addr = ifaddr;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    if (bind(fd, (struct sockaddr *)&local, sizeof(local)) < 0 ||
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof(ifaddr)) <
            0 ||
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop_on,
                   sizeof(loop_on)) < 0 ||
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)) < 0 ||
        connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        status = shp_status_from_errno(errno);
        close(fd);
        return status;
    }
    ep = udp_ep_new(tp, fd, group, cbs, arg, 1);
    if (ep == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    *ep_out = &ep->base;
    return SHP_OK;
}

static shp_status_t udp_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    udp_ep_t *ep = (udp_ep_t *)base;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    struct iovec iov[2];
    ssize_t n;

    if (!ep->is_sender || ep->closing) {
        return ep->closing ? SHP_ERR_CLOSED : SHP_ERR_UNSUPPORTED;
    }
    if (hdr->payload_len > base->tp->max_payload) {
        return SHP_ERR_TOO_LARGE;
    }
    shp_wire_hdr_pack(hdr, raw);
    iov[0].iov_base = raw;
    iov[0].iov_len = sizeof(raw);
    iov[1].iov_base = (void *)payload;
    iov[1].iov_len = hdr->payload_len;
    n = writev(ep->fd, iov, hdr->payload_len ? 2 : 1);
    if (n < 0) {
        /* a full socket buffer loses the datagram like the network would;
         * receivers recover it */
        if (errno == EAGAIN || errno == ENOBUFS) {
            return SHP_OK;
        }
        return shp_status_from_errno(errno);
    }
    base->tp->stats.msgs_out++;
    base->tp->stats.bytes_out += (uint64_t)n;
    return SHP_OK;
}

const shp_tp_ops_t shp_tp_udp_ops = {
    .name = "udp",
    .init = udp_init,
    .cleanup = shp_tp_stub_cleanup, /* nothing held per provider */
    .listen = shp_tp_stub_listen,
    .listen_addr = shp_tp_stub_listen_addr,
    .connect = shp_tp_stub_ep,
    .send = udp_send,
    .close = udp_close,
    .mcast_join = udp_mcast_join,
    .mcast_sender = udp_mcast_sender,
    .dump = shp_tp_stub_dump,
    .quiet = shp_tp_stub_quiet,
    .pull = shp_tp_stub_pull,
};
