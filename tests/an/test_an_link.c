/* The aggregation node's links on an in-memory transport (shp_tp_find is
 * wrapped at link time): a send that fails while the AN is inside one of
 * its callbacks, a member that joins one group twice, a group removed while
 * its members wait. */
#include "tests/support/test_util.h"
#include "tests/support/group_keys.h"

#include "an/an_int.h"
#include "protocol/ctl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static struct ev_loop *loop;

/* The transport: connect hands out an endpoint; sends answer send_status
 * (SHP_ERR_NO_RESOURCE: a peer that does not read) and are recorded;
 * close calls on_close at once, as tcp does outside on_msg, and frees the
 * endpoint. */
static int sends, closes, opened;
static shp_status_t send_status;
static shp_wire_hdr_t last_sent;
/* the errors sent, in order, and to which endpoint */
static struct {
    shp_tp_ep_t *ep;
    int16_t status;
} errs[8];
static int nerrs;
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

/* the last payload sent, and the nonce each endpoint was sent */
static uint8_t last_payload[SHP_WIRE_ERR_MSG_MAX];
static struct {
    shp_tp_ep_t *ep;
    uint8_t nonce[SHP_WIRE_NONCE_LEN];
} nonces[16];
static int nnonces;

static const uint8_t *nonce_of(const shp_tp_ep_t *ep)
{
    for (int i = nnonces - 1; i >= 0; i--) {
        if (nonces[i].ep == ep) {
            return nonces[i].nonce;
        }
    }
    fail_msg("no nonce was sent to this endpoint");
    return NULL;
}

static shp_status_t mem_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    sends++;
    last_sent = *hdr;
    if (payload != NULL && hdr->payload_len <= sizeof(last_payload)) {
        memcpy(last_payload, payload, hdr->payload_len);
    }
    if (hdr->opcode == SHP_WIRE_OP_JOIN_NONCE && nnonces < 16) {
        nonces[nnonces].ep = ep;
        memcpy(nonces[nnonces++].nonce, payload, SHP_WIRE_NONCE_LEN);
    }
    if (hdr->opcode == SHP_WIRE_OP_ERROR && nerrs < 8) {
        errs[nerrs].ep = ep;
        errs[nerrs++].status = hdr->status;
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

static const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN] =
    "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff"
    "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff";

