/* Transports: tcp messages both ways with validation, malformed input,
 * udp multicast on loopback with and without induced loss, stubs. */
#include "../test_util.h"

#include "common/net.h"
#include "common/time.h"
#include "common/transport.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static struct ev_loop *loop;

typedef struct {
    int msgs, closes, connected;
    shp_status_t reason;
    uint32_t last_seq;
    uint32_t sum;
    shp_tp_ep_t *ep;
} rx_t;

static void rx_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    rx_t *r = ep->arg;
    uint32_t v = 0;

    r->msgs++;
    r->last_seq = hdr->seq;
    if (hdr->payload_len >= 4) {
        memcpy(&v, payload, 4);
    }
    r->sum += v;
}

static void rx_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    rx_t *r = ep->arg;

    if (r == NULL) { /* a sender */
        return;
    }
    r->closes++;
    r->reason = reason;
    r->ep = NULL;
}

static void rx_connect(shp_tp_ep_t *ep)
{
    ((rx_t *)ep->arg)->connected = 1;
}

static const shp_tp_ep_cbs_t rx_cbs = {rx_msg, rx_connect, rx_close};

static rx_t server_rx;

static void on_accept(shp_tp_t *tp, shp_tp_ep_t *ep)
{
    (void)tp;
    ep->cbs = &rx_cbs;
    ep->arg = &server_rx;
    server_rx.ep = ep;
}

static int setup(void **state)
{
    loop = ev_loop_new(EVFLAG_AUTO);
    memset(&server_rx, 0, sizeof(server_rx));
    return test_log_setup(state);
}

static int teardown(void **state)
{
    ev_loop_destroy(loop);
    return test_log_teardown(state);
}

static void make_msg(shp_wire_hdr_t *h, uint32_t seq, uint32_t count)
{
    shp_reduce_desc_t d = {SHP_DTYPE_U32, SHP_OP_SUM, SHP_DTYPE_NULL};

    shp_wire_hdr_init_agg(h, SHP_WIRE_OP_AGG_REQ, 1, 5, seq, &d, count);
}

static void test_tcp_roundtrip(void **state)
{
    shp_tp_t tp;
    shp_tp_ep_t *c;
    shp_wire_hdr_t h;
    uint32_t payload[64];
    rx_t crx = {0};
    uint32_t i;

    (void)state;
    assert_int_equal(
        shp_tp_init(&tp, shp_tp_find("tcp"), loop, 1024, "127.0.0.1"), SHP_OK);
    assert_int_equal(tp.ops->listen(&tp, "127.0.0.1:0", on_accept), SHP_OK);
    assert_non_null(tp.ops->listen_addr(&tp));
    assert_int_equal(
        tp.ops->connect(&tp, tp.ops->listen_addr(&tp), &rx_cbs, &crx, &c),
        SHP_OK);
    crx.ep = c;
    for (i = 0; i < 64; i++) {
        payload[i] = 1;
    }
    for (i = 0; i < 1000; i++) {
        make_msg(&h, i, 1 + i % 64);
        assert_int_equal(shp_tp_send(c, &h, payload), SHP_OK);
    }
    TEST_RUN_WHILE(loop, server_rx.msgs < 1000, 5);
    assert_int_equal(server_rx.msgs, 1000);
    assert_int_equal(server_rx.last_seq, 999);
    assert_int_equal(server_rx.sum, 1000);
    assert_true(crx.connected);
    /* and back */
    make_msg(&h, 7, 1);
    assert_int_equal(shp_tp_send(server_rx.ep, &h, payload), SHP_OK);
    TEST_RUN_WHILE(loop, crx.msgs < 1, 2);
    assert_int_equal(crx.last_seq, 7);
    shp_tp_close(c);
    assert_int_equal(crx.closes, 1);
    TEST_RUN_WHILE(loop, server_rx.closes < 1, 2);
    assert_int_equal(server_rx.reason, SHP_ERR_CLOSED);
    shp_tp_cleanup(&tp);
}

