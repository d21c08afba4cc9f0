/*
 * A real aggregation node (an/) driven by a sequence of events: the
 * AM's tree and group requests (the functions its control connection
 * calls), children connecting and hanging up, parents coming up, join
 * timers firing, and data-path messages delivered through shp_tp_deliver,
 * the function every transport hands a received message to.  The AN runs
 * on an in-memory transport (shp_tp_find is wrapped at link time) that
 * behaves as tcp does: a failed validation closes the endpoint, a close
 * inside on_msg or on_connect completes when that returns, on_close comes
 * once.
 * Everything the AN sends must pass shp_wire_validate.  The AN's control
 * connection runs too: shp_conn_connect is wrapped to hand it a socketpair
 * whose far end is the AM (fuzz_peer.h), so the AM's requests and the
 * handshake go through an_ctl.c as they arrive from a socket.  Operations:
 * tests/fuzz/fuzz.h (FZ_AN_*).
 */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_peer.h"
#include "tests/support/group_keys.h"

#include "an/an.h"
#include "protocol/ctl.h"
#include "core/log.h"

/* The in-memory transport ------------------------------------------------ */

enum { EP_CHILD, EP_PARENT, EP_MCAST };

typedef struct fz_ep {
    shp_tp_ep_t ep; /* first: the AN sees this */
    int kind, slot;
    int connected, closing, dispatching, close_pending, broken;
    uint8_t nonce[SHP_WIRE_NONCE_LEN]; /* the AN sent it (JOIN_NONCE) */
    struct fz_ep *next;
} fz_ep_t;

static fz_ep_t *live;              /* every open endpoint */
static fz_ep_t *slots[FZ_AN_NEPS]; /* the ones the input addresses */
static shp_tp_accept_cb_t accept_cb;
static uint64_t sent_msgs, sent_bytes;

static fz_ep_t *ep_new(shp_tp_t *tp, int kind, const char *peer)
{
    fz_ep_t *e = calloc(1, sizeof(*e));

    FZ_CHECK(e != NULL);
    e->ep.tp = tp;
    e->kind = kind;
    e->slot = -1;
    snprintf(e->ep.peer, sizeof(e->ep.peer), "%s", peer);
    if (kind != EP_MCAST) {
        for (int i = 0; i < FZ_AN_NEPS; i++) {
            if (slots[i] == NULL) {
                slots[i] = e;
                e->slot = i;
                break;
            }
        }
    }
    e->next = live;
    live = e;
    return e;
}

static void ep_finish_close(fz_ep_t *e, shp_status_t reason)
{
    fz_ep_t **pp;

    for (pp = &live; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    if (e->slot >= 0) {
        slots[e->slot] = NULL;
    }
    if (e->ep.cbs != NULL && e->ep.cbs->on_close != NULL) {
        e->ep.cbs->on_close(&e->ep, reason);
    }
    free(e);
}

static void ep_close(fz_ep_t *e, shp_status_t reason)
{
    if (e->closing) {
        return;
    }
    e->closing = 1;
    if (e->dispatching) {
        e->close_pending = 1;
    } else {
        ep_finish_close(e, reason);
    }
}

static shp_status_t fz_init(shp_tp_t *tp)
{
    (void)tp;
    return SHP_OK;
}

static void fz_cleanup(shp_tp_t *tp)
{
    fz_ep_t *e, *next;

    for (e = live; e != NULL; e = next) {
        next = e->next;
        if (e->ep.tp == tp) {
            ep_finish_close(e, SHP_ERR_CANCELED);
            next = live; /* on_close may have closed others */
        }
    }
}

static shp_status_t fz_listen(shp_tp_t *tp, const char *addr,
                              shp_tp_accept_cb_t on_accept)
{
    (void)tp;
    (void)addr;
    accept_cb = on_accept;
    return SHP_OK;
}

static const char *fz_listen_addr(shp_tp_t *tp)
{
    (void)tp;
    return "127.0.0.1:7000";
}

static shp_status_t fz_connect(shp_tp_t *tp, const char *addr,
                               const shp_tp_ep_cbs_t *cbs, void *arg,
                               shp_tp_ep_t **ep)
{
    fz_ep_t *e = ep_new(tp, EP_PARENT, addr);

    e->ep.cbs = cbs;
    e->ep.arg = arg;
    *ep = &e->ep;
    return SHP_OK;
}

static shp_status_t fz_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                            const void *payload)
{
    fz_ep_t *e = (fz_ep_t *)ep;
    uint8_t raw[SHP_WIRE_HDR_LEN];
    shp_wire_hdr_t back;
    const char *why = NULL;
    shp_status_t st;
    uint8_t *copy;

    if (e->closing) {
        return SHP_ERR_CLOSED;
    }
    if (e->broken) {
        return SHP_ERR_NO_RESOURCE; /* the peer does not read */
    }
    shp_wire_hdr_pack(hdr, raw);
    shp_wire_hdr_unpack(raw, &back);
    st = shp_wire_validate(&back, SHP_WIRE_HDR_LEN + (size_t)hdr->payload_len,
                           ep->tp->max_payload, &why);
    if (st != SHP_OK) {
        fprintf(stderr, "the AN sends an invalid %s: %s\n",
                shp_wire_opcode_name(hdr->opcode), why);
        abort();
    }
    /* the payload must be there, all of it (ASan reads it) */
    copy = malloc(hdr->payload_len + 1);
    FZ_CHECK(copy != NULL);
    if (hdr->payload_len > 0) {
        FZ_CHECK(payload != NULL);
        memcpy(copy, payload, hdr->payload_len);
    }
    free(copy);
    if (hdr->opcode == SHP_WIRE_OP_JOIN_NONCE) { /* joins prove over it */
        memcpy(e->nonce, payload, sizeof(e->nonce));
    }
    sent_msgs++;
    sent_bytes += SHP_WIRE_HDR_LEN + hdr->payload_len;
    ep->tp->stats.msgs_out++;
    return SHP_OK;
}

