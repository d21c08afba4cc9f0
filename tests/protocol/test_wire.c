/* Wire format: byte-by-byte packing, round trips, and every rejection of
 * the validator. */
#include "tests/support/test_util.h"

#include "protocol/wire.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static void assert_hdr_equal(const shp_wire_hdr_t *a, const shp_wire_hdr_t *b)
{
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->opcode, b->opcode);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->tree_id, b->tree_id);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->group_id, b->group_id);
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->tag_dtype, b->tag_dtype);
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->payload_len, b->payload_len);
}

static shp_wire_hdr_t agg_hdr(void)
{
    shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_hdr_t h;

    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 3, 0x01020304u, 0xa0b0c0d0u,
                          &d, 16);
    return h;
}

static void test_hdr_pack_bytes(void **state)
{
    static const uint8_t want[SHP_WIRE_HDR_LEN] = {
        0x01,                   /* version */
        0x02,                   /* opcode: agg_result */
        0x00, 0x05,             /* flags: mcast | barrier (BE) */
        0x12, 0x34,             /* tree id */
        0xff, 0xd6,             /* status -42 */
        0xde, 0xad, 0xbe, 0xef, /* group id */
        0x00, 0x00, 0x01, 0x00, /* seq 256 */
        0x09,                   /* dtype bf16 */
        0x0b,                   /* op minloc */
        0x01,                   /* tag dtype i32 */
        0x00,                   /* reserved */
        0x00, 0x01, 0x02, 0x03, /* count */
        0x04, 0x05, 0x06, 0x07, /* payload_len */
        0x00, 0x00, 0x00, 0x00, /* reserved */
    };
    shp_wire_hdr_t h = {
        .version = 1,
        .opcode = SHP_WIRE_OP_AGG_RESULT,
        .flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_BARRIER,
        .tree_id = 0x1234,
        .status = -42,
        .group_id = 0xdeadbeefu,
        .seq = 256,
        .dtype = SHP_DTYPE_BF16,
        .op = SHP_OP_MINLOC,
        .tag_dtype = SHP_DTYPE_I32,
        .count = 0x00010203u,
        .payload_len = 0x04050607u,
    };
    uint8_t buf[SHP_WIRE_HDR_LEN + 4];
    shp_wire_hdr_t back;

    (void)state;
    memset(buf, 0xee, sizeof(buf));
    shp_wire_hdr_pack(&h, buf);
    assert_memory_equal(buf, want, SHP_WIRE_HDR_LEN);
    assert_int_equal(buf[SHP_WIRE_HDR_LEN], 0xee); /* wrote exactly 32 */
    shp_wire_hdr_unpack(buf, &back);
    assert_hdr_equal(&back, &h);
}

static void test_hdr_reserved_ignored(void **state)
{
    shp_wire_hdr_t h = agg_hdr(), back;
    uint8_t buf[SHP_WIRE_HDR_LEN];

    (void)state;
    shp_wire_hdr_pack(&h, buf);
    buf[19] = 0x55;
    buf[28] = 0x66;
    shp_wire_hdr_unpack(buf, &back);
    assert_hdr_equal(&back, &h);
}

static void test_join_pack_bytes(void **state)
{
    shp_wire_join_t j = {.job_id = 0x0102030405060708ull, .child_index = 17};
    uint8_t buf[SHP_WIRE_JOIN_LEN];
    shp_wire_join_t back;
    int i;

    (void)state;
    for (i = 0; i < SHP_WIRE_PROOF_LEN; i++) {
        j.proof[i] = (uint8_t)(0xa0 + i);
    }
    shp_wire_join_pack(&j, buf);
    for (i = 0; i < 8; i++) {
        assert_int_equal(buf[i], i + 1);
    }
    for (i = 0; i < SHP_WIRE_PROOF_LEN; i++) {
        assert_int_equal(buf[8 + i], 0xa0 + i);
    }
    assert_int_equal(buf[40], 0);
    assert_int_equal(buf[43], 17);
    assert_int_equal(buf[44] | buf[45] | buf[46] | buf[47], 0);
    shp_wire_join_unpack(buf, &back);
    assert_true(back.job_id == j.job_id);
    assert_memory_equal(back.proof, j.proof, SHP_WIRE_PROOF_LEN);
    assert_int_equal(back.child_index, j.child_index);
}