static void test_tcp_malformed(void **state)
{
    shp_tp_t tp;
    shp_sockaddr_t sa;
    shp_wire_hdr_t h;
    uint8_t raw[SHP_WIRE_HDR_LEN + 8];
    int fd;

    (void)state;
    assert_int_equal(shp_tp_init(&tp, shp_tp_find("tcp"), loop, 1024, NULL),
                     SHP_OK);
    assert_int_equal(tp.ops->listen(&tp, "127.0.0.1:0", on_accept), SHP_OK);
    assert_int_equal(shp_sockaddr_parse(tp.ops->listen_addr(&tp), 0, &sa),
                     SHP_OK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    /* count says 3 u32 (12 bytes) but the payload is 8 */
    make_msg(&h, 1, 2);
    h.count = 3;
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    TEST_RUN_WHILE(loop, server_rx.closes < 1, 2);
    assert_int_equal(server_rx.closes, 1);
    assert_int_equal(server_rx.msgs, 0);
    assert_int_equal(server_rx.reason, SHP_ERR_PROTO);
    assert_int_equal(tp.stats.malformed, 1);
    test_log_warnings = 0; /* the malformed message was logged */
    close(fd);
    shp_tp_cleanup(&tp);
}

static void test_tcp_payload_too_large(void **state)
{
    shp_tp_t tp;
    shp_sockaddr_t sa;
    shp_wire_hdr_t h;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    int fd;

    (void)state;
    assert_int_equal(shp_tp_init(&tp, shp_tp_find("tcp"), loop, 64, NULL),
                     SHP_OK);
    assert_int_equal(tp.ops->listen(&tp, "127.0.0.1:0", on_accept), SHP_OK);
    assert_int_equal(shp_sockaddr_parse(tp.ops->listen_addr(&tp), 0, &sa),
                     SHP_OK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa.ss, sa.len), 0);
    make_msg(&h, 1, 1000); /* 4000 bytes announced, max is 64 */
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    TEST_RUN_WHILE(loop, server_rx.closes < 1, 2);
    assert_int_equal(server_rx.reason, SHP_ERR_TOO_LARGE);
    test_log_warnings = 0;
    close(fd);
    shp_tp_cleanup(&tp);
}

static void test_udp_mcast(void **state)
{
    shp_tp_t tp;
    shp_tp_ep_t *tx, *rx1, *rx2;
    rx_t r1 = {0}, r2 = {0};
    shp_wire_hdr_t h;
    uint32_t v = 3;
    int i;

    (void)state;
    assert_int_equal(
        shp_tp_init(&tp, shp_tp_find("udp"), loop, 1024, "127.0.0.1"), SHP_OK);
    assert_int_equal(
        tp.ops->mcast_join(&tp, "239.77.1.1:17301", &rx_cbs, &r1, &rx1),
        SHP_OK);
    assert_int_equal(
        tp.ops->mcast_join(&tp, "239.77.1.1:17301", &rx_cbs, &r2, &rx2),
        SHP_OK);
    assert_int_equal(
        tp.ops->mcast_sender(&tp, "239.77.1.1:17301", &rx_cbs, NULL, &tx),
        SHP_OK);
    for (i = 0; i < 100; i++) {
        make_msg(&h, (uint32_t)i, 1);
        assert_int_equal(shp_tp_send(tx, &h, &v), SHP_OK);
    }
    TEST_RUN_WHILE(loop, r1.msgs < 100 || r2.msgs < 100, 2);
    assert_int_equal(r1.msgs, 100); /* every receiver gets a copy */
    assert_int_equal(r2.msgs, 100);
    assert_int_equal(r1.sum, 300);
    /* receivers cannot send; senders refuse oversize payloads */
    assert_int_equal(shp_tp_send(rx1, &h, &v), SHP_ERR_UNSUPPORTED);
    make_msg(&h, 0, 1000);
    assert_int_equal(shp_tp_send(tx, &h, NULL), SHP_ERR_TOO_LARGE);
    shp_tp_close(rx1);
    shp_tp_close(rx2);
    shp_tp_close(tx);
    assert_int_equal(r1.closes + r2.closes, 2);
    shp_tp_cleanup(&tp);
}

