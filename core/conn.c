/* Framed connections, listeners and signals on libev (see conn.h). */
#include "core/conn.h"

#include "core/log.h"
#include "core/time.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* SO_RCVLOWAT of a quiet connection: more than a peer sends between two
 * reads of its owner (one message); if that many bytes ever wait, they wake
 * the loop as usual (TCP also grows the receive buffer to hold them) */
#define SHP_CONN_QUIET_LOWAT (256 * 1024)

static void shp_conn_read_cb(struct ev_loop *loop, ev_io *w, int revents);
static void shp_conn_write_cb(struct ev_loop *loop, ev_io *w, int revents);
static void shp_conn_prepare_cb(struct ev_loop *loop, ev_prepare *w,
                                int revents);
static void shp_conn_ka_cb(struct ev_loop *loop, ev_timer *w, int revents);

void shp_conn_init(shp_conn_t *conn, struct ev_loop *loop,
                   const shp_conn_ops_t *ops, void *arg, size_t max_frame)
{
    memset(conn, 0, sizeof(*conn));
    conn->loop = loop;
    conn->ops = ops;
    conn->arg = arg;
    conn->fd = -1;
    conn->max_frame = max_frame;
    conn->max_queued = SHP_CONN_DEFAULT_MAX_QUEUED;
    snprintf(conn->peer, sizeof(conn->peer), "?");
}

static void shp_conn_peer_name(shp_conn_t *conn)
{
    shp_sockaddr_t a;

    a.len = sizeof(a.ss);
    if (getpeername(conn->fd, (struct sockaddr *)&a.ss, &a.len) == 0 &&
        a.ss.ss_family != AF_UNIX) {
        shp_sockaddr_str(&a, conn->peer, sizeof(conn->peer));
    } else {
        snprintf(conn->peer, sizeof(conn->peer), "fd %d", conn->fd);
    }
}

static void shp_conn_start_io(shp_conn_t *conn)
{
    ev_io_init(&conn->rio, shp_conn_read_cb, conn->fd, EV_READ);
    ev_io_init(&conn->wio, shp_conn_write_cb, conn->fd, EV_WRITE);
    ev_prepare_init(&conn->flush_w, shp_conn_prepare_cb);
    conn->rio.data = conn->wio.data = conn->flush_w.data = conn;
    conn->last_rx_ns = conn->last_tx_ns = shp_time_ns();
}

shp_status_t shp_conn_open_fd(shp_conn_t *conn, int fd)
{
    if (shp_fd_set_nonblock(fd) < 0) {
        return shp_status_from_errno(errno);
    }
    shp_sock_tune(fd);
    conn->fd = fd;
    conn->state = SHP_CONN_OPEN;
    shp_conn_peer_name(conn);
    shp_conn_start_io(conn);
    ev_io_start(conn->loop, &conn->rio);
    if (conn->wlen > 0) {
        ev_prepare_start(conn->loop, &conn->flush_w);
    }
    return SHP_OK;
}

shp_status_t shp_conn_connect(shp_conn_t *conn, const shp_sockaddr_t *addr,
                              const shp_sockaddr_t *bind_addr)
{
    shp_status_t status;
    int fd;

    status = shp_connect_start(addr, bind_addr, &fd);
    if (status != SHP_INPROGRESS) {
        return status;
    }
    conn->fd = fd;
    conn->state = SHP_CONN_CONNECTING;
    shp_sockaddr_str(addr, conn->peer, sizeof(conn->peer));
    shp_conn_start_io(conn);
    ev_io_start(conn->loop, &conn->wio); /* writable = connect finished */
    return SHP_OK;
}

void shp_conn_set_keepalive(shp_conn_t *conn, double interval_s,
                            unsigned misses)
{
    conn->ka_interval = interval_s;
    conn->ka_misses = misses ? misses : 1;
    if (ev_is_active(&conn->ka_timer)) {
        ev_timer_stop(conn->loop, &conn->ka_timer);
    }
    if (interval_s > 0) {
        ev_timer_init(&conn->ka_timer, shp_conn_ka_cb, interval_s, interval_s);
        conn->ka_timer.data = conn;
        ev_timer_start(conn->loop, &conn->ka_timer);
    }
}

void shp_conn_set_connect_misses(shp_conn_t *conn, unsigned misses)
{
    conn->ka_connect_misses = misses;
}

static void shp_conn_finish_close(shp_conn_t *conn)
{
    shp_status_t reason = conn->close_reason;

    conn->close_pending = 0;
    if (conn->ops->on_close != NULL) {
        conn->ops->on_close(conn, reason);
    }
}

