/*
 * The verbs transport: InfiniBand / RoCE through libibverbs and librdmacm.
 *
 *   connections   RC queue pairs set up with rdma_cm (listen / connect by
 *                 "ip:port", the IPoIB or RoCE address of the device)
 *   multicast     a UD queue pair joined with rdma_join_multicast(): the
 *                 receiver is attached by the join, the sender addresses
 *                 the group through the address handle the join returns
 *
 * Every endpoint has its own PD, CQ and completion channel; the channel's fd
 * and the rdma_cm event channel's fd are libev watchers (drain, re-arm,
 * drain again).  Buffers: one registered region per endpoint holding
 * VB_RECV receive slots (always posted) and VB_SEND send slots of VB_SLOT
 * bytes; a message is copied into free send slots (or queued while none is
 * free).  On RC a message longer than a slot goes in several sends, every
 * one but the last flagged "more", and is put back together on arrival (RC
 * keeps them in order): an endpoint registers half a megabyte whatever the
 * largest payload, where a slot per largest message would pin 64 KiB x 256
 * (16 MiB) per connection and take seconds to register on soft-RoCE.
 *
 * Flow control on RC is by credits, so that a sender never finds the
 * receive queue empty: each side grants the other VB_RECV - VB_RESERVE
 * sends in the rdma_cm private data of connect / accept (a connect without
 * it is rejected); every send is a SEND_WITH_IMM whose immediate value
 * returns the receives consumed since the last one.  A side that has nothing to send returns credits in a
 * zero-length message once VB_CREDIT_BATCH of them have piled up; those
 * land in the VB_RESERVE receives no grant covers (at most
 * (VB_RECV - VB_RESERVE) / VB_CREDIT_BATCH < VB_RESERVE of them can be
 * unread at a time).  Receiver-not-ready retry (rnr_retry 7) stays as a
 * backstop only: soft-RoCE was seen to stall on it under load, and its
 * waits are long at best.  A multicast message must fit
 * the path MTU (SHP_ERR_TOO_LARGE otherwise); datagrams have no credits.
 *
 * The provider's files (transport/verbs/verbs_int.h): verbs_ep.c, an
 * endpoint (its queue pair, buffers, credits, sends, completions, close);
 * verbs_cm.c, the rdma_cm events that make and end connections; this one,
 * the provider's ops.
 */
#include "transport/verbs/verbs_int.h"

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>

static shp_status_t verbs_init(shp_tp_t *tp)
{
    verbs_tp_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    v->ch = rdma_create_event_channel();
    if (v->ch == NULL) {
        free(v);
        return SHP_ERR_UNSUPPORTED; /* no RDMA stack on this machine */
    }
    shp_fd_set_nonblock(v->ch->fd);
    tp->priv = v;
    ev_io_init(&v->ch_w, shp_tp_verbs_ch_cb, v->ch->fd, EV_READ);
    v->ch_w.data = tp;
    ev_io_start(tp->loop, &v->ch_w);
    return SHP_OK;
}

static void verbs_cleanup(shp_tp_t *tp)
{
    verbs_tp_t *v = shp_tp_verbs_of(tp);
    if (v == NULL) {
        return;
    }
    while (v->eps != NULL) {
        verbs_ep_t *ep = v->eps;
        ep->close_reason = SHP_ERR_CANCELED;
        shp_tp_verbs_finish_close(ep);
    }
    if (v->listen_id != NULL) {
        rdma_destroy_id(v->listen_id);
    }
    ev_io_stop(tp->loop, &v->ch_w);
    rdma_destroy_event_channel(v->ch);
    free(v);
    tp->priv = NULL;
}

