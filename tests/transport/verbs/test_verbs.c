/*
 * The verbs transport against a real (soft-RoCE) device: run inside the
 * rxe guest (tests/transport/verbs/rxe-run.sh), exit 77 where there is no RDMA device.
 *
 *   rc          connect to a listener on SHARP_RXE_IP, 3000 messages each
 *               way with payloads of 0 to 16 KiB (more than the send and
 *               receive rings: flow control; above 4 KiB a message goes
 *               in several sends, put back together), every byte and the
 *               order checked
 *   one way     10000 more messages from the client only: the server never
 *               sends, so its receives come back in credit-only messages
 *               (without them the client would stop after one grant)
 *   bad input   a malformed message closes the connection and counts
 *   foreign     a peer whose connect carries none of our private data (no
 *               credit grant) is rejected
 *   multicast   a UD sender and a receiver joined to one group through
 *               rdma_cm: 200 datagrams, each intact (and nearly all there:
 *               the guest loops them back); one above the path MTU refused
 *   close       the client closes: the server side learns, exactly once
 */
#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "transport/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMSG 3000
#define NONEWAY 10000
#define MAXP (16 * 1024)

static struct ev_loop *loop;
static shp_tp_t tp;
static shp_tp_ep_t *srv, *cli, *mrx, *mtx;
static int fails, connected, mready, srv_closed, cli_closed;
static uint32_t got_srv, got_cli, mgot;

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "test_verbs: ");                                   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            fails++;                                                           \
        }                                                                      \
    } while (0)

static uint32_t plen(uint32_t i)
{
    return (i * 2654435761u) % (MAXP / 4 + 1) * 4 * (i % 7 == 0);
}

static void fill(uint8_t *p, uint32_t n, uint32_t seed)
{
    for (uint32_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(seed * 31 + i * 7);
    }
}

static void send_one(shp_tp_ep_t *ep, uint32_t i)
{
    static uint8_t buf[MAXP];
    shp_reduce_desc_t d = {SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL};
    shp_wire_hdr_t h;
    uint32_t n = plen(i);
    fill(buf, n, i);
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 1, 7, i, &d, n);
    CHECK(shp_tp_send(ep, &h, buf) == SHP_OK, "send %u", i);
}

static void check_msg(const shp_wire_hdr_t *h, const void *p, uint32_t want)
{
    static uint8_t buf[MAXP];
    CHECK(h->seq == want, "message %u arrived as %u", want, h->seq);
    CHECK(h->payload_len == plen(want), "message %u: %u bytes", want,
          h->payload_len);
    fill(buf, h->payload_len, want);
    CHECK(memcmp(buf, p, h->payload_len) == 0, "message %u: wrong bytes", want);
}

static void srv_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *h, const void *p)
{
    (void)ep;
    check_msg(h, p, got_srv++);
}

static void srv_close(shp_tp_ep_t *ep, shp_status_t r)
{
    (void)ep;
    (void)r;
    srv_closed++;
    srv = NULL;
}

static const shp_tp_ep_cbs_t srv_cbs = {srv_msg, NULL, srv_close};

static void on_accept(shp_tp_t *t, shp_tp_ep_t *ep)
{
    (void)t;
    ep->cbs = &srv_cbs;
    srv = ep;
}

static void cli_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *h, const void *p)
{
    (void)ep;
    check_msg(h, p, got_cli++);
}

static void cli_connect(shp_tp_ep_t *ep)
{
    (void)ep;
    connected = 1;
}

static void cli_close(shp_tp_ep_t *ep, shp_status_t r)
{
    (void)ep;
    (void)r;
    cli_closed++;
    cli = NULL;
}

static const shp_tp_ep_cbs_t cli_cbs = {cli_msg, cli_connect, cli_close};

static void m_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *h, const void *p)
{
    uint8_t buf[256];
    CHECK(ep == mrx, "the sender delivered a datagram");
    fill(buf, 64, h->seq);
    CHECK(h->payload_len == 64 && memcmp(buf, p, 64) == 0,
          "datagram %u damaged", h->seq);
    mgot++;
}

static void m_connect(shp_tp_ep_t *ep)
{
    (void)ep;
    mready++;
}

