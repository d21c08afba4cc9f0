/* Framed connections on a real libev loop over real sockets: batching,
 * large frames, malformed and oversize input, EOF, keepalive, closing from
 * inside a callback, TCP connect/accept, a full send queue, EMFILE. */
#include "tests/support/test_util.h"

#include "protocol/ctl.h"
#include "core/time.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    shp_conn_t conn;
    int frames;
    int msgs;
    int pings, pongs;
    int closes;
    int connected;
    shp_status_t reason;
    int64_t next_n;
    size_t big_len;
    int close_in_frame;
    int close_in_connect;
    int answer_pings;
    int bad_order;
} peer_t;

static struct ev_loop *loop;

static void peer_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    peer_t *p = conn->arg;
    json_t *msg = NULL;
    uint8_t type;
    int64_t n;

    p->frames++;
    assert_int_equal(shp_ctl_decode(frame, len, &type, &msg, NULL), SHP_OK);
    if (type == SHP_CTL_FRAME_PING) {
        p->pings++;
        if (p->answer_pings) {
            assert_int_equal(shp_ctl_send_frame(conn, SHP_CTL_FRAME_PONG),
                             SHP_OK);
        }
        return;
    }
    if (type == SHP_CTL_FRAME_PONG) {
        p->pongs++;
        return;
    }
    p->msgs++;
    if (shp_json_get_int(msg, "n", 0, INT64_MAX, &n, NULL) == SHP_OK) {
        if (n != p->next_n) {
            p->bad_order++;
        }
        p->next_n = n + 1;
    }
    if (json_object_get(msg, "blob") != NULL) {
        p->big_len = json_string_length(json_object_get(msg, "blob"));
    }
    json_decref(msg);
    if (p->close_in_frame) {
        shp_conn_close(conn, SHP_ERR_CANCELED);
        assert_int_equal(p->closes, 0); /* deferred until we return */
    }
}

static void peer_close(shp_conn_t *conn, shp_status_t reason)
{
    peer_t *p = conn->arg;

    p->closes++;
    p->reason = reason;
}

static void peer_connect(shp_conn_t *conn)
{
    peer_t *p = conn->arg;

    p->connected = 1;
    if (p->close_in_connect) {
        shp_conn_close(conn, SHP_ERR_CANCELED);
        assert_int_equal(p->closes, 0); /* deferred until we return */
    }
}

static void peer_idle(shp_conn_t *conn)
{
    shp_status_t st = shp_ctl_send_frame(conn, SHP_CTL_FRAME_PING);

    assert_int_equal(st, SHP_OK);
}

static const shp_conn_ops_t peer_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = peer_frame,
    .on_connect = peer_connect,
    .on_close = peer_close,
    .on_idle = peer_idle,
};

/* Run the loop until *flag is non-zero or `secs` pass; returns *flag. */
static int run_until(const int *flag, double secs)
{
    TEST_RUN_WHILE(loop, !*flag, secs);
    return *flag;
}

static void pair(peer_t *a, peer_t *b, size_t max_frame)
{
    int sv[2];

    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&a->conn, loop, &peer_ops, a, max_frame);
    shp_conn_init(&b->conn, loop, &peer_ops, b, max_frame);
    assert_int_equal(shp_conn_open_fd(&a->conn, sv[0]), SHP_OK);
    assert_int_equal(shp_conn_open_fd(&b->conn, sv[1]), SHP_OK);
}

static void send_n(peer_t *p, int64_t n)
{
    json_t *m = json_pack("{s:s, s:I}", "type", "seq", "n", (json_int_t)n);

    assert_int_equal(shp_ctl_send(&p->conn, m), SHP_OK);
    json_decref(m);
}

static int setup(void **state)
{
    loop = ev_loop_new(EVFLAG_AUTO);
    return test_log_setup(state);
}

static int teardown(void **state)
{
    ev_loop_destroy(loop);
    return test_log_teardown(state);
}