static void test_init_agg(void **state)
{
    shp_reduce_desc_t d = {SHP_DTYPE_F64, SHP_OP_MAXLOC, SHP_DTYPE_I32};
    shp_wire_hdr_t h;

    (void)state;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, 1, 2, 3, &d, 10);
    assert_int_equal(h.version, SHP_WIRE_VERSION);
    assert_int_equal(h.payload_len, 120);
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 120, 256, NULL),
                     SHP_OK);
}

static void test_init_plain(void **state)
{
    shp_wire_hdr_t h;

    (void)state;
    memset(&h, 0xa5, sizeof(h));
    shp_wire_hdr_init(&h, SHP_WIRE_OP_RETRANS_REQ, 3, 44, 55);
    assert_int_equal(h.version, SHP_WIRE_VERSION);
    assert_int_equal(h.opcode, SHP_WIRE_OP_RETRANS_REQ);
    assert_int_equal(h.tree_id, 3);
    assert_int_equal(h.group_id, 44);
    assert_int_equal(h.seq, 55);
    assert_int_equal(h.flags, 0);
    assert_int_equal(h.status, 0);
    assert_int_equal(h.dtype, SHP_DTYPE_NULL);
    assert_int_equal(h.op, SHP_OP_NULL);
    assert_int_equal(h.tag_dtype, SHP_DTYPE_NULL);
    assert_int_equal(h.count, 0);
    assert_int_equal(h.payload_len, 0);
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
}

#define REJECT(_h, _len, _max, _status, _substr)                               \
    do {                                                                       \
        const char *why_ = NULL;                                               \
        assert_int_equal(shp_wire_validate(&(_h), (_len), (_max), &why_),      \
                         (_status));                                           \
        assert_non_null(why_);                                                 \
        assert_non_null(strstr(why_, (_substr)));                              \
    } while (0)

static void test_validate_accepts(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 64, 256, NULL),
                     SHP_OK);
    /* zero-length reduction */
    h.count = 0;
    h.payload_len = 0;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
}

static void test_validate_version(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    h.version = 2;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_VERSION, "version");
    h.version = 0;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_VERSION, "version");
}

static void test_validate_opcode(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    h.opcode = 0;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "opcode");
    h.opcode = SHP_WIRE_OP_LAST;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "opcode");
    h.opcode = 0xff;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "opcode");
}

static void test_validate_lengths(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    REJECT(h, SHP_WIRE_HDR_LEN + 63, 256, SHP_ERR_PROTO, "length");
    REJECT(h, SHP_WIRE_HDR_LEN + 65, 256, SHP_ERR_PROTO, "length");
    REJECT(h, SHP_WIRE_HDR_LEN, 256, SHP_ERR_PROTO, "length");
    h.count = 15; /* 15 * 4 != 64 */
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "count");
    h.count = 0x40000010u; /* 32-bit overflow of count * 4 == 64 */
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "count");
}

static void test_validate_too_large(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 63, SHP_ERR_TOO_LARGE, "maximum");
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 64, 64, NULL),
                     SHP_OK);
}

static void test_validate_dtype_op(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    h.op = SHP_OP_BXOR; /* bitwise on floats */
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "integer");
    h.op = SHP_OP_LOR;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "integer");
    h.op = SHP_OP_MINLOC; /* no tag type */
    h.tag_dtype = SHP_DTYPE_NULL;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "tag");
    h.op = SHP_OP_SUM; /* tag type without a loc op */
    h.tag_dtype = SHP_DTYPE_I32;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "tag");
    h.tag_dtype = SHP_DTYPE_NULL;
    h.dtype = 200;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "datatype");
    h.dtype = SHP_DTYPE_F32;
    h.op = SHP_OP_NULL;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_UNSUPPORTED, "op");
    /* minloc pairs: f32 value + i16 tag = 6 bytes */
    h.op = SHP_OP_MINLOC;
    h.tag_dtype = SHP_DTYPE_I16;
    h.count = 10;
    h.payload_len = 60;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 60, 256, NULL),
                     SHP_OK);
}

