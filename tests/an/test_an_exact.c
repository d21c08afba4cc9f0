/* Exact-mode messages at the aggregation node (an in-memory transport,
 * shp_tp_find wrapped at link time, as in test_an_link): the wire checks,
 * a fold that keeps the EXACT flag and the lanes, the per-group count the
 * manager shows in `sharpctl groups`, and malformed accumulators refused
 * with an error that fails the group. */
#include "tests/support/test_util.h"
#include "tests/support/group_keys.h"

#include "an/an.h"
#include "protocol/ctl.h"
#include "reduce/exact.h"

#include <stdlib.h>

static struct ev_loop *loop;

/* The transport: sends are recorded (the last header and payload). */
static int sends, closes, opened;
static shp_status_t send_status;
static shp_wire_hdr_t last_sent;
static shp_tp_accept_cb_t accept_cb;

static shp_status_t mem_init(shp_tp_t *tp)
{
    (void)tp;
    return SHP_OK;
}

static shp_status_t mem_connect(shp_tp_t *tp, const char *addr,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **ep)
{
    shp_tp_ep_t *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    e->tp = tp;
    e->cbs = cbs;
    e->arg = arg;
    snprintf(e->peer, sizeof(e->peer), "%s", addr);
    *ep = e;
    opened++;
    return SHP_OK;
}

static uint8_t last_payload[4096];

static shp_status_t mem_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    (void)ep;
    sends++;
    last_sent = *hdr;
    if (payload != NULL && hdr->payload_len <= sizeof(last_payload)) {
        memcpy(last_payload, payload, hdr->payload_len);
    }
    return send_status;
}

static shp_status_t mem_listen(shp_tp_t *tp, const char *addr,
                               shp_tp_accept_cb_t on_accept)
{
    (void)tp;
    (void)addr;
    accept_cb = on_accept;
    return SHP_OK;
}

static const char *mem_listen_addr(shp_tp_t *tp)
{
    (void)tp;
    return "127.0.0.1:7000";
}

static void mem_close(shp_tp_ep_t *ep)
{
    closes++;
    ep->cbs->on_close(ep, SHP_ERR_CANCELED);
    free(ep);
}

static const shp_tp_ops_t mem_ops = {
    .name = "mem",
    .init = mem_init,
    .cleanup = shp_tp_stub_cleanup,
    .listen = mem_listen,
    .listen_addr = mem_listen_addr,
    .connect = mem_connect,
    .send = mem_send,
    .close = mem_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
    .dump = shp_tp_stub_dump,
};

const shp_tp_ops_t *__wrap_shp_tp_find(const char *name);
const shp_tp_ops_t *__wrap_shp_tp_find(const char *name)
{
    (void)name;
    return &mem_ops;
}

static const uint8_t key[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
                                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};

static void deliver(shp_tp_ep_t *ep, const shp_wire_hdr_t *h,
                    const void *payload)
{
    uint8_t msg[SHP_WIRE_HDR_LEN + 1024];
    shp_wire_hdr_pack(h, msg);
    memcpy(msg + SHP_WIRE_HDR_LEN, payload, h->payload_len);
    memset(&last_sent, 0, sizeof(last_sent));
    assert_int_equal(shp_tp_deliver(ep, msg, SHP_WIRE_HDR_LEN + h->payload_len),
                     SHP_OK);
}

static void join(shp_tp_ep_t *ep, uint32_t gid, uint32_t ci)
{
    uint8_t p[SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;
    /* proved over the nonce the AN sent the link when it accepted it */
    const shp_an_link_t *l = ep->arg;
    shp_wire_join_make(key, l->nonce, 0, gid, 5, ci, &h, p);
    deliver(ep, &h, p);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_JOIN_ACK);
    assert_int_equal(last_sent.status, SHP_OK);
}

/* an exact-mode request: `n` int64 lanes, `lanes` per element */
static void exact_req(shp_tp_ep_t *ep, uint32_t seq, const int64_t *v,
                      uint32_t n, uint8_t lanes)
{
    shp_reduce_desc_t d = {SHP_DTYPE_I64, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_hdr_t h;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 0, 7, seq, &d, n);
    h.flags = SHP_WIRE_F_EXACT;
    h.lanes = lanes;
    deliver(ep, &h, v);
}

static void test_wire_checks(void **state)
{
    (void)state;
    shp_reduce_desc_t d = {SHP_DTYPE_I64, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_hdr_t h, u;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    const char *why = NULL;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 0, 7, 0, &d, 6);
    h.flags = SHP_WIRE_F_EXACT;
    h.lanes = 3;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 48, 4096, &why),
                     SHP_OK);
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(raw[19], 3); /* the lanes byte */
    shp_wire_hdr_unpack(raw, &u);
    assert_int_equal(u.lanes, 3);
    h.lanes = 4; /* 6 lanes are not whole elements of 4 */
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 48, 4096, &why),
                     SHP_ERR_PROTO);
    assert_non_null(strstr(why, "exact"));
    h.lanes = 0;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 48, 4096, NULL),
                     SHP_ERR_PROTO);
    h.lanes = 3;
    h.op = SHP_OP_MAX;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 48, 4096, NULL),
                     SHP_ERR_PROTO);
    h.op = SHP_OP_SUM;
    h.dtype = SHP_DTYPE_F64;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 48, 4096, NULL),
                     SHP_ERR_PROTO);
    /* outside exact mode the byte is reserved: not read */
    h.dtype = SHP_DTYPE_I64;
    h.flags = 0;
    shp_wire_hdr_pack(&h, raw);
    assert_int_equal(raw[19], 0);
    raw[19] = 9;
    shp_wire_hdr_unpack(raw, &u);
    assert_int_equal(u.lanes, 0);
}