static void test_many_small_batched(void **state)
{
    enum { N = 20000 };
    peer_t a, b;
    int64_t i;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    for (i = 0; i < 10; i++) {
        send_n(&a, i);
    }
    /* nothing written until the loop is about to sleep (or the queue
     * passes the high-water mark) */
    assert_int_equal(a.conn.stats.write_calls, 0);
    for (; i < N; i++) {
        send_n(&a, i);
    }
    TEST_RUN_WHILE(loop, b.msgs < N && !a.closes && !b.closes, 10);
    assert_int_equal(b.msgs, N);
    assert_int_equal(b.bad_order, 0);
    /* batched: far fewer syscalls than messages each way */
    assert_true(b.conn.stats.read_calls * 20 < (uint64_t)N);
    assert_true(a.conn.stats.write_calls * 20 < (uint64_t)N);
    shp_conn_close(&a.conn, SHP_OK);
    shp_conn_close(&b.conn, SHP_OK);
    assert_int_equal(a.closes, 1);
    assert_int_equal(b.closes, 1);
}

static void test_large_frame(void **state)
{
    size_t big = 3 * 1024 * 1024;
    char *s = malloc(big + 1);
    json_t *m;
    peer_t a, b;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    memset(s, 'x', big);
    s[big] = '\0';
    m = json_pack("{s:s, s:s}", "type", "blob", "blob", s);
    assert_int_equal(shp_ctl_send(&a.conn, m), SHP_OK);
    send_n(&a, 0);
    json_decref(m);
    free(s);
    TEST_RUN_WHILE(loop, b.msgs < 2 && !a.closes && !b.closes, 10);
    assert_int_equal(b.msgs, 2);
    assert_int_equal(b.big_len, big);
    assert_true(a.conn.stats.write_calls > 1 || b.conn.stats.read_calls > 1);
    shp_conn_close(&a.conn, SHP_OK);
    shp_conn_close(&b.conn, SHP_OK);
}

static void test_malformed_closes(void **state)
{
    static const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
    int sv[2];
    peer_t b;

    (void)state;
    memset(&b, 0, sizeof(b));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&b.conn, loop, &peer_ops, &b, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&b.conn, sv[1]), SHP_OK);
    assert_int_equal(write(sv[0], garbage, sizeof(garbage) - 1),
                     (ssize_t)sizeof(garbage) - 1);
    assert_true(run_until(&b.closes, 2));
    assert_int_equal(b.reason, SHP_ERR_PROTO);
    assert_int_equal(b.frames, 0);
    assert_int_equal(test_log_warnings, 1); /* "dropping connection" */
    test_log_warnings = 0;
    close(sv[0]);
}

static void test_oversize_closes(void **state)
{
    char blob[600];
    json_t *m;
    peer_t a, b;

    (void)state;
    pair(&a, &b, 512);
    memset(blob, 'y', sizeof(blob) - 1);
    blob[sizeof(blob) - 1] = '\0';
    m = json_pack("{s:s, s:s}", "type", "blob", "blob", blob);
    assert_int_equal(shp_ctl_send(&a.conn, m), SHP_OK);
    json_decref(m);
    assert_true(run_until(&b.closes, 2));
    assert_int_equal(b.reason, SHP_ERR_TOO_LARGE);
    assert_true(run_until(&a.closes, 2)); /* a sees the EOF */
    assert_int_equal(a.reason, SHP_ERR_CLOSED);
    test_log_warnings = 0;
}

/* A peer that announces a frame of the largest size and sends a little of
 * it makes us hold what it sent, not what it announced (a 4 MiB buffer
 * per connection before: any peer, authenticated or not, could make a
 * daemon hold that much for each connection it opened). */
