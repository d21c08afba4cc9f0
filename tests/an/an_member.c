/*
 * an_member: a group member for the aggregation-node tests.  Connects to its
 * leaf AN, joins a group, runs a plan of operations with up to `osts` in
 * flight, and checks every result bitwise against the fold of all members'
 * data computed locally in the tree's order (leaf partials in member order,
 * then the leaves in order).
 *
 * Exit: 0 all results right, 1 a wrong result, 2 setup failed, 3 the AN
 * reported an error (the status is printed), 4 no progress for --timeout.
 *
 * Plans: dtypes (every dtype x op, counts from 0 to several fragments),
 * determinism (adversarial f32/f64 sums, random delays, 100 rounds),
 * stream (u32 sums of --count elements, 4 by default, until --ops or an
 * error), bcast (bcasts from every member in turn, 1 byte to a whole
 * payload, between u32 sums: the root sends its data, the others a
 * header alone), free (the same with random delays, and every bcast
 * whose seq is not a multiple of SHP_WIRE_FREE_SYNC free: its root sends
 * alone, the others nothing, and take its result even before they reach
 * it), bcastmix (a stream where member 5 takes operation 3 for a bcast of
 * member 0's: the group must fail, not hang), freemix (a free-bcast plan
 * where member 5 sends a header for one the others skip).
 */
#include "core/log.h"
#include "reduce/reduce.h"
#include "core/time.h"
#include "transport/transport.h"

#include <getopt.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *leaf, *mcast, *plan, *local_ip, *transport;
    uint32_t group;
    uint16_t tree;
    uint64_t job;
    uint8_t key[32];
    unsigned child, rank, leaves, per_leaf, osts;
    uint32_t payload, count; /* count: elements per stream operation */
    double drop, timeout;
    long ops;
    unsigned retrans_ms; /* first retransmit request after this long */
    unsigned seed;
    int done_fd;
} opts_t;

/* one operation */
typedef struct {
    shp_reduce_desc_t desc;
    uint32_t count;
    int barrier;
    int bcast; /* a tree bcast from member `root` */
    int free;  /* a free one: only its root sends */
    unsigned root;
    uint32_t frag; /* fragment index within a message */
    uint32_t tag;  /* which message of the plan */
    int done;
    uint64_t sent_ns;
    int retrans;
} op_t;

static opts_t o;
static struct ev_loop *loop;
static shp_tp_t tp, mtp;
static shp_tp_ep_t *ep, *mep;
static int connected, joined = -1;
static op_t *ops;
static long nops, next_send, next_done;
static int exit_code = -1;
static uint8_t *sendbuf, *expect, *scratch;
static const void **srcs;
static uint64_t last_progress;
static uint8_t mac_key[SHP_WIRE_MAC_KEY_LEN]; /* the group's results' tags */
static long retrans_sent, results_rc, results_mcast, results_unicast;
static long results_retrans; /* results that came on request */
static long results_early;   /* free bcasts' results before their turn */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* The value element i of op k has at member `rank`. */
static void gen(const op_t *op, long k, unsigned rank, uint8_t *buf)
{
    static const double adversarial[] = {1e20, 1.0,  -1e20, 3.0, 1e-3,
                                         -1.0, 7e19, -7e19, 0.5, 1e16};
    size_t vs = shp_dtype_size(op->desc.dtype);
    size_t es = shp_reduce_elem_size(&op->desc);
    uint32_t i;

    for (i = 0; i < op->count; i++) {
        uint64_t r = mix(((uint64_t)k << 32) ^ ((uint64_t)rank << 20) ^ i ^
                         ((uint64_t)o.seed << 48));
        uint8_t *p = buf + i * es;
        double v;
        if (!shp_dtype_is_float(op->desc.dtype)) {
            if (op->desc.op == SHP_OP_PROD) {
                r = r % 3; /* keep products from collapsing to 0 */
            }
            memcpy(p, &r, vs);
        } else {
            if (!strcmp(o.plan, "determinism")) {
                v = adversarial[(r >> 7) % 10] * (1.0 + (double)(r % 13) / 7);
            } else if (op->desc.op == SHP_OP_PROD) {
                v = 0.5 + (double)(r % 1000) / 1000.0;
            } else {
                v = ((double)(int64_t)(r >> 11) / 9007199254740992.0) * 100.0;
                if (r % 17 == 0) {
                    v = -0.0;
                }
            }
            switch (op->desc.dtype) {
            case SHP_DTYPE_F32: {
                float f = (float)v;
                memcpy(p, &f, 4);
                break;
            }
            case SHP_DTYPE_F64: memcpy(p, &v, 8); break;
            case SHP_DTYPE_F16: {
                uint16_t h = shp_f32_to_f16((float)v);
                memcpy(p, &h, 2);
                break;
            }
            default: {
                uint16_t h = shp_f32_to_bf16((float)v);
                memcpy(p, &h, 2);
                break;
            }
            }
        }
        if (shp_op_is_loc(op->desc.op)) {
            int32_t tag = (int32_t)rank;
            if (!shp_dtype_is_float(op->desc.dtype)) {
                memset(p, (int)(r % 3), vs); /* many equal values: ties */
            }
            memcpy(p + vs, &tag, 4);
        }
    }
}