static shp_an_t an;
static shp_tp_ep_t *eps[2];

static void start_group(void)
{
    static char name[] = "an0", listen[] = "127.0.0.1:0", empty[] = "";
    const char *why = NULL;
    json_t *req;

    send_status = SHP_OK;
    memset(&an, 0, sizeof(an));
    an.cfg.name = name;
    an.cfg.listen = listen;
    an.cfg.am = empty;
    an.cfg.advertise = empty;
    an.cfg.max_trees = 4;
    an.cfg.max_groups = 8;
    an.cfg.max_osts = 4;
    an.cfg.max_payload = 4096;
    assert_int_equal(shp_an_start(&an, loop), SHP_OK);
    req = json_pack("{s:i, s:n}", "tree_id", 0, "parent");
    assert_int_equal(shp_an_tree_set(&an, req, &why), SHP_OK);
    json_decref(req);
    req = group_keys(json_pack(
        "{s:i, s:i, s:s, s:s, s:i, s:i, s:[{s:s}, {s:s}], s:b}", "group_id", 7,
        "tree_id", 0, "job_id", "5", "job_key",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        "osts", 2, "payload", 1024, "children", "kind", "member", "kind",
        "member", "top", 1));
    assert_int_equal(shp_an_group_add(&an, req, 1, &why), SHP_OK);
    json_decref(req);
    for (int i = 0; i < 2; i++) {
        eps[i] = calloc(1, sizeof(*eps[i]));
        assert_non_null(eps[i]);
        eps[i]->tp = &an.tp;
        accept_cb(&an.tp, eps[i]);
        join(eps[i], 7, (uint32_t)i);
    }
}

static void stop_group(void)
{
    for (int i = 0; i < 2; i++) {
        eps[i]->cbs->on_close(eps[i], SHP_ERR_IO);
        free(eps[i]);
    }
    shp_an_stop(&an);
}

/* two members' lanes are added; the result keeps the flag and the lanes;
 * the group counts it */
static void test_fold_and_count(void **state)
{
    (void)state;
    start_group();
    int64_t a[4] = {1, -5, (int64_t)1 << 40, 7};
    int64_t b[4] = {2, 5, -((int64_t)1 << 41), 0};
    exact_req(eps[0], 0, a, 4, 2);
    assert_int_equal(last_sent.opcode, 0); /* waits for the other */
    exact_req(eps[1], 0, b, 4, 2);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_AGG_RESULT);
    assert_true(last_sent.flags & SHP_WIRE_F_EXACT);
    assert_int_equal(last_sent.lanes, 2);
    assert_int_equal(last_sent.count, 4);
    int64_t got[4];
    memcpy(got, last_payload, sizeof(got));
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 0);
    assert_int_equal(got[2], -((int64_t)1 << 40));
    assert_int_equal(got[3], 7);
    assert_int_equal(shp_an_group_find(&an, 7)->exact_ops, 1);
    json_t *st = shp_an_stats_json(&an);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(st, "exact_ops"), "7")),
                     1);
    json_decref(st);
    /* members that disagree on the lanes: a mismatch, the group fails */
    exact_req(eps[0], 1, a, 4, 2);
    exact_req(eps[1], 1, b, 4, 4);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_ERROR);
    assert_int_equal(last_sent.status, SHP_ERR_MISMATCH);
    assert_true(shp_an_group_find(&an, 7)->failed);
    stop_group();
}

/* a lane beyond +-2^52 is a malformed accumulator: an error, the group
 * fails, the AN counts it */
static void test_malformed_accumulator(void **state)
{
    (void)state;
    start_group();
    int64_t a[2] = {1, SHP_EXACT_LANE_MAX + 1};
    exact_req(eps[0], 0, a, 2, 2);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_ERROR);
    assert_int_equal(last_sent.status, SHP_ERR_PROTO);
    assert_non_null(
        memmem(last_payload, last_sent.payload_len, "malformed", 9));
    assert_int_equal(an.stats.err_malformed, 1);
    assert_true(shp_an_group_find(&an, 7)->failed);
    stop_group();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_checks),
        cmocka_unit_test(test_fold_and_count),
        cmocka_unit_test(test_malformed_accumulator),
    };
    shp_log_set_level(SHP_LOG_FATAL);
    loop = ev_default_loop(0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
