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
 */
#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>

#define VB_RECV 64
#define VB_SEND 64
#define VB_SLOT 4096 /* bytes per RC send; also the largest UD message */
#define VB_GRH 40    /* UD receives start with the global route header */
#define VB_TIMEOUT_MS 5000
#define VB_RESERVE 4 /* receives for credit-only messages */
#define VB_CREDIT_BATCH (VB_RECV / 4)
#define VB_WR_CREDIT UINT64_MAX /* wr_id of a credit-only send */
/* the immediate value of an RC send */
#define VB_IMM_CREDITS 0xffffu  /* receives returned */
#define VB_IMM_ONLY (1u << 30)  /* credits only: no data */
#define VB_IMM_MORE (1u << 31)  /* the message goes on in the next send */
#define VB_CM_MAGIC 0x53485631u /* "SHV1": the private data is ours */

/* credit-only messages fit the receives no grant covers (see above) */
_Static_assert((VB_RECV - VB_RESERVE) / VB_CREDIT_BATCH < VB_RESERVE,
               "too few reserved receives");

/* rdma_cm private data of connect and accept, network order */
typedef struct {
    uint32_t magic;
    uint32_t credits; /* messages the sender of this may receive */
} verbs_cm_priv_t;

typedef struct verbs_msg {
    struct verbs_msg *next;
    size_t len, off; /* off: bytes already posted */
    uint8_t data[];
} verbs_msg_t;

typedef struct verbs_ep {
    shp_tp_ep_t base;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *bufs;
    size_t slot; /* bytes per slot */
    int free_slots[VB_SEND], nfree;
    verbs_msg_t *queue, *queue_tail; /* waiting for a send slot */
    ev_io cq_w;
    int ud, sender, accepted, ready, in_cb, close_pending, closed;
    shp_status_t close_reason;
    struct ibv_ah *ah;
    uint32_t remote_qpn, remote_qkey;
    size_t ud_max; /* largest UD message (path MTU) */
    struct sockaddr_storage maddr;
    uint8_t *rx_msg; /* a message arriving in several sends */
    size_t rx_len;
    int tx_credits;      /* sends the peer can take now */
    int rx_to_return;    /* receives consumed, not yet returned */
    int credit_inflight; /* credit-only sends not completed */
    uint64_t n_events, n_sent, n_recvd, n_queued; /* for the dump */
    uint64_t last_event_ns;
    struct verbs_ep *next;
} verbs_ep_t;

typedef struct verbs_tp {
    struct rdma_event_channel *ch;
    ev_io ch_w;
    struct rdma_cm_id *listen_id;
    shp_tp_accept_cb_t on_accept;
    char listen_addr[64];
    verbs_ep_t *eps;
} verbs_tp_t;

static verbs_tp_t *verbs_of(shp_tp_t *tp)
{
    return tp->priv;
}

static size_t verbs_msg_max(shp_tp_t *tp)
{
    return SHP_WIRE_HDR_LEN + tp->max_payload;
}

static void verbs_finish_close(verbs_ep_t *ep);

/* Endpoints ------------------------------------------------------------------ */

static verbs_ep_t *verbs_ep_new(shp_tp_t *tp, const shp_tp_ep_cbs_t *cbs,
                                void *arg)
{
    verbs_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return NULL;
    }
    ep->base.tp = tp;
    ep->base.cbs = cbs;
    ep->base.arg = arg;
    ep->next = verbs_of(tp)->eps;
    verbs_of(tp)->eps = ep;
    return ep;
}