/* The expected result: leaf partials in member order, then leaves. */
static void expected(const op_t *op, long k, uint8_t *out)
{
    size_t es = shp_reduce_elem_size(&op->desc);
    size_t bytes = (size_t)op->count * es;
    unsigned l, m, n = o.leaves * o.per_leaf;

    if (op->barrier || op->count == 0) {
        return;
    }
    if (op->bcast) {
        gen(op, k, op->root, out);
        return;
    }
    for (m = 0; m < n; m++) {
        gen(op, k, m, scratch + (size_t)m * bytes);
    }
    for (l = 0; l < o.leaves; l++) {
        for (m = 0; m < o.per_leaf; m++) {
            srcs[m] = scratch + (size_t)(l * o.per_leaf + m) * bytes;
        }
        if (shp_reduce_fold(&op->desc, out + (size_t)l * bytes, srcs,
                            o.per_leaf, op->count) != SHP_OK) {
            exit(2);
        }
    }
    for (l = 0; l < o.leaves; l++) {
        srcs[l] = out + (size_t)l * bytes;
    }
    if (o.leaves > 1 &&
        shp_reduce_fold(&op->desc, out, srcs, o.leaves, op->count) != SHP_OK) {
        exit(2);
    }
}

static int lingering;

static void finish(int code)
{
    if (exit_code >= 0) {
        return;
    }
    exit_code = code;
    if (code >= 3) { /* what this member's transport holds, for the logs */
        fprintf(stderr, "member %u: sent up to %ld, done up to %ld\n", o.rank,
                next_send, next_done);
        shp_log_set_level(SHP_LOG_INFO);
        tp.ops->dump(&tp);
    }
    if (code == 0 && o.done_fd >= 0) {
        /* out-of-band barrier: say we are done and stay (the group stays
         * whole) until the driver has heard from everyone and stops us */
        char c = 1;
        if (write(o.done_fd, &c, 1) == 1) {
            lingering = 1;
            return;
        }
    }
    ev_break(loop, EVBREAK_ALL);
}

static void stop_cb(struct ev_loop *l, ev_signal *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(l, EVBREAK_ALL);
}

static void send_op(long k)
{
    op_t *op = &ops[k];
    shp_wire_hdr_t h;

    if (!strncmp(o.plan, "free", 4)) { /* members apart, roots ahead */
        usleep((useconds_t)(mix((uint64_t)k * 31 + o.rank) % 1500));
    }
    op->sent_ns = shp_time_ns();
    if (op->free && op->root != o.rank) {
        return; /* nothing: its result comes when the root's data does */
    }

    if (op->barrier) {
        shp_wire_hdr_init(&h, SHP_WIRE_OP_AGG_REQ, o.tree, o.group,
                          (uint32_t)k);
        h.flags = SHP_WIRE_F_BARRIER;
    } else {
        /* a bcast's data from its root, a header from the others */
        int none = op->bcast && op->root != o.rank;
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, o.tree, o.group,
                              (uint32_t)k, &op->desc, none ? 0 : op->count);
        gen(op, k, o.rank, sendbuf);
        h.flags |= op->bcast ? SHP_WIRE_F_BCAST : 0;
        h.flags |= op->free ? SHP_WIRE_F_FREE : 0;
    }
    if (!strcmp(o.plan, "determinism")) {
        usleep((useconds_t)(mix((uint64_t)k * 977 + o.rank) % 2000));
    }
    op->sent_ns = shp_time_ns();
    if (shp_tp_send(ep, &h, sendbuf) != SHP_OK) {
        fprintf(stderr, "member %u: send failed\n", o.rank);
        finish(3);
    }
}