/* 1 if `hay` holds 8 bytes of the job key anywhere */
static int holds_key(const uint8_t *hay, size_t n)
{
    for (size_t k = 0; k + 8 <= sizeof(job_key); k++) {
        for (size_t i = 0; i + 8 <= n; i++) {
            if (memcmp(hay + i, job_key + k, 8) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

static void add_group(shp_an_t *an, int gid)
{
    json_t *req = group_keys(json_pack(
        "{s:i, s:i, s:s, s:s, s:i, s:i, s:[{s:s}], s:b, s:i}", "group_id", gid,
        "tree_id", 0, "job_id", "5", "job_key",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        "osts", 2, "payload", 64, "children", "kind", "member", "top", 0,
        "parent_index", 0));
    const char *why = NULL;

    assert_non_null(req);
    /* not the top: answered once the parent AN is joined */
    assert_int_equal(shp_an_group_add(an, req, gid, &why), SHP_INPROGRESS);
    json_decref(req);
}

/* The parent's nonce `n` arriving on its link ep, as a transport delivers
 * it */
static void deliver_nonce(shp_tp_ep_t *ep, const uint8_t *n)
{
    uint8_t msg[SHP_WIRE_HDR_LEN + SHP_WIRE_NONCE_LEN];
    uint8_t mine[SHP_WIRE_NONCE_LEN];
    shp_wire_hdr_t h;

    shp_wire_nonce_new(mine, &h);
    shp_wire_hdr_pack(&h, msg);
    memcpy(msg + SHP_WIRE_HDR_LEN, n, SHP_WIRE_NONCE_LEN);
    assert_int_equal(shp_tp_deliver(ep, msg, sizeof(msg)), SHP_OK);
}

/* Found by tests/fuzz/fuzz_an: the parent connection comes up, the join
 * of the first group cannot be sent, the transport closes the link at
 * once (on_close frees it), and on_connect went on with the next group on
 * the freed link.  (Under SAN=1 a heap-use-after-free; here freed memory
 * is scribbled on, so the old code follows garbage.)  The joins now go
 * out when the parent's nonce comes: the same holds there. */
static void test_send_fails_in_on_connect(void **state)
{
    static char name[] = "an0", empty[] = "";
    static shp_an_t an;
    const char *why = NULL;
    json_t *tree;
    shp_tp_ep_t *parent;

    (void)state;
    send_status = SHP_ERR_NO_RESOURCE;
    memset(&an, 0, sizeof(an));
    an.loop = loop;
    an.link_cbs = &shp_an_link_cbs; /* as shp_an_start sets it */
    an.cfg.name = name;
    an.cfg.am = empty;
    an.cfg.max_trees = 4;
    an.cfg.max_groups = 8;
    an.cfg.max_osts = 4;
    an.cfg.max_payload = 4096;
    an.cfg.join_timeout_ms = 5000;
    assert_int_equal(shp_tp_init(&an.tp, &mem_ops, loop, 4096, NULL), SHP_OK);
    tree = json_pack("{s:i, s:s}", "tree_id", 0, "parent", "10.0.0.1:7000");
    assert_int_equal(shp_an_tree_set(&an, tree, &why), SHP_OK);
    json_decref(tree);
    add_group(&an, 1);
    add_group(&an, 2);
    add_group(&an, 3);
    assert_int_equal(opened, 1); /* one link to the parent for all */
    assert_int_equal(sends, 0);  /* nothing before it is connected */

    parent = an.parents->ep;
    parent->cbs->on_connect(parent);
    assert_int_equal(sends, 0); /* the joins wait for the parent's nonce */
    deliver_nonce(parent, job_key);
    /* one join tried, the link closed and gone, the groups failed */
    assert_int_equal(sends, 1);
    assert_int_equal(closes, 1);
    assert_null(an.parents);
    assert_null(an.links);
    assert_int_equal(an.stats.groups_failed, 3);
    assert_true(shp_an_group_find(&an, 2)->failed);

    an.stopping = 1;
    for (uint32_t g = 1; g <= 3; g++) {
        assert_int_equal(shp_an_group_remove(&an, g), SHP_OK);
    }
    shp_tp_cleanup(&an.tp);
}

/* A member's join of group `gid` at place `ci`, delivered as a transport
 * delivers it; returns the status of the AN's answer. */
static int join(shp_tp_ep_t *ep, uint32_t gid, uint32_t ci)
{
    uint8_t msg[SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;

    shp_wire_join_make(job_key, nonce_of(ep), 0, gid, 5, ci, &h,
                       msg + SHP_WIRE_HDR_LEN);
    shp_wire_hdr_pack(&h, msg);
    memset(&last_sent, 0, sizeof(last_sent));
    assert_int_equal(shp_tp_deliver(ep, msg, sizeof(msg)), SHP_OK);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_JOIN_ACK);
    return last_sent.status;
}

/* A top AN of group 7 (job 5) with two member places, on the in-memory
 * transport, nobody joined yet. */
static void start_top(shp_an_t *an)
{
    static char name[] = "an0", listen[] = "127.0.0.1:0", empty[] = "";
    const char *why = NULL;
    json_t *req;

    send_status = SHP_OK;
    memset(an, 0, sizeof(*an));
    an->cfg.name = name;
    an->cfg.listen = listen;
    an->cfg.am = empty;
    an->cfg.advertise = empty;
    an->cfg.max_trees = 4;
    an->cfg.max_groups = 8;
    an->cfg.max_osts = 4;
    an->cfg.max_payload = 4096;
    assert_int_equal(shp_an_start(an, loop), SHP_OK);
    req = json_pack("{s:i, s:n}", "tree_id", 0, "parent");
    assert_int_equal(shp_an_tree_set(an, req, &why), SHP_OK);
    json_decref(req);
    req = group_keys(json_pack(
        "{s:i, s:i, s:s, s:s, s:i, s:i, s:[{s:s}, {s:s}], s:b}", "group_id", 7,
        "tree_id", 0, "job_id", "5", "job_key",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        "osts", 2, "payload", 64, "children", "kind", "member", "kind",
        "member", "top", 1));
    assert_int_equal(shp_an_group_add(an, req, 1, &why), SHP_OK);
    json_decref(req);
}

/* Found by tests/fuzz/fuzz_an: one link joined a group at two places; its
 * leave freed one, and when it closed the other still pointed at the freed
 * link (a use after free when the group went).  A link is one member of a
 * group: a second place is refused. */
static void test_member_joins_twice(void **state)
{
    static shp_an_t an;
    shp_tp_ep_t *ep = calloc(1, sizeof(*ep));

    (void)state;
    assert_non_null(ep);
    start_top(&an);

    ep->tp = &an.tp;
    accept_cb(&an.tp, ep);
    assert_non_null(ep->cbs);
    assert_int_equal(join(ep, 7, 0), SHP_OK);
    assert_int_equal(join(ep, 7, 0), SHP_OK); /* the same place again */
    assert_int_equal(join(ep, 7, 1), SHP_ERR_EXISTS);
    assert_null(shp_an_group_find(&an, 7)->children[1].link);

    ep->cbs->on_close(ep, SHP_ERR_IO); /* the member goes */
    free(ep);
    assert_null(shp_an_group_find(&an, 7)->children[0].link);
    assert_null(an.links);
    shp_an_stop(&an);
}

/* start_top, and both places joined by links eps[2] */
static void top_with_two_members(shp_an_t *an, shp_tp_ep_t *eps[2])
{
    start_top(an);
    for (uint32_t i = 0; i < 2; i++) {
        eps[i] = calloc(1, sizeof(*eps[i]));
        assert_non_null(eps[i]);
        eps[i]->tp = &an->tp;
        accept_cb(&an->tp, eps[i]);
        assert_non_null(eps[i]->cbs);
        assert_int_equal(join(eps[i], 7, i), SHP_OK);
    }
}

static void members_go(shp_tp_ep_t *eps[2])
{
    for (int i = 0; i < 2; i++) {
        eps[i]->cbs->on_close(eps[i], SHP_ERR_IO);
        free(eps[i]);
    }
}

/* Seen in tests/mpi-coll/test_fault.sh: the manager revoked a group and removed
 * it from its ANs; an AN removed it while a member's operation waited
 * there, and the error that failed the group elsewhere came to that AN
 * only after the removal (an unknown group by then): the member waited
 * forever.  A removed group's members still joined are told. */
static void test_removed_group_fails_its_members(void **state)
{
    static shp_an_t an;
    shp_tp_ep_t *eps[2];
    shp_reduce_desc_t d = {SHP_DTYPE_I64, SHP_OP_SUM, SHP_DTYPE_NULL};
    int64_t v = 1;
    uint8_t msg[SHP_WIRE_HDR_LEN + sizeof(v)];
    shp_wire_hdr_t h;

    (void)state;
    top_with_two_members(&an, eps);
    /* member 0's operation waits for member 1's */
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 0, 7, 0, &d, 1);
    shp_wire_hdr_pack(&h, msg);
    memcpy(msg + SHP_WIRE_HDR_LEN, &v, sizeof(v));
    nerrs = 0;
    assert_int_equal(shp_tp_deliver(eps[0], msg, sizeof(msg)), SHP_OK);
    assert_int_equal(nerrs, 0);

    assert_int_equal(shp_an_group_remove(&an, 7), SHP_OK);
    assert_int_equal(nerrs, 2);
    for (int i = 0; i < 2; i++) {
        assert_ptr_equal(errs[i].ep, eps[i]);
        assert_int_equal(errs[i].status, SHP_ERR_GROUP_REVOKED);
    }
    assert_null(shp_an_group_find(&an, 7));
    members_go(eps);
    assert_null(an.links);
    shp_an_stop(&an);
}

/* After an orderly destroy (every member left) the removal sends nothing;
 * a member whose send fails as it is told loses its link, and nothing
 * points at the freed link afterwards. */
static void test_removal_after_leave_is_silent(void **state)
{
    static shp_an_t an;
    shp_tp_ep_t *eps[2];
    uint8_t msg[SHP_WIRE_HDR_LEN];
    shp_wire_hdr_t h;

    (void)state;
    top_with_two_members(&an, eps);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_LEAVE, 0, 7, 0);
    shp_wire_hdr_pack(&h, msg);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(shp_tp_deliver(eps[i], msg, sizeof(msg)), SHP_OK);
        assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_LEAVE);
    }
    nerrs = 0;
    assert_int_equal(shp_an_group_remove(&an, 7), SHP_OK);
    assert_int_equal(nerrs, 0);
    members_go(eps);

    /* now the members do not read: the first error closes its link */
    top_with_two_members(&an, eps);
    send_status = SHP_ERR_NO_RESOURCE;
    nerrs = 0;
    closes = 0;
    assert_int_equal(shp_an_group_remove(&an, 7), SHP_OK);
    assert_int_equal(nerrs, 2);
    assert_int_equal(closes, 2); /* mem_close freed both endpoints */
    assert_null(an.links);
    shp_an_stop(&an);
}

