/* Packing, unpacking and validation of data-path messages (see wire.h). */
#include "protocol/wire.h"

#include "reduce/sparse.h"

#include <endian.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

void shp_wire_hdr_pack(const shp_wire_hdr_t *hdr, void *buf)
{
    shp_wire_hdr_raw_t raw = {
        .version = hdr->version,
        .opcode = hdr->opcode,
        .flags_be = htobe16(hdr->flags),
        .tree_id_be = htobe16(hdr->tree_id),
        .status_be = htobe16((uint16_t)hdr->status),
        .group_id_be = htobe32(hdr->group_id),
        .seq_be = htobe32(hdr->seq),
        .dtype = hdr->dtype,
        .op = hdr->op,
        .tag_dtype = hdr->tag_dtype,
        .lanes = (hdr->flags & SHP_WIRE_F_EXACT) ? hdr->lanes : 0,
        .count_be = htobe32(hdr->count),
        .payload_len_be = htobe32(hdr->payload_len),
        .reserved1 = 0,
    };

    memcpy(buf, &raw, sizeof(raw));
}

void shp_wire_hdr_unpack(const void *buf, shp_wire_hdr_t *hdr)
{
    shp_wire_hdr_raw_t raw;

    memcpy(&raw, buf, sizeof(raw));
    hdr->version = raw.version;
    hdr->opcode = raw.opcode;
    hdr->flags = be16toh(raw.flags_be);
    hdr->tree_id = be16toh(raw.tree_id_be);
    hdr->status = (int16_t)be16toh(raw.status_be);
    hdr->group_id = be32toh(raw.group_id_be);
    hdr->seq = be32toh(raw.seq_be);
    hdr->dtype = raw.dtype;
    hdr->op = raw.op;
    hdr->tag_dtype = raw.tag_dtype;
    hdr->lanes = (hdr->flags & SHP_WIRE_F_EXACT) ? raw.lanes : 0;
    hdr->count = be32toh(raw.count_be);
    hdr->payload_len = be32toh(raw.payload_len_be);
}

void shp_wire_join_pack(const shp_wire_join_t *join, void *buf)
{
    shp_wire_join_raw_t raw;

    raw.job_id_be = htobe64(join->job_id);
    memcpy(raw.proof, join->proof, sizeof(raw.proof));
    raw.child_index_be = htobe32(join->child_index);
    raw.reserved = 0;
    memcpy(buf, &raw, sizeof(raw));
}

void shp_wire_join_unpack(const void *buf, shp_wire_join_t *join)
{
    shp_wire_join_raw_t raw;

    memcpy(&raw, buf, sizeof(raw));
    join->job_id = be64toh(raw.job_id_be);
    memcpy(join->proof, raw.proof, sizeof(join->proof));
    join->child_index = be32toh(raw.child_index_be);
}

/* Join proofs ---------------------------------------------------------------- */

void shp_wire_group_subkey(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                           uint16_t tree_id, uint32_t group_id,
                           const char ctx[8], uint8_t *key, size_t len)
{
    _Static_assert(SHP_WIRE_JOB_KEY_LEN == crypto_kdf_KEYBYTES,
                   "the job key is a KDF key");
    if (sodium_init() < 0) { /* cannot fail once it has succeeded */
        abort();
    }
    crypto_kdf_derive_from_key(key, len, ((uint64_t)tree_id << 32) | group_id,
                               ctx, job_key);
}

void shp_wire_join_key(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                       uint16_t tree_id, uint32_t group_id,
                       uint8_t key[SHP_WIRE_JOIN_KEY_LEN])
{
    _Static_assert(SHP_WIRE_JOIN_KEY_LEN == crypto_auth_KEYBYTES &&
                       crypto_auth_KEYBYTES <= crypto_kdf_BYTES_MAX,
                   "a join key is a crypto_auth key made by crypto_kdf");
    shp_wire_group_subkey(job_key, tree_id, group_id, "shp_join", key,
                          SHP_WIRE_JOIN_KEY_LEN);
}

