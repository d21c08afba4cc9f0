/*
 * Internal to the shm provider: what its files share (transport/shm/shm.c
 * says how the transport works).  shm_ep.c is the bottom (an endpoint, its
 * rings, sending, closing); shm_rx.c receives and waits, on it; shm.c
 * makes endpoints and holds the provider's ops, on both.
 */
#ifndef SHP_TRANSPORT_SHM_SHM_INT_H
#define SHP_TRANSPORT_SHM_SHM_INT_H

#include "transport/shm/shm.h"
#include "transport/transport.h"

#include <ev.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* What may wait behind a full ring for a peer that does not read, as a
 * connection's send queue (64 MiB on tcp): a peer that asks and never
 * reads the answers gets its connection closed, not the AN's memory. */
#define SHM_MAX_BACKLOG (16u << 20)
/* the cap on a sleep waiting for several contributions (shm_priv_t) */
#define SHM_CAP_MIN 0.001
#define SHM_CAP_MAX 0.064

typedef struct shm_backlog {
    struct shm_backlog *next;
    uint32_t len;
    int counted; /* a contribution (see shm_after_put) */
    uint8_t msg[];
} shm_backlog_t;

typedef struct shm_ep {
    shp_tp_ep_t base;
    struct shm_ep *next, *prev; /* the provider's list of live endpoints */
    struct shm_ep *dead_next;   /* closed, freed before the loop sleeps */
    int fd;                     /* the Unix socket: doorbell, liveness */
    ev_io io;
    ev_timer hello_timer; /* inbound: the hello must come within 5 s */
    shm_seg_t *seg;
    size_t seg_len;
    uint32_t cap;
    shm_ring_t *tx, *rx;
    uint8_t *tx_data, *rx_data;
    shm_backlog_t *backlog, **backlog_tail;
    size_t backlog_bytes; /* at most SHM_MAX_BACKLOG */
    shm_board_t *board;   /* outbound: the listener's, once it sent it */
    int up;               /* the segment is mapped: messages may flow */
    int inbound;          /* accepted here (the peer created the segment) */
    int announced;        /* on_connect was called */
    int accepted;    /* inbound: the owner has not seen it before the hello */
    int dispatching; /* inside on_msg */
    int closed;
    int dead; /* on_close called: off the live list, memory kept a while */
    shp_status_t close_reason;
} shm_ep_t;

typedef struct {
    shp_tp_t *tp;
    int lfd; /* the Unix listener */
    int rsv; /* the TCP socket reserving ip:port */
    ev_io lio;
    ev_timer pause; /* out of descriptors: accept again in 100 ms */
    shp_tp_accept_cb_t on_accept;
    char listen_addr[64];
    shm_ep_t *eps;
    shm_ep_t *dead;     /* kept until prepare: a walk of eps may stand on one */
    shm_board_t *board; /* a listener's, shared with its connectors */
    int board_fd;
    /* a sleep waiting for several contributions ends after cap_s at most:
     * 1 ms, doubled (to SHM_CAP_MAX) each time the cap ended a sleep
     * that nothing came in, back to 1 ms once something comes: an idle
     * group's AN does not wake a thousand times a second */
    ev_timer cap;
    double cap_s;
    int cap_fired;
    uint64_t polled_ns; /* the last turn that polled (check ran) */
    ev_prepare prep;
    ev_check check;
    ev_idle idle;
} shm_priv_t;

uint32_t shp_tp_shm_ring_cap(const shp_tp_t *tp);
uint32_t shp_tp_shm_accept_cap(const shp_tp_t *tp);
size_t shp_tp_shm_seg_len(uint32_t cap);
void shp_tp_shm_abstract_name(const char *addr, struct sockaddr_un *sun,
                              socklen_t *len);
int shp_tp_shm_listener_trusted(const shp_tp_t *tp, int fd, uid_t *uid);
void shp_tp_shm_name_taken(const struct sockaddr_un *sun, socklen_t slen);
void shp_tp_shm_ep_map(shm_ep_t *ep, int connector);
void shp_tp_shm_ring_bell(shm_ep_t *ep);
void shp_tp_shm_ep_free(shm_ep_t *ep);
void shp_tp_shm_free_dead(shm_priv_t *priv);
void shp_tp_shm_ep_finish(shm_ep_t *ep);
void shp_tp_shm_ep_close(shm_ep_t *ep, shp_status_t reason);
void shp_tp_shm_flush_backlog(shm_ep_t *ep);
shp_status_t shp_tp_shm_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
                             const void *payload);
int shp_tp_shm_send_fd(int fd, const shm_hello_t *hello, int memfd);
void shp_tp_shm_io_cb(struct ev_loop *loop, ev_io *w, int revents);
void shp_tp_shm_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents);
void shp_tp_shm_check_cb(struct ev_loop *loop, ev_check *w, int revents);
void shp_tp_shm_idle_cb(struct ev_loop *loop, ev_idle *w, int revents);

#endif