static void pump(void)
{
    if (ep == NULL || exit_code >= 0) {
        return;
    }
    while (next_done < nops && ops[next_done].done) {
        next_done++;
        last_progress = shp_time_ns();
    }
    if (next_done == nops) {
        finish(0);
        return;
    }
    /* free plans: odd members one operation at a time, so that results
     * come before they reach them */
    long win = !strncmp(o.plan, "free", 4) && o.rank % 2 ? 1 : (long)o.osts;
    while (next_send < nops && next_send < next_done + win) {
        send_op(next_send++);
    }
}

static void on_result(const shp_wire_hdr_t *in, const void *payload)
{
    long k = (long)in->seq;
    shp_wire_hdr_t h = *in, *hdr = &h;
    op_t *op;
    size_t bytes;

    if (hdr->group_id != o.group || k < next_done || k >= nops || ops[k].done ||
        (k >= next_send && !(ops[k].free && ops[k].root != o.rank))) {
        return; /* not ours, or a duplicate (RC and multicast both) */
    }
    results_early += k >= next_send;
    if (hdr->flags & SHP_WIRE_F_MCAST) { /* as libsharp: tagged, checked */
        if (!shp_wire_mac_ok(mac_key, (uint64_t)k, hdr, payload)) {
            fprintf(stderr,
                    "member %u: op %ld: multicast result without a "
                    "right tag\n",
                    o.rank, k);
            finish(1);
            return;
        }
        hdr->payload_len -= SHP_WIRE_MAC_LEN;
    }
    op = &ops[k];
    bytes =
        op->barrier ? 0 : (size_t)op->count * shp_reduce_elem_size(&op->desc);
    if (hdr->payload_len != bytes) {
        fprintf(stderr, "member %u: op %ld: result of %u bytes, want %zu\n",
                o.rank, k, hdr->payload_len, bytes);
        finish(1);
        return;
    }
    expected(op, k, expect);
    if (bytes > 0 && memcmp(payload, expect, bytes) != 0) {
        fprintf(stderr, "member %u: op %ld (%s/%s count %u): wrong result\n",
                o.rank, k, shp_dtype_name(op->desc.dtype),
                shp_op_name(op->desc.op), op->count);
        finish(1);
        return;
    }
    op->done = 1;
    if (hdr->flags & SHP_WIRE_F_MCAST) {
        results_mcast++;
    } else {
        results_rc++;
    }
    results_unicast += (hdr->flags & SHP_WIRE_F_UNICAST) != 0;
    results_retrans += (hdr->flags & SHP_WIRE_F_RETRANS) != 0;
    pump();
}

/* The leaf AN's nonce: the join proves the job key over it */
static void on_nonce(shp_tp_ep_t *e, const void *nonce)
{
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;

    shp_wire_join_make(o.key, nonce, o.tree, o.group, o.job, o.child, &h,
                       payload);
    if (shp_tp_send(e, &h, payload) != SHP_OK) {
        finish(2);
    }
}

static void on_msg(shp_tp_ep_t *e, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    if (lingering || exit_code >= 0) {
        return; /* finished: nothing more to check or send */
    }
    switch (hdr->opcode) {
    case SHP_WIRE_OP_JOIN_NONCE:
        if (e == ep) {
            on_nonce(e, payload);
        }
        break;
    case SHP_WIRE_OP_GROUP_JOIN_ACK:
        joined = hdr->status;
        if (joined != SHP_OK) {
            printf("member %u: join refused: %s\n", o.rank,
                   shp_status_name(hdr->status));
            finish(3);
        } else {
            last_progress = shp_time_ns();
            pump();
        }
        break;
    case SHP_WIRE_OP_AGG_RESULT: on_result(hdr, payload); break;
    case SHP_WIRE_OP_ERROR:
        printf("member %u: error %s: %.*s\n", o.rank,
               shp_status_name(hdr->status), (int)hdr->payload_len,
               (const char *)payload);
        finish(3);
        break;
    default: break;
    }
}