static void fz_close(shp_tp_ep_t *ep)
{
    ep_close((fz_ep_t *)ep, SHP_ERR_CANCELED);
}

static shp_status_t fz_mcast_sender(shp_tp_t *tp, const char *group,
                                    const shp_tp_ep_cbs_t *cbs, void *arg,
                                    shp_tp_ep_t **ep)
{
    fz_ep_t *e = ep_new(tp, EP_MCAST, group);

    e->ep.cbs = cbs;
    e->ep.arg = arg;
    e->connected = 1;
    *ep = &e->ep;
    return SHP_OK;
}

static const shp_tp_ops_t fz_ops = {
    .name = "fuzz",
    .init = fz_init,
    .cleanup = fz_cleanup,
    .listen = fz_listen,
    .listen_addr = fz_listen_addr,
    .connect = fz_connect,
    .send = fz_send,
    .close = fz_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = fz_mcast_sender,
    .dump = shp_tp_stub_dump,
};

const shp_tp_ops_t *__wrap_shp_tp_find(const char *name);
const shp_tp_ops_t *__wrap_shp_tp_find(const char *name)
{
    (void)name;
    return &fz_ops;
}

/* Delivery as a transport does it: validate, on_msg, close what failed;
 * a close requested meanwhile completes afterwards. */
static void deliver(fz_ep_t *e, const void *msg, size_t len)
{
    shp_status_t st;

    if (e->closing || e->ep.cbs == NULL) {
        return;
    }
    e->dispatching = 1;
    st = shp_tp_deliver(&e->ep, msg, len);
    e->dispatching = 0;
    if (e->close_pending) {
        ep_finish_close(e, SHP_ERR_CANCELED);
    } else if (st != SHP_OK) {
        ep_close(e, st);
    }
}

/* The harness --------------------------------------------------------------- */

static shp_an_t an;
static const char *const fz_pend_types[] = {NULL};
/* the AN's loop; `loop` (fuzz_peer.h) carries only its AM connection, so
 * running it never fires one of the AN's timers */
static struct ev_loop *an_loop;

/* The AM connection: a socketpair instead of a TCP connect, peers[0] its
 * far end. */
shp_status_t __wrap_shp_conn_connect(shp_conn_t *conn,
                                     const shp_sockaddr_t *addr,
                                     const shp_sockaddr_t *bind_addr);
shp_status_t __wrap_shp_conn_connect(shp_conn_t *conn,
                                     const shp_sockaddr_t *addr,
                                     const shp_sockaddr_t *bind_addr)
{
    int sv[2];

    (void)addr;
    (void)bind_addr;
    FZ_CHECK(peers[0].fd < 0);
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    conn->loop = loop; /* nothing of it started yet */
    FZ_CHECK(shp_conn_open_fd(conn, sv[0]) == SHP_OK);
    peers[0].fd = sv[1];
    conn->ops->on_connect(conn); /* hello */
    return SHP_OK;
}