/* A member's join proves the job key over the nonce the AN sent its link
 * first: a join proved with another key, one carrying the key itself (as
 * joins did before), and a join recorded on one link and sent again on
 * another (the member's place free again after it left) are refused. */
static void test_join_proves_the_key(void **state)
{
    static shp_an_t an;
    shp_tp_ep_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    uint8_t rec[SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN];
    uint8_t wrong[SHP_WIRE_JOB_KEY_LEN], msg[sizeof(rec)];
    shp_wire_join_t j = {.job_id = 5, .child_index = 0};
    shp_wire_hdr_t h;

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    start_top(&an);
    a->tp = b->tp = &an.tp;
    sends = 0;
    accept_cb(&an.tp, a);
    /* the first thing on a link: its nonce */
    assert_int_equal(sends, 1);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_JOIN_NONCE);

    /* another key */
    memcpy(wrong, job_key, sizeof(wrong));
    wrong[7] ^= 0x40;
    shp_wire_join_make(wrong, nonce_of(a), 0, 7, 5, 0, &h,
                       msg + SHP_WIRE_HDR_LEN);
    shp_wire_hdr_pack(&h, msg);
    assert_int_equal(shp_tp_deliver(a, msg, sizeof(msg)), SHP_OK);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_JOIN_ACK);
    assert_int_equal(last_sent.status, SHP_ERR_BAD_KEY);
    /* the key itself, as the old join sent it */
    memcpy(j.proof, job_key, sizeof(j.proof));
    shp_wire_join_pack(&j, msg + SHP_WIRE_HDR_LEN);
    assert_int_equal(shp_tp_deliver(a, msg, sizeof(msg)), SHP_OK);
    assert_int_equal(last_sent.status, SHP_ERR_BAD_KEY);
    assert_int_equal(an.stats.err_bad_key, 2);
    assert_null(shp_an_group_find(&an, 7)->children[0].link);

    /* the right proof, recorded by whoever reads the network */
    shp_wire_join_make(job_key, nonce_of(a), 0, 7, 5, 0, &h,
                       rec + SHP_WIRE_HDR_LEN);
    shp_wire_hdr_pack(&h, rec);
    assert_false(holds_key(rec, sizeof(rec)));
    assert_int_equal(shp_tp_deliver(a, rec, sizeof(rec)), SHP_OK);
    assert_int_equal(last_sent.status, SHP_OK);
    assert_ptr_equal(shp_an_group_find(&an, 7)->children[0].link, a->arg);
    /* the member leaves cleanly: its place is free */
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_LEAVE, 0, 7, 0);
    shp_wire_hdr_pack(&h, msg);
    assert_int_equal(shp_tp_deliver(a, msg, SHP_WIRE_HDR_LEN), SHP_OK);
    assert_null(shp_an_group_find(&an, 7)->children[0].link);

    /* the recorded join, replayed on a new link: refused */
    accept_cb(&an.tp, b);
    assert_non_null(b->cbs);
    assert_memory_not_equal(nonce_of(a), nonce_of(b), SHP_WIRE_NONCE_LEN);
    assert_int_equal(shp_tp_deliver(b, rec, sizeof(rec)), SHP_OK);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_JOIN_ACK);
    assert_int_equal(last_sent.status, SHP_ERR_BAD_KEY);
    assert_null(shp_an_group_find(&an, 7)->children[0].link);
    assert_int_equal(an.stats.err_bad_key, 3);
    /* proved over b's own nonce it joins */
    assert_int_equal(join(b, 7, 0), SHP_OK);

    a->cbs->on_close(a, SHP_ERR_IO);
    b->cbs->on_close(b, SHP_ERR_IO);
    free(a);
    free(b);
    shp_an_stop(&an);
}

