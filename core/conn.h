/*
 * A framed, non-blocking stream connection on a libev loop.
 *
 * Framing is pluggable (frame_len): the control plane uses it with
 * length-prefixed JSON frames (ctl.h), the data path with wire headers.
 * Reads are batched (one read() may deliver many frames); writes are queued
 * and flushed once before the loop sleeps (an ev_prepare watcher), or at
 * once when the queue passes a high-water mark.  A keepalive timer closes
 * the connection when nothing was received for `interval x misses` and asks
 * the protocol to send something when the link was idle for `interval`.
 *
 * Lifetime: ops->on_close is called exactly once for every connection that
 * was opened or connected, as its last callback; the owner may free the
 * connection there.  If the owner calls shp_conn_close() from on_frame or
 * on_connect, the close completes (and on_close runs) when that returns.
 */
#ifndef SHP_COMMON_CONN_H
#define SHP_COMMON_CONN_H

#include "core/net.h"
#include "core/status.h"

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

typedef struct shp_conn shp_conn_t;

typedef struct shp_conn_ops {
    /* Length of the frame starting at buf (SHP_INPROGRESS: need more
     * bytes; an error closes the connection with that status). */
    shp_status_t (*frame_len)(shp_conn_t *conn, const void *buf, size_t avail,
                              size_t *len);
    void (*on_frame)(shp_conn_t *conn, const void *frame, size_t len);
    void (*on_connect)(shp_conn_t *conn); /* may be NULL */
    void (*on_close)(shp_conn_t *conn, shp_status_t reason);
    void (*on_idle)(shp_conn_t *conn); /* send a keepalive; may be NULL */
} shp_conn_ops_t;

typedef enum shp_conn_state {
    SHP_CONN_IDLE = 0,
    SHP_CONN_CONNECTING,
    SHP_CONN_OPEN,
    SHP_CONN_CLOSED,
} shp_conn_state_t;

typedef struct shp_conn_stats {
    uint64_t frames_in, frames_out, bytes_in, bytes_out, read_calls,
        write_calls;
} shp_conn_stats_t;

/* A control connection's frames are sealed once its handshake is done: the
 * keys and sequence numbers of the two directions.  protocol/ctl.c reads
 * and writes them; core only keeps them, and wipes them at close. */
typedef struct shp_conn_seal {
    uint8_t tx_key[32], rx_key[32];
    uint64_t tx_seq, rx_seq;
    int on;
} shp_conn_seal_t;

struct shp_conn {
    struct ev_loop *loop;
    const shp_conn_ops_t *ops;
    void *arg; /* the owner's */
    int fd;
    shp_conn_state_t state;
    ev_io rio;
    ev_io wio;
    ev_prepare flush_w;
    ev_timer ka_timer;
    /* read side: rbuf holds what arrived of frames not yet dispatched; once
     * none is left it is released unless it is at most rbuf_keep bytes (0
     * by default: a connection idle between frames holds no buffer) */
    uint8_t *rbuf;
    size_t rlen, rcap, max_frame, rbuf_keep;
    /* write side: past max_queued bytes waiting for a peer that does not
     * read, a send fails and the connection is closed (SHP_ERR_NO_RESOURCE,
     * `overflowed` set for on_close) before the loop sleeps */
    uint8_t *wbuf;
    size_t woff, wlen, wcap, max_queued;
    int overflowed;
    /* keepalive */
    double ka_interval;
    unsigned ka_misses;
    unsigned ka_connect_misses; /* while connecting; 0: ka_misses */
    uint64_t last_rx_ns, last_tx_ns;
    /* deferred close while dispatching frames */
    int dispatching;
    int close_pending;
    shp_status_t close_reason;
    shp_conn_stats_t stats;
    shp_conn_seal_t seal;
    char peer[64]; /* for log messages */
};

/* Queue limits (bytes). */
#define SHP_CONN_HIGH_WATER (256 * 1024)
#define SHP_CONN_DEFAULT_MAX_QUEUED (64u * 1024 * 1024)
/* A read buffer's first size (or the largest frame, if smaller); a data
 * path keeps its buffer between frames (rbuf_keep: at least this, the tcp
 * transport its largest message) and then its write buffer too. */
#define SHP_CONN_RBUF_MIN (64 * 1024)

void shp_conn_init(shp_conn_t *conn, struct ev_loop *loop,
                   const shp_conn_ops_t *ops, void *arg, size_t max_frame);

