/*
 * Writes the seed corpora of the fuzz harnesses into DIR/<harness>/:
 * valid inputs made with the project's own encoders (wire headers, control
 * frames, handshake messages, configuration dumps, generated fat-trees)
 * and, for the stateful harnesses, whole sessions (a group joined, reduced,
 * left; ANs registered, trees built, a job with a group).
 *
 *   gen_seeds DIR
 */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_config_table.h"
#include "tests/support/group_keys.h"

#include "topology/topo.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "protocol/wire.h"

#include <errno.h>
#include <sys/stat.h>

static const char *outdir;

/* A growing byte buffer. */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        FZ_CHECK(b->p != NULL);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put8(buf_t *b, unsigned v)
{
    uint8_t c = (uint8_t)v;
    put(b, &c, 1);
}

static void put16(buf_t *b, unsigned v)
{
    put8(b, v >> 8);
    put8(b, v);
}

static void save(const char *harness, const char *name, const void *d, size_t n)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", outdir, harness);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", outdir, harness, name);
    f = fopen(path, "wb");
    FZ_CHECK(f != NULL);
    FZ_CHECK(fwrite(d, 1, n, f) == n || n == 0);
    fclose(f);
}

static void save_buf(const char *harness, const char *name, buf_t *b)
{
    save(harness, name, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* wire ---------------------------------------------------------------------- */

static void put_msg(buf_t *b, const shp_wire_hdr_t *h, const void *payload)
{
    uint8_t raw[SHP_WIRE_HDR_LEN];
    shp_wire_hdr_pack(h, raw);
    put(b, raw, sizeof(raw));
    if (h->payload_len > 0) {
        put(b, payload, h->payload_len);
    }
}

static void seeds_wire(void)
{
    static const shp_reduce_desc_t descs[] = {
        {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL},
        {SHP_DTYPE_I64, SHP_OP_MAX, SHP_DTYPE_NULL},
        {SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_I32},
        {SHP_DTYPE_BF16, SHP_OP_PROD, SHP_DTYPE_NULL},
        {SHP_DTYPE_U8, SHP_OP_BXOR, SHP_DTYPE_NULL},
    };
    uint8_t payload[256] = {0}, join[SHP_WIRE_JOIN_LEN];
    shp_wire_join_t j = {.job_id = 77, .child_index = 3};
    shp_wire_hdr_t h;
    buf_t b = {0};
    char name[32];

    for (unsigned i = 0; i < sizeof(payload); i++) {
        payload[i] = (uint8_t)(i * 7);
    }
    for (unsigned i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
        put8(&b, 3);
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 1, 5, i, &descs[i], 8);
        put_msg(&b, &h, payload);
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 1, 5, i, &descs[i],
                              4);
        h.flags = SHP_WIRE_F_MCAST;
        put_msg(&b, &h, payload);
        snprintf(name, sizeof(name), "agg-%u", i);
        save_buf("wire", name, &b);
    }
    /* sparse: 64 floats in blocks of 8 bytes, blocks 1 and 5 there */
    {
        static const shp_reduce_desc_t f = {SHP_DTYPE_F32, SHP_OP_SUM,
                                            SHP_DTYPE_NULL};
        uint8_t sp[4 + 1 + 16] = {8, 0, 0, 0, 0x22};
        memcpy(sp + 5, payload, 16);
        put8(&b, 3);
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 1, 5, 7, &f, 16);
        h.flags = SHP_WIRE_F_SPARSE;
        h.payload_len = sizeof(sp);
        put_msg(&b, &h, sp);
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 1, 5, 7, &f, 16);
        h.flags = SHP_WIRE_F_SPARSE;
        h.payload_len = sizeof(sp);
        put_msg(&b, &h, sp);
        save_buf("wire", "sparse", &b);
    }
    put8(&b, 3);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_AGG_REQ, 0, 9, 1);
    h.flags = SHP_WIRE_F_BARRIER;
    put_msg(&b, &h, NULL);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_ERROR, 0, 9, 1);
    h.status = SHP_ERR_GROUP_FAILED;
    h.payload_len = 12;
    put_msg(&b, &h, "group failed");
    shp_wire_hdr_init(&h, SHP_WIRE_OP_RETRANS_REQ, 0, 9, 1);
    put_msg(&b, &h, NULL);
    shp_wire_join_pack(&j, join);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_JOIN, 0, 9, 0);
    h.payload_len = SHP_WIRE_JOIN_LEN;
    put_msg(&b, &h, join);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_JOIN_ACK, 0, 9, 0);
    put_msg(&b, &h, NULL);
    shp_wire_nonce_new(payload, &h);
    put_msg(&b, &h, payload);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_LEAVE, 0, 9, 4);
    put_msg(&b, &h, NULL);
    save_buf("wire", "control-ops", &b);
}

