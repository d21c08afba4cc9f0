/*
 * The verbs transport's endpoints (transport/verbs/verbs.c says how it
 * works): one made with its PD, CQ and completion channel, its queue pair
 * and registered slots; a message posted in slots (several sends on RC,
 * each but the last flagged "more") or queued while no slot or credit is
 * free; credits returned; completions drained and receives put back
 * together and delivered; a failure, and the close that releases it all.
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

static void verbs_cq_cb(struct ev_loop *loop, ev_io *w, int revents);

verbs_tp_t *shp_tp_verbs_of(shp_tp_t *tp)
{
    return tp->priv;
}

size_t shp_tp_verbs_msg_max(shp_tp_t *tp)
{
    return SHP_WIRE_HDR_LEN + tp->max_payload;
}

verbs_ep_t *shp_tp_verbs_ep_new(shp_tp_t *tp, const shp_tp_ep_cbs_t *cbs,
                                void *arg)
{
    verbs_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return NULL;
    }
    ep->base.tp = tp;
    ep->base.cbs = cbs;
    ep->base.arg = arg;
    ep->next = shp_tp_verbs_of(tp)->eps;
    shp_tp_verbs_of(tp)->eps = ep;
    return ep;
}

void shp_tp_verbs_unlink(verbs_ep_t *ep)
{
    verbs_tp_t *v = shp_tp_verbs_of(ep->base.tp);
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

/* PD, CQ on a completion channel, QP, registered slots, receives posted */
shp_status_t shp_tp_verbs_setup_qp(verbs_ep_t *ep, struct rdma_cm_id *id,
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

int shp_tp_verbs_can_post(const verbs_ep_t *ep)
{
    return ep->ready && ep->nfree > 0 && (ep->ud || ep->tx_credits > 0);
}

/* Post a + b (at most a slot) from a free slot; the caller checked
 * shp_tp_verbs_can_post().  `more`: the message goes on in the next send. */
shp_status_t shp_tp_verbs_post(verbs_ep_t *ep, const void *a, size_t alen,
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
shp_status_t shp_tp_verbs_drain_queue(verbs_ep_t *ep)
{
    while (ep->queue != NULL && shp_tp_verbs_can_post(ep)) {
        verbs_msg_t *m = ep->queue;
        size_t n = m->len - m->off;
        int more = !ep->ud && n > VB_SLOT;
        if (more) {
            n = VB_SLOT;
        }
        shp_status_t st =
            shp_tp_verbs_post(ep, m->data + m->off, n, NULL, 0, more);
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

void shp_tp_verbs_fail(verbs_ep_t *ep, shp_status_t why)
{
    if (ep->closed) {
        return;
    }
    ep->close_reason = why;
    if (ep->in_cb) {
        ep->close_pending = 1;
    } else {
        shp_tp_verbs_finish_close(ep);
    }
}

/* One RC receive: a whole message, or a piece of one (`more`: not the
 * last).  Pieces gather in rx_msg. */
static shp_status_t verbs_recv_rc(verbs_ep_t *ep, const uint8_t *m, size_t len,
                                  int more)
{
    size_t max = shp_tp_verbs_msg_max(ep->base.tp);
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
                    shp_tp_verbs_fail(ep, SHP_ERR_CONN_RESET);
                    break;
                }
                if (wc[k].opcode & IBV_WC_RECV) {
                    shp_status_t st = verbs_on_recv(ep, &wc[k]);
                    if (st != SHP_OK) {
                        shp_tp_verbs_fail(ep, st);
                    } else if (!ep->close_pending &&
                               verbs_post_recv(ep, i) != 0) {
                        shp_tp_verbs_fail(ep, SHP_ERR_NO_RESOURCE);
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
    if (!ep->close_pending && (shp_tp_verbs_drain_queue(ep) != SHP_OK ||
                               verbs_return_credits(ep) != SHP_OK)) {
        shp_tp_verbs_fail(ep, SHP_ERR_IO);
    }
    ep->in_cb = 0;
    if (ep->close_pending) {
        shp_tp_verbs_finish_close(ep);
    }
}

void shp_tp_verbs_release(verbs_ep_t *ep)
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

void shp_tp_verbs_finish_close(verbs_ep_t *ep)
{
    if (ep->closed) {
        return;
    }
    ep->closed = 1;
    shp_debug("verbs: %s closed: %s", ep->base.peer,
              shp_status_str(ep->close_reason));
    shp_tp_verbs_unlink(ep);
    shp_tp_verbs_release(ep);
    if (ep->base.cbs != NULL && ep->base.cbs->on_close != NULL) {
        ep->base.cbs->on_close(&ep->base, ep->close_reason);
    }
    free(ep);
}