static void test_announced_length(void **state)
{
    uint8_t hdr[SHP_CTL_HDR_LEN], body[96 * 1024];
    int sv[2];
    peer_t b;

    (void)state;
    memset(&b, 0, sizeof(b));
    memset(body, '{', sizeof(body));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&b.conn, loop, &peer_ops, &b, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&b.conn, sv[1]), SHP_OK);
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, SHP_CTL_MAX_FRAME - SHP_CTL_HDR_LEN,
                     hdr);
    assert_int_equal(write(sv[0], hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    assert_int_equal(write(sv[0], body, 100), 100);
    TEST_RUN_WHILE(loop, b.conn.rlen < 108, 2);
    assert_int_equal(b.conn.rlen, 108);
    assert_true(b.conn.rcap <= 64 * 1024);
    /* more of it: the buffer grows with what came, by doubling */
    assert_int_equal(write(sv[0], body, sizeof(body)), (ssize_t)sizeof(body));
    TEST_RUN_WHILE(loop, b.conn.rlen < 108 + sizeof(body), 2);
    assert_int_equal(b.conn.rlen, 108 + sizeof(body));
    assert_true(b.conn.rcap >= b.conn.rlen && b.conn.rcap <= 256 * 1024);
    assert_int_equal(b.frames, 0);
    assert_int_equal(b.closes, 0);
    shp_conn_close(&b.conn, SHP_OK);
    close(sv[0]);
}

static void test_eof(void **state)
{
    peer_t a, b;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    send_n(&a, 0);
    shp_conn_flush(&a.conn);
    shp_conn_close(&a.conn, SHP_OK);
    assert_int_equal(a.closes, 1);
    assert_true(run_until(&b.closes, 2));
    assert_int_equal(b.msgs, 1); /* data before the EOF arrives */
    assert_int_equal(b.reason, SHP_ERR_CLOSED);
    /* sending after close fails cleanly */
    assert_int_equal(shp_conn_send(&b.conn, "x", 1, NULL, 0), SHP_ERR_CLOSED);
    shp_conn_close(&b.conn, SHP_OK); /* idempotent */
    assert_int_equal(b.closes, 1);
}

/* shp_conn_push writes at once (the bytes are in the peer's socket before
 * the loop runs); on a dead peer it does not close there (no on_close in
 * the caller's walk): the loop's flush does. */
static void test_push(void **state)
{
    peer_t a, b;
    int queued = 0;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    send_n(&a, 0);
    assert_int_equal(ioctl(b.conn.fd, FIONREAD, &queued), 0);
    assert_int_equal(queued, 0); /* queued in a, not written */
    shp_conn_push(&a.conn);
    assert_int_equal(ioctl(b.conn.fd, FIONREAD, &queued), 0);
    assert_true(queued > 0);
    assert_true(run_until(&b.msgs, 2));

    shp_conn_close(&b.conn, SHP_OK);
    send_n(&a, 1);
    shp_conn_push(&a.conn); /* EPIPE */
    assert_int_equal(a.closes, 0);
    assert_true(run_until(&a.closes, 2));
    assert_int_equal(a.closes, 1);
}

static void test_keepalive_dead_peer(void **state)
{
    int sv[2];
    peer_t b;
    uint64_t t0;
    double secs;

    (void)state;
    memset(&b, 0, sizeof(b));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&b.conn, loop, &peer_ops, &b, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&b.conn, sv[1]), SHP_OK);
    shp_conn_set_keepalive(&b.conn, 0.1, 3);
    t0 = shp_time_ns();
    /* the other end is a process that hangs: open but silent */
    assert_true(run_until(&b.closes, 3));
    secs = (double)(shp_time_ns() - t0) / 1e9;
    assert_int_equal(b.reason, SHP_ERR_KEEPALIVE);
    assert_true(secs >= 0.25 && secs < 1.5);
    close(sv[0]);
}

/* The process stalled (stopped, or starved of CPU) longer than the
 * keepalive while its peer kept talking: when it runs again its timer and
 * its input are due together, and the peer is not taken for dead. */