/* mcast: a seq byte, then one multicast result with a tag of zeros (the
 * harness makes the right one itself) */
static void seeds_mcast(void)
{
    static const shp_reduce_desc_t descs[] = {
        {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL},
        {SHP_DTYPE_I64, SHP_OP_MAX, SHP_DTYPE_NULL},
        {SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_I32},
    };
    uint8_t payload[256 + SHP_WIRE_MAC_LEN] = {0};
    shp_wire_hdr_t h;
    buf_t b = {0};
    char name[32];

    for (unsigned i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
        put8(&b, (uint8_t)(i * 40));
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 1, 5, i, &descs[i],
                              4);
        h.flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC;
        h.payload_len += SHP_WIRE_MAC_LEN;
        put_msg(&b, &h, payload);
        snprintf(name, sizeof(name), "result-%u", i);
        save_buf("mcast", name, &b);
    }
    put8(&b, 9); /* a barrier's result: only the tag */
    shp_wire_hdr_init(&h, SHP_WIRE_OP_AGG_RESULT, 1, 5, 9);
    h.flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC | SHP_WIRE_F_BARRIER;
    h.payload_len = SHP_WIRE_MAC_LEN;
    put_msg(&b, &h, payload);
    save_buf("mcast", "barrier", &b);
}

/* ctl ------------------------------------------------------------------------- */

static void put_json(buf_t *b, json_t *m)
{
    uint8_t *frame;
    size_t len;

    FZ_CHECK(m != NULL && shp_ctl_encode(m, &frame, &len) == SHP_OK);
    put(b, frame, len);
    free(frame);
    json_decref(m);
}

static void put_frame(buf_t *b, uint8_t type)
{
    uint8_t hdr[SHP_CTL_HDR_LEN];
    shp_ctl_hdr_pack(type, 0, hdr);
    put(b, hdr, sizeof(hdr));
}

static void seeds_ctl(void)
{
    uint8_t key[32];
    buf_t b = {0};

    fz_an_job_key(1, key);
    put8(&b, 0);
    put_json(&b,
             json_pack("{s:s, s:s, s:s, s:s, s:b, s:{s:i, s:i, s:i, "
                       "s:I}, s:[i]}",
                       "type", "an_register", "name", "leaf01", "data_addr",
                       "127.0.0.1:7000", "transport", "tcp", "mcast", 1, "caps",
                       "max_trees", 64, "max_groups", 1000, "max_osts", 256,
                       "max_payload", (json_int_t)65536, "groups", 3));
    put_frame(&b, SHP_CTL_FRAME_PING);
    put_json(
        &b, group_keys(json_pack(
                "{s:s, s:I, s:i, s:I, s:o, s:o, s:[{s:s}, {s:s}], "
                "s:b, s:s, s:i, s:i}",
                "type", "group_add", "id", (json_int_t)(1 << 20), "group_id", 1,
                "tree_id", (json_int_t)0, "job_id", shp_json_u64(UINT64_MAX),
                "job_key", shp_json_hex(key, sizeof(key)), "children", "kind",
                "member", "kind", "an", "top", 1, "dist", "both", "osts", 16,
                "payload", 4096)));
    put_frame(&b, SHP_CTL_FRAME_PONG);
    save_buf("ctl", "messages", &b);

    put8(&b, 1);
    put_frame(&b, SHP_CTL_FRAME_PING);
    put_json(
        &b, json_pack("{s:s, s:i, s:i}", "type", "note", "id", 3, "status", 0));
    put_json(&b,
             json_pack("{s:s, s:i, s:i, s:{s:i, s:i}}", "type", "stats_reply",
                       "id", 7, "status", 0, "stats", "jobs", 1, "groups", 2));
    save_buf("ctl", "call-answer", &b);
}