static int ctl_started;

static void op_ctl(uint8_t mode)
{
    if ((mode & 2) && peers[0].fd >= 0) { /* the AM goes away */
        peer_drop(&peers[0]);
        pump();
        return;
    }
    if (!ctl_started) {
        ctl_started = 1;
        shp_an_ctl_start(&an);
    } else if (ev_is_active(&an.am_timer) && peers[0].fd < 0) {
        ev_timer_stop(an_loop, &an.am_timer); /* the reconnect timer fires */
        ev_invoke(an_loop, &an.am_timer, EV_TIMER);
    } else {
        return;
    }
    /* later reconnects wait for this operation, not for time */
    an.ams.backoff = 1e6;
    if ((mode & 1) && an.am_up) {
        an.authenticated = 1; /* as if the handshake were done */
    }
    pump();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* SHARP_FUZZ_LOG=debug: the daemon's log, to see what an input does */
    shp_log_set_level(getenv("SHARP_FUZZ_LOG") ? SHP_LOG_DEBUG : SHP_LOG_OFF);
    FZ_CHECK(shp_auth_init() == SHP_OK);
    an_loop = ev_default_loop(EVFLAG_AUTO);
    loop = ev_loop_new(EVFLAG_AUTO);
    FZ_CHECK(an_loop != NULL && loop != NULL);
    for (int i = 0; i < FZ_NPEERS; i++) {
        peers[i].fd = -1;
    }
    return 0;
}

static fz_ep_t *slot_of(fz_in_t *in)
{
    return slots[fz_u8(in) % FZ_AN_NEPS];
}

static void op_tree(fz_in_t *in)
{
    uint8_t t = fz_u8(in);
    json_t *req =
        json_pack("{s:s, s:i, s:I, s:s?}", "type", "tree_config", "tree_id",
                  (t & 0x40) ? (int)(t - 0x40) : t % 4, "id", (json_int_t)1,
                  "parent", (t & 0x80) ? FZ_AN_PARENT : NULL);
    const char *why = NULL;

    FZ_CHECK(req != NULL);
    if (shp_an_tree_set(&an, req, &why) != SHP_OK) {
        FZ_CHECK(why != NULL);
    }
    json_decref(req);
}

static void op_group_add(fz_in_t *in)
{
    static const char *const dists[] = {"rc", "mcast", "both", "neither"};
    static const int payloads[] = {0, 8, 64, 256, 4096, 70000};
    uint32_t gid = fz_u8(in) % FZ_AN_NGROUPS;
    int tree = fz_u8(in) % 4;
    uint8_t flags = fz_u8(in);
    int osts = 1 + fz_u8(in) % 4;
    int payload = payloads[fz_u8(in) % 6];
    unsigned nchildren = 1 + fz_u8(in) % 4;
    uint8_t kinds = fz_u8(in);
    int pidx = fz_u8(in) % 4;
    uint8_t key[32];
    json_t *children = json_array(), *req, *hex;
    const char *why = NULL;
    shp_status_t st;
    int existed;

    for (unsigned i = 0; i < nchildren; i++) {
        json_array_append_new(
            children,
            json_pack("{s:s}", "kind", (kinds >> i) & 1 ? "an" : "member"));
    }
    fz_an_job_key(gid, key);
    if (flags & FZ_AN_G_BADKEY) {
        key[0] ^= 1;
    }
    hex = shp_json_hex(key, sizeof(key));
    req = json_pack("{s:s, s:I, s:i, s:o, s:o, s:i, s:i, s:o, s:b, s:i, s:s}",
                    "type", "group_add", "group_id", (json_int_t)gid, "tree_id",
                    tree, "job_id", shp_json_u64(fz_an_job_id(gid)), "job_key",
                    hex, "osts", osts, "payload", payload, "children", children,
                    "top", flags & FZ_AN_G_TOP, "parent_index", pidx, "dist",
                    dists[FZ_AN_G_DIST(flags)]);
    req = group_keys(req); /* what the manager sends: the group's keys */
    FZ_CHECK(req != NULL);
    if (!(flags & FZ_AN_G_NOMCAST)) {
        json_object_set_new(req, "mcast_addr", json_string("239.77.0.1:20000"));
    }
    existed = shp_an_group_find(&an, gid) != NULL;
    st = shp_an_group_add(&an, req, 42, &why);
    if (st < 0) {
        /* refused: nothing changed */
        FZ_CHECK(why != NULL);
        FZ_CHECK(existed == (shp_an_group_find(&an, gid) != NULL));
    } else {
        FZ_CHECK(shp_an_group_find(&an, gid) != NULL);
    }
    json_decref(req);
}