/* An AN's join of its parent waits for the parent's nonce and proves the
 * job key over it: the key is nowhere in what it sends. */
static void test_parent_join_proves_the_key(void **state)
{
    static char name[] = "an1", empty[] = "";
    static shp_an_t an;
    const char *why = NULL;
    uint8_t n[SHP_WIRE_NONCE_LEN];
    shp_wire_join_t j;
    shp_tp_ep_t *parent;

    (void)state;
    send_status = SHP_OK;
    sends = 0;
    memset(&an, 0, sizeof(an));
    an.loop = loop;
    an.link_cbs = &shp_an_link_cbs;
    an.cfg.name = name;
    an.cfg.am = empty;
    an.cfg.max_trees = 4;
    an.cfg.max_groups = 8;
    an.cfg.max_osts = 4;
    an.cfg.max_payload = 4096;
    an.cfg.join_timeout_ms = 5000;
    assert_int_equal(shp_tp_init(&an.tp, &mem_ops, loop, 4096, NULL), SHP_OK);
    json_t *tree =
        json_pack("{s:i, s:s}", "tree_id", 0, "parent", "10.0.0.1:7000");
    assert_int_equal(shp_an_tree_set(&an, tree, &why), SHP_OK);
    json_decref(tree);
    add_group(&an, 4);
    parent = an.parents->ep;
    parent->cbs->on_connect(parent);
    assert_int_equal(sends, 0);

    for (size_t i = 0; i < sizeof(n); i++) {
        n[i] = (uint8_t)(0xe0 ^ i);
    }
    deliver_nonce(parent, n);
    assert_int_equal(sends, 1);
    assert_int_equal(last_sent.opcode, SHP_WIRE_OP_GROUP_JOIN);
    assert_int_equal(last_sent.payload_len, SHP_WIRE_JOIN_LEN);
    assert_false(holds_key(last_payload, SHP_WIRE_JOIN_LEN));
    shp_wire_join_unpack(last_payload, &j);
    uint8_t jk[SHP_WIRE_JOIN_KEY_LEN];
    shp_wire_join_key(job_key, 0, 4, jk);
    assert_true(shp_wire_join_proof_ok(jk, n, 0, 4, &j));
    n[0] ^= 1;
    assert_false(shp_wire_join_proof_ok(jk, n, 0, 4, &j));

    an.stopping = 1;
    assert_int_equal(shp_an_group_remove(&an, 4), SHP_OK);
    shp_tp_close(parent);
    shp_tp_cleanup(&an.tp);
}