static shp_status_t verbs_listen(shp_tp_t *tp, const char *addr,
                                 shp_tp_accept_cb_t on_accept)
{
    verbs_tp_t *v = shp_tp_verbs_of(tp);
    shp_sockaddr_t sa;
    if (shp_sockaddr_parse(addr, 0, &sa) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (rdma_create_id(v->ch, &v->listen_id, NULL, RDMA_PS_TCP) != 0) {
        return shp_status_from_errno(errno);
    }
    if (rdma_bind_addr(v->listen_id, (struct sockaddr *)&sa.ss) != 0 ||
        rdma_listen(v->listen_id, 64) != 0) {
        shp_status_t st = shp_status_from_errno(errno);
        rdma_destroy_id(v->listen_id);
        v->listen_id = NULL;
        return st;
    }
    v->on_accept = on_accept;
    struct sockaddr *la = rdma_get_local_addr(v->listen_id);
    shp_sockaddr_t out = {.len = sizeof(struct sockaddr_in)};
    memcpy(&out.ss, la, sizeof(struct sockaddr_in));
    shp_sockaddr_str(&out, v->listen_addr, sizeof(v->listen_addr));
    return SHP_OK;
}

static const char *verbs_listen_addr(shp_tp_t *tp)
{
    return shp_tp_verbs_of(tp)->listen_id ? shp_tp_verbs_of(tp)->listen_addr
                                          : NULL;
}

/* an endpoint whose id resolves `addr` (from the local address if any) */
static shp_status_t verbs_start(shp_tp_t *tp, const char *addr, int ud,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **out)
{
    verbs_tp_t *v = shp_tp_verbs_of(tp);
    shp_sockaddr_t dst;
    struct sockaddr_in src = {.sin_family = AF_INET};
    int have_src = tp->local_ip[0] != '\0' &&
                   inet_pton(AF_INET, tp->local_ip, &src.sin_addr) == 1;
    if (shp_sockaddr_parse(addr, 1, &dst) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    verbs_ep_t *ep = shp_tp_verbs_ep_new(tp, cbs, arg);
    if (ep == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    ep->ud = ud;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", addr);
    memcpy(&ep->maddr, &dst.ss, sizeof(ep->maddr));
    if (rdma_create_id(v->ch, &ep->id, ep, ud ? RDMA_PS_UDP : RDMA_PS_TCP) !=
            0 ||
        rdma_resolve_addr(ep->id, have_src ? (struct sockaddr *)&src : NULL,
                          (struct sockaddr *)&dst.ss, VB_TIMEOUT_MS) != 0) {
        shp_status_t st = shp_status_from_errno(errno);
        shp_tp_verbs_unlink(ep);
        if (ep->id != NULL) {
            rdma_destroy_id(ep->id);
        }
        free(ep);
        return st;
    }
    *out = &ep->base;
    return SHP_OK;
}

static shp_status_t verbs_connect(shp_tp_t *tp, const char *addr,
                                  const shp_tp_ep_cbs_t *cbs, void *arg,
                                  shp_tp_ep_t **ep)
{
    return verbs_start(tp, addr, 0, cbs, arg, ep);
}

static shp_status_t verbs_mcast_join(shp_tp_t *tp, const char *group,
                                     const shp_tp_ep_cbs_t *cbs, void *arg,
                                     shp_tp_ep_t **ep)
{
    return verbs_start(tp, group, 1, cbs, arg, ep);
}

static shp_status_t verbs_mcast_sender(shp_tp_t *tp, const char *group,
                                       const shp_tp_ep_cbs_t *cbs, void *arg,
                                       shp_tp_ep_t **out)
{
    shp_status_t st = verbs_start(tp, group, 1, cbs, arg, out);
    if (st == SHP_OK) {
        ((verbs_ep_t *)*out)->sender = 1;
    }
    return st;
}

static shp_status_t verbs_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
                               const void *payload)
{
    verbs_ep_t *ep = (verbs_ep_t *)base;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    size_t len = SHP_WIRE_HDR_LEN + hdr->payload_len;

    if (ep->closed || ep->close_pending) {
        return SHP_ERR_CLOSED;
    }
    if (ep->ud && !ep->sender) {
        return SHP_ERR_UNSUPPORTED; /* a multicast receiver only receives */
    }
    if (len > shp_tp_verbs_msg_max(base->tp) ||
        (ep->ud && len > (ep->ud_max ? ep->ud_max : VB_SLOT))) {
        return SHP_ERR_TOO_LARGE;
    }
    shp_wire_hdr_pack(hdr, raw);
    base->tp->stats.msgs_out++;
    base->tp->stats.bytes_out += len;
    if (ep->queue == NULL && len <= VB_SLOT && shp_tp_verbs_can_post(ep)) {
        return shp_tp_verbs_post(ep, raw, sizeof(raw), payload,
                                 hdr->payload_len, 0);
    }
    /* not connected yet, no credit or slot, or longer than a slot: a copy
     * goes in the queue, which keeps the order */
    verbs_msg_t *m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    m->next = NULL;
    m->len = len;
    m->off = 0;
    ep->n_queued++;
    memcpy(m->data, raw, sizeof(raw));
    if (hdr->payload_len > 0) {
        memcpy(m->data + sizeof(raw), payload, hdr->payload_len);
    }
    if (ep->queue_tail != NULL) {
        ep->queue_tail->next = m;
    } else {
        ep->queue = m;
    }
    ep->queue_tail = m;
    return shp_tp_verbs_drain_queue(ep);
}

static void verbs_dump(shp_tp_t *tp)
{
    for (verbs_ep_t *ep = shp_tp_verbs_of(tp)->eps; ep != NULL; ep = ep->next) {
        struct ibv_qp_attr qa = {0};
        struct ibv_qp_init_attr qi;
        unsigned queued = 0;
        for (verbs_msg_t *m = ep->queue; m != NULL; m = m->next) {
            queued++;
        }
        if (ep->id == NULL || ep->id->qp == NULL ||
            ibv_query_qp(ep->id->qp, &qa, IBV_QP_STATE, &qi) != 0) {
            qa.qp_state = IBV_QPS_RESET;
        }
        shp_info("verbs %s %s%s: qp state %d, %d of %d send slots free, "
                 "%u queued (%" PRIu64 " ever), %d credits, %d to return, "
                 "%" PRIu64 " sent, %" PRIu64 " received, %" PRIu64
                 " cq events (last %.3f s ago)",
                 ep->base.peer,
                 ep->ud ? (ep->sender ? "mcast-tx" : "mcast-rx")
                        : (ep->accepted ? "accepted" : "rc"),
                 ep->ready ? "" : " (not ready)", (int)qa.qp_state, ep->nfree,
                 VB_SEND, queued, ep->n_queued, ep->tx_credits,
                 ep->rx_to_return, ep->n_sent, ep->n_recvd, ep->n_events,
                 ep->n_events
                     ? (double)(shp_time_ns() - ep->last_event_ns) / 1e9
                     : 0.0);
    }
}

static void verbs_close(shp_tp_ep_t *base)
{
    shp_tp_verbs_fail((verbs_ep_t *)base, SHP_ERR_CANCELED);
}

const shp_tp_ops_t shp_tp_verbs_ops = {
    .name = "verbs",
    .init = verbs_init,
    .cleanup = verbs_cleanup,
    .listen = verbs_listen,
    .listen_addr = verbs_listen_addr,
    .connect = verbs_connect,
    .send = verbs_send,
    .close = verbs_close,
    .mcast_join = verbs_mcast_join,
    .mcast_sender = verbs_mcast_sender,
    .dump = verbs_dump,
    .quiet = shp_tp_stub_quiet,
    .pull = shp_tp_stub_pull,
};