/* Adopt a connected socket (accepted, or from socketpair()). */
SHP_WUR shp_status_t shp_conn_open_fd(shp_conn_t *conn, int fd);

/* Connect without blocking: on_connect when done, on_close(reason) if it
 * fails.  Frames sent meanwhile are queued. */
SHP_WUR shp_status_t shp_conn_connect(shp_conn_t *conn,
                                      const shp_sockaddr_t *addr,
                                      const shp_sockaddr_t *bind_addr);

/* A connection still connecting after this many keepalive intervals (at
 * least 1; 0: as many as an open one may miss) fails SHP_ERR_TIMED_OUT: a
 * peer whose SYNs are dropped is given up sooner than a silent open one. */
void shp_conn_set_connect_misses(shp_conn_t *conn, unsigned misses);

/* interval <= 0 disables. */
void shp_conn_set_keepalive(shp_conn_t *conn, double interval_s,
                            unsigned misses);

/* Queue `a` then `b` (either may be empty) as one frame's bytes.
 * SHP_ERR_NO_RESOURCE if the peer does not read and the queue would pass
 * max_queued: the connection stops reading, is logged and is closed with
 * that status before the loop sleeps (conn->overflowed set), never inside
 * this call.  SHP_ERR_CLOSED after close. */
SHP_WUR shp_status_t shp_conn_send(shp_conn_t *conn, const void *a, size_t alen,
                                   const void *b, size_t blen);

/* Write what is queued now (normally done before the loop sleeps).  A
 * failed write closes the connection here (on_close, where the owner may
 * free it): to send what is queued and then close, use shp_conn_push and
 * shp_conn_close. */
void shp_conn_flush(shp_conn_t *conn);
/* Writes what the socket takes now, like shp_conn_flush, but never closes
 * here: a write error is left to the loop (its flush closes), for callers
 * walking state that a close (on_close) could change. */
void shp_conn_push(shp_conn_t *conn);

/* Quiet (1): the peer's bytes no longer wake the loop (SO_RCVLOWAT set
 * far above what one peer sends between two reads: the kernel neither
 * reports the socket readable nor wakes a waiter for them); a closed or
 * reset connection still does.  The owner reads them with shp_conn_pull.
 * 0: back to normal (the kernel reports what waits at once).  Stream
 * sockets (TCP) only; SHP_ERR_UNSUPPORTED where the socket refuses. */
shp_status_t shp_conn_set_quiet(shp_conn_t *conn, int quiet);

/* Read what the peer sent, as if the socket had been reported readable
 * (one recv, frames dispatched).  May close the connection (on_close). */
void shp_conn_pull(shp_conn_t *conn);

/* Close: stops watchers, closes the socket, frees buffers, then calls
 * on_close(reason) (deferred while inside on_frame).  Idempotent. */
void shp_conn_close(shp_conn_t *conn, shp_status_t reason);

static inline int shp_conn_is_open(const shp_conn_t *conn)
{
    return conn->state == SHP_CONN_OPEN || conn->state == SHP_CONN_CONNECTING;
}

/* Accepting connections. */
typedef struct shp_listener shp_listener_t;
typedef void (*shp_accept_cb_t)(shp_listener_t *listener, int fd,
                                const shp_sockaddr_t *peer);

struct shp_listener {
    struct ev_loop *loop;
    int fd;
    ev_io io;
    ev_timer pause; /* out of descriptors: retry later */
    shp_accept_cb_t on_accept;
    void *arg;
    shp_sockaddr_t addr; /* bound address (port filled in) */
};

SHP_WUR shp_status_t shp_listener_start(shp_listener_t *listener,
                                        struct ev_loop *loop,
                                        const shp_sockaddr_t *addr,
                                        shp_accept_cb_t on_accept, void *arg);
void shp_listener_stop(shp_listener_t *listener);

/* SIGTERM/SIGINT -> on_stop, SIGHUP -> on_reload; SIGPIPE ignored. */
typedef struct shp_signals {
    ev_signal term, intr, hup;
    void (*on_stop)(void *arg, int signum);
    void (*on_reload)(void *arg);
    void *arg;
} shp_signals_t;

void shp_signals_start(shp_signals_t *sig, struct ev_loop *loop,
                       void (*on_stop)(void *arg, int signum),
                       void (*on_reload)(void *arg), void *arg);
void shp_signals_stop(shp_signals_t *sig, struct ev_loop *loop);

#endif