/* The loop's polls that may sleep (timeout != 0), counted: libev's
 * epoll_wait resolves to this one (the program exports it:
 * tests/module.mk). */
static unsigned long sleeps;

__attribute__((visibility("default"))) int
epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
    sleeps += timeout != 0;
    return epoll_pwait(epfd, ev, max, timeout, NULL);
}

/* shp_an_run's socket spin: a message every 200 us (counted as the
 * transport counts one), 50 of them, then quit; returns how many times
 * the loop could sleep meanwhile. */
static shp_an_t *run_an;
static int run_ticks;

static void tick_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l;
    (void)revents;
    run_an->tp.stats.msgs_in++;
    if (++run_ticks == 50) {
        shp_an_quit(run_an);
    } else { /* the next one 200 us from now: a loop turn each */
        ev_timer_set(w, 0.0002, 0.);
        ev_timer_start(l, w);
    }
}

static unsigned long run_with(unsigned spin_us, const char *loadavg)
{
    static shp_an_t an;
    static char path[] = "/tmp/sharp-test-loadavg.XXXXXX";
    char p[sizeof(path)];
    memcpy(p, path, sizeof(path));
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, loadavg, strlen(loadavg)),
                     (ssize_t)strlen(loadavg));
    close(fd);

    memset(&an, 0, sizeof(an));
    an.loop = loop;
    an.cfg.sock_spin_us = spin_us;
    an.loadavg_path = p;
    assert_int_equal(shp_tp_init(&an.tp, &mem_ops, loop, 4096, NULL), SHP_OK);
    run_an = &an;
    run_ticks = 0;
    ev_timer t;
    ev_timer_init(&t, tick_cb, 0.0002, 0.);
    ev_timer_start(loop, &t);
    unsigned long s0 = sleeps;
    shp_an_run(&an);
    unsigned long slept = sleeps - s0;
    assert_int_equal(run_ticks, 50);
    shp_tp_cleanup(&an.tp);
    unlink(p);
    return slept;
}