void shp_conn_close(shp_conn_t *conn, shp_status_t reason)
{
    int was_open = conn->state != SHP_CONN_IDLE;

    if (conn->state == SHP_CONN_CLOSED) {
        return;
    }
    conn->state = SHP_CONN_CLOSED;
    conn->close_reason = reason;
    if (conn->fd >= 0) {
        ev_io_stop(conn->loop, &conn->rio);
        ev_io_stop(conn->loop, &conn->wio);
        ev_prepare_stop(conn->loop, &conn->flush_w);
        close(conn->fd);
        conn->fd = -1;
    }
    if (conn->ka_interval > 0) {
        ev_timer_stop(conn->loop, &conn->ka_timer);
    }
    free(conn->rbuf);
    free(conn->wbuf);
    conn->rbuf = conn->wbuf = NULL;
    conn->rlen = conn->rcap = conn->woff = conn->wlen = conn->wcap = 0;
    explicit_bzero(&conn->seal,
                   sizeof(conn->seal)); /* a reconnect starts plain */
    if (!was_open) {
        return;
    }
    if (conn->dispatching) {
        conn->close_pending = 1; /* on_close after on_frame returns */
    } else {
        shp_conn_finish_close(conn);
    }
}

/* Write what is queued; on EAGAIN wait for writability. */
static shp_status_t shp_conn_do_write(shp_conn_t *conn)
{
    ssize_t n;

    while (conn->wlen > 0) {
        n = send(conn->fd, conn->wbuf + conn->woff, conn->wlen, MSG_NOSIGNAL);
        conn->stats.write_calls++;
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                ev_io_start(conn->loop, &conn->wio);
                return SHP_INPROGRESS;
            }
            return shp_status_from_errno(errno);
        }
        conn->woff += (size_t)n;
        conn->wlen -= (size_t)n;
        conn->stats.bytes_out += (uint64_t)n;
        conn->last_tx_ns = shp_time_ns();
    }
    conn->woff = 0;
    ev_io_stop(conn->loop, &conn->wio);
    /* a large answer went: not kept (a data path that keeps its read
     * buffer, rbuf_keep, keeps this one too) */
    if (conn->wcap > SHP_CONN_RBUF_MIN && conn->rbuf_keep == 0) {
        free(conn->wbuf);
        conn->wbuf = NULL;
        conn->wcap = 0;
    }
    return SHP_OK;
}

void shp_conn_flush(shp_conn_t *conn)
{
    shp_status_t status;

    if (conn->overflowed) {
        return; /* it closes before the loop sleeps (shp_conn_overflow) */
    }
    ev_prepare_stop(conn->loop, &conn->flush_w);
    if (conn->state != SHP_CONN_OPEN || conn->wlen == 0) {
        return;
    }
    status = shp_conn_do_write(conn);
    if (status < 0) {
        shp_debug("write to %s failed: %s", conn->peer, shp_status_str(status));
        shp_conn_close(conn, status);
    }
}

void shp_conn_push(shp_conn_t *conn)
{
    if (conn->state != SHP_CONN_OPEN || conn->wlen == 0 || conn->overflowed ||
        ev_is_active(&conn->wio)) {
        return;
    }
    if (shp_conn_do_write(conn) >= 0) {
        ev_prepare_stop(conn->loop, &conn->flush_w);
    } else {
        ev_prepare_start(conn->loop, &conn->flush_w); /* it closes there */
    }
}

/* The peer does not read what is sent to it: it stops being read, and is
 * closed before the loop sleeps (the caller of send may hold state that
 * on_close frees). */
static void shp_conn_overflow(shp_conn_t *conn, size_t more)
{
    if (conn->overflowed) {
        return;
    }
    conn->overflowed = 1;
    shp_warn_sparse(1000,
                    "closing %s: it does not read what is sent to it "
                    "(%zu bytes waiting, %zu more would pass the bound of "
                    "%zu)",
                    conn->peer, conn->wlen, more, conn->max_queued);
    if (conn->fd >= 0) {
        ev_io_stop(conn->loop, &conn->rio);
        ev_prepare_start(conn->loop, &conn->flush_w);
    }
}