/* auth ------------------------------------------------------------------------ */

static void put_line(buf_t *b, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    FZ_CHECK(s != NULL);
    put(b, s, strlen(s));
    put8(b, '\n');
    free(s);
    json_decref(m);
}

static void seeds_auth(void)
{
    shp_auth_key_t key;
    shp_auth_client_t c;
    shp_auth_server_t s;
    json_t *hello, *chal = NULL, *auth = NULL;
    const char *why;
    buf_t b = {0};

    FZ_CHECK(shp_auth_init() == SHP_OK);
    shp_auth_key_from_bytes("some cluster secret", 19, &key);
    memset(&s, 0, sizeof(s));
    hello = shp_auth_client_hello(&c, "an", "leaf01");
    FZ_CHECK(shp_auth_server_hello(&s, &key, hello, &chal, &why) == SHP_OK);
    FZ_CHECK(shp_auth_client_answer(&c, &key, chal, &auth, &why) == SHP_OK);
    put8(&b, 0);
    put_line(&b, json_incref(hello));
    put_line(&b, json_incref(auth));
    save_buf("auth", "server", &b);
    put8(&b, 1);
    put_line(&b, json_incref(chal));
    save_buf("auth", "client", &b);
    for (unsigned how = 0; how < 4; how++) {
        char name[32];
        static const char role[39] = "sharpd"; /* the harness's field */
        put8(&b, 2);
        put8(&b, how);
        put8(&b, 17);
        put(&b, role, sizeof(role));
        put(&b, "n00001", 6);
        snprintf(name, sizeof(name), "handshake-%u", how);
        save_buf("auth", name, &b);
    }
    /* secret files: a node secret, and a cluster secret */
    char node[SHP_AUTH_NODE_SECRET_MAX];
    FZ_CHECK(shp_auth_node_secret(&key, "an", "leaf01", node) == SHP_OK);
    put8(&b, 3);
    put(&b, node, strlen(node));
    put8(&b, '\n');
    save_buf("auth", "node-secret", &b);
    put8(&b, 3);
    put(&b, "some cluster secret\n", 20);
    save_buf("auth", "cluster-secret", &b);
    json_decref(hello);
    json_decref(chal);
    json_decref(auth);
}

/* config -------------------------------------------------------------------- */

static void dump_seed(const char *name, unsigned mode, const fz_cfg_t *c,
                      unsigned flags, const char *head)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    buf_t b = {0};

    FZ_CHECK(f != NULL);
    fputs(head, f);
    shp_config_dump(&fz_cfg_table, c, f, flags);
    fclose(f);
    put8(&b, mode);
    put(&b, text, len);
    save_buf("config", name, &b);
    free(text);
}

static void seeds_config(void)
{
    static const char argv_seed[] =
        "\002--int_opt=5\n--bool_opt\n--size_opt\n2m\n--time-opt=150ms\n"
        "--enum_opt=verbs\n--log-level=debug\n--string_opt\n10.0.0.1:7100";
    fz_cfg_t c = {0};
    shp_config_err_t err;

    FZ_CHECK(shp_config_defaults(&fz_cfg_table, &c) == SHP_OK);
    dump_seed("file-defaults", 0, &c,
              SHP_CONFIG_DUMP_DOC | SHP_CONFIG_DUMP_HIDDEN, "");
    FZ_CHECK(shp_config_set(&fz_cfg_table, &c, "size_opt", "3g", "seed",
                            &err) == SHP_OK);
    FZ_CHECK(shp_config_set(&fz_cfg_table, &c, "double_opt", "1e-3", "seed",
                            &err) == SHP_OK);
    FZ_CHECK(shp_config_set(&fz_cfg_table, &c, "time_opt", "2m", "seed",
                            &err) == SHP_OK);
    dump_seed("file-section", 0, &c, SHP_CONFIG_DUMP_COMMENTED,
              "; a comment\n[sharp_fz]\n");
    dump_seed("env", 1, &c, SHP_CONFIG_DUMP_ENV | SHP_CONFIG_DUMP_HIDDEN, "");
    save("config", "argv", argv_seed, sizeof(argv_seed) - 1);
    shp_config_release(&fz_cfg_table, &c);
}