/* Over sockets the AN polls, without sleeping, for sock_spin_us after each
 * message while no more processes are runnable than there are cores; on
 * a busy machine, or with 0, it sleeps between messages. */
static void test_run_spins_while_a_core_is_free(void **state)
{
    (void)state;
    unsigned long free_ = run_with(10000, "0.10 0.10 0.10 1/80 4242\n");
    unsigned long busy = run_with(10000, "9.00 9.00 9.00 4000/4100 4242\n");
    unsigned long off = run_with(0, "0.10 0.10 0.10 1/80 4242\n");
    print_message("50 messages 200 us apart: the loop could sleep %lu times "
                  "spinning with a core free, %lu on a busy machine, %lu "
                  "not spinning\n",
                  free_, busy, off);
    assert_true(free_ <= 5);
    assert_true(busy >= 45); /* each message a turn, each turn a sleep */
    assert_true(off >= 45);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_fails_in_on_connect),
        cmocka_unit_test(test_member_joins_twice),
        cmocka_unit_test(test_join_proves_the_key),
        cmocka_unit_test(test_parent_join_proves_the_key),
        cmocka_unit_test(test_removed_group_fails_its_members),
        cmocka_unit_test(test_removal_after_leave_is_silent),
        cmocka_unit_test(test_run_spins_while_a_core_is_free),
    };

    /* freed memory filled with 0x5a, no per-thread cache that skips it:
     * a use after free reads garbage (glibc reads these at start) */
    (void)argc;
    if (getenv("SHP_TEST_PERTURBED") == NULL) {
        setenv("SHP_TEST_PERTURBED", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        setenv("MALLOC_PERTURB_", "165", 1);
        execv("/proc/self/exe", argv);
    }

    shp_log_set_level(SHP_LOG_ERROR);
    loop = ev_default_loop(0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