shp_status_t shp_conn_send(shp_conn_t *conn, const void *a, size_t alen,
                           const void *b, size_t blen)
{
    size_t need;

    if (conn->state == SHP_CONN_CLOSED) {
        return SHP_ERR_CLOSED;
    }
    /* one message always fits an empty queue: the bound is on what waits
     * behind it, unread */
    if (conn->overflowed ||
        (conn->wlen > 0 && conn->wlen + alen + blen > conn->max_queued)) {
        shp_conn_overflow(conn, alen + blen);
        return SHP_ERR_NO_RESOURCE;
    }
    need = conn->woff + conn->wlen + alen + blen;
    if (need > conn->wcap) {
        if (conn->woff > 0) { /* compact first */
            memmove(conn->wbuf, conn->wbuf + conn->woff, conn->wlen);
            conn->woff = 0;
            need = conn->wlen + alen + blen;
        }
        if (need > conn->wcap) {
            size_t cap = conn->wcap ? conn->wcap : 4096;
            uint8_t *p;
            while (cap < need) {
                cap *= 2;
            }
            p = realloc(conn->wbuf, cap);
            if (p == NULL) {
                return SHP_ERR_NO_MEMORY;
            }
            conn->wbuf = p;
            conn->wcap = cap;
        }
    }
    if (alen > 0) {
        memcpy(conn->wbuf + conn->woff + conn->wlen, a, alen);
        conn->wlen += alen;
    }
    if (blen > 0) {
        memcpy(conn->wbuf + conn->woff + conn->wlen, b, blen);
        conn->wlen += blen;
    }
    conn->stats.frames_out++;
    /* while waiting for writability the write watcher drains the queue */
    if (conn->state == SHP_CONN_OPEN && !ev_is_active(&conn->wio)) {
        if (conn->wlen >= SHP_CONN_HIGH_WATER) {
            shp_conn_flush(conn);
        } else {
            ev_prepare_start(conn->loop, &conn->flush_w);
        }
    }
    return SHP_OK;
}

static void shp_conn_prepare_cb(struct ev_loop *loop, ev_prepare *w,
                                int revents)
{
    shp_conn_t *conn = w->data;

    (void)loop;
    (void)revents;
    if (conn->overflowed) { /* open or still connecting */
        ev_prepare_stop(conn->loop, &conn->flush_w);
        shp_conn_close(conn, SHP_ERR_NO_RESOURCE);
        return;
    }
    shp_conn_flush(conn);
}

static void shp_conn_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_conn_t *conn = w->data;
    shp_status_t status;

    (void)loop;
    (void)revents;
    if (conn->state == SHP_CONN_CONNECTING) {
        status = shp_connect_result(conn->fd);
        if (status != SHP_OK) {
            shp_debug("connect to %s failed: %s", conn->peer,
                      shp_status_str(status));
            shp_conn_close(conn, status);
            return;
        }
        conn->state = SHP_CONN_OPEN;
        ev_io_stop(conn->loop, &conn->wio);
        ev_io_start(conn->loop, &conn->rio);
        conn->last_rx_ns = shp_time_ns();
        if (conn->ops->on_connect != NULL) {
            /* a close there completes when it returns, as in on_frame:
             * the owner may free the connection in on_close */
            conn->dispatching = 1;
            conn->ops->on_connect(conn);
            conn->dispatching = 0;
            if (conn->close_pending) {
                shp_conn_finish_close(conn);
                return;
            }
        }
        if (conn->state != SHP_CONN_OPEN) {
            return;
        }
    }
    shp_conn_flush(conn);
}

/* Frames dispatched: what a peer made the buffer grow to is not kept.
 * Nothing left: the buffer goes, unless the owner keeps one that size
 * (rbuf_keep).  The start of a frame left: a buffer grown past the
 * first size shrinks back to it when what is left fits. */
static void shp_conn_rbuf_trim(shp_conn_t *conn)
{
    uint8_t *p;

    if (conn->rlen == 0 && conn->rcap > conn->rbuf_keep) {
        free(conn->rbuf);
        conn->rbuf = NULL;
        conn->rcap = 0;
    } else if (conn->rcap > SHP_CONN_RBUF_MIN && conn->rcap > conn->rbuf_keep &&
               conn->rlen <= SHP_CONN_RBUF_MIN) {
        p = realloc(conn->rbuf, SHP_CONN_RBUF_MIN);
        if (p != NULL) {
            conn->rbuf = p;
            conn->rcap = SHP_CONN_RBUF_MIN;
        }
    }
}