static void test_keepalive_after_own_stall(void **state)
{
    int sv[2];
    peer_t b;
    uint8_t *frame;
    size_t len;
    json_t *m = json_pack("{s:s, s:i}", "type", "seq", "n", 0);

    (void)state;
    memset(&b, 0, sizeof(b));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&b.conn, loop, &peer_ops, &b, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&b.conn, sv[1]), SHP_OK);
    shp_conn_set_keepalive(&b.conn, 0.1, 3);
    TEST_RUN_WHILE(loop, 1, 0.05);
    usleep(500000); /* this process does not run its loop */
    assert_int_equal(shp_ctl_encode(m, &frame, &len), SHP_OK);
    assert_int_equal(write(sv[0], frame, len), (ssize_t)len);
    free(frame);
    json_decref(m);
    TEST_RUN_WHILE(loop, b.msgs == 0, 0.1);
    assert_int_equal(b.msgs, 1);
    assert_int_equal(b.closes, 0);
    /* and a peer silent from then on is still found dead */
    assert_true(run_until(&b.closes, 3));
    assert_int_equal(b.reason, SHP_ERR_KEEPALIVE);
    close(sv[0]);
}

static void test_keepalive_alive_peer(void **state)
{
    peer_t a, b;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    a.answer_pings = b.answer_pings = 1;
    shp_conn_set_keepalive(&a.conn, 0.1, 3);
    shp_conn_set_keepalive(&b.conn, 0.1, 3);
    TEST_RUN_WHILE(loop, 1, 1.0);
    assert_int_equal(a.closes + b.closes, 0);
    assert_true(a.pings + a.pongs > 0);
    assert_true(b.pings + b.pongs > 0);
    shp_conn_close(&a.conn, SHP_OK);
    shp_conn_close(&b.conn, SHP_OK);
}

static void test_close_inside_frame(void **state)
{
    peer_t a, b;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    b.close_in_frame = 1;
    send_n(&a, 0);
    send_n(&a, 1); /* arrives in the same read: must not be delivered */
    assert_true(run_until(&b.closes, 2));
    assert_int_equal(b.msgs, 1);
    assert_int_equal(b.closes, 1);
    assert_int_equal(b.reason, SHP_ERR_CANCELED);
    assert_true(run_until(&a.closes, 2));
    assert_int_equal(a.reason, SHP_ERR_CLOSED);
}

typedef struct {
    peer_t peers[4];
    int accepted;
} server_t;

static void on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    server_t *s = l->arg;

    peer_t *p = &s->peers[s->accepted++];

    (void)peer;
    assert_true(s->accepted <= 4);
    shp_conn_init(&p->conn, loop, &peer_ops, p, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&p->conn, fd), SHP_OK);
}

/* A listener on 127.0.0.1 (any port) accepting into s, and c connecting
 * to it; c's first message is queued while it connects. */
static void tcp_pair(shp_listener_t *l, server_t *s, peer_t *c)
{
    shp_sockaddr_t addr;

    memset(s, 0, sizeof(*s));
    memset(c, 0, sizeof(*c));
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:0", 0, &addr), SHP_OK);
    assert_int_equal(shp_listener_start(l, loop, &addr, on_accept, s), SHP_OK);
    assert_true(shp_sockaddr_port(&l->addr) > 0);
    shp_conn_init(&c->conn, loop, &peer_ops, c, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_connect(&c->conn, &l->addr, NULL), SHP_OK);
    send_n(c, 0);
}

static void test_tcp_connect(void **state)
{
    shp_listener_t l;
    server_t s;
    peer_t c;
    char name[64];

    (void)state;
    tcp_pair(&l, &s, &c);
    assert_true(run_until(&c.connected, 2));
    assert_true(run_until(&s.peers[0].msgs, 2));
    send_n(&s.peers[0], 0);
    assert_true(run_until(&c.msgs, 2));
    shp_sockaddr_str(&l.addr, name, sizeof(name));
    assert_non_null(strstr(name, "127.0.0.1:"));
    shp_conn_close(&c.conn, SHP_OK);
    assert_true(run_until(&s.peers[0].closes, 2));
    shp_listener_stop(&l);
}

