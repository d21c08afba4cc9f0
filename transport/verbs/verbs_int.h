/*
 * Internal to the verbs provider: what its files share (transport/verbs/
 * verbs.c says how the transport works).  verbs_ep.c is the bottom (an
 * endpoint); verbs_cm.c, the connection events, uses it; verbs.c, the
 * provider's ops, uses both.
 */
#ifndef SHP_TRANSPORT_VERBS_VERBS_INT_H
#define SHP_TRANSPORT_VERBS_VERBS_INT_H

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

/* credit-only messages fit the receives no grant covers (verbs.c) */
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

verbs_tp_t *shp_tp_verbs_of(shp_tp_t *tp);
size_t shp_tp_verbs_msg_max(shp_tp_t *tp);
verbs_ep_t *shp_tp_verbs_ep_new(shp_tp_t *tp, const shp_tp_ep_cbs_t *cbs,
                                void *arg);
void shp_tp_verbs_unlink(verbs_ep_t *ep);
shp_status_t shp_tp_verbs_setup_qp(verbs_ep_t *ep, struct rdma_cm_id *id,
                                   int ud);
int shp_tp_verbs_can_post(const verbs_ep_t *ep);
shp_status_t shp_tp_verbs_post(verbs_ep_t *ep, const void *a, size_t alen,
                               const void *b, size_t blen, int more);
shp_status_t shp_tp_verbs_drain_queue(verbs_ep_t *ep);
void shp_tp_verbs_fail(verbs_ep_t *ep, shp_status_t why);
void shp_tp_verbs_release(verbs_ep_t *ep);
void shp_tp_verbs_finish_close(verbs_ep_t *ep);
void shp_tp_verbs_ch_cb(struct ev_loop *loop, ev_io *w, int revents);

#endif