static void op_msg(fz_in_t *in)
{
    fz_ep_t *e = slot_of(in);
    uint8_t opcode = fz_u8(in) % 9, gid = fz_u8(in);
    uint32_t seq = fz_u8(in);
    uint16_t flags = fz_u8(in) % 16;
    shp_reduce_desc_t d = {fz_u8(in) % 14, fz_u8(in) % 14, fz_u8(in) % 14};
    uint32_t count = fz_u8(in);
    uint8_t extra = fz_u8(in);
    shp_wire_hdr_t h;
    uint8_t *buf;
    size_t len;

    shp_wire_hdr_init(&h, opcode, 0, gid % FZ_AN_NGROUPS, seq);
    h.flags = flags;
    if (opcode == SHP_WIRE_OP_AGG_REQ || opcode == SHP_WIRE_OP_AGG_RESULT) {
        h.dtype = d.dtype;
        h.op = d.op;
        h.tag_dtype = d.tag_dtype;
        h.count = (flags & SHP_WIRE_F_BARRIER) ? 0 : count;
        h.payload_len = (uint32_t)(h.count * shp_reduce_elem_size(&d));
    } else if (opcode == SHP_WIRE_OP_GROUP_JOIN) {
        h.payload_len = SHP_WIRE_JOIN_LEN;
    } else if (opcode == SHP_WIRE_OP_JOIN_NONCE) {
        h.payload_len = SHP_WIRE_NONCE_LEN;
    } else if (opcode == SHP_WIRE_OP_ERROR) {
        h.status = SHP_ERR_GROUP_FAILED;
        h.payload_len = count % 64;
    }
    if (extra & FZ_AN_M_RAWLEN) {
        h.payload_len = fz_u16(in);
    }
    if (extra & FZ_AN_M_STATUS) {
        h.status = (int16_t)-fz_u8(in);
    }
    if (extra & FZ_AN_M_SEQ32) {
        h.seq = fz_u32(in);
    }
    if (h.payload_len > 70000) {
        h.payload_len = 70000;
    }
    len = SHP_WIRE_HDR_LEN + h.payload_len;
    buf = malloc(len);
    FZ_CHECK(buf != NULL);
    shp_wire_hdr_pack(&h, buf);
    if (opcode == SHP_WIRE_OP_GROUP_JOIN &&
        h.payload_len >= SHP_WIRE_JOIN_LEN && !(extra & FZ_AN_M_OWNJOIN)) {
        /* proved over the nonce the AN sent this link, for the group's
         * tree (any, if the group is not there) */
        shp_an_group_t *g = shp_an_group_find(&an, h.group_id);
        static const uint8_t none[SHP_WIRE_NONCE_LEN];
        uint8_t key[SHP_WIRE_JOB_KEY_LEN];
        shp_wire_join_t j;
        j.job_id = fz_an_job_id(h.group_id);
        fz_an_job_key(h.group_id, key);
        if (extra & FZ_AN_M_BADKEY) {
            key[31] ^= 0x80;
        }
        j.child_index = FZ_AN_M_CHILD(extra);
        uint8_t jk[SHP_WIRE_JOIN_KEY_LEN]; /* what the group's AN holds */
        shp_wire_join_key(key, g != NULL ? g->tree_id : 0, h.group_id, jk);
        shp_wire_join_prove(jk, e != NULL ? e->nonce : none,
                            g != NULL ? g->tree_id : 0, h.group_id, &j);
        shp_wire_join_pack(&j, buf + SHP_WIRE_HDR_LEN);
        fz_bytes(in, buf + SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN,
                 h.payload_len - SHP_WIRE_JOIN_LEN);
    } else {
        fz_bytes(in, buf + SHP_WIRE_HDR_LEN, h.payload_len);
    }
    if (e != NULL) {
        deliver(e, buf, len);
    }
    free(buf);
}

static void op_raw(fz_in_t *in)
{
    fz_ep_t *e = slot_of(in);
    size_t len = fz_u16(in) % 8192;
    uint8_t *buf = malloc(len + 1);

    FZ_CHECK(buf != NULL);
    len = fz_bytes(in, buf, len);
    if (e != NULL) {
        deliver(e, buf, len);
    }
    free(buf);
}

