/*
 * The data-path wire codec: a byte stream cut into messages the way the
 * tcp transport cuts it (shp_wire_frame_len), each header unpacked and
 * validated the way shp_tp_deliver does.  Checks: packing an unpacked
 * header gives the same bytes (reserved fields zero), a validated
 * reduction message's payload is count x element size, swapping its
 * elements twice changes nothing, a join payload round-trips, a sparse
 * payload's parts are consistent and pack back to the same bytes.
 */
#include "tests/fuzz/fuzz.h"

#include "protocol/wire.h"
#include "reduce/sparse.h"

#include <stdlib.h>
#include <string.h>

static int hdr_equal(const shp_wire_hdr_t *a, const shp_wire_hdr_t *b)
{
    return a->version == b->version && a->opcode == b->opcode &&
           a->flags == b->flags && a->tree_id == b->tree_id &&
           a->status == b->status && a->group_id == b->group_id &&
           a->seq == b->seq && a->dtype == b->dtype && a->op == b->op &&
           a->tag_dtype == b->tag_dtype && a->lanes == b->lanes &&
           a->count == b->count && a->payload_len == b->payload_len;
}

/* A SPARSE payload the header check let by: its parts checked as
 * shp_tp_deliver checks them; if right, the dense payload they stand for
 * (at most 1 MiB here) packs back into the same bitmap and blocks where
 * no present block is all zero */