static void test_validate_flags_and_barrier(void **state)
{
    shp_wire_hdr_t h = agg_hdr();

    (void)state;
    h.flags = 0x8000;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "flags");
    h.flags = SHP_WIRE_F_BARRIER;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "barrier");
    h.count = 0;
    h.payload_len = 0;
    h.dtype = SHP_DTYPE_NULL;
    h.op = SHP_OP_NULL;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
    /* a bcast: the root's bytes, or a header alone; never a barrier or
     * exact */
    h.flags = SHP_WIRE_F_BCAST | SHP_WIRE_F_BARRIER;
    REJECT(h, SHP_WIRE_HDR_LEN, 256, SHP_ERR_PROTO, "bcast");
    h = agg_hdr();
    h.flags = SHP_WIRE_F_BCAST | SHP_WIRE_F_EXACT;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "bcast");
    h.flags = SHP_WIRE_F_BCAST;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 64, 256, NULL),
                     SHP_OK);
    h.count = 0;
    h.payload_len = 0;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
    /* a free bcast: a bcast, its root's 1 to 4096 bytes */
    h.flags = SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE;
    REJECT(h, SHP_WIRE_HDR_LEN, 256, SHP_ERR_PROTO, "free bcast");
    h = agg_hdr();
    h.flags = SHP_WIRE_F_FREE;
    REJECT(h, SHP_WIRE_HDR_LEN + 64, 256, SHP_ERR_PROTO, "free bcast");
    h.flags = SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 64, 256, NULL),
                     SHP_OK);
    h.dtype = SHP_DTYPE_U8;
    h.op = SHP_OP_BOR;
    h.count = h.payload_len = SHP_WIRE_FREE_MAX + 1;
    REJECT(h, SHP_WIRE_HDR_LEN + SHP_WIRE_FREE_MAX + 1, 8192, SHP_ERR_PROTO,
           "free bcast");
    h.count = h.payload_len = SHP_WIRE_FREE_MAX;
    assert_int_equal(
        shp_wire_validate(&h, SHP_WIRE_HDR_LEN + SHP_WIRE_FREE_MAX, 8192, NULL),
        SHP_OK);
}

static void test_validate_control_opcodes(void **state)
{
    shp_wire_hdr_t h = {.version = SHP_WIRE_VERSION};

    (void)state;
    h.opcode = SHP_WIRE_OP_ERROR;
    h.status = SHP_ERR_GROUP_FAILED;
    h.payload_len = 20;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN + 20, 256, NULL),
                     SHP_OK);
    h.status = 0;
    REJECT(h, SHP_WIRE_HDR_LEN + 20, 256, SHP_ERR_PROTO, "status");
    h.status = -1;
    h.payload_len = SHP_WIRE_ERR_MSG_MAX + 1;
    REJECT(h, SHP_WIRE_HDR_LEN + SHP_WIRE_ERR_MSG_MAX + 1, 4096, SHP_ERR_PROTO,
           "too long");

    memset(&h, 0, sizeof(h));
    h.version = SHP_WIRE_VERSION;
    h.opcode = SHP_WIRE_OP_RETRANS_REQ;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
    h.payload_len = 4;
    REJECT(h, SHP_WIRE_HDR_LEN + 4, 256, SHP_ERR_PROTO, "payload");

    h.opcode = SHP_WIRE_OP_GROUP_LEAVE;
    h.payload_len = 0;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
    h.payload_len = 4;
    REJECT(h, SHP_WIRE_HDR_LEN + 4, 256, SHP_ERR_PROTO, "leave with");

    h.opcode = SHP_WIRE_OP_GROUP_JOIN;
    h.payload_len = SHP_WIRE_JOIN_LEN;
    assert_int_equal(
        shp_wire_validate(&h, SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN, 256, NULL),
        SHP_OK);
    h.payload_len = SHP_WIRE_JOIN_LEN - 1;
    REJECT(h, SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN - 1, 256, SHP_ERR_PROTO,
           "size");

    h.opcode = SHP_WIRE_OP_JOIN_NONCE;
    h.payload_len = SHP_WIRE_NONCE_LEN;
    assert_int_equal(
        shp_wire_validate(&h, SHP_WIRE_HDR_LEN + SHP_WIRE_NONCE_LEN, 256, NULL),
        SHP_OK);
    h.payload_len = SHP_WIRE_NONCE_LEN - 1;
    REJECT(h, SHP_WIRE_HDR_LEN + SHP_WIRE_NONCE_LEN - 1, 256, SHP_ERR_PROTO,
           "nonce");

    h.opcode = SHP_WIRE_OP_GROUP_JOIN_ACK;
    h.payload_len = 0;
    assert_int_equal(shp_wire_validate(&h, SHP_WIRE_HDR_LEN, 256, NULL),
                     SHP_OK);
    h.count = 1;
    REJECT(h, SHP_WIRE_HDR_LEN, 256, SHP_ERR_PROTO, "payload");
}