static void on_connect(shp_tp_ep_t *e)
{
    if (e == ep) {
        connected = 1; /* the join waits for the AN's nonce */
    }
}

static void on_close(shp_tp_ep_t *e, shp_status_t reason)
{
    if (e == ep) {
        ep = NULL;
        if (exit_code < 0) {
            printf("member %u: lost the leaf AN: %s\n", o.rank,
                   shp_status_str(reason));
            finish(connected ? 3 : 2);
        }
    }
}

static const shp_tp_ep_cbs_t cbs = {on_msg, on_connect, on_close};

/* Ask again for results that did not come (multicast loss), and give up
 * when nothing moves for --timeout seconds. */
static void tick_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    uint64_t now = shp_time_ns();
    long k;

    (void)l;
    (void)w;
    (void)revents;
    if (lingering) {
        return;
    }
    if (joined == SHP_OK && mep != NULL) { /* RC results are never lost */
        for (k = next_done; k < next_send; k++) {
            op_t *op = &ops[k];
            if (!op->done &&
                now - op->sent_ns >
                    shp_wire_retrans_gap(o.retrans_ms * SHP_NSEC_PER_MSEC,
                                         (unsigned)op->retrans)) {
                shp_wire_hdr_t h;
                shp_wire_hdr_init(&h, SHP_WIRE_OP_RETRANS_REQ, o.tree, o.group,
                                  (uint32_t)k);
                if (results_mcast == 0 &&
                    results_retrans >= SHP_WIRE_RC_ONLY_AFTER) {
                    h.flags |= SHP_WIRE_F_RC_ONLY; /* as libsharp_coll does */
                }
                op->sent_ns = now;
                op->retrans++;
                retrans_sent++;
                if (ep != NULL && shp_tp_send(ep, &h, NULL) != SHP_OK) {
                    finish(3);
                    return;
                }
            }
        }
    }
    if ((double)(now - last_progress) / 1e9 > o.timeout) {
        fprintf(stderr, "member %u: no progress for %.1fs (op %ld)\n", o.rank,
                o.timeout, next_done);
        finish(4);
    }
}