static void shp_wire_join_mac(const uint8_t key[SHP_WIRE_JOIN_KEY_LEN],
                              const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                              uint16_t tree_id, uint32_t group_id,
                              const shp_wire_join_t *join,
                              uint8_t mac[SHP_WIRE_PROOF_LEN])
{
    _Static_assert(SHP_WIRE_PROOF_LEN == crypto_auth_BYTES,
                   "a join's proof is one crypto_auth tag");
    uint8_t msg[SHP_WIRE_NONCE_LEN + 2 + 4 + 8 + 4], *p = msg;
    uint16_t t = htobe16(tree_id);
    uint32_t g = htobe32(group_id), c = htobe32(join->child_index);
    uint64_t j = htobe64(join->job_id);

    if (sodium_init() < 0) { /* cannot fail once it has succeeded */
        abort();
    }
    memcpy(p, nonce, SHP_WIRE_NONCE_LEN);
    p += SHP_WIRE_NONCE_LEN;
    memcpy(p, &t, 2);
    memcpy(p + 2, &g, 4);
    memcpy(p + 6, &j, 8);
    memcpy(p + 14, &c, 4);
    crypto_auth(mac, msg, sizeof(msg), key);
}

void shp_wire_join_prove(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                         const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                         uint16_t tree_id, uint32_t group_id,
                         shp_wire_join_t *join)
{
    shp_wire_join_mac(join_key, nonce, tree_id, group_id, join, join->proof);
}

int shp_wire_join_proof_ok(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                           const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                           uint16_t tree_id, uint32_t group_id,
                           const shp_wire_join_t *join)
{
    uint8_t want[SHP_WIRE_PROOF_LEN];

    shp_wire_join_mac(join_key, nonce, tree_id, group_id, join, want);
    return sodium_memcmp(want, join->proof, sizeof(want)) == 0;
}

void shp_wire_nonce_new(uint8_t nonce[SHP_WIRE_NONCE_LEN], shp_wire_hdr_t *hdr)
{
    if (sodium_init() < 0) {
        abort();
    }
    randombytes_buf(nonce, SHP_WIRE_NONCE_LEN);
    shp_wire_hdr_init(hdr, SHP_WIRE_OP_JOIN_NONCE, 0, 0, 0);
    hdr->payload_len = SHP_WIRE_NONCE_LEN;
}

void shp_wire_join_make(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                        const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                        uint16_t tree_id, uint32_t group_id, uint64_t job_id,
                        uint32_t child_index, shp_wire_hdr_t *hdr,
                        uint8_t payload[SHP_WIRE_JOIN_LEN])
{
    uint8_t key[SHP_WIRE_JOIN_KEY_LEN];

    shp_wire_join_key(job_key, tree_id, group_id, key);
    shp_wire_join_make_keyed(key, nonce, tree_id, group_id, job_id, child_index,
                             hdr, payload);
    sodium_memzero(key, sizeof(key));
}

void shp_wire_join_make_keyed(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                              const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                              uint16_t tree_id, uint32_t group_id,
                              uint64_t job_id, uint32_t child_index,
                              shp_wire_hdr_t *hdr,
                              uint8_t payload[SHP_WIRE_JOIN_LEN])
{
    shp_wire_join_t join = {.job_id = job_id, .child_index = child_index};

    shp_wire_join_prove(join_key, nonce, tree_id, group_id, &join);
    shp_wire_join_pack(&join, payload);
    shp_wire_hdr_init(hdr, SHP_WIRE_OP_GROUP_JOIN, tree_id, group_id, 0);
    hdr->payload_len = SHP_WIRE_JOIN_LEN;
}

void shp_wire_hdr_init(shp_wire_hdr_t *hdr, shp_wire_opcode_t opcode,
                       uint16_t tree_id, uint32_t group_id, uint32_t seq)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->version = SHP_WIRE_VERSION;
    hdr->opcode = (uint8_t)opcode;
    hdr->tree_id = tree_id;
    hdr->group_id = group_id;
    hdr->seq = seq;
    hdr->dtype = SHP_DTYPE_NULL;
    hdr->op = SHP_OP_NULL;
    hdr->tag_dtype = SHP_DTYPE_NULL;
}

void shp_wire_hdr_init_agg(shp_wire_hdr_t *hdr, shp_wire_opcode_t opcode,
                           uint16_t tree_id, uint32_t group_id, uint32_t seq,
                           const shp_reduce_desc_t *desc, uint32_t count)
{
    shp_wire_hdr_init(hdr, opcode, tree_id, group_id, seq);
    hdr->dtype = (uint8_t)desc->dtype;
    hdr->op = (uint8_t)desc->op;
    hdr->tag_dtype = (uint8_t)desc->tag_dtype;
    hdr->count = count;
    hdr->payload_len = (uint32_t)(count * shp_reduce_elem_size(desc));
}