static void op_timers(void)
{
    shp_an_group_t *g, *tmp;
    uint32_t armed[SHP_AN_MAX_GROUPS];
    unsigned n = 0;

    /* fire one at a time, finding the group again: a callback may end
     * another group */
    HASH_ITER(hh, an.groups, g, tmp)
    {
        if (ev_is_active(&g->join_timer) && n < SHP_AN_MAX_GROUPS) {
            armed[n++] = g->id;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        g = shp_an_group_find(&an, armed[i]);
        if (g != NULL && ev_is_active(&g->join_timer)) {
            ev_timer_stop(an_loop, &g->join_timer);
            ev_invoke(an_loop, &g->join_timer, EV_TIMER);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char name[] = "an-fuzz", listen[] = "127.0.0.1:0",
                am[] = "127.0.0.1:6126", adv[] = "", secret[] = "";
    fz_in_t in = {data, size};
    shp_status_t st;

    memset(&an, 0, sizeof(an));
    an.cfg.name = name;
    an.cfg.listen = listen;
    an.cfg.am = am;
    an.cfg.advertise = adv;
    an.cfg.secret_file = secret;
    an.cfg.max_trees = 3;
    an.cfg.max_groups = 6;
    an.cfg.max_osts = 4;
    an.cfg.max_payload = 65536;
    an.cfg.join_timeout_ms = 5000;
    shp_auth_key_from_bytes("the cluster secret of the AN", 28, &an.key);
    ctl_started = 0;
    FZ_CHECK(shp_an_start(&an, an_loop) == SHP_OK);
    FZ_CHECK(an.have_mcast);
    while (fz_more(&in)) {
        fz_ep_t *e;
        switch (fz_u8(&in) % FZ_AN_NOPS) {
        case FZ_AN_TREE: op_tree(&in); break;
        case FZ_AN_GROUP_ADD: op_group_add(&in); break;
        case FZ_AN_GROUP_RM:
            st = shp_an_group_remove(&an, fz_u8(&in) % FZ_AN_NGROUPS);
            FZ_CHECK(st == SHP_OK || st == SHP_ERR_GROUP_UNKNOWN);
            break;
        case FZ_AN_ACCEPT:
            e = ep_new(&an.tp, EP_CHILD, "127.0.0.2:5000");
            e->connected = 1;
            accept_cb(&an.tp, &e->ep);
            if (e->ep.cbs == NULL) {
                ep_close(e, SHP_ERR_NO_MEMORY);
            }
            break;
        case FZ_AN_CLOSE: {
            uint8_t b = fz_u8(&in);
            e = slots[b % FZ_AN_NEPS];
            if (e != NULL && (b & 0x80)) {
                e->broken = 1; /* its sends fail from now on */
            } else if (e != NULL) {
                ep_close(e, SHP_ERR_IO);
            }
            break;
        }
        case FZ_AN_CONNECT:
            e = slot_of(&in);
            if (e != NULL && e->kind == EP_PARENT && !e->connected &&
                !e->closing) {
                e->connected = 1;
                if (e->ep.cbs->on_connect != NULL) {
                    /* as tcp (core/conn.c): a close in there completes
                     * when it returns */
                    e->dispatching = 1;
                    e->ep.cbs->on_connect(&e->ep);
                    e->dispatching = 0;
                    if (e->close_pending) {
                        ep_finish_close(e, SHP_ERR_CANCELED);
                    }
                }
            }
            break;
        case FZ_AN_MSG: op_msg(&in); break;
        case FZ_AN_RAW: op_raw(&in); break;
        case FZ_AN_TIMERS: op_timers(); break;
        case FZ_AN_DUMP:
            shp_an_dump(&an);
            json_decref(shp_an_stats_json(&an));
            break;
        case FZ_AN_CTL: op_ctl(fz_u8(&in)); break;
        case FZ_AN_CTL_SEND: op_send_to(&peers[0], &in, 0); break;
        }
        FZ_CHECK(an.ngroups == HASH_COUNT(an.groups));
    }
    /* shut down as main() does */
    an.stopping = 1;
    if (ctl_started) {
        shp_an_ctl_stop(&an);
    }
    shp_an_stop(&an);
    peer_drop(&peers[0]);
    FZ_CHECK(live == NULL);
    for (int i = 0; i < FZ_AN_NEPS; i++) {
        FZ_CHECK(slots[i] == NULL);
    }
    FZ_CHECK(an.links == NULL && an.parents == NULL);
    return 0;
}