static void build_plan(void)
{
    long cap = 1 << 16, k = 0;
    uint32_t tag = 0;

    ops = calloc((size_t)cap, sizeof(*ops));
    if (!strcmp(o.plan, "dtypes")) {
        int dt, op;
        for (dt = 0; dt < SHP_DTYPE_LAST; dt++) {
            for (op = 0; op < SHP_OP_LAST; op++) {
                shp_reduce_desc_t d = {
                    dt, op, shp_op_is_loc(op) ? SHP_DTYPE_I32 : SHP_DTYPE_NULL};
                size_t es = shp_reduce_elem_size(&d);
                uint32_t per = es ? (uint32_t)(o.payload / es) : 0;
                uint32_t counts[] = {0, 1, 13, per, 3 * per + 5};
                unsigned c;
                if (es == 0) {
                    continue;
                }
                for (c = 0; c < 5; c++) {
                    uint32_t left = counts[c], f = 0;
                    /* a message of counts[c] elements, cut into
                     * payload-sized fragments, one operation each */
                    do {
                        uint32_t n = left < per ? left : per;
                        ops[k].desc = d;
                        ops[k].count = n;
                        ops[k].frag = f++;
                        ops[k].tag = tag;
                        k++;
                        left -= n;
                    } while (left > 0);
                    tag++;
                }
            }
        }
        ops[k++].barrier = 1;
    } else if (!strcmp(o.plan, "determinism")) {
        long r;
        for (r = 0; r < 100; r++) {
            shp_reduce_desc_t d = {r % 2 ? SHP_DTYPE_F64 : SHP_DTYPE_F32,
                                   SHP_OP_SUM, SHP_DTYPE_NULL};
            ops[k].desc = d;
            ops[k].count = 32;
            k++;
        }
    } else if (!strcmp(o.plan, "bcast") || !strncmp(o.plan, "free", 4)) {
        unsigned n = o.leaves * o.per_leaf;
        uint32_t most =
            o.payload < SHP_WIRE_FREE_MAX ? o.payload : SHP_WIRE_FREE_MAX;
        int fr = strcmp(o.plan, "bcast") != 0;
        for (k = 0; k < (o.ops > 0 ? o.ops : 600); k++) {
            ops[k].count = o.count;
            ops[k].desc =
                (shp_reduce_desc_t){SHP_DTYPE_U32, SHP_OP_SUM, SHP_DTYPE_NULL};
            if (k % 3 != 0) {
                ops[k].bcast = 1;
                ops[k].root = (unsigned)(k * 7) % n;
                ops[k].desc = (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR,
                                                  SHP_DTYPE_NULL};
                ops[k].count = k % 4 == 0 ? o.payload
                                          : 1 + (uint32_t)(k * 131) % o.payload;
                ops[k].free =
                    fr && k % SHP_WIRE_FREE_SYNC != 0 && ops[k].count <= most;
            }
            if (fr && k % 3 == 0 && k % 5 == 0) {
                /* runs of bcasts: a root far ahead of the others */
                ops[k].bcast = 1;
                ops[k].root = (unsigned)(k / 15) % n;
                ops[k].desc = (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR,
                                                  SHP_DTYPE_NULL};
                ops[k].count = 8;
                ops[k].free = k % SHP_WIRE_FREE_SYNC != 0;
            }
        }
        for (long j = 0; !strcmp(o.plan, "freemix") && o.rank == 5 && j < k;
             j++) {
            if (ops[j].free && ops[j].root != o.rank) {
                ops[j].free = 0; /* a header where the others send nothing */
                break;
            }
        }
    } else { /* stream, or mismatch: i32 max where the others sum u32 */
        long n = o.ops > 0 ? o.ops : cap - 1;
        int odd = !strcmp(o.plan, "mismatch");
        free(ops);
        ops = calloc((size_t)n + 1, sizeof(*ops));
        for (k = 0; k < n; k++) {
            ops[k].desc = (shp_reduce_desc_t){
                odd ? SHP_DTYPE_I32 : SHP_DTYPE_U32,
                odd ? SHP_OP_MAX : SHP_OP_SUM, SHP_DTYPE_NULL};
            ops[k].count = o.count;
        }
        if (!strcmp(o.plan, "bcastmix") && o.rank == 5 && n > 3) {
            ops[3].bcast = 1; /* of member 0's, where the others sum */
            ops[3].root = 0;
        }
    }
    nops = k;
}