static void test_udp_isolated_groups(void **state)
{
    shp_tp_t tp;
    shp_tp_ep_t *tx, *rx1, *rx2;
    rx_t r1 = {0}, r2 = {0};
    shp_wire_hdr_t h;
    uint32_t v = 1;

    (void)state;
    assert_int_equal(
        shp_tp_init(&tp, shp_tp_find("udp"), loop, 1024, "127.0.0.1"), SHP_OK);
    /* same port, different groups: no cross delivery */
    assert_int_equal(
        tp.ops->mcast_join(&tp, "239.77.1.2:17302", &rx_cbs, &r1, &rx1),
        SHP_OK);
    assert_int_equal(
        tp.ops->mcast_join(&tp, "239.77.1.3:17302", &rx_cbs, &r2, &rx2),
        SHP_OK);
    assert_int_equal(
        tp.ops->mcast_sender(&tp, "239.77.1.2:17302", &rx_cbs, NULL, &tx),
        SHP_OK);
    make_msg(&h, 1, 1);
    assert_int_equal(shp_tp_send(tx, &h, &v), SHP_OK);
    TEST_RUN_WHILE(loop, r1.msgs < 1, 2);
    TEST_RUN_WHILE(loop, 1, 0.1); /* time for a wrong delivery */
    assert_int_equal(r1.msgs, 1);
    assert_int_equal(r2.msgs, 0);
    shp_tp_close(rx1);
    shp_tp_close(rx2);
    shp_tp_close(tx);
    shp_tp_cleanup(&tp);
}

static void test_udp_drop(void **state)
{
    shp_tp_t tp;
    shp_tp_ep_t *tx, *rx;
    rx_t r = {0};
    shp_wire_hdr_t h;
    uint32_t v = 1;
    int i;

    (void)state;
    assert_int_equal(
        shp_tp_init(&tp, shp_tp_find("udp"), loop, 1024, "127.0.0.1"), SHP_OK);
    tp.mcast_drop = 0.2;
    assert_int_equal(
        tp.ops->mcast_join(&tp, "239.77.1.4:17303", &rx_cbs, &r, &rx), SHP_OK);
    assert_int_equal(
        tp.ops->mcast_sender(&tp, "239.77.1.4:17303", &rx_cbs, NULL, &tx),
        SHP_OK);
    for (i = 0; i < 1000; i++) {
        make_msg(&h, (uint32_t)i, 1);
        assert_int_equal(shp_tp_send(tx, &h, &v), SHP_OK);
        if (i % 100 == 0) {
            ev_run(loop, EVRUN_NOWAIT);
        }
    }
    TEST_RUN_WHILE(loop, (uint64_t)r.msgs + tp.stats.mcast_dropped < 1000, 2);
    assert_int_equal((uint64_t)r.msgs + tp.stats.mcast_dropped, 1000);
    assert_true(tp.stats.mcast_dropped > 120 && tp.stats.mcast_dropped < 280);
    shp_tp_close(rx);
    shp_tp_close(tx);
    shp_tp_cleanup(&tp);
}

static void test_udp_bad_group(void **state)
{
    shp_tp_t tp;
    shp_tp_ep_t *ep;
    rx_t r = {0};

    (void)state;
    assert_int_equal(shp_tp_init(&tp, shp_tp_find("udp"), loop, 1024, NULL),
                     SHP_OK);
    assert_int_equal(tp.ops->mcast_join(&tp, "10.0.0.1:5000", &rx_cbs, &r, &ep),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(tp.ops->mcast_join(&tp, "nonsense", &rx_cbs, &r, &ep),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(tp.ops->connect(&tp, "127.0.0.1:1", &rx_cbs, &r, &ep),
                     SHP_ERR_UNSUPPORTED);
    shp_tp_cleanup(&tp);
}

static void test_registry_and_stubs(void **state)
{
    shp_tp_t tp;

    (void)state;
    assert_non_null(shp_tp_find("tcp"));
    assert_non_null(shp_tp_find("udp"));
    assert_non_null(shp_tp_find("verbs"));
    assert_null(shp_tp_find("carrier-pigeon"));
    assert_int_equal(shp_tp_init(&tp, shp_tp_find("verbs"), loop, 1024, NULL),
                     SHP_ERR_UNSUPPORTED);
}

int main(void)
{
#define T(_f) cmocka_unit_test_setup_teardown(_f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_tcp_roundtrip),         T(test_tcp_malformed),
        T(test_tcp_payload_too_large), T(test_udp_mcast),
        T(test_udp_isolated_groups),   T(test_udp_drop),
        T(test_udp_bad_group),         T(test_registry_and_stubs),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