/* 1 if `hay` holds `needle` anywhere */
static int holds(const uint8_t *hay, size_t n, const uint8_t *needle,
                 size_t len)
{
    for (size_t i = 0; i + len <= n; i++) {
        if (memcmp(hay + i, needle, len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A join proves the job key over the link's nonce without carrying it: its
 * bytes hold no part of the key (no 8 bytes of it), and the proof verifies
 * only for the key, nonce, tree, group, job and place it was made for. */
static void test_join_proof(void **state)
{
    uint8_t key[SHP_WIRE_JOB_KEY_LEN], nonce[SHP_WIRE_NONCE_LEN];
    uint8_t other[SHP_WIRE_NONCE_LEN],
        msg[SHP_WIRE_HDR_LEN + SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h, nh, back;
    shp_wire_join_t j, bad;

    (void)state;
    for (size_t i = 0; i < sizeof(key); i++) {
        key[i] = (uint8_t)(0x11 * (i + 1));
    }
    shp_wire_nonce_new(nonce, &nh);
    shp_wire_nonce_new(other, &nh);
    assert_int_equal(nh.opcode, SHP_WIRE_OP_JOIN_NONCE);
    assert_int_equal(nh.payload_len, SHP_WIRE_NONCE_LEN);
    assert_memory_not_equal(nonce, other, sizeof(nonce)); /* fresh each */

    shp_wire_join_make(key, nonce, 3, 77, 5555, 2, &h, msg + SHP_WIRE_HDR_LEN);
    shp_wire_hdr_pack(&h, msg);
    for (size_t off = 0; off + 8 <= sizeof(key); off++) {
        assert_false(holds(msg, sizeof(msg), key + off, 8));
    }
    shp_wire_hdr_unpack(msg, &back);
    assert_int_equal(shp_wire_validate(&back, sizeof(msg), 256, NULL), SHP_OK);
    assert_int_equal(back.opcode, SHP_WIRE_OP_GROUP_JOIN);
    assert_int_equal(back.tree_id, 3);
    assert_int_equal(back.group_id, 77);
    shp_wire_join_unpack(msg + SHP_WIRE_HDR_LEN, &j);
    assert_true(j.job_id == 5555);
    assert_int_equal(j.child_index, 2);
    /* an AN checks it with the group's join key (the manager's), never
     * the job key */
    uint8_t jk[SHP_WIRE_JOIN_KEY_LEN];
    shp_wire_join_key(key, 3, 77, jk);
    assert_false(shp_wire_join_proof_ok(key, nonce, 3, 77, &j));
    assert_true(shp_wire_join_proof_ok(jk, nonce, 3, 77, &j));

    /* another link's nonce (a replay), tree, group, key */
    assert_false(shp_wire_join_proof_ok(jk, other, 3, 77, &j));
    assert_false(shp_wire_join_proof_ok(jk, nonce, 4, 77, &j));
    assert_false(shp_wire_join_proof_ok(jk, nonce, 3, 78, &j));
    uint8_t wrong[SHP_WIRE_JOB_KEY_LEN];
    memcpy(wrong, key, sizeof(wrong));
    wrong[31] ^= 1;
    assert_false(shp_wire_join_proof_ok(wrong, nonce, 3, 77, &j));
    /* another job or place under the same proof */
    bad = j;
    bad.job_id++;
    assert_false(shp_wire_join_proof_ok(jk, nonce, 3, 77, &bad));
    bad = j;
    bad.child_index = 1;
    assert_false(shp_wire_join_proof_ok(jk, nonce, 3, 77, &bad));
    /* any bit of the proof */
    for (size_t i = 0; i < SHP_WIRE_PROOF_LEN * 8; i++) {
        bad = j;
        bad.proof[i / 8] ^= (uint8_t)(1u << (i % 8));
        assert_false(shp_wire_join_proof_ok(jk, nonce, 3, 77, &bad));
    }
    /* what the old join sent, the key itself as the proof */
    bad = j;
    memcpy(bad.proof, key, sizeof(bad.proof));
    assert_false(shp_wire_join_proof_ok(key, nonce, 3, 77, &bad));
}

static void test_frame_len(void **state)
{
    shp_wire_hdr_t h = agg_hdr();
    uint8_t buf[SHP_WIRE_HDR_LEN];
    size_t len = 0;

    (void)state;
    shp_wire_hdr_pack(&h, buf);
    assert_int_equal(shp_wire_frame_len(buf, 31, 256, &len), SHP_INPROGRESS);
    assert_int_equal(shp_wire_frame_len(buf, 32, 256, &len), SHP_OK);
    assert_int_equal(len, 96);
    assert_int_equal(shp_wire_frame_len(buf, 32, 32, &len), SHP_ERR_TOO_LARGE);
    buf[0] = 9;
    assert_int_equal(shp_wire_frame_len(buf, 32, 256, &len), SHP_ERR_VERSION);
}

static void test_payload_swap(void **state)
{
    shp_reduce_desc_t d = {SHP_DTYPE_U32, SHP_OP_MAXLOC, SHP_DTYPE_U16};
    uint8_t buf[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static const uint8_t want[12] = {4, 3, 2, 1, 6, 5, 10, 9, 8, 7, 12, 11};
    uint8_t same[12];

    (void)state;
    shp_wire_bswap_elems(&d, buf, 2);
    assert_memory_equal(buf, want, 12);
    shp_wire_bswap_elems(&d, buf, 2);
    memcpy(same, buf, 12);
    shp_wire_payload_swap(&d, buf, 2); /* little-endian host: unchanged */
    assert_memory_equal(buf, same, 12);
    d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_bswap_elems(&d, buf, 1);
    assert_int_equal(buf[0], 8);
    assert_int_equal(buf[7], 1);
}

/* Random bytes never crash unpack/validate, and anything accepted is
 * self-consistent. */
static void test_validate_random(void **state)
{
    uint64_t seed = 7;
    uint8_t buf[SHP_WIRE_HDR_LEN];
    shp_wire_hdr_t h;
    int i, j, accepted = 0;

    (void)state;
    for (i = 0; i < 200000; i++) {
        for (j = 0; j < SHP_WIRE_HDR_LEN; j++) {
            buf[j] = (uint8_t)test_rand(&seed);
        }
        shp_wire_hdr_unpack(buf, &h);
        /* steer half of them towards plausible headers */
        if (i & 1) {
            shp_reduce_desc_t d = {h.dtype % 13, h.op % 13,
                                   (i & 2) ? SHP_DTYPE_NULL : h.tag_dtype % 13};
            h.version = SHP_WIRE_VERSION;
            h.opcode = (uint8_t)(1 + (i >> 2) % 6);
            h.flags = 0;
            h.dtype = (uint8_t)d.dtype;
            h.op = (uint8_t)d.op;
            h.tag_dtype = (uint8_t)d.tag_dtype;
            h.count = h.count % 16;
            h.payload_len = (uint32_t)(h.count * shp_reduce_elem_size(&d) +
                                       (i & 4 ? 1 : 0));
            shp_wire_hdr_pack(&h, buf);
        }
        shp_wire_hdr_unpack(buf, &h);
        if (shp_wire_validate(&h, SHP_WIRE_HDR_LEN + h.payload_len, 256,
                              NULL) == SHP_OK) {
            accepted++;
            assert_int_equal(h.version, SHP_WIRE_VERSION);
            assert_true(h.payload_len <= 256);
        }
    }
    assert_true(accepted > 0);
}

/* multicast result tags: validation of the flag, and the tag itself */
static void test_mac(void **state)
{
    static const uint8_t job[SHP_WIRE_JOB_KEY_LEN] = {1, 2, 3};
    uint8_t key[SHP_WIRE_MAC_KEY_LEN], k2[SHP_WIRE_MAC_KEY_LEN];
    uint8_t payload[8 * 4 + SHP_WIRE_MAC_LEN];
    shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_hdr_t h;
    (void)state;

    shp_wire_mac_key(job, 3, 77, key);
    shp_wire_mac_key(job, 3, 78, k2);
    assert_memory_not_equal(key, k2, sizeof(key));
    for (unsigned i = 0; i < sizeof(payload); i++) {
        payload[i] = (uint8_t)(i * 13);
    }
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 3, 77, 5, &d, 8);
    h.flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC;
    h.payload_len = 32 + SHP_WIRE_MAC_LEN;
    assert_int_equal(
        shp_wire_validate(&h, SHP_WIRE_HDR_LEN + h.payload_len, 32, NULL),
        SHP_OK); /* the tag is on top of the maximum */
    shp_wire_mac(key, 5, &h, payload, payload + 32);
    assert_true(shp_wire_mac_ok(key, 5, &h, payload));
    assert_false(shp_wire_mac_ok(k2, 5, &h, payload)); /* group */
    assert_false(
        shp_wire_mac_ok(key, 5 + (1ull << 32), &h, payload)); /* wrap */
    shp_wire_hdr_t h2 = h;
    h2.seq = 6;
    assert_false(shp_wire_mac_ok(key, 5, &h2, payload)); /* header */
    h2 = h;
    h2.flags &= (uint16_t)~SHP_WIRE_F_MAC;
    assert_false(shp_wire_mac_ok(key, 5, &h2, payload)); /* no tag */
    for (unsigned i = 0; i < sizeof(payload); i++) {     /* data or tag */
        payload[i] ^= 0x10;
        assert_false(shp_wire_mac_ok(key, 5, &h, payload));
        payload[i] ^= 0x10;
    }
    assert_true(shp_wire_mac_ok(key, 5, &h, payload));
    /* the flag only on a multicast result with room for the tag */
    h2 = h;
    h2.opcode = SHP_WIRE_OP_AGG_REQ;
    assert_int_equal(
        shp_wire_validate(&h2, SHP_WIRE_HDR_LEN + h2.payload_len, 4096, NULL),
        SHP_ERR_PROTO);
    h2 = h;
    h2.flags = SHP_WIRE_F_MAC;
    assert_int_equal(
        shp_wire_validate(&h2, SHP_WIRE_HDR_LEN + h2.payload_len, 4096, NULL),
        SHP_ERR_PROTO);
    h2 = h;
    h2.payload_len = 32; /* the data without a tag */
    assert_int_equal(
        shp_wire_validate(&h2, SHP_WIRE_HDR_LEN + h2.payload_len, 4096, NULL),
        SHP_ERR_PROTO);
    shp_wire_hdr_init(&h2, SHP_WIRE_OP_AGG_RESULT, 3, 77, 5);
    h2.flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC | SHP_WIRE_F_BARRIER;
    h2.payload_len = SHP_WIRE_MAC_LEN - 1;
    assert_int_equal(
        shp_wire_validate(&h2, SHP_WIRE_HDR_LEN + h2.payload_len, 4096, NULL),
        SHP_ERR_PROTO);
    h2.payload_len = SHP_WIRE_MAC_LEN;
    assert_int_equal(
        shp_wire_validate(&h2, SHP_WIRE_HDR_LEN + h2.payload_len, 4096, NULL),
        SHP_OK);
}

/* The tag is RFC 8439's Poly1305 under ChaCha20's one-time key, whichever
 * library computed it (libsodium below 512 bytes, OpenSSL above): checked
 * against libsodium alone at sizes on both sides of the switch, from
 * unaligned offsets */
static void test_mac_construction(void **state)
{
    static const size_t lens[] = {0,   1,   15,   16,   17,    511,  512,
                                  513, 777, 4096, 8191, 32768, 65519};
    static uint8_t data[65536 + 8];
    uint8_t key[SHP_WIRE_MAC_KEY_LEN], tag[SHP_WIRE_MAC_LEN];
    uint8_t want[SHP_WIRE_MAC_LEN], otk[32], raw[SHP_WIRE_HDR_LEN];
    uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {0};
    shp_reduce_desc_t d = {SHP_DTYPE_U8, SHP_OP_SUM, SHP_DTYPE_NULL};
    crypto_onetimeauth_state st;
    shp_wire_hdr_t h;
    (void)state;

    randombytes_buf(key, sizeof(key));
    randombytes_buf(data, sizeof(data));
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        uint64_t seq64 = 0x1234567800000000ull + i;
        const uint8_t *p = data + i % 8;

        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, 3, 77,
                              (uint32_t)seq64, &d, (uint32_t)lens[i]);
        h.flags = SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC;
        h.payload_len = (uint32_t)(lens[i] + SHP_WIRE_MAC_LEN);
        shp_wire_mac(key, seq64, &h, p, tag);
        for (int b = 0; b < 8; b++) {
            nonce[b] = (uint8_t)(seq64 >> (8 * b));
        }
        crypto_stream_chacha20_ietf(otk, sizeof(otk), nonce, key);
        shp_wire_hdr_pack(&h, raw);
        crypto_onetimeauth_init(&st, otk);
        crypto_onetimeauth_update(&st, raw, sizeof(raw));
        crypto_onetimeauth_update(&st, p, lens[i]);
        crypto_onetimeauth_final(&st, want);
        assert_memory_equal(tag, want, sizeof(tag));
        if (lens[i] > 0) { /* and a change in the last byte shows */
            data[i % 8 + lens[i] - 1] ^= 1;
            shp_wire_mac(key, seq64, &h, p, tag);
            assert_memory_not_equal(tag, want, sizeof(tag));
            data[i % 8 + lens[i] - 1] ^= 1;
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_pack_bytes),
        cmocka_unit_test(test_hdr_reserved_ignored),
        cmocka_unit_test(test_join_pack_bytes),
        cmocka_unit_test(test_join_proof),
        cmocka_unit_test(test_init_agg),
        cmocka_unit_test(test_init_plain),
        cmocka_unit_test(test_validate_accepts),
        cmocka_unit_test(test_validate_version),
        cmocka_unit_test(test_validate_opcode),
        cmocka_unit_test(test_validate_lengths),
        cmocka_unit_test(test_validate_too_large),
        cmocka_unit_test(test_validate_dtype_op),
        cmocka_unit_test(test_validate_flags_and_barrier),
        cmocka_unit_test(test_validate_control_opcodes),
        cmocka_unit_test(test_frame_len),
        cmocka_unit_test(test_payload_swap),
        cmocka_unit_test(test_validate_random),
        cmocka_unit_test(test_mac),
        cmocka_unit_test(test_mac_construction),
    };
    return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