/* topo ------------------------------------------------------------------------ */

static void seeds_topo(void)
{
    static const shp_fat_tree_spec_t specs[] = {
        {2, 4, 4}, {2, 6, 9}, {3, 4, 8}};

    for (unsigned i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        shp_topo_t *t = NULL;
        char err[256], name[32], *text = NULL;
        size_t len = 0;
        FILE *f;

        FZ_CHECK(shp_topo_fat_tree(&specs[i], &t, err, sizeof(err)) == SHP_OK);
        f = open_memstream(&text, &len);
        FZ_CHECK(f != NULL);
        shp_topo_write(t, f, 0);
        fclose(f);
        snprintf(name, sizeof(name), "fat-tree-%u.ibnd", i);
        save("topo", name, text, len);
        free(text);
        shp_topo_free(t);
    }
}

/* an: sessions ------------------------------------------------------------- */

/* FZ_AN_MSG with a computed payload_len; payload bytes follow. */
static void an_msg(buf_t *b, unsigned ep, unsigned opcode, unsigned gid,
                   unsigned seq, unsigned flags, const shp_reduce_desc_t *d,
                   unsigned count, unsigned extra)
{
    put8(b, FZ_AN_MSG);
    put8(b, ep);
    put8(b, opcode);
    put8(b, gid);
    put8(b, seq);
    put8(b, flags);
    put8(b, d ? d->dtype : SHP_DTYPE_NULL);
    put8(b, d ? d->op : SHP_OP_NULL);
    put8(b, d ? d->tag_dtype : SHP_DTYPE_NULL);
    put8(b, count);
    put8(b, extra);
    if (d != NULL) {
        size_t n = count * shp_reduce_elem_size(d);
        for (size_t i = 0; i < n; i++) {
            put8(b, (unsigned)(i * 13 + seq));
        }
    }
}

static void an_group(buf_t *b, unsigned gid, unsigned tree, unsigned flags,
                     unsigned nchildren, unsigned kinds, unsigned pidx)
{
    put8(b, FZ_AN_GROUP_ADD);
    put8(b, gid);
    put8(b, tree);
    put8(b, flags);
    put8(b, 1); /* osts 2 */
    put8(b, 2); /* payload 64 */
    put8(b, nchildren - 1);
    put8(b, kinds);
    put8(b, pidx);
}

/* FZ_AN_CTL_SEND: a message from the AM */
static void an_ctl(buf_t *b, json_t *m)
{
    char *t = json_dumps(m, JSON_COMPACT);
    FZ_CHECK(t != NULL);
    put8(b, FZ_AN_CTL_SEND);
    put16(b, (unsigned)strlen(t));
    put(b, t, strlen(t));
    free(t);
    json_decref(m);
}