static void verbs_unlink(verbs_ep_t *ep)
{
    verbs_tp_t *v = verbs_of(ep->base.tp);
    for (verbs_ep_t **pp = &v->eps; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
}

static int verbs_post_recv(verbs_ep_t *ep, int i)
{
    struct ibv_sge sge = {(uintptr_t)(ep->bufs + (size_t)i * ep->slot),
                          (uint32_t)ep->slot, ep->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i,
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;
    return ibv_post_recv(ep->id->qp, &wr, &bad);
}

static void verbs_cq_cb(struct ev_loop *loop, ev_io *w, int revents);

/* PD, CQ on a completion channel, QP, registered slots, receives posted */
static shp_status_t verbs_setup_qp(verbs_ep_t *ep, struct rdma_cm_id *id,
                                   int ud)
{
    shp_tp_t *tp = ep->base.tp;
    struct ibv_qp_init_attr qa;

    ep->id = id;
    ep->ud = ud;
    ep->slot = VB_SLOT + (ud ? VB_GRH : 0);
    ep->pd = ibv_alloc_pd(id->verbs);
    ep->cc = ep->pd ? ibv_create_comp_channel(id->verbs) : NULL;
    ep->cq = ep->cc ? ibv_create_cq(id->verbs, VB_RECV + VB_SEND + VB_RESERVE,
                                    ep, ep->cc, 0)
                    : NULL;
    if (ep->cq == NULL || ibv_req_notify_cq(ep->cq, 0) != 0) {
        return SHP_ERR_NO_RESOURCE;
    }
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = ep->cq;
    qa.recv_cq = ep->cq;
    qa.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC;
    qa.cap.max_send_wr = VB_SEND + VB_RESERVE;
    qa.cap.max_recv_wr = VB_RECV;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, ep->pd, &qa) != 0) {
        return shp_status_from_errno(errno);
    }
    size_t bytes = (size_t)(VB_RECV + VB_SEND) * ep->slot;
    if (posix_memalign((void **)&ep->bufs, 4096, bytes) != 0) {
        return SHP_ERR_NO_MEMORY;
    }
    ep->mr = ibv_reg_mr(ep->pd, ep->bufs, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (ep->mr == NULL) {
        return SHP_ERR_NO_RESOURCE;
    }
    for (int i = 0; i < VB_RECV; i++) {
        if (verbs_post_recv(ep, i) != 0) {
            return SHP_ERR_NO_RESOURCE;
        }
    }
    for (int i = 0; i < VB_SEND; i++) {
        ep->free_slots[ep->nfree++] = VB_RECV + i;
    }
    shp_fd_set_nonblock(ep->cc->fd);
    ev_io_init(&ep->cq_w, verbs_cq_cb, ep->cc->fd, EV_READ);
    ep->cq_w.data = ep;
    ev_io_start(tp->loop, &ep->cq_w);
    if (ud) {
        struct ibv_port_attr pa;
        ep->ud_max = ibv_query_port(id->verbs, id->port_num, &pa) == 0
                         ? (size_t)128 << pa.active_mtu
                         : 1024;
        if (ep->ud_max > VB_SLOT) {
            ep->ud_max = VB_SLOT;
        }
    }
    return SHP_OK;
}

static int verbs_can_post(const verbs_ep_t *ep)
{
    return ep->ready && ep->nfree > 0 && (ep->ud || ep->tx_credits > 0);
}

/* Post a + b (at most a slot) from a free slot; the caller checked
 * verbs_can_post().  `more`: the message goes on in the next send. */
static shp_status_t verbs_post(verbs_ep_t *ep, const void *a, size_t alen,
                               const void *b, size_t blen, int more)
{
    int i = ep->free_slots[--ep->nfree];
    uint8_t *slot = ep->bufs + (size_t)i * ep->slot;
    memcpy(slot, a, alen);
    if (blen > 0) {
        memcpy(slot + alen, b, blen);
    }
    struct ibv_sge sge = {(uintptr_t)slot, (uint32_t)(alen + blen),
                          ep->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ep->ud) {
        wr.wr.ud.ah = ep->ah;
        wr.wr.ud.remote_qpn = ep->remote_qpn;
        wr.wr.ud.remote_qkey = ep->remote_qkey;
    } else {
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data =
            htonl((uint32_t)ep->rx_to_return | (more ? VB_IMM_MORE : 0));
    }
    if (ibv_post_send(ep->id->qp, &wr, &bad) != 0) {
        ep->free_slots[ep->nfree++] = i;
        return SHP_ERR_IO;
    }
    if (!ep->ud) {
        ep->tx_credits--;
        ep->rx_to_return = 0;
    }
    return SHP_OK;
}

/* Return credits in a message of their own when nothing carried them. */
static shp_status_t verbs_return_credits(verbs_ep_t *ep)
{
    struct ibv_send_wr wr = {.wr_id = VB_WR_CREDIT,
                             .num_sge = 0,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ep->ud || !ep->ready || ep->rx_to_return < VB_CREDIT_BATCH ||
        ep->credit_inflight >= VB_RESERVE) {
        return SHP_OK; /* a completion will bring us back */
    }
    wr.imm_data = htonl((uint32_t)ep->rx_to_return | VB_IMM_ONLY);
    if (ibv_post_send(ep->id->qp, &wr, &bad) != 0) {
        return SHP_ERR_IO;
    }
    ep->rx_to_return = 0;
    ep->credit_inflight++;
    return SHP_OK;
}

/* Post what is queued, a slot at a time, while credits and slots last. */
static shp_status_t verbs_drain_queue(verbs_ep_t *ep)
{
    while (ep->queue != NULL && verbs_can_post(ep)) {
        verbs_msg_t *m = ep->queue;
        size_t n = m->len - m->off;
        int more = !ep->ud && n > VB_SLOT;
        if (more) {
            n = VB_SLOT;
        }
        shp_status_t st = verbs_post(ep, m->data + m->off, n, NULL, 0, more);
        if (st != SHP_OK) {
            return st;
        }
        m->off += n;
        if (m->off == m->len) {
            ep->queue = m->next;
            if (ep->queue == NULL) {
                ep->queue_tail = NULL;
            }
            free(m);
        }
    }
    return SHP_OK;
}

static void verbs_fail(verbs_ep_t *ep, shp_status_t why)
{
    if (ep->closed) {
        return;
    }
    ep->close_reason = why;
    if (ep->in_cb) {
        ep->close_pending = 1;
    } else {
        verbs_finish_close(ep);
    }
}

/* One RC receive: a whole message, or a piece of one (`more`: not the
 * last).  Pieces gather in rx_msg. */
static shp_status_t verbs_recv_rc(verbs_ep_t *ep, const uint8_t *m, size_t len,
                                  int more)
{
    size_t max = verbs_msg_max(ep->base.tp);
    ep->n_recvd += !more;
    if (ep->rx_len == 0 && !more) {
        return shp_tp_deliver(&ep->base, m, len);
    }
    if (ep->rx_len + len > max) {
        ep->base.tp->stats.malformed++;
        return SHP_ERR_PROTO; /* longer than any message can be */
    }
    if (ep->rx_msg == NULL && (ep->rx_msg = malloc(max)) == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    memcpy(ep->rx_msg + ep->rx_len, m, len);
    ep->rx_len += len;
    if (more) {
        return SHP_OK;
    }
    len = ep->rx_len;
    ep->rx_len = 0;
    return shp_tp_deliver(&ep->base, ep->rx_msg, len);
}

/* One receive completion: a datagram, credits alone, or (a piece of) an RC
 * message.  The slot is the caller's to post again. */
static shp_status_t verbs_on_recv(verbs_ep_t *ep, const struct ibv_wc *wc)
{
    uint8_t *m = ep->bufs + (size_t)wc->wr_id * ep->slot;
    size_t len = wc->byte_len;
    uint32_t imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc->imm_data) : 0;

    if (ep->ud) {
        /* a sender's QP is a member too: it hears itself; a bad datagram
         * is only dropped */
        if (!ep->sender && !shp_tp_drop_datagram(ep->base.tp)) {
            ep->n_recvd++;
            (void)shp_tp_deliver(&ep->base, m + VB_GRH,
                                 len >= VB_GRH ? len - VB_GRH : 0);
        }
        return SHP_OK;
    }
    ep->tx_credits += (int)(imm & VB_IMM_CREDITS);
    if (!ep->ready && ep->accepted) {
        /* data before the ESTABLISHED event: the peer is up (its RTU may be
         * lost or late); tell rdma_cm, which then reports ESTABLISHED */
        (void)rdma_notify(ep->id, IBV_EVENT_COMM_EST);
        ep->ready = 1;
    }
    if (imm & VB_IMM_ONLY) {
        return SHP_OK;
    }
    ep->rx_to_return++;
    return verbs_recv_rc(ep, m, len, imm & VB_IMM_MORE);
}

static void verbs_cq_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    verbs_ep_t *ep = w->data;
    struct ibv_cq *cq;
    void *ctx;
    struct ibv_wc wc[32];
    (void)loop;
    (void)revents;

    if (ibv_get_cq_event(ep->cc, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ep->n_events++;
        ep->last_event_ns = shp_time_ns();
    }
    ep->in_cb = 1;
    for (int pass = 0; pass < 2 && !ep->close_pending; pass++) {
        int n;
        while (!ep->close_pending && (n = ibv_poll_cq(ep->cq, 32, wc)) > 0) {
            for (int k = 0; k < n && !ep->close_pending; k++) {
                int i = (int)wc[k].wr_id;
                if (wc[k].status != IBV_WC_SUCCESS) {
                    verbs_fail(ep, SHP_ERR_CONN_RESET);
                    break;
                }
                if (wc[k].opcode & IBV_WC_RECV) {
                    shp_status_t st = verbs_on_recv(ep, &wc[k]);
                    if (st != SHP_OK) {
                        verbs_fail(ep, st);
                    } else if (!ep->close_pending &&
                               verbs_post_recv(ep, i) != 0) {
                        verbs_fail(ep, SHP_ERR_NO_RESOURCE);
                    }
                } else if (wc[k].wr_id == VB_WR_CREDIT) {
                    ep->credit_inflight--;
                } else {
                    ep->n_sent++;
                    ep->free_slots[ep->nfree++] = i;
                }
            }
        }
        if (pass == 0) { /* re-arm, then look again: nothing slips by */
            ibv_req_notify_cq(ep->cq, 0);
        }
    }
    /* what is queued carries credits back; if nothing is, alone */
    if (!ep->close_pending && (verbs_drain_queue(ep) != SHP_OK ||
                               verbs_return_credits(ep) != SHP_OK)) {
        verbs_fail(ep, SHP_ERR_IO);
    }
    ep->in_cb = 0;
    if (ep->close_pending) {
        verbs_finish_close(ep);
    }
}

static void verbs_release(verbs_ep_t *ep)
{
    shp_tp_t *tp = ep->base.tp;
    if (ev_is_active(&ep->cq_w)) {
        ev_io_stop(tp->loop, &ep->cq_w);
    }
    if (ep->id != NULL) {
        if (ep->ud && ep->ready) {
            rdma_leave_multicast(ep->id, (struct sockaddr *)&ep->maddr);
        } else if (!ep->ud && ep->ready) {
            rdma_disconnect(ep->id);
        }
        if (ep->id->qp != NULL) {
            rdma_destroy_qp(ep->id);
        }
    }
    if (ep->ah != NULL) {
        ibv_destroy_ah(ep->ah);
    }
    if (ep->mr != NULL) {
        ibv_dereg_mr(ep->mr);
    }
    if (ep->cq != NULL) {
        ibv_destroy_cq(ep->cq);
    }
    if (ep->cc != NULL) {
        ibv_destroy_comp_channel(ep->cc);
    }
    if (ep->pd != NULL) {
        ibv_dealloc_pd(ep->pd);
    }
    if (ep->id != NULL) {
        ep->id->context = NULL;
        rdma_destroy_id(ep->id);
    }
    free(ep->bufs);
    free(ep->rx_msg);
    while (ep->queue != NULL) {
        verbs_msg_t *m = ep->queue;
        ep->queue = m->next;
        free(m);
    }
}

static void verbs_finish_close(verbs_ep_t *ep)
{
    if (ep->closed) {
        return;
    }
    ep->closed = 1;
    shp_debug("verbs: %s closed: %s", ep->base.peer,
              shp_status_str(ep->close_reason));
    verbs_unlink(ep);
    verbs_release(ep);
    if (ep->base.cbs != NULL && ep->base.cbs->on_close != NULL) {
        ep->base.cbs->on_close(&ep->base, ep->close_reason);
    }
    free(ep);
}

/* rdma_cm events --------------------------------------------------------------- */

/* The endpoint can send: tell the owner (`announce`), post what waited. */
static void verbs_up(verbs_ep_t *ep, int announce)
{
    ep->ready = 1;
    if (announce && ep->base.cbs->on_connect != NULL) {
        ep->base.cbs->on_connect(&ep->base);
    }
    if (verbs_drain_queue(ep) != SHP_OK) {
        verbs_fail(ep, SHP_ERR_IO);
    }
}

/* `grant`: the credits the peer's private data gave (0: none) */
/* The connection parameters both sides give: our private data (magic and
 * receive credits), retries. */
static void verbs_conn_param(verbs_cm_priv_t *mine, struct rdma_conn_param *cp)
{
    mine->magic = htonl(VB_CM_MAGIC);
    mine->credits = htonl(VB_RECV - VB_RESERVE);
    memset(cp, 0, sizeof(*cp));
    cp->private_data = mine;
    cp->private_data_len = sizeof(*mine);
    cp->responder_resources = 1;
    cp->initiator_depth = 1;
    cp->retry_count = 7;
    cp->rnr_retry_count = 7;
}

/* A peer asks to connect (ev->id is the new connection): a queue pair for
 * it, the owner told, accepted; a request that is not ours is refused. */
static void verbs_cm_request(shp_tp_t *tp, struct rdma_cm_event *ev, int grant)
{
    verbs_tp_t *v = verbs_of(tp);
    verbs_cm_priv_t mine;
    struct rdma_conn_param cp;
    shp_sockaddr_t pa = {.len = sizeof(struct sockaddr_in)};
    verbs_ep_t *ep;

    if (grant == 0 || (ep = verbs_ep_new(tp, NULL, NULL)) == NULL) {
        /* not one of ours, or no memory: refused, its id freed */
        rdma_reject(ev->id, NULL, 0);
        rdma_destroy_id(ev->id);
        return;
    }
    ev->id->context = ep;
    ep->accepted = 1;
    ep->tx_credits = grant;
    memcpy(&pa.ss, rdma_get_peer_addr(ev->id), sizeof(struct sockaddr_in));
    shp_sockaddr_str(&pa, ep->base.peer, sizeof(ep->base.peer));
    if (verbs_setup_qp(ep, ev->id, 0) != SHP_OK) {
        /* never announced to the owner: refuse and forget it */
        rdma_reject(ev->id, NULL, 0);
        verbs_unlink(ep);
        verbs_release(ep);
        free(ep);
        return;
    }
    v->on_accept(tp, &ep->base); /* sets cbs and arg */
    verbs_conn_param(&mine, &cp);
    if (rdma_accept(ev->id, &cp) != 0) {
        verbs_fail(ep, SHP_ERR_NO_RESOURCE);
    }
}

/* Our side of a connection (or a multicast endpoint) on its way up. */
static void verbs_cm_progress(verbs_ep_t *ep, struct rdma_cm_event *ev,
                              int grant)
{
    verbs_cm_priv_t mine;
    struct rdma_conn_param cp;
    shp_status_t st;

    verbs_conn_param(&mine, &cp);
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (ep->ud) {
            st = verbs_setup_qp(ep, ev->id, 1);
            if (st != SHP_OK ||
                rdma_join_multicast(ev->id, (struct sockaddr *)&ep->maddr,
                                    ep) != 0) {
                verbs_fail(ep, st != SHP_OK ? st : SHP_ERR_UNREACHABLE);
            }
        } else if (rdma_resolve_route(ev->id, VB_TIMEOUT_MS) != 0) {
            verbs_fail(ep, SHP_ERR_UNREACHABLE);
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        st = verbs_setup_qp(ep, ev->id, 0);
        if (st != SHP_OK || rdma_connect(ev->id, &cp) != 0) {
            verbs_fail(ep, st != SHP_OK ? st : SHP_ERR_CONN_REFUSED);
        }
        return;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (!ep->accepted) { /* the accept's private data */
            if (grant == 0) {
                verbs_fail(ep, SHP_ERR_PROTO);
                return;
            }
            ep->tx_credits = grant;
        }
        verbs_up(ep, !ep->accepted);
        return;
    case RDMA_CM_EVENT_MULTICAST_JOIN:
        if (ep->sender) {
            ep->ah = ibv_create_ah(ep->pd, &ev->param.ud.ah_attr);
            ep->remote_qpn = ev->param.ud.qp_num;
            ep->remote_qkey = ev->param.ud.qkey;
            if (ep->ah == NULL) {
                verbs_fail(ep, SHP_ERR_NO_RESOURCE);
                return;
            }
        }
        verbs_up(ep, 1);
        return;
    default: return;
    }
}

static void verbs_cm_event(shp_tp_t *tp, struct rdma_cm_event *ev, int grant)
{
    verbs_ep_t *ep = ev->id->context;

    shp_debug("verbs: %s on %s (status %d)", rdma_event_str(ev->event),
              ep != NULL ? ep->base.peer : "a new connection", ev->status);
    switch (ev->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: verbs_cm_request(tp, ev, grant); return;
    case RDMA_CM_EVENT_ADDR_RESOLVED:
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
    case RDMA_CM_EVENT_ESTABLISHED:
    case RDMA_CM_EVENT_MULTICAST_JOIN:
        if (ep != NULL) {
            verbs_cm_progress(ep, ev, grant);
        }
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (ep != NULL) {
            ep->ready = 0;
            verbs_fail(ep, SHP_ERR_CONN_RESET);
        }
        return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE: return;
    default: /* unreachable, rejected, errors, device removal */
        if (ep != NULL) {
            verbs_fail(ep, ev->event == RDMA_CM_EVENT_REJECTED
                               ? SHP_ERR_CONN_REFUSED
                               : SHP_ERR_UNREACHABLE);
        }
        return;
    }
}

static void verbs_ch_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_tp_t *tp = w->data;
    struct rdma_cm_event *ev;
    (void)loop;
    (void)revents;

    while (rdma_get_cm_event(verbs_of(tp)->ch, &ev) == 0) {
        /* copy what we need, ack first: an id can only be destroyed once
         * its events are acked (the private data goes with the ack) */
        struct rdma_cm_event copy = *ev;
        verbs_cm_priv_t peer;
        int grant = 0;
        if ((ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ||
             ev->event == RDMA_CM_EVENT_ESTABLISHED) &&
            ev->param.conn.private_data != NULL &&
            ev->param.conn.private_data_len >= sizeof(peer)) {
            memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
            if (ntohl(peer.magic) == VB_CM_MAGIC &&
                ntohl(peer.credits) <= VB_RECV) {
                grant = (int)ntohl(peer.credits);
            }
        }
        rdma_ack_cm_event(ev);
        verbs_cm_event(tp, &copy, grant);
    }
}

