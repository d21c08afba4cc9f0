/*
 * The verbs transport's connection events (transport/verbs/verbs.c says
 * how it works): rdma_cm's event channel read on the loop; a connect
 * request accepted with our grant of credits in the private data (one
 * without ours is rejected), a connection's address and route resolved,
 * established, or refused, and a disconnect.
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

/* rdma_cm events --------------------------------------------------------------- */

/* The endpoint can send: tell the owner (`announce`), post what waited. */
static void verbs_up(verbs_ep_t *ep, int announce)
{
    ep->ready = 1;
    if (announce && ep->base.cbs->on_connect != NULL) {
        ep->base.cbs->on_connect(&ep->base);
    }
    if (shp_tp_verbs_drain_queue(ep) != SHP_OK) {
        shp_tp_verbs_fail(ep, SHP_ERR_IO);
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
    verbs_tp_t *v = shp_tp_verbs_of(tp);
    verbs_cm_priv_t mine;
    struct rdma_conn_param cp;
    shp_sockaddr_t pa = {.len = sizeof(struct sockaddr_in)};
    verbs_ep_t *ep;

    if (grant == 0 || (ep = shp_tp_verbs_ep_new(tp, NULL, NULL)) == NULL) {
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
    if (shp_tp_verbs_setup_qp(ep, ev->id, 0) != SHP_OK) {
        /* never announced to the owner: refuse and forget it */
        rdma_reject(ev->id, NULL, 0);
        shp_tp_verbs_unlink(ep);
        shp_tp_verbs_release(ep);
        free(ep);
        return;
    }
    v->on_accept(tp, &ep->base); /* sets cbs and arg */
    verbs_conn_param(&mine, &cp);
    if (rdma_accept(ev->id, &cp) != 0) {
        shp_tp_verbs_fail(ep, SHP_ERR_NO_RESOURCE);
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
            st = shp_tp_verbs_setup_qp(ep, ev->id, 1);
            if (st != SHP_OK ||
                rdma_join_multicast(ev->id, (struct sockaddr *)&ep->maddr,
                                    ep) != 0) {
                shp_tp_verbs_fail(ep, st != SHP_OK ? st : SHP_ERR_UNREACHABLE);
            }
        } else if (rdma_resolve_route(ev->id, VB_TIMEOUT_MS) != 0) {
            shp_tp_verbs_fail(ep, SHP_ERR_UNREACHABLE);
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        st = shp_tp_verbs_setup_qp(ep, ev->id, 0);
        if (st != SHP_OK || rdma_connect(ev->id, &cp) != 0) {
            shp_tp_verbs_fail(ep, st != SHP_OK ? st : SHP_ERR_CONN_REFUSED);
        }
        return;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (!ep->accepted) { /* the accept's private data */
            if (grant == 0) {
                shp_tp_verbs_fail(ep, SHP_ERR_PROTO);
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
                shp_tp_verbs_fail(ep, SHP_ERR_NO_RESOURCE);
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
            shp_tp_verbs_fail(ep, SHP_ERR_CONN_RESET);
        }
        return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE: return;
    default: /* unreachable, rejected, errors, device removal */
        if (ep != NULL) {
            shp_tp_verbs_fail(ep, ev->event == RDMA_CM_EVENT_REJECTED
                                      ? SHP_ERR_CONN_REFUSED
                                      : SHP_ERR_UNREACHABLE);
        }
        return;
    }
}

void shp_tp_verbs_ch_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_tp_t *tp = w->data;
    struct rdma_cm_event *ev;
    (void)loop;
    (void)revents;

    while (rdma_get_cm_event(shp_tp_verbs_of(tp)->ch, &ev) == 0) {
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