static void seeds_an(void)
{
    static const shp_reduce_desc_t sum = {SHP_DTYPE_F32, SHP_OP_SUM,
                                          SHP_DTYPE_NULL};
    static const shp_reduce_desc_t loc = {SHP_DTYPE_F64, SHP_OP_MAXLOC,
                                          SHP_DTYPE_I32};
    buf_t b = {0};

    /* the top of a group: two members join, reduce, ask again, leave */
    put8(&b, FZ_AN_TREE);
    put8(&b, 0);
    an_group(&b, 1, 0, FZ_AN_G_TOP | (2 << 1), 2, 0, 0);
    put8(&b, FZ_AN_ACCEPT);
    put8(&b, FZ_AN_ACCEPT);
    an_msg(&b, 0, SHP_WIRE_OP_GROUP_JOIN, 1, 0, 0, NULL, 0, 0 << 5);
    an_msg(&b, 1, SHP_WIRE_OP_GROUP_JOIN, 1, 0, 0, NULL, 0, 1 << 5);
    for (unsigned seq = 0; seq < 3; seq++) {
        an_msg(&b, seq & 1, SHP_WIRE_OP_AGG_REQ, 1, seq, 0, &sum, 4, 0);
        an_msg(&b, !(seq & 1), SHP_WIRE_OP_AGG_REQ, 1, seq, 0, &sum, 4, 0);
    }
    an_msg(&b, 0, SHP_WIRE_OP_RETRANS_REQ, 1, 2, 0, NULL, 0, 0);
    an_msg(&b, 1, SHP_WIRE_OP_AGG_REQ, 1, 3, SHP_WIRE_F_BARRIER, NULL, 0, 0);
    an_msg(&b, 0, SHP_WIRE_OP_RETRANS_REQ, 1, 3, 0, NULL, 0, 0);
    an_msg(&b, 0, SHP_WIRE_OP_AGG_REQ, 1, 3, SHP_WIRE_F_BARRIER, NULL, 0, 0);
    an_msg(&b, 1, SHP_WIRE_OP_GROUP_LEAVE, 1, 4, 0, NULL, 0, 0);
    an_msg(&b, 0, SHP_WIRE_OP_AGG_REQ, 1, 4, 0, &loc, 2, 0);
    put8(&b, FZ_AN_DUMP);
    put8(&b, FZ_AN_GROUP_RM);
    put8(&b, 1);
    save_buf("an", "top-group", &b);

    /* below a parent: join it (refused once, retried), fold, pass up, get
     * the result down */
    put8(&b, FZ_AN_TREE);
    put8(&b, 0x80 | 1);
    an_group(&b, 2, 1, 0, 2, 0x2, 1);
    put8(&b, FZ_AN_CONNECT);
    put8(&b, 0);
    /* the parent's nonce: the join goes out (payload: 32 bytes of 0x5a) */
    an_msg(&b, 0, SHP_WIRE_OP_JOIN_NONCE, 0, 0, 0, NULL, 0, 0);
    for (unsigned i = 0; i < SHP_WIRE_NONCE_LEN; i++) {
        put8(&b, 0x5a);
    }
    an_msg(&b, 0, SHP_WIRE_OP_GROUP_JOIN_ACK, 2, 0, 0, NULL, 0, FZ_AN_M_STATUS);
    put8(&b, SHP_ERR_GROUP_UNKNOWN < 0 ? -SHP_ERR_GROUP_UNKNOWN : 0);
    put8(&b, FZ_AN_TIMERS);
    an_msg(&b, 0, SHP_WIRE_OP_GROUP_JOIN_ACK, 2, 0, 0, NULL, 0, 0);
    put8(&b, FZ_AN_ACCEPT);
    put8(&b, FZ_AN_ACCEPT);
    an_msg(&b, 1, SHP_WIRE_OP_GROUP_JOIN, 2, 0, 0, NULL, 0, 0 << 5);
    an_msg(&b, 2, SHP_WIRE_OP_GROUP_JOIN, 2, 0, 0, NULL, 0, 1 << 5);
    an_msg(&b, 1, SHP_WIRE_OP_AGG_REQ, 2, 0, 0, &sum, 8, 0);
    an_msg(&b, 2, SHP_WIRE_OP_AGG_REQ, 2, 0, 0, &sum, 8, 0);
    an_msg(&b, 0, SHP_WIRE_OP_AGG_RESULT, 2, 0, 0, &sum, 8, 0);
    an_msg(&b, 1, SHP_WIRE_OP_AGG_REQ, 2, 1, 0, &sum, 8, 0);
    an_msg(&b, 0, SHP_WIRE_OP_ERROR, 2, 1, 0, NULL, 5, 0);
    put8(&b, 'x');
    put8(&b, FZ_AN_CLOSE);
    put8(&b, 2);
    save_buf("an", "below-parent", &b);

    /* the AM configures the AN over its control connection */
    {
        uint8_t key[32];
        fz_an_job_key(3, key);
        put8(&b, FZ_AN_CTL);
        put8(&b, 1);
        an_ctl(&b, json_pack("{s:s, s:i, s:i, s:n}", "type", "tree_config",
                             "id", 1, "tree_id", 2, "parent"));
        an_ctl(&b,
               group_keys(json_pack(
                   "{s:s, s:i, s:i, s:i, s:o, s:o, s:[{s:s}, {s:s}], "
                   "s:b, s:s, s:s, s:i, s:i}",
                   "type", "group_add", "id", 2, "group_id", 3, "tree_id", 2,
                   "job_id", shp_json_u64(fz_an_job_id(3)), "job_key",
                   shp_json_hex(key, sizeof(key)), "children", "kind", "member",
                   "kind", "member", "top", 1, "dist", "both", "mcast_addr",
                   "239.77.0.3:20003", "osts", 2, "payload", 64)));
        put8(&b, FZ_AN_ACCEPT);
        an_msg(&b, 0, SHP_WIRE_OP_GROUP_JOIN, 3, 0, 0, NULL, 0, 0);
        an_ctl(&b, json_pack("{s:s, s:i}", "type", "stats_req", "id", 3));
        an_ctl(&b, json_pack("{s:s, s:i, s:i}", "type", "group_remove", "id", 4,
                             "group_id", 3));
        an_ctl(&b, json_pack("{s:s, s:i}", "type", "what", "id", 5));
        put8(&b, FZ_AN_CTL);
        put8(&b, 2); /* the AM goes */
        put8(&b, FZ_AN_CTL);
        put8(&b, 0); /* and comes back: the handshake again */
        an_ctl(&b, json_pack("{s:s, s:s, s:s}", "type", "challenge", "nonce",
                             "00", "proof", "00"));
        save_buf("an", "control", &b);
    }
}