/* Provider ops -------------------------------------------------------------------- */

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
    ev_io_init(&v->ch_w, verbs_ch_cb, v->ch->fd, EV_READ);
    v->ch_w.data = tp;
    ev_io_start(tp->loop, &v->ch_w);
    return SHP_OK;
}

static void verbs_cleanup(shp_tp_t *tp)
{
    verbs_tp_t *v = verbs_of(tp);
    if (v == NULL) {
        return;
    }
    while (v->eps != NULL) {
        verbs_ep_t *ep = v->eps;
        ep->close_reason = SHP_ERR_CANCELED;
        verbs_finish_close(ep);
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
    verbs_tp_t *v = verbs_of(tp);
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
    return verbs_of(tp)->listen_id ? verbs_of(tp)->listen_addr : NULL;
}

/* an endpoint whose id resolves `addr` (from the local address if any) */
static shp_status_t verbs_start(shp_tp_t *tp, const char *addr, int ud,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **out)
{
    verbs_tp_t *v = verbs_of(tp);
    shp_sockaddr_t dst;
    struct sockaddr_in src = {.sin_family = AF_INET};
    int have_src = tp->local_ip[0] != '\0' &&
                   inet_pton(AF_INET, tp->local_ip, &src.sin_addr) == 1;
    if (shp_sockaddr_parse(addr, 1, &dst) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    verbs_ep_t *ep = verbs_ep_new(tp, cbs, arg);
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
        verbs_unlink(ep);
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
    if (len > verbs_msg_max(base->tp) ||
        (ep->ud && len > (ep->ud_max ? ep->ud_max : VB_SLOT))) {
        return SHP_ERR_TOO_LARGE;
    }
    shp_wire_hdr_pack(hdr, raw);
    base->tp->stats.msgs_out++;
    base->tp->stats.bytes_out += len;
    if (ep->queue == NULL && len <= VB_SLOT && verbs_can_post(ep)) {
        return verbs_post(ep, raw, sizeof(raw), payload, hdr->payload_len, 0);
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
    return verbs_drain_queue(ep);
}

static void verbs_dump(shp_tp_t *tp)
{
    for (verbs_ep_t *ep = verbs_of(tp)->eps; ep != NULL; ep = ep->next) {
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
    verbs_fail((verbs_ep_t *)base, SHP_ERR_CANCELED);
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