/* Deliver every complete frame in rbuf. */
static shp_status_t shp_conn_dispatch(shp_conn_t *conn)
{
    size_t off = 0, len;
    shp_status_t status = SHP_OK;

    conn->dispatching = 1;
    while (conn->state == SHP_CONN_OPEN) {
        status = conn->ops->frame_len(conn, conn->rbuf + off, conn->rlen - off,
                                      &len);
        if (status == SHP_INPROGRESS) {
            status = SHP_OK;
            break;
        }
        if (status != SHP_OK) {
            break;
        }
        if (len > conn->max_frame) {
            status = SHP_ERR_TOO_LARGE;
            break;
        }
        if (len > conn->rlen - off) {
            /* incomplete: room for more of it, as its bytes come (twice
             * the buffer once it is full, up to the frame), never the
             * announced length at once: what a peer makes us hold is what
             * it sent.  With frames before it (off > 0), moving it to the
             * front below makes the room. */
            if (off == 0 && conn->rlen == conn->rcap && len > conn->rcap) {
                size_t cap = 2 * conn->rcap < len ? 2 * conn->rcap : len;
                uint8_t *p = realloc(conn->rbuf, cap);
                if (p == NULL) {
                    status = SHP_ERR_NO_MEMORY;
                    break;
                }
                conn->rbuf = p;
                conn->rcap = cap;
            }
            break;
        }
        conn->stats.frames_in++;
        conn->ops->on_frame(conn, conn->rbuf + off, len);
        off += len;
    }
    conn->dispatching = 0;
    if (conn->state == SHP_CONN_OPEN && off > 0) {
        memmove(conn->rbuf, conn->rbuf + off, conn->rlen - off);
        conn->rlen -= off;
        shp_conn_rbuf_trim(conn);
    }
    return status;
}

static void shp_conn_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_conn_t *conn = w->data;
    shp_status_t status;
    ssize_t n;

    (void)loop;
    (void)revents;
    if (conn->rbuf == NULL) {
        /* no more than the largest frame taken now (before a peer
         * authenticates, a small one) */
        size_t cap = conn->max_frame < SHP_CONN_RBUF_MIN ? conn->max_frame
                                                         : SHP_CONN_RBUF_MIN;
        cap = cap < 4096 ? 4096 : cap;
        conn->rbuf = malloc(cap);
        if (conn->rbuf == NULL) {
            shp_conn_close(conn, SHP_ERR_NO_MEMORY);
            return;
        }
        conn->rcap = cap;
    }
    do {
        n = recv(conn->fd, conn->rbuf + conn->rlen, conn->rcap - conn->rlen, 0);
    } while (n < 0 && errno == EINTR);
    conn->stats.read_calls++;
    if (n == 0) {
        shp_conn_close(conn, SHP_ERR_CLOSED);
        return;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        }
        shp_conn_close(conn, shp_status_from_errno(errno));
        return;
    }
    conn->rlen += (size_t)n;
    conn->stats.bytes_in += (uint64_t)n;
    conn->last_rx_ns = shp_time_ns();

    status = shp_conn_dispatch(conn);
    if (conn->close_pending) {
        shp_conn_finish_close(conn);
        return;
    }
    if (status != SHP_OK) {
        shp_warn_sparse(1000, "dropping connection from %s: %s", conn->peer,
                        shp_status_str(status));
        shp_conn_close(conn, status);
    }
}

shp_status_t shp_conn_set_quiet(shp_conn_t *conn, int quiet)
{
    int v = quiet ? SHP_CONN_QUIET_LOWAT : 1;

    if (conn->fd < 0 ||
        setsockopt(conn->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) != 0) {
        return SHP_ERR_UNSUPPORTED;
    }
    return SHP_OK;
}

void shp_conn_pull(shp_conn_t *conn)
{
    if (conn->state == SHP_CONN_OPEN && conn->fd >= 0) {
        shp_conn_read_cb(conn->loop, &conn->rio, EV_READ);
    }
}

/* Bytes from the peer wait in the socket.  A process that did not run for
 * longer than the keepalive (stopped, or starved of CPU) finds its timers
 * and its input due at once, and libev runs the timers first: the peer
 * spoke, it is only not read yet. */
static int shp_conn_input_waits(const shp_conn_t *conn)
{
    struct pollfd pf = {.fd = conn->fd, .events = POLLIN};
    int queued = 0;

    /* a quiet socket (shp_conn_set_quiet) is not readable to poll below
     * its low-water mark: ask how many bytes wait */
    return conn->fd >= 0 &&
           ((poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN)) ||
            (ioctl(conn->fd, FIONREAD, &queued) == 0 && queued > 0));
}

static void shp_conn_ka_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_conn_t *conn = w->data;
    uint64_t now = shp_time_ns();
    uint64_t interval_ns = (uint64_t)(conn->ka_interval * 1e9);

    (void)loop;
    (void)revents;
    if (conn->state == SHP_CONN_CONNECTING) {
        unsigned m =
            conn->ka_connect_misses ? conn->ka_connect_misses : conn->ka_misses;
        if (now - conn->last_rx_ns >= interval_ns * m) {
            shp_conn_close(conn, SHP_ERR_TIMED_OUT);
        }
        return;
    }
    if (conn->state != SHP_CONN_OPEN) {
        return;
    }
    if (now - conn->last_rx_ns >= interval_ns * conn->ka_misses &&
        !shp_conn_input_waits(conn)) {
        shp_debug("%s silent for %.1fs: closing", conn->peer,
                  (double)(now - conn->last_rx_ns) / 1e9);
        shp_conn_close(conn, SHP_ERR_KEEPALIVE);
        return;
    }
    if (now - conn->last_tx_ns >= interval_ns / 2 &&
        conn->ops->on_idle != NULL) {
        conn->ops->on_idle(conn);
    }
}