/* am: sessions -------------------------------------------------------------- */

static void am_send(buf_t *b, unsigned peer, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    FZ_CHECK(s != NULL);
    put8(b, FZ_AM_SEND);
    put8(b, peer);
    put16(b, (unsigned)strlen(s));
    put(b, s, strlen(s));
    free(s);
    json_decref(m);
}

static void seeds_am(void)
{
    shp_fat_tree_spec_t spec = {FZ_AM_LEVELS, FZ_AM_RADIX, FZ_AM_HOSTS};
    const char *sw[64], *host[64];
    int nsw = 0, nh = 0, np = 0;
    shp_topo_t *t = NULL;
    char err[256];
    buf_t b = {0};
    json_t *hl;

    FZ_CHECK(shp_topo_fat_tree(&spec, &t, err, sizeof(err)) == SHP_OK);
    for (size_t i = 0; i < shp_topo_count(t); i++) {
        const shp_topo_node_t *nd = shp_topo_node(t, (int)i);
        if (nd->type == SHP_NODE_SWITCH && nsw < 64) {
            sw[nsw++] = nd->desc;
        } else if (nd->type == SHP_NODE_CA && nh < 64) {
            host[nh++] = nd->host;
        }
    }
    /* every switch's AN registers */
    for (int i = 0; i < nsw; i++, np++) {
        char addr[32];
        put8(&b, FZ_AM_PEER);
        put8(&b, 1);
        put8(&b, i);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", 7000 + i);
        am_send(&b, np,
                json_pack("{s:s, s:s, s:s, s:s, s:b, s:{s:i, s:i, s:i, s:I}, "
                          "s:[]}",
                          "type", "an_register", "name", sw[i], "data_addr",
                          addr, "transport", "tcp", "mcast", 1, "caps",
                          "max_trees", 64, "max_groups", 1000, "max_osts", 256,
                          "max_payload", (json_int_t)65536, "groups"));
    }
    put8(&b, FZ_AM_TIMERS); /* trees are built, tree_config sent */
    for (int i = 0; i < nsw; i++) {
        put8(&b, FZ_AM_ACK);
        put8(&b, i);
        put8(&b, 0);
    }
    /* every host's sharpd; the first begins a job and creates a group */
    for (int i = 0; i < nh; i++) {
        put8(&b, FZ_AM_PEER);
        put8(&b, 2);
        put8(&b, i);
        am_send(&b, np + i,
                json_pack("{s:s, s:s, s:[]}", "type", "sharpd_register", "host",
                          host[i], "jobs"));
    }
    hl = json_array();
    for (int i = 0; i < nh; i++) {
        json_array_append_new(hl, json_string(host[i]));
    }
    am_send(&b, np,
            json_pack("{s:s, s:i, s:o, s:i, s:O}", "type", "job_begin", "id", 1,
                      "job_id", shp_json_u64(77), "uid", 0, "hosts", hl));
    for (int i = 1; i < nh; i++) {
        am_send(&b, np + i,
                json_pack("{s:s, s:i, s:s, s:i}", "type", "job_attach", "id", 2,
                          "job_id", "77", "uid", 0));
    }
    am_send(&b, np,
            json_pack("{s:s, s:i, s:s, s:i, s:O, s:s}", "type", "group_create",
                      "id", 3, "job_id", "77", "uid", 0, "members", hl, "dist",
                      "both"));
    for (int i = 0; i < nsw; i++) {
        put8(&b, FZ_AM_ACK);
        put8(&b, i);
        put8(&b, 0);
    }
    save("am", "job-group", b.p, b.n); /* goes on below */
    size_t job_group_len = b.n;

    /* sharpctl looks, the group goes, the job ends */
    put8(&b, FZ_AM_ADMIN);
    static const char *const admin[] = {"ans", "trees", "jobs", "stats",
                                        "topology"};
    for (unsigned i = 0; i < 5; i++) {
        am_send(&b, np + nh,
                json_pack("{s:s, s:i}", "type", admin[i], "id", (int)i));
    }
    am_send(
        &b, np + nh,
        json_pack("{s:s, s:i, s:i}", "type", "tree", "id", 9, "tree_id", 0));
    am_send(&b, np + nh,
            json_pack("{s:s, s:i, s:s}", "type", "groups", "id", 10, "job_id",
                      "77"));
    put8(&b, FZ_AM_TIMERS);
    am_send(&b, np,
            json_pack("{s:s, s:i, s:s, s:i, s:i}", "type", "group_destroy",
                      "id", 4, "job_id", "77", "uid", 0, "group_id", 1));
    am_send(&b, np,
            json_pack("{s:s, s:i, s:s, s:i}", "type", "job_end", "id", 5,
                      "job_id", "77", "uid", 0));
    am_send(&b, np + nh,
            json_pack("{s:s, s:i, s:s}", "type", "topology_load", "id", 11,
                      "file", "topo2.ibnd"));
    save("am", "admin", b.p, b.n);

    /* from the job and its group: a scheduler reserves job 78 on every
     * host, its owner's process attaches and makes a group, the process
     * goes (the job stays), the epilogs release it twice */
    b.n = job_group_len;
    for (int i = 0; i < nh; i++) {
        am_send(&b, np + i,
                json_pack("{s:s, s:i, s:s, s:i, s:i, s:{s:i}}", "type",
                          "job_reserve", "id", 20, "job_id", "78", "uid", 0,
                          "owner", 1000, "req", "osts", 4));
    }
    am_send(&b, np + 1,
            json_pack("{s:s, s:i, s:s, s:i}", "type", "job_attach", "id", 21,
                      "job_id", "78", "uid", 1000));
    am_send(&b, np + 1,
            json_pack("{s:s, s:i, s:s, s:i, s:[s]}", "type", "group_create",
                      "id", 22, "job_id", "78", "uid", 1000, "members",
                      host[1]));
    put8(&b, FZ_AM_ACK);
    put8(&b, 0);
    put8(&b, 0);
    am_send(&b, np + 1,
            json_pack("{s:s, s:s}", "type", "job_detach", "job_id", "78"));
    am_send(&b, np + 1,
            json_pack("{s:s, s:i, s:i, s:i}", "type", "sharpd_stats",
                      "clients_refused", 3, "frames_timed_out", 1,
                      "jobs_refused", 2));
    for (int i = 0; i < 2; i++) {
        am_send(&b, np + i,
                json_pack("{s:s, s:i, s:s, s:i}", "type", "job_release", "id",
                          23 + i, "job_id", "78", "uid", 0));
    }
    save("am", "reserve", b.p, b.n);

    /* an AN that fails a group, a sharpd that goes */
    b.n = 0;
    put8(&b, FZ_AM_PEER);
    put8(&b, 0);
    put8(&b, 0);
    am_send(&b, 0,
            json_pack("{s:s, s:s, s:s, s:s}", "type", "hello", "role", "an",
                      "name", sw[0], "nonce",
                      "000102030405060708090a0b0c0d0e0f"
                      "101112131415161718191a1b1c1d1e1f"));
    am_send(&b, 0, json_pack("{s:s, s:s}", "type", "auth", "proof", "00"));
    save_buf("am", "stranger", &b);
    json_decref(hl);
    shp_topo_free(t);
}