int main(int argc, char **argv)
{
    /* clang-format off */
    static const struct option lopts[] = {
        {"leaf", 1, 0, 'l'},      {"group", 1, 0, 'g'},
        {"tree", 1, 0, 't'},      {"job", 1, 0, 'j'},
        {"key", 1, 0, 'k'},       {"child", 1, 0, 'c'},
        {"rank", 1, 0, 'r'},      {"leaves", 1, 0, 'L'},
        {"per-leaf", 1, 0, 'P'},  {"osts", 1, 0, 'o'},
        {"payload", 1, 0, 'p'},   {"plan", 1, 0, 'x'},
        {"mcast", 1, 0, 'm'},     {"drop", 1, 0, 'd'},
        {"ops", 1, 0, 'n'},       {"timeout", 1, 0, 'T'},
        {"count", 1, 0, 'C'},     {"local", 1, 0, 'i'},
        {"seed", 1, 0, 's'},      {"done-fd", 1, 0, 'D'},
        {"transport", 1, 0, 'X'}, {"retrans-ms", 1, 0, 'R'},
        {0, 0, 0, 0}};
    /* clang-format on */
    ev_signal term;
    ev_timer tick;
    size_t maxbytes;
    int c, i;

    o.plan = "stream";
    o.osts = 8;
    o.payload = 256;
    o.leaves = 1;
    o.per_leaf = 1;
    o.timeout = 10;
    o.retrans_ms = 20;
    o.count = 4;
    o.local_ip = "127.0.0.1";
    o.done_fd = -1;
    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (c) {
        case 'l': o.leaf = optarg; break;
        case 'g': o.group = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 't': o.tree = (uint16_t)strtoul(optarg, NULL, 0); break;
        case 'j': o.job = strtoull(optarg, NULL, 0); break;
        case 'k':
            for (i = 0; i < 32 && optarg[2 * i] && optarg[2 * i + 1]; i++) {
                unsigned v;
                sscanf(optarg + 2 * i, "%2x", &v);
                o.key[i] = (uint8_t)v;
            }
            break;
        case 'c': o.child = (unsigned)atoi(optarg); break;
        case 'r': o.rank = (unsigned)atoi(optarg); break;
        case 'L': o.leaves = (unsigned)atoi(optarg); break;
        case 'P': o.per_leaf = (unsigned)atoi(optarg); break;
        case 'o': o.osts = (unsigned)atoi(optarg); break;
        case 'p': o.payload = (uint32_t)atoi(optarg); break;
        case 'x': o.plan = optarg; break;
        case 'm': o.mcast = optarg; break;
        case 'd': o.drop = atof(optarg); break;
        case 'n': o.ops = atol(optarg); break;
        case 'T': o.timeout = atof(optarg); break;
        case 'C': o.count = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'i': o.local_ip = optarg; break;
        case 's': o.seed = (unsigned)atoi(optarg); break;
        case 'D': o.done_fd = atoi(optarg); break;
        case 'X': o.transport = optarg; break;
        case 'R': o.retrans_ms = (unsigned)atoi(optarg); break;
        default: return 2;
        }
    }
    if (o.leaf == NULL) {
        fprintf(stderr, "an_member: --leaf is required\n");
        return 2;
    }
    shp_log_set_component("an_member");
    shp_log_set_level(SHP_LOG_ERROR);
    build_plan();
    maxbytes = (size_t)o.payload + 64;
    sendbuf = calloc(1, maxbytes);
    expect = calloc(o.leaves + 1, maxbytes);
    scratch = calloc((size_t)o.leaves * o.per_leaf + 1, maxbytes);
    srcs = calloc(o.leaves * o.per_leaf + 1, sizeof(*srcs));

    loop = ev_loop_new(EVFLAG_AUTO);
    const shp_tp_ops_t *tops = shp_tp_find(o.transport ? o.transport : "tcp");
    if (tops == NULL) {
        fprintf(stderr, "an_member: unknown transport\n");
        return 2;
    }
    if (shp_tp_init(&tp, tops, loop, o.payload + 64, o.local_ip) != SHP_OK ||
        tp.ops->connect(&tp, o.leaf, &cbs, NULL, &ep) != SHP_OK) {
        fprintf(stderr, "member %u: cannot connect to %s\n", o.rank, o.leaf);
        return 2;
    }
    if (o.mcast != NULL) {
        shp_wire_mac_key(o.key, o.tree, o.group, mac_key);
        if (shp_tp_init(&mtp, shp_tp_mcast_ops(tops), loop, o.payload + 64,
                        o.local_ip) != SHP_OK ||
            mtp.ops->mcast_join(&mtp, o.mcast, &cbs, NULL, &mep) != SHP_OK) {
            fprintf(stderr, "member %u: cannot join %s\n", o.rank, o.mcast);
            return 2;
        }
        mtp.mcast_drop = o.drop;
        mtp.drop_seed ^= mix(o.rank + 1);
    }
    last_progress = shp_time_ns();
    ev_timer_init(&tick, tick_cb, 0.005, 0.005);
    ev_timer_start(loop, &tick);
    ev_signal_init(&term, stop_cb, SIGTERM);
    ev_signal_start(loop, &term);
    ev_run(loop, 0);
    if (exit_code == 0) {
        printf("member %u: %ld operations right (%ld by RC, %ld by multicast, "
               "%ld flagged unicast, %ld retransmit requests, %llu datagrams "
               "dropped, %ld before their turn)\n",
               o.rank, nops, results_rc, results_mcast, results_unicast,
               retrans_sent, (unsigned long long)mtp.stats.mcast_dropped,
               results_early);
    }
    fflush(stdout);
    /* leave without a clean close: the test driver watches exit codes */
    _exit(exit_code < 0 ? 2 : exit_code);
}