static void m_close(shp_tp_ep_t *ep, shp_status_t r)
{
    CHECK(r == SHP_ERR_CANCELED, "multicast endpoint lost: %s",
          shp_status_str(r));
    if (ep == mrx) {
        mrx = NULL;
    } else {
        mtx = NULL;
    }
}

static const shp_tp_ep_cbs_t m_cbs = {m_msg, m_connect, m_close};

static void run_until(int *flag, int want, double secs)
{
    uint64_t end = shp_time_ns() + (uint64_t)(secs * 1e9);
    while (*flag < want && shp_time_ns() < end) {
        ev_run(loop, EVRUN_NOWAIT);
    }
}

static int run_while_u32(uint32_t *v, uint32_t want, double secs)
{
    uint64_t end = shp_time_ns() + (uint64_t)(secs * 1e9);
    while (*v < want && shp_time_ns() < end) {
        ev_run(loop, EVRUN_NOWAIT);
    }
    return *v >= want;
}

/* the next event on a raw rdma_cm channel, the transport's loop turning
 * meanwhile (the listener is in this process); -1 if none came */
static int raw_event(struct rdma_event_channel *ch, double secs)
{
    uint64_t end = shp_time_ns() + (uint64_t)(secs * 1e9);
    struct rdma_cm_event *ev;
    while (shp_time_ns() < end) {
        if (rdma_get_cm_event(ch, &ev) == 0) {
            int e = (int)ev->event;
            rdma_ack_cm_event(ev);
            return e;
        }
        ev_run(loop, EVRUN_NOWAIT);
    }
    return -1;
}

/* A plain rdma_cm client (no private data) connects to `addr`: the event
 * it ends with. */
static int foreign_connect(const char *ip, const char *addr)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {0};
    struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 1,
                                          .max_recv_wr = 1,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    struct rdma_conn_param cp = {.retry_count = 1, .rnr_retry_count = 1};
    shp_sockaddr_t sa;
    int e = -1;
    if (ch == NULL || shp_sockaddr_parse(addr, 1, &sa) != SHP_OK ||
        inet_pton(AF_INET, ip, &src.sin_addr) != 1) {
        return -1;
    }
    memcpy(&dst, &sa.ss, sizeof(dst));
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 &&
        rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
                          2000) == 0 &&
        raw_event(ch, 5) == RDMA_CM_EVENT_ADDR_RESOLVED &&
        rdma_resolve_route(id, 2000) == 0 &&
        raw_event(ch, 5) == RDMA_CM_EVENT_ROUTE_RESOLVED &&
        rdma_create_qp(id, NULL, &qa) == 0 && rdma_connect(id, &cp) == 0) {
        e = raw_event(ch, 10);
    }
    if (id != NULL) {
        if (id->qp != NULL) {
            rdma_destroy_qp(id);
        }
        rdma_destroy_id(id);
    }
    rdma_destroy_event_channel(ch);
    return e;
}