static const char *const shp_wire_opcode_names[SHP_WIRE_OP_LAST] = {
    [SHP_WIRE_OP_AGG_REQ] = "agg_req",
    [SHP_WIRE_OP_AGG_RESULT] = "agg_result",
    [SHP_WIRE_OP_ERROR] = "error",
    [SHP_WIRE_OP_RETRANS_REQ] = "retrans_req",
    [SHP_WIRE_OP_GROUP_JOIN] = "group_join",
    [SHP_WIRE_OP_GROUP_JOIN_ACK] = "group_join_ack",
    [SHP_WIRE_OP_GROUP_LEAVE] = "group_leave",
    [SHP_WIRE_OP_JOIN_NONCE] = "join_nonce",
};

const char *shp_wire_opcode_name(unsigned opcode)
{
    if (opcode == 0 || opcode >= SHP_WIRE_OP_LAST) {
        return "unknown";
    }
    return shp_wire_opcode_names[opcode];
}

static shp_status_t shp_wire_reject(shp_status_t status, const char *reason,
                                    const char **why)
{
    if (why != NULL) {
        *why = reason;
    }
    return status;
}

/* What every header must satisfy, before its payload is even read. */
static shp_status_t shp_wire_check_start(const shp_wire_hdr_t *hdr,
                                         uint32_t max_payload, const char **why)
{
    if (hdr->version != SHP_WIRE_VERSION) {
        return shp_wire_reject(SHP_ERR_VERSION, "unknown protocol version",
                               why);
    }
    if (hdr->opcode == 0 || hdr->opcode >= SHP_WIRE_OP_LAST) {
        return shp_wire_reject(SHP_ERR_PROTO, "unknown opcode", why);
    }
    if ((uint64_t)hdr->payload_len >
        (uint64_t)max_payload +
            (hdr->flags & SHP_WIRE_F_MAC ? SHP_WIRE_MAC_LEN : 0)) {
        return shp_wire_reject(SHP_ERR_TOO_LARGE,
                               "payload above the negotiated maximum", why);
    }
    return SHP_OK;
}

/* An aggregation request or result: a barrier carries nothing, exact mode
 * whole int64 lanes, anything else count elements of its type. */
static shp_status_t shp_wire_check_agg(const shp_wire_hdr_t *hdr,
                                       uint32_t data_len, const char **why)
{
    shp_reduce_desc_t desc;
    shp_status_t status;

    if ((hdr->flags & SHP_WIRE_F_SPARSE) &&
        (hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_BCAST))) {
        return shp_wire_reject(SHP_ERR_PROTO, "a sparse barrier or bcast", why);
    }
    if ((hdr->flags & SHP_WIRE_F_BCAST) &&
        (hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT))) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "a bcast that is a barrier or exact", why);
    }
    /* a free bcast: a bcast, and (its root's data) at most FREE_MAX bytes,
     * never empty on a request */
    if ((hdr->flags & SHP_WIRE_F_FREE) &&
        (!(hdr->flags & SHP_WIRE_F_BCAST) || data_len > SHP_WIRE_FREE_MAX ||
         (hdr->opcode == SHP_WIRE_OP_AGG_REQ && data_len == 0))) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "a free bcast that is not a bcast, has no "
                               "data or more than its most",
                               why);
    }
    if (hdr->flags & SHP_WIRE_F_BARRIER) {
        if (hdr->count != 0 || data_len != 0) {
            return shp_wire_reject(SHP_ERR_PROTO, "barrier with a payload",
                                   why);
        }
        return SHP_OK;
    }
    if ((hdr->flags & SHP_WIRE_F_EXACT) &&
        (hdr->dtype != SHP_DTYPE_I64 || hdr->op != SHP_OP_SUM ||
         hdr->lanes == 0 || hdr->count % hdr->lanes != 0)) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "exact-mode message that is not int64 sum "
                               "of whole elements (count a multiple of "
                               "lanes > 0)",
                               why);
    }
    desc.dtype = hdr->dtype;
    desc.op = hdr->op;
    desc.tag_dtype = hdr->tag_dtype;
    status = shp_reduce_desc_check(&desc, why);
    if (status != SHP_OK) {
        return status;
    }
    uint64_t dense = (uint64_t)hdr->count * shp_reduce_elem_size(&desc);
    if (hdr->flags & SHP_WIRE_F_SPARSE) {
        /* its bitmap and blocks: shp_wire_sparse_view, on delivery */
        if (!shp_sparse_ok(&desc) || data_len < SHP_WIRE_SPARSE_HDR ||
            data_len > dense) {
            return shp_wire_reject(SHP_ERR_PROTO,
                                   "a sparse payload of the wrong kind or "
                                   "above its dense size",
                                   why);
        }
        return SHP_OK;
    }
    if (dense != data_len) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "count x element size != payload_len", why);
    }
    return SHP_OK;
}