/* A quiet connection (the AN's children but one, while it sleeps): what
 * the peer sends neither wakes the loop nor is read until pulled, in order;
 * lowering the mark reports what waits; the peer's close still wakes it. */
static void test_tcp_quiet(void **state)
{
    shp_listener_t l;
    server_t s;
    peer_t c;
    int never = 0;

    (void)state;
    tcp_pair(&l, &s, &c);
    assert_true(run_until(&s.peers[0].msgs, 2));
    peer_t *q = &s.peers[0];

    assert_int_equal(shp_conn_set_quiet(&q->conn, 1), SHP_OK);
    for (int64_t n = 1; n <= 3; n++) {
        send_n(&c, n);
    }
    run_until(&never, 0.1); /* the client writes; the server reads nothing */
    assert_int_equal(q->msgs, 1);
    shp_conn_pull(&q->conn);
    assert_int_equal(q->msgs, 4);
    assert_int_equal(q->bad_order, 0);

    send_n(&c, 4);
    run_until(&never, 0.1);
    assert_int_equal(q->msgs, 4);
    assert_int_equal(shp_conn_set_quiet(&q->conn, 0), SHP_OK);
    run_until(&never, 0.05);
    assert_int_equal(q->msgs, 5); /* loud again: reported at once */

    assert_int_equal(shp_conn_set_quiet(&q->conn, 1), SHP_OK);
    send_n(&c, 5);
    shp_conn_flush(&c.conn);
    shp_conn_close(&c.conn, SHP_OK);
    /* the close wakes the quiet side, which reads what came before it */
    assert_true(run_until(&q->closes, 2));
    assert_int_equal(q->msgs, 6);
    assert_int_equal(q->bad_order, 0);
    shp_listener_stop(&l);
}

/* Found by fuzzing the AN (tests/fuzz/fuzz_an): a send that fails in
 * on_connect closes the connection there; on_close (which may free it)
 * ran inside on_connect, and conn.c read the connection afterwards. */
static void test_close_inside_connect(void **state)
{
    shp_listener_t l;
    shp_sockaddr_t addr;
    server_t s;
    peer_t *c = calloc(1, sizeof(*c));

    (void)state;
    assert_non_null(c);
    memset(&s, 0, sizeof(s));
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:0", 0, &addr), SHP_OK);
    assert_int_equal(shp_listener_start(&l, loop, &addr, on_accept, &s),
                     SHP_OK);
    shp_conn_init(&c->conn, loop, &peer_ops, c, SHP_CTL_MAX_FRAME);
    c->close_in_connect = 1;
    assert_int_equal(shp_conn_connect(&c->conn, &l.addr, NULL), SHP_OK);
    assert_true(run_until(&c->closes, 2));
    assert_int_equal(c->connected, 1);
    assert_int_equal(c->closes, 1);
    assert_int_equal(c->reason, SHP_ERR_CANCELED);
    free(c);
    assert_true(run_until(&s.peers[0].closes, 2));
    shp_listener_stop(&l);
}

static void test_tcp_refused(void **state)
{
    shp_listener_t l;
    shp_sockaddr_t addr;
    server_t s;
    peer_t c;

    (void)state;
    memset(&c, 0, sizeof(c));
    /* a port that was just free: bind, learn it, close */
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:0", 0, &addr), SHP_OK);
    assert_int_equal(shp_listener_start(&l, loop, &addr, on_accept, &s),
                     SHP_OK);
    addr = l.addr;
    shp_listener_stop(&l);
    shp_conn_init(&c.conn, loop, &peer_ops, &c, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_connect(&c.conn, &addr, NULL), SHP_OK);
    assert_true(run_until(&c.closes, 2));
    assert_int_equal(c.reason, SHP_ERR_CONN_REFUSED);
    assert_int_equal(c.connected, 0);
}

