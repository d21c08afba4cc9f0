/*
 * The multicast result path: what anyone on the data network can send to
 * a group's address.  Each input is one datagram, checked the way a member
 * takes it (shp_tp_deliver's validation, then the tag with the group's key
 * for the operation number the member expects).  Checks: no input the
 * fuzzer makes carries a right tag (it does not know the key); the same
 * datagram with the right tag is taken, and is refused again for another
 * operation number, another group's key, or any one bit of its header or
 * data changed.
 */
#include "tests/fuzz/fuzz.h"

#include "protocol/wire.h"

static const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN] = {
    0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
    0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
    0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t key[SHP_WIRE_MAC_KEY_LEN], other[SHP_WIRE_MAC_KEY_LEN];
    static int keyed;
    shp_wire_hdr_t hdr;
    const char *why = NULL;

    if (!keyed) {
        shp_wire_mac_key(job_key, 1, 5, key);
        shp_wire_mac_key(job_key, 1, 6, other);
        keyed = 1;
    }
    if (size < SHP_WIRE_HDR_LEN + 1 || size > 65536) {
        return 0;
    }
    uint64_t seq64 = data[0];
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    shp_wire_hdr_unpack(msg, &hdr);
    if (shp_wire_validate(&hdr, len, 65536, &why) != SHP_OK) {
        FZ_CHECK(why != NULL);
        return 0;
    }
    const uint8_t *payload = msg + SHP_WIRE_HDR_LEN;
    /* what the fuzzer made itself: never a right tag */
    FZ_CHECK(!shp_wire_mac_ok(key, seq64, &hdr, payload));
    if (!(hdr.flags & SHP_WIRE_F_MAC)) {
        return 0;
    }
    /* the datagram as the group's top AN would tag it */
    uint8_t *copy = malloc(hdr.payload_len);
    FZ_CHECK(copy != NULL);
    memcpy(copy, payload, hdr.payload_len);
    shp_wire_mac(key, seq64, &hdr, copy,
                 copy + hdr.payload_len - SHP_WIRE_MAC_LEN);
    FZ_CHECK(shp_wire_mac_ok(key, seq64, &hdr, copy));
    FZ_CHECK(!shp_wire_mac_ok(key, seq64 + 1, &hdr, copy));
    FZ_CHECK(!shp_wire_mac_ok(key, seq64 + (1ull << 32), &hdr, copy));
    FZ_CHECK(!shp_wire_mac_ok(other, seq64, &hdr, copy));
    /* one bit flipped, chosen by the input: header or data */
    size_t data_len = hdr.payload_len - SHP_WIRE_MAC_LEN;
    size_t bit =
        (size_t)data[size - 1] * 131 % ((SHP_WIRE_HDR_LEN + data_len) * 8);
    if (bit < SHP_WIRE_HDR_LEN * 8) {
        uint8_t raw[SHP_WIRE_HDR_LEN];
        shp_wire_hdr_t h2;
        shp_wire_hdr_pack(&hdr, raw);
        raw[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        shp_wire_hdr_unpack(raw, &h2);
        uint8_t back[SHP_WIRE_HDR_LEN];
        shp_wire_hdr_pack(&h2, back);
        /* a flip in a reserved byte packs away: the same header */
        if (memcmp(back, raw, sizeof(raw)) == 0 &&
            h2.payload_len == hdr.payload_len) {
            FZ_CHECK(!shp_wire_mac_ok(key, seq64, &h2, copy));
        }
    } else {
        bit -= SHP_WIRE_HDR_LEN * 8;
        copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        FZ_CHECK(!shp_wire_mac_ok(key, seq64, &hdr, copy));
    }
    free(copy);
    return 0;
}