int main(void)
{
    const char *ip = getenv("SHARP_RXE_IP");
    int ndev = 0;
    struct ibv_device **devs = ibv_get_device_list(&ndev);
    if (devs == NULL || ndev == 0 || ip == NULL) {
        printf("skip: no RDMA device here (run it in "
               "tests/transport/verbs/rxe-run.sh)\n");
        return 77;
    }
    ibv_free_device_list(devs);
    shp_log_set_level(SHP_LOG_WARN);
    loop = ev_default_loop(0);
    if (shp_tp_init(&tp, &shp_tp_verbs_ops, loop, MAXP, ip) != SHP_OK) {
        printf("FAIL: verbs transport init\n");
        return 1;
    }
    char addr[80];
    snprintf(addr, sizeof(addr), "%s:0", ip);
    CHECK(tp.ops->listen(&tp, addr, on_accept) == SHP_OK, "listen");
    const char *la = tp.ops->listen_addr(&tp);
    CHECK(la != NULL && strncmp(la, ip, strlen(ip)) == 0, "listen address %s",
          la ? la : "none");
    CHECK(tp.ops->connect(&tp, la, &cli_cbs, NULL, &cli) == SHP_OK, "connect");
    run_until(&connected, 1, 10);
    CHECK(connected && srv != NULL, "no connection");
    if (fails) {
        return 1;
    }

    /* rc: both ways at once, more than the rings hold */
    for (uint32_t i = 0; i < NMSG; i++) {
        send_one(cli, i);
        send_one(srv, i);
    }
    CHECK(run_while_u32(&got_srv, NMSG, 60) &&
              run_while_u32(&got_cli, NMSG, 60),
          "rc: %u and %u of %u messages arrived", got_srv, got_cli, NMSG);
    printf("rc: %u messages each way, 0-16 KiB, in order and intact\n", NMSG);

    /* one way: credits must come back without data to carry them */
    for (uint32_t i = NMSG; i < NMSG + NONEWAY; i++) {
        send_one(cli, i);
    }
    CHECK(run_while_u32(&got_srv, NMSG + NONEWAY, 60),
          "one way: %u of %u messages arrived", got_srv - NMSG, NONEWAY);
    printf("one way: %u messages, credits returned alone\n", got_srv - NMSG);

    /* a connect without our private data is refused, nothing is set up */
    {
        shp_tp_ep_t *before = srv;
        int e = foreign_connect(ip, la);
        CHECK(e == RDMA_CM_EVENT_REJECTED, "foreign connect: %s, want %s",
              e >= 0 ? rdma_event_str(e) : "no event",
              rdma_event_str(RDMA_CM_EVENT_REJECTED));
        CHECK(srv == before, "a foreign peer was accepted");
        printf("foreign: a connect without our private data rejected\n");
    }

    /* multicast through rdma_cm */
    char group[64];
    snprintf(group, sizeof(group), "239.77.9.9:20000");
    CHECK(tp.ops->mcast_join(&tp, group, &m_cbs, NULL, &mrx) == SHP_OK,
          "mcast_join");
    CHECK(tp.ops->mcast_sender(&tp, group, &m_cbs, NULL, &mtx) == SHP_OK,
          "mcast_sender");
    run_until(&mready, 2, 10);
    CHECK(mready == 2, "multicast joins: %d of 2", mready);
    if (mready == 2) {
        shp_reduce_desc_t d = {SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL};
        uint8_t buf[MAXP];
        shp_wire_hdr_t h;
        for (uint32_t i = 0; i < 200; i++) {
            fill(buf, 64, i);
            shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 1, 7, i, &d, 64);
            h.flags = SHP_WIRE_F_MCAST;
            CHECK(shp_tp_send(mtx, &h, buf) == SHP_OK, "mcast send %u", i);
            if (i % 16 == 15) {
                ev_run(loop, EVRUN_NOWAIT);
            }
        }
        run_while_u32(&mgot, 200, 5);
        CHECK(mgot >= 190 && mgot <= 200, "multicast: %u of 200 datagrams",
              mgot);
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 1, 7, 999, &d, MAXP);
        CHECK(shp_tp_send(mtx, &h, buf) == SHP_ERR_TOO_LARGE,
              "a datagram above the MTU was not refused");
        printf("multicast: %u of 200 datagrams, intact\n", mgot);
    }

    /* bad input: a malformed header closes the receiving side */
    {
        uint64_t before = tp.stats.malformed;
        shp_wire_hdr_t h;
        shp_wire_hdr_init(&h, SHP_WIRE_OP_AGG_REQ, 1, 7, 5);
        h.dtype = 200; /* not a dtype */
        h.count = 1;
        h.payload_len = 4;
        uint8_t four[4] = {0};
        CHECK(shp_tp_send(cli, &h, four) == SHP_OK, "send malformed");
        run_until(&srv_closed, 1, 10);
        CHECK(srv_closed == 1 && tp.stats.malformed > before,
              "a malformed message did not close the connection (%d, %llu)",
              srv_closed, (unsigned long long)tp.stats.malformed);
        run_until(&cli_closed, 1, 10);
        CHECK(cli_closed == 1, "the client did not learn of the close");
        printf("bad input: connection closed, counted\n");
    }
    if (mrx != NULL) {
        shp_tp_close(mrx);
    }
    if (mtx != NULL) {
        shp_tp_close(mtx);
    }
    ev_run(loop, EVRUN_NOWAIT);
    shp_tp_cleanup(&tp);
    CHECK(srv_closed == 1 && cli_closed == 1, "on_close not exactly once");
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