/* sharpd: sessions ----------------------------------------------------------- */

static void sd_send(buf_t *b, unsigned peer, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    FZ_CHECK(s != NULL);
    put8(b, FZ_SD_SEND);
    put8(b, peer);
    put16(b, (unsigned)strlen(s));
    put(b, s, strlen(s));
    free(s);
    json_decref(m);
}

static void seeds_sharpd(void)
{
    buf_t b = {0};

    /* a registered AM, two local processes of one job, a group */
    put8(&b, FZ_SD_AM);
    put8(&b, 1);
    put8(&b, FZ_SD_CLIENT);
    put8(&b, FZ_SD_CLIENT);
    sd_send(&b, 1, json_pack("{s:s, s:i}", "type", "hello", "id", 1));
    sd_send(&b, 1,
            json_pack("{s:s, s:i, s:s, s:[s, s]}", "type", "job_begin", "id", 2,
                      "job_id", "77", "hosts", "n00001", "n00002"));
    put8(&b, FZ_SD_ANSWER);
    put8(&b, 0);
    sd_send(&b, 2,
            json_pack("{s:s, s:i, s:s}", "type", "job_attach", "id", 1,
                      "job_id", "77"));
    put8(&b, FZ_SD_ANSWER);
    put8(&b, 0);
    sd_send(&b, 1,
            json_pack("{s:s, s:i, s:s, s:[s, s], s:s}", "type", "group_create",
                      "id", 3, "job_id", "77", "members", "n00001", "n00002",
                      "dist", "rc"));
    put8(&b, FZ_SD_ANSWER);
    put8(&b, 0);
    sd_send(&b, 0,
            json_pack("{s:s, s:s, s:i, s:i, s:s}", "type", "group_revoked",
                      "job_id", "77", "group_id", 1, "status", -30, "reason",
                      "an AN failed"));
    sd_send(&b, 1,
            json_pack("{s:s, s:i, s:s, s:i}", "type", "group_destroy", "id", 4,
                      "job_id", "77", "group_id", 1));
    put8(&b, FZ_SD_CLOSE);
    put8(&b, 2);
    put8(&b, FZ_SD_CLOSE);
    put8(&b, 0); /* the AM goes: pending requests fail, groups revoked */
    sd_send(&b, 1,
            json_pack("{s:s, s:i, s:s}", "type", "job_end", "id", 5, "job_id",
                      "77"));
    save_buf("sharpd", "job-group", &b);

    /* an AM that has yet to prove the secret */
    put8(&b, FZ_SD_AM);
    put8(&b, 0);
    put8(&b, FZ_SD_CLIENT);
    sd_send(&b, 0,
            json_pack("{s:s, s:s, s:s}", "type", "challenge", "nonce",
                      "000102030405060708090a0b0c0d0e0f"
                      "101112131415161718191a1b1c1d1e1f",
                      "proof",
                      "000102030405060708090a0b0c0d0e0f"
                      "101112131415161718191a1b1c1d1e1f"));
    put8(&b, FZ_SD_AM);
    put8(&b, 0);
    sd_send(
        &b, 0,
        json_pack("{s:s, s:i}", "type", "sharpd_register_ack", "status", 0));
    sd_send(&b, 1,
            json_pack("{s:s, s:i, s:s, s:[s]}", "type", "job_begin", "id", 1,
                      "job_id", "78", "hosts", "n00001"));
    save_buf("sharpd", "unproven-am", &b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds DIR\n");
        return 2;
    }
    outdir = argv[1];
    seeds_wire();
    seeds_mcast();
    seeds_ctl();
    seeds_auth();
    seeds_config();
    seeds_topo();
    seeds_an();
    seeds_am();
    seeds_sharpd();
    return 0;
}