/* A peer that does not read: past max_queued a send fails, the
 * connection stops reading, logs it and is closed before the loop sleeps
 * (never inside the send), on_close seeing `overflowed`; one message
 * larger than the bound still goes into an empty queue. */
static void test_queue_limit(void **state)
{
    char chunk[64 * 1024];
    static char huge[2 * 1024 * 1024];
    peer_t a, b;
    shp_status_t st = SHP_OK;
    int i;

    (void)state;
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    ev_io_stop(loop, &b.conn.rio); /* b stops reading */
    a.conn.max_queued = 1024 * 1024;
    memset(chunk, 0, sizeof(chunk));
    for (i = 0; i < 200 && st == SHP_OK; i++) {
        st = shp_conn_send(&a.conn, chunk, sizeof(chunk), NULL, 0);
    }
    assert_int_equal(st, SHP_ERR_NO_RESOURCE);
    assert_true(a.conn.wlen <= a.conn.max_queued);
    assert_int_equal(a.closes, 0); /* not inside the send */
    assert_int_equal(a.conn.overflowed, 1);
    assert_int_equal(shp_conn_send(&a.conn, "x", 1, NULL, 0),
                     SHP_ERR_NO_RESOURCE);
    assert_true(run_until(&a.closes, 2));
    assert_int_equal(a.reason, SHP_ERR_NO_RESOURCE);
    assert_non_null(strstr(test_log_last, "does not read"));
    test_log_warnings = 0;
    shp_conn_close(&b.conn, SHP_OK);

    /* one message past the bound, into an empty queue */
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    ev_io_stop(loop, &b.conn.rio);
    a.conn.max_queued = 1024 * 1024;
    assert_int_equal(shp_conn_send(&a.conn, huge, sizeof(huge), NULL, 0),
                     SHP_OK);
    assert_int_equal(a.conn.overflowed, 0);
    shp_conn_close(&a.conn, SHP_OK);
    shp_conn_close(&b.conn, SHP_OK);
}

/* The read buffer after a frame: released when nothing of another frame
 * waits (a 1 MiB frame leaves nothing held), kept at rbuf_keep when the
 * owner keeps one. */
static void test_rbuf_released(void **state)
{
    peer_t a, b;
    json_t *m;
    char *blob = malloc(1 << 20);

    (void)state;
    assert_non_null(blob);
    memset(blob, 'x', (1 << 20) - 1);
    blob[(1 << 20) - 1] = '\0';
    pair(&a, &b, SHP_CTL_MAX_FRAME);
    m = json_pack("{s:s, s:s}", "type", "big", "blob", blob);
    assert_int_equal(shp_ctl_send(&a.conn, m), SHP_OK);
    json_decref(m);
    assert_true(run_until(&b.msgs, 5));
    assert_int_equal(b.big_len, (1 << 20) - 1);
    assert_null(b.conn.rbuf);
    assert_int_equal(b.conn.rcap, 0);
    /* kept: the first size, not what the big frame grew it to */
    b.conn.rbuf_keep = SHP_CONN_RBUF_MIN;
    m = json_pack("{s:s, s:s}", "type", "big", "blob", blob);
    assert_int_equal(shp_ctl_send(&a.conn, m), SHP_OK);
    json_decref(m);
    TEST_RUN_WHILE(loop, b.msgs < 2, 5);
    assert_int_equal(b.msgs, 2);
    assert_true(b.conn.rcap <= SHP_CONN_RBUF_MIN);
    m = json_pack("{s:s}", "type", "small");
    assert_int_equal(shp_ctl_send(&a.conn, m), SHP_OK);
    json_decref(m);
    TEST_RUN_WHILE(loop, b.msgs < 3, 5);
    assert_int_equal(b.msgs, 3);
    assert_non_null(b.conn.rbuf);
    assert_int_equal(b.conn.rcap, SHP_CONN_RBUF_MIN);
    shp_conn_close(&a.conn, SHP_OK);
    shp_conn_close(&b.conn, SHP_OK);
    free(blob);
}