shp_status_t shp_wire_sparse_view(const shp_wire_hdr_t *hdr, const void *data,
                                  size_t data_len, shp_wire_sparse_t *v,
                                  const char **why)
{
    shp_reduce_desc_t desc = {hdr->dtype, hdr->op, hdr->tag_dtype};
    const uint8_t *p = data;
    uint32_t le;

    if (data_len < SHP_WIRE_SPARSE_HDR) {
        return shp_wire_reject(SHP_ERR_PROTO, "a sparse payload without head",
                               why);
    }
    memcpy(&le, p, sizeof(le));
    v->block = le32toh(le);
    v->dense_len = (size_t)hdr->count * shp_reduce_elem_size(&desc);
    if (shp_sparse_layout_check(&desc, v->dense_len, v->block) != SHP_OK) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "a sparse payload's block does not fit its "
                               "type",
                               why);
    }
    size_t bm = shp_sparse_bitmap_bytes(v->dense_len, v->block);
    if (data_len - SHP_WIRE_SPARSE_HDR < bm) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "a sparse payload's bitmap is cut", why);
    }
    v->bitmap = p + SHP_WIRE_SPARSE_HDR;
    v->packed = v->bitmap + bm;
    v->packed_len = data_len - SHP_WIRE_SPARSE_HDR - bm;
    const char *w = NULL;
    if (shp_sparse_check(v->dense_len, v->block, v->bitmap, v->packed_len,
                         &w) != SHP_OK) {
        return shp_wire_reject(SHP_ERR_PROTO, w, why);
    }
    return SHP_OK;
}

size_t shp_wire_sparse_head(void *out, uint32_t block, size_t dense_len)
{
    uint32_t le = htole32(block);
    memcpy(out, &le, sizeof(le));
    return SHP_WIRE_SPARSE_HDR + shp_sparse_bitmap_bytes(dense_len, block);
}

/* The messages of a group's life and its errors: no elements, a fixed
 * payload or none (an error's text is bounded). */
static shp_status_t shp_wire_check_ctl(const shp_wire_hdr_t *hdr,
                                       const char **why)
{
    switch (hdr->opcode) {
    case SHP_WIRE_OP_ERROR:
        if (hdr->status >= 0) {
            return shp_wire_reject(
                SHP_ERR_PROTO, "error message without an error status", why);
        }
        if (hdr->count != 0 || hdr->payload_len > SHP_WIRE_ERR_MSG_MAX) {
            return shp_wire_reject(SHP_ERR_PROTO, "error text too long", why);
        }
        return SHP_OK;
    case SHP_WIRE_OP_RETRANS_REQ:
        if (hdr->count != 0 || hdr->payload_len != 0) {
            return shp_wire_reject(SHP_ERR_PROTO,
                                   "retransmit request with a payload", why);
        }
        return SHP_OK;
    case SHP_WIRE_OP_GROUP_JOIN:
        if (hdr->payload_len != SHP_WIRE_JOIN_LEN) {
            return shp_wire_reject(SHP_ERR_PROTO, "join of the wrong size",
                                   why);
        }
        return SHP_OK;
    case SHP_WIRE_OP_JOIN_NONCE:
        if (hdr->count != 0 || hdr->payload_len != SHP_WIRE_NONCE_LEN) {
            return shp_wire_reject(SHP_ERR_PROTO,
                                   "join nonce of the wrong size", why);
        }
        return SHP_OK;
    case SHP_WIRE_OP_GROUP_JOIN_ACK:
        if (hdr->count != 0 || hdr->payload_len != 0) {
            return shp_wire_reject(SHP_ERR_PROTO, "join ack with a payload",
                                   why);
        }
        return SHP_OK;
    case SHP_WIRE_OP_GROUP_LEAVE:
        if (hdr->count != 0 || hdr->payload_len != 0) {
            return shp_wire_reject(SHP_ERR_PROTO, "leave with a payload", why);
        }
        return SHP_OK;
    default: return shp_wire_reject(SHP_ERR_PROTO, "unknown opcode", why);
    }
}

