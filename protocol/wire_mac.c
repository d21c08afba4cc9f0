/*
 * Tags of multicast results (see wire.h): Poly1305 under a one-time key
 * made by ChaCha20 from the group's key and the operation's number, as
 * RFC 8439 (section 2.6) makes it.
 *
 * Every member checks every byte of every result it takes by multicast,
 * so at large sizes this is the data path's own cost.  libsodium makes the
 * one-time key and tags short results; the Poly1305 of a long one is
 * OpenSSL's (libcrypto), whose vectorised code (AVX-512 IFMA, AVX2) takes
 * a 32 KiB fragment in about a fifth of libsodium 1.0.18's time here
 * (README, "Libraries").  Both compute the same function: the tag on the
 * wire does not depend on which did (tests/protocol/test_wire checks it
 * against libsodium alone on both sides of the switch).
 */
#include "protocol/wire.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>

/* Below this many bytes libsodium's is as fast: EVP's set-up costs about
 * 100 ns a tag. */
#define MAC_OSSL_MIN 512

static EVP_MAC *ossl_poly1305;
static pthread_once_t ossl_once = PTHREAD_ONCE_INIT;

static void ossl_fetch(void)
{
    /* NULL where the provider has none (a FIPS-only configuration):
     * libsodium then tags everything */
    ossl_poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
}

/* OpenSSL's Poly1305 of raw then data under otk: 0 when it could not (no
 * memory, no provider), the caller then uses libsodium's */
static int poly1305_ossl(const uint8_t otk[crypto_onetimeauth_KEYBYTES],
                         const uint8_t raw[SHP_WIRE_HDR_LEN], const void *data,
                         size_t len, uint8_t tag[SHP_WIRE_MAC_LEN])
{
    EVP_MAC_CTX *c;
    size_t out = 0;
    int ok;

    pthread_once(&ossl_once, ossl_fetch);
    if (ossl_poly1305 == NULL || (c = EVP_MAC_CTX_new(ossl_poly1305)) == NULL) {
        return 0;
    }
    ok = EVP_MAC_init(c, otk, crypto_onetimeauth_KEYBYTES, NULL) &&
         EVP_MAC_update(c, raw, SHP_WIRE_HDR_LEN) &&
         EVP_MAC_update(c, data, len) &&
         EVP_MAC_final(c, tag, &out, SHP_WIRE_MAC_LEN) &&
         out == SHP_WIRE_MAC_LEN;
    EVP_MAC_CTX_free(c);
    return ok;
}

void shp_wire_mac_key(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                      uint16_t tree_id, uint32_t group_id,
                      uint8_t key[SHP_WIRE_MAC_KEY_LEN])
{
    shp_wire_group_subkey(job_key, tree_id, group_id, "shpmcast", key,
                          SHP_WIRE_MAC_KEY_LEN);
}

void shp_wire_mac(const uint8_t key[SHP_WIRE_MAC_KEY_LEN], uint64_t seq64,
                  const shp_wire_hdr_t *hdr, const void *data,
                  uint8_t tag[SHP_WIRE_MAC_LEN])
{
    _Static_assert(SHP_WIRE_MAC_LEN == crypto_onetimeauth_BYTES,
                   "a tag is one Poly1305 tag");
    uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {0};
    uint8_t otk[crypto_onetimeauth_KEYBYTES], raw[SHP_WIRE_HDR_LEN];
    size_t len = hdr->payload_len - SHP_WIRE_MAC_LEN;
    crypto_onetimeauth_state st;

    for (int i = 0; i < 8; i++) {
        nonce[i] = (uint8_t)(seq64 >> (8 * i));
    }
    crypto_stream_chacha20_ietf(otk, sizeof(otk), nonce, key);
    shp_wire_hdr_pack(hdr, raw);
    if (len < MAC_OSSL_MIN || !poly1305_ossl(otk, raw, data, len, tag)) {
        crypto_onetimeauth_init(&st, otk);
        crypto_onetimeauth_update(&st, raw, sizeof(raw));
        crypto_onetimeauth_update(&st, data, len);
        crypto_onetimeauth_final(&st, tag);
        sodium_memzero(&st, sizeof(st));
    }
    sodium_memzero(otk, sizeof(otk));
}

int shp_wire_mac_ok(const uint8_t key[SHP_WIRE_MAC_KEY_LEN], uint64_t seq64,
                    const shp_wire_hdr_t *hdr, const void *payload)
{
    uint8_t tag[SHP_WIRE_MAC_LEN];

    if (!(hdr->flags & SHP_WIRE_F_MAC) || hdr->payload_len < SHP_WIRE_MAC_LEN) {
        return 0;
    }
    shp_wire_mac(key, seq64, hdr, payload, tag);
    return crypto_verify_16(tag, (const uint8_t *)payload + hdr->payload_len -
                                     SHP_WIRE_MAC_LEN) == 0;
}