/* Listener ---------------------------------------------------------------- */

static void shp_listener_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_listener_t *l = w->data;
    shp_sockaddr_t peer;
    int fd, i;

    (void)revents;
    for (i = 0; i < 64; i++) { /* a batch per wake-up */
        peer.len = sizeof(peer.ss);
        fd = accept4(l->fd, (struct sockaddr *)&peer.ss, &peer.len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* out of descriptors: stop accepting for a moment instead
                 * of spinning on a readable listener */
                shp_warn_sparse(5000, "accept: %m; pausing for 100 ms");
                ev_io_stop(loop, &l->io);
                ev_timer_set(&l->pause, 0.1, 0.);
                ev_timer_start(loop, &l->pause);
            }
            return;
        }
        l->on_accept(l, fd, &peer);
    }
}

static void shp_listener_resume_cb(struct ev_loop *loop, ev_timer *w,
                                   int revents)
{
    shp_listener_t *l = w->data;

    (void)revents;
    ev_io_start(loop, &l->io);
}

shp_status_t shp_listener_start(shp_listener_t *l, struct ev_loop *loop,
                                const shp_sockaddr_t *addr,
                                shp_accept_cb_t on_accept, void *arg)
{
    shp_status_t status;

    memset(l, 0, sizeof(*l));
    l->fd = -1;
    status = shp_listen(addr, 512, &l->fd);
    if (status != SHP_OK) {
        return status;
    }
    l->loop = loop;
    l->on_accept = on_accept;
    l->arg = arg;
    l->addr = *addr;
    if (addr->ss.ss_family != AF_UNIX) { /* learn the port of ip:0 */
        l->addr.len = sizeof(l->addr.ss);
        if (getsockname(l->fd, (struct sockaddr *)&l->addr.ss, &l->addr.len) <
            0) {
            l->addr = *addr;
        }
    }
    ev_io_init(&l->io, shp_listener_cb, l->fd, EV_READ);
    ev_timer_init(&l->pause, shp_listener_resume_cb, 0.1, 0.);
    l->io.data = l->pause.data = l;
    ev_io_start(loop, &l->io);
    return SHP_OK;
}

void shp_listener_stop(shp_listener_t *l)
{
    if (l->fd < 0 || l->loop == NULL) {
        return;
    }
    ev_io_stop(l->loop, &l->io);
    ev_timer_stop(l->loop, &l->pause);
    close(l->fd);
    l->fd = -1;
    if (l->addr.ss.ss_family == AF_UNIX) {
        unlink(((struct sockaddr_un *)(void *)&l->addr.ss)->sun_path);
    }
}

/* Signals ------------------------------------------------------------------ */

static void shp_signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    shp_signals_t *sig = w->data;

    (void)loop;
    (void)revents;
    if (w->signum == SIGHUP) {
        if (sig->on_reload != NULL) {
            sig->on_reload(sig->arg);
        }
    } else if (sig->on_stop != NULL) {
        sig->on_stop(sig->arg, w->signum);
    }
}

void shp_signals_start(shp_signals_t *sig, struct ev_loop *loop,
                       void (*on_stop)(void *arg, int signum),
                       void (*on_reload)(void *arg), void *arg)
{
    signal(SIGPIPE, SIG_IGN);
    sig->on_stop = on_stop;
    sig->on_reload = on_reload;
    sig->arg = arg;
    ev_signal_init(&sig->term, shp_signal_cb, SIGTERM);
    ev_signal_init(&sig->intr, shp_signal_cb, SIGINT);
    ev_signal_init(&sig->hup, shp_signal_cb, SIGHUP);
    sig->term.data = sig->intr.data = sig->hup.data = sig;
    ev_signal_start(loop, &sig->term);
    ev_signal_start(loop, &sig->intr);
    ev_signal_start(loop, &sig->hup);
}

void shp_signals_stop(shp_signals_t *sig, struct ev_loop *loop)
{
    ev_signal_stop(loop, &sig->term);
    ev_signal_stop(loop, &sig->intr);
    ev_signal_stop(loop, &sig->hup);
}