shp_status_t shp_wire_validate(const shp_wire_hdr_t *hdr, size_t msg_len,
                               uint32_t max_payload, const char **why)
{
    shp_status_t status;
    uint32_t data_len = hdr->payload_len;

    status = shp_wire_check_start(hdr, max_payload, why);
    if (status != SHP_OK) {
        return status;
    }
    if (msg_len != SHP_WIRE_HDR_LEN + (size_t)hdr->payload_len) {
        return shp_wire_reject(
            SHP_ERR_PROTO, "message length does not match payload_len", why);
    }
    if (hdr->flags & ~SHP_WIRE_F_KNOWN) {
        return shp_wire_reject(SHP_ERR_PROTO, "unknown flags", why);
    }
    /* the tag: only on a multicast result, after its data */
    if (hdr->flags & SHP_WIRE_F_MAC) {
        if (hdr->opcode != SHP_WIRE_OP_AGG_RESULT ||
            !(hdr->flags & SHP_WIRE_F_MCAST) ||
            hdr->payload_len < SHP_WIRE_MAC_LEN) {
            return shp_wire_reject(
                SHP_ERR_PROTO, "a tag on what is not a multicast result", why);
        }
        data_len -= SHP_WIRE_MAC_LEN;
    }
    if (hdr->opcode == SHP_WIRE_OP_AGG_REQ ||
        hdr->opcode == SHP_WIRE_OP_AGG_RESULT) {
        return shp_wire_check_agg(hdr, data_len, why);
    }
    if (hdr->flags & SHP_WIRE_F_SPARSE) {
        return shp_wire_reject(SHP_ERR_PROTO,
                               "a sparse flag on what is not a reduction", why);
    }
    return shp_wire_check_ctl(hdr, why);
}

shp_status_t shp_wire_frame_len(const void *buf, size_t avail,
                                uint32_t max_payload, size_t *len)
{
    shp_wire_hdr_t hdr;
    shp_status_t status;

    if (avail < SHP_WIRE_HDR_LEN) {
        return SHP_INPROGRESS;
    }
    shp_wire_hdr_unpack(buf, &hdr);
    status = shp_wire_check_start(&hdr, max_payload, NULL);
    if (status != SHP_OK) {
        return status;
    }
    *len = SHP_WIRE_HDR_LEN + (size_t)hdr.payload_len;
    return SHP_OK;
}

static void shp_wire_bswap(uint8_t *p, size_t size)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;

    switch (size) {
    case 2:
        memcpy(&v16, p, 2);
        v16 = __builtin_bswap16(v16);
        memcpy(p, &v16, 2);
        break;
    case 4:
        memcpy(&v32, p, 4);
        v32 = __builtin_bswap32(v32);
        memcpy(p, &v32, 4);
        break;
    case 8:
        memcpy(&v64, p, 8);
        v64 = __builtin_bswap64(v64);
        memcpy(p, &v64, 8);
        break;
    default: break;
    }
}

void shp_wire_bswap_elems(const shp_reduce_desc_t *desc, void *buf,
                          size_t count)
{
    size_t vs = shp_dtype_size(desc->dtype);
    size_t ts = shp_op_is_loc(desc->op) ? shp_dtype_size(desc->tag_dtype) : 0;
    uint8_t *p = buf;
    size_t i;

    for (i = 0; i < count; i++, p += vs + ts) {
        shp_wire_bswap(p, vs);
        shp_wire_bswap(p + vs, ts);
    }
}

void shp_wire_payload_swap(const shp_reduce_desc_t *desc, void *buf,
                           size_t count)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    shp_wire_bswap_elems(desc, buf, count);
#else
    (void)desc;
    (void)buf;
    (void)count;
#endif
}