static void test_listener_emfile(void **state)
{
    struct rlimit old, low;
    shp_listener_t l;
    shp_sockaddr_t addr;
    server_t s;
    int fds[8], i, nfd, probe;

    (void)state;
    memset(&s, 0, sizeof(s));
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:0", 0, &addr), SHP_OK);
    assert_int_equal(shp_listener_start(&l, loop, &addr, on_accept, &s),
                     SHP_OK);
    /* two client sockets, then no descriptor left for accept() */
    for (i = 0; i < 2; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(
            connect(fds[i], (struct sockaddr *)&l.addr.ss, l.addr.len), 0);
    }
    probe = dup(0);
    nfd = probe;
    close(probe);
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = (rlim_t)nfd; /* the next descriptor is one too many */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    TEST_RUN_WHILE(loop, 1, 0.3);
    assert_int_equal(s.accepted, 0);
    assert_false(ev_is_active(&l.io)); /* paused, not spinning */
    assert_int_equal(test_log_warnings, 1);
    test_log_warnings = 0;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    TEST_RUN_WHILE(loop, s.accepted < 2, 2); /* resumes by itself */
    assert_int_equal(s.accepted, 2);
    for (i = 0; i < 2; i++) {
        shp_conn_close(&s.peers[i].conn, SHP_OK);
        close(fds[i]);
    }
    shp_listener_stop(&l);
}

static void test_sockaddr_parse(void **state)
{
    shp_sockaddr_t a;
    char buf[128];

    (void)state;
    assert_int_equal(shp_sockaddr_parse("127.0.0.2:7100", 0, &a), SHP_OK);
    assert_string_equal(shp_sockaddr_str(&a, buf, sizeof(buf)),
                        "127.0.0.2:7100");
    assert_int_equal(shp_sockaddr_parse("[::1]:80", 0, &a), SHP_OK);
    assert_string_equal(shp_sockaddr_str(&a, buf, sizeof(buf)), "[::1]:80");
    assert_int_equal(shp_sockaddr_parse("127.0.0.1", 9, &a), SHP_OK);
    assert_int_equal(shp_sockaddr_port(&a), 9);
    assert_int_equal(shp_sockaddr_parse("unix:/tmp/x.sock", 0, &a), SHP_OK);
    assert_string_equal(shp_sockaddr_str(&a, buf, sizeof(buf)),
                        "unix:/tmp/x.sock");
    assert_int_equal(shp_sockaddr_parse("/run/sharpd.sock", 0, &a), SHP_OK);
    assert_int_equal(shp_sockaddr_parse("127.0.0.1", 0, &a),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:99999", 0, &a),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("127.0.0.1:", 0, &a),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("::1:80", 0, &a),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse(":80", 0, &a), SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("", 0, &a), SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("unix:", 0, &a), SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sockaddr_parse("no.such.host.invalid:1", 0, &a),
                     SHP_ERR_NOT_FOUND);
}

int main(void)
{
#define T(_f) cmocka_unit_test_setup_teardown(_f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_many_small_batched),
        T(test_large_frame),
        T(test_malformed_closes),
        T(test_oversize_closes),
        T(test_announced_length),
        T(test_eof),
        T(test_push),
        T(test_keepalive_dead_peer),
        T(test_keepalive_after_own_stall),
        T(test_keepalive_alive_peer),
        T(test_close_inside_frame),
        T(test_tcp_connect),
        T(test_tcp_quiet),
        T(test_close_inside_connect),
        T(test_tcp_refused),
        T(test_queue_limit),
        T(test_rbuf_released),
        T(test_listener_emfile),
        T(test_sockaddr_parse),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("conn", tests, NULL, NULL);
}