static void check_sparse(const shp_wire_hdr_t *hdr, const uint8_t *payload)
{
    size_t data =
        hdr->payload_len - (hdr->flags & SHP_WIRE_F_MAC ? SHP_WIRE_MAC_LEN : 0);
    shp_wire_sparse_t v;
    const char *why = NULL;
    shp_reduce_desc_t d = {hdr->dtype, hdr->op, hdr->tag_dtype};

    FZ_CHECK(shp_sparse_ok(&d) && !(hdr->flags & SHP_WIRE_F_BARRIER) &&
             !(hdr->flags & SHP_WIRE_F_BCAST));
    if (shp_wire_sparse_view(hdr, payload, data, &v, &why) != SHP_OK) {
        FZ_CHECK(why != NULL);
        return;
    }
    FZ_CHECK(v.dense_len >= data);
    FZ_CHECK(v.packed + v.packed_len == payload + data);
    FZ_CHECK(shp_sparse_packed_len(v.dense_len, v.block, v.bitmap) ==
             v.packed_len);
    if (v.dense_len > (1u << 20)) {
        return;
    }
    uint8_t *dense = malloc(v.dense_len + 1);
    uint8_t *again = malloc(data + 1);
    FZ_CHECK(dense != NULL && again != NULL);
    shp_sparse_expand(dense, v.dense_len, v.block, v.bitmap, v.packed);
    size_t nb = shp_sparse_nblocks(v.dense_len, v.block);
    uint8_t *bm = again + SHP_WIRE_SPARSE_HDR;
    (void)shp_sparse_scan(dense, v.dense_len, v.block, bm, nb);
    if (!memcmp(bm, v.bitmap, shp_sparse_bitmap_bytes(v.dense_len, v.block))) {
        size_t head = shp_wire_sparse_head(again, v.block, v.dense_len);
        size_t k =
            shp_sparse_pack(dense, v.dense_len, v.block, bm, again + head);
        FZ_CHECK(head + k == data && !memcmp(again, payload, data));
    }
    free(dense);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t maxes[] = {0, 48, 256, 65536, UINT32_MAX};
    const uint8_t *p = data;
    size_t avail = size;
    uint32_t max_payload;

    if (size < 1) {
        return 0;
    }
    max_payload = maxes[p[0] % 5];
    p++;
    avail--;
    while (avail > 0) {
        shp_wire_hdr_t hdr, again;
        uint8_t raw[SHP_WIRE_HDR_LEN], want[SHP_WIRE_HDR_LEN];
        const char *why = NULL;
        shp_status_t st;
        size_t len = 0;

        st = shp_wire_frame_len(p, avail, max_payload, &len);
        if (st == SHP_INPROGRESS) {
            FZ_CHECK(avail < SHP_WIRE_HDR_LEN);
            break;
        }
        if (st != SHP_OK) {
            break; /* the transport closes the connection */
        }
        FZ_CHECK(len >= SHP_WIRE_HDR_LEN);
        FZ_CHECK(len - SHP_WIRE_HDR_LEN <=
                 (uint64_t)max_payload + SHP_WIRE_MAC_LEN);
        if (len > avail) {
            break; /* waits for more bytes */
        }
        shp_wire_hdr_unpack(p, &hdr);
        shp_wire_hdr_pack(&hdr, raw);
        memcpy(want, p, sizeof(want));
        if (!(hdr.flags & SHP_WIRE_F_EXACT)) {
            want[19] = 0; /* lanes: reserved outside exact mode */
        }
        memset(want + 28, 0, 4); /* reserved1 */
        FZ_CHECK(memcmp(raw, want, sizeof(raw)) == 0);
        shp_wire_hdr_unpack(raw, &again);
        FZ_CHECK(hdr_equal(&hdr, &again));

        st = shp_wire_validate(&hdr, len, max_payload, &why);
        if (st == SHP_OK) {
            FZ_CHECK(hdr.payload_len == len - SHP_WIRE_HDR_LEN);
            /* a tag only on a multicast result, and room for it */
            FZ_CHECK(!(hdr.flags & SHP_WIRE_F_MAC) ||
                     (hdr.opcode == SHP_WIRE_OP_AGG_RESULT &&
                      (hdr.flags & SHP_WIRE_F_MCAST) &&
                      hdr.payload_len >= SHP_WIRE_MAC_LEN));
            if (hdr.flags & SHP_WIRE_F_SPARSE) {
                check_sparse(&hdr, p + SHP_WIRE_HDR_LEN);
            } else if ((hdr.opcode == SHP_WIRE_OP_AGG_REQ ||
                        hdr.opcode == SHP_WIRE_OP_AGG_RESULT) &&
                       !(hdr.flags & SHP_WIRE_F_BARRIER)) {
                shp_reduce_desc_t d = {hdr.dtype, hdr.op, hdr.tag_dtype};
                size_t es = shp_reduce_elem_size(&d);
                uint8_t *copy = malloc(hdr.payload_len + 1);
                FZ_CHECK(copy != NULL);
                FZ_CHECK((uint64_t)hdr.count * es ==
                         hdr.payload_len - (hdr.flags & SHP_WIRE_F_MAC
                                                ? SHP_WIRE_MAC_LEN
                                                : 0));
                memcpy(copy, p + SHP_WIRE_HDR_LEN, hdr.payload_len);
                shp_wire_bswap_elems(&d, copy, hdr.count);
                shp_wire_bswap_elems(&d, copy, hdr.count);
                FZ_CHECK(memcmp(copy, p + SHP_WIRE_HDR_LEN, hdr.payload_len) ==
                         0);
                shp_wire_payload_swap(&d, copy, hdr.count);
                free(copy);
            }
            if (hdr.opcode == SHP_WIRE_OP_GROUP_JOIN) {
                shp_wire_join_t j, j2;
                uint8_t jr[SHP_WIRE_JOIN_LEN];
                shp_wire_join_unpack(p + SHP_WIRE_HDR_LEN, &j);
                shp_wire_join_pack(&j, jr);
                shp_wire_join_unpack(jr, &j2);
                FZ_CHECK(j.job_id == j2.job_id &&
                         j.child_index == j2.child_index &&
                         !memcmp(j.proof, j2.proof, sizeof(j.proof)));
                FZ_CHECK(!memcmp(jr, p + SHP_WIRE_HDR_LEN, 44));
            }
        } else {
            FZ_CHECK(why != NULL);
        }
        (void)shp_wire_opcode_name(hdr.opcode);
        p += len;
        avail -= len;
    }
    return 0;
}
