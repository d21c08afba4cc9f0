/* Control-plane framing and JSON message codec (see ctl.h). */
#include "protocol/ctl.h"

#include "core/log.h"

#include <endian.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void shp_ctl_hdr_pack(uint8_t type, uint32_t length, void *buf)
{
    uint8_t *p = buf;
    uint16_t magic = htobe16(SHP_CTL_MAGIC);
    uint32_t len_be = htobe32(length);

    memcpy(p, &magic, 2);
    p[2] = SHP_CTL_VERSION;
    p[3] = type;
    memcpy(p + 4, &len_be, 4);
}

const char *const shp_dist_names[] = {"auto", "rc", "mcast", "both", NULL};

int shp_dist_parse(const char *name)
{
    int d;

    for (d = 0; shp_dist_names[d] != NULL; d++) {
        if (!strcmp(shp_dist_names[d], name)) {
            return d;
        }
    }
    return -1;
}

static shp_status_t shp_ctl_reject(shp_status_t status, const char *reason,
                                   const char **why)
{
    if (why != NULL) {
        *why = reason;
    }
    return status;
}

shp_status_t shp_ctl_hdr_unpack(const void *buf, uint8_t *type,
                                uint32_t *length, const char **why)
{
    const uint8_t *p = buf;
    uint16_t magic;
    uint32_t len;

    memcpy(&magic, p, 2);
    memcpy(&len, p + 4, 4);
    if (be16toh(magic) != SHP_CTL_MAGIC) {
        return shp_ctl_reject(SHP_ERR_PROTO, "bad magic: not a sharp peer",
                              why);
    }
    if (p[2] != SHP_CTL_VERSION) {
        return shp_ctl_reject(SHP_ERR_VERSION,
                              "unsupported control protocol version", why);
    }
    if (p[3] < SHP_CTL_FRAME_MSG || p[3] > SHP_CTL_FRAME_SEALED) {
        return shp_ctl_reject(SHP_ERR_PROTO, "unknown frame type", why);
    }
    len = be32toh(len);
    if (len > SHP_CTL_MAX_FRAME - SHP_CTL_HDR_LEN) {
        return shp_ctl_reject(SHP_ERR_TOO_LARGE, "frame too large", why);
    }
    if ((p[3] == SHP_CTL_FRAME_PING || p[3] == SHP_CTL_FRAME_PONG) &&
        len != 0) {
        return shp_ctl_reject(SHP_ERR_PROTO, "ping/pong with a body", why);
    }
    if (p[3] == SHP_CTL_FRAME_SEALED && len < SHP_CTL_SEAL_OVERHEAD) {
        return shp_ctl_reject(SHP_ERR_PROTO, "sealed frame too short", why);
    }
    *type = p[3];
    *length = len;
    return SHP_OK;
}

/* A peer of another control protocol version (its magic and version are
 * where every version puts them): it is sent a bare ping of this node's
 * version before the connection closes, so it can say which version it
 * met, and both sides name the two versions in their logs.  The peer's
 * answer to that ping, if any, goes to a closed connection: no loop. */
static void shp_ctl_version_met(shp_conn_t *conn, const uint8_t *hdr)
{
    uint8_t ping[SHP_CTL_HDR_LEN];
    uint16_t magic;

    memcpy(&magic, hdr, 2);
    if (conn == NULL || be16toh(magic) != SHP_CTL_MAGIC) {
        return;
    }
    shp_ctl_hdr_pack(SHP_CTL_FRAME_PING, 0, ping);
    if (conn->fd >= 0) { /* best effort: 8 bytes fit any socket's buffer */
        (void)!send(conn->fd, ping, sizeof(ping), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    shp_warn_sparse(1000,
                    "%s speaks control protocol version %u, this node %u "
                    "(unsupported protocol version): nodes of two protocol "
                    "versions cannot work together; upgrade the fabric "
                    "whole, between jobs (docs/admin.md, Protocol versions)",
                    conn->peer[0] != '\0' ? conn->peer : "a peer",
                    (unsigned)hdr[2], (unsigned)SHP_CTL_VERSION);
}

shp_status_t shp_ctl_frame_len(shp_conn_t *conn, const void *buf, size_t avail,
                               size_t *len)
{
    uint32_t length;
    uint8_t type;
    shp_status_t status;

    if (avail < SHP_CTL_HDR_LEN) {
        return SHP_INPROGRESS;
    }
    status = shp_ctl_hdr_unpack(buf, &type, &length, NULL);
    if (status == SHP_ERR_VERSION) {
        shp_ctl_version_met(conn, buf);
    }
    if (status != SHP_OK) {
        return status;
    }
    *len = SHP_CTL_HDR_LEN + (size_t)length;
    return SHP_OK;
}

const char *shp_ctl_type(const json_t *msg)
{
    const char *type = json_string_value(json_object_get(msg, "type"));

    return type ? type : "";
}

shp_status_t shp_ctl_encode(const json_t *msg, uint8_t **frame, size_t *len)
{
    size_t body;
    uint8_t *buf;

    if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "type"))) {
        return SHP_ERR_INVALID_PARAM;
    }
    body = json_dumpb(msg, NULL, 0, JSON_COMPACT);
    if (body == 0 || body > SHP_CTL_MAX_FRAME - SHP_CTL_HDR_LEN) {
        return body == 0 ? SHP_ERR_INVALID_PARAM : SHP_ERR_TOO_LARGE;
    }
    buf = malloc(SHP_CTL_HDR_LEN + body);
    if (buf == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    if (json_dumpb(msg, (char *)buf + SHP_CTL_HDR_LEN, body, JSON_COMPACT) !=
        body) {
        free(buf);
        return SHP_ERR_INVALID_PARAM;
    }
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, (uint32_t)body, buf);
    *frame = buf;
    *len = SHP_CTL_HDR_LEN + body;
    return SHP_OK;
}

shp_status_t shp_ctl_decode(const void *frame, size_t len, uint8_t *type,
                            json_t **msg, const char **why)
{
    json_error_t jerr;
    uint32_t length;
    shp_status_t status;
    json_t *obj;

    if (len < SHP_CTL_HDR_LEN) {
        return shp_ctl_reject(SHP_ERR_PROTO, "truncated frame", why);
    }
    status = shp_ctl_hdr_unpack(frame, type, &length, why);
    if (status != SHP_OK) {
        return status;
    }
    if ((size_t)length != len - SHP_CTL_HDR_LEN) {
        return shp_ctl_reject(SHP_ERR_PROTO, "frame length mismatch", why);
    }
    if (*type == SHP_CTL_FRAME_SEALED) {
        return shp_ctl_reject(
            SHP_ERR_AUTH, "a sealed frame on a connection that is not", why);
    }
    if (*type != SHP_CTL_FRAME_MSG) {
        *msg = NULL;
        return SHP_OK;
    }
    /* without JSON_ALLOW_NUL, "\u0000" in a string is refused; a raw NUL
     * byte is invalid JSON anyway */
    obj = json_loadb((const char *)frame + SHP_CTL_HDR_LEN, length,
                     JSON_REJECT_DUPLICATES, &jerr);
    if (obj == NULL) {
        return shp_ctl_reject(SHP_ERR_PARSE, "body is not valid JSON", why);
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        return shp_ctl_reject(SHP_ERR_PROTO, "body is not a JSON object", why);
    }
    if (!json_is_string(json_object_get(obj, "type")) ||
        json_string_length(json_object_get(obj, "type")) == 0) {
        json_decref(obj);
        return shp_ctl_reject(SHP_ERR_PROTO, "message without a \"type\"", why);
    }
    *msg = obj;
    return SHP_OK;
}

/* Sealing ------------------------------------------------------------------ */

_Static_assert(SHP_CTL_SEAL_OVERHEAD ==
                   1 + crypto_aead_chacha20poly1305_IETF_ABYTES,
               "a sealed frame is the inner type, the body and the tag");

void shp_ctl_seal(shp_conn_t *conn, const uint8_t tx_key[32],
                  const uint8_t rx_key[32])
{
    memcpy(conn->seal.tx_key, tx_key, sizeof(conn->seal.tx_key));
    memcpy(conn->seal.rx_key, rx_key, sizeof(conn->seal.rx_key));
    conn->seal.tx_seq = conn->seal.rx_seq = 0;
    conn->seal.on = 1;
}

static void
ctl_seal_nonce(uint64_t seq,
               uint8_t n[crypto_aead_chacha20poly1305_IETF_NPUBBYTES])
{
    uint64_t le = htole64(seq);

    memset(n, 0, crypto_aead_chacha20poly1305_IETF_NPUBBYTES);
    memcpy(n, &le, sizeof(le));
}

shp_status_t shp_ctl_seal_frame(shp_conn_seal_t *seal, const uint8_t *frame,
                                size_t len, uint8_t **sealed, size_t *slen)
{
    uint8_t n[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    size_t body = len - SHP_CTL_HDR_LEN, out = len + SHP_CTL_SEAL_OVERHEAD;
    uint8_t *s;

    if (len < SHP_CTL_HDR_LEN || out > SHP_CTL_MAX_FRAME ||
        seal->tx_seq == UINT64_MAX) {
        return SHP_ERR_TOO_LARGE;
    }
    s = malloc(out);
    if (s == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    shp_ctl_hdr_pack(SHP_CTL_FRAME_SEALED, (uint32_t)(out - SHP_CTL_HDR_LEN),
                     s);
    s[SHP_CTL_HDR_LEN] = frame[3]; /* the inner type */
    memcpy(s + SHP_CTL_HDR_LEN + 1, frame + SHP_CTL_HDR_LEN, body);
    ctl_seal_nonce(seal->tx_seq++, n);
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(
        s + SHP_CTL_HDR_LEN, s + SHP_CTL_HDR_LEN + 1 + body, NULL,
        s + SHP_CTL_HDR_LEN, 1 + body, s, SHP_CTL_HDR_LEN, NULL, n,
        seal->tx_key);
    *sealed = s;
    *slen = out;
    return SHP_OK;
}

shp_status_t shp_ctl_open_frame(shp_conn_seal_t *seal, const uint8_t *frame,
                                size_t len, uint8_t **plain, size_t *plen,
                                const char **why)
{
    uint8_t n[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    uint8_t *p, type;
    uint32_t length;
    size_t ct;

    if (len < SHP_CTL_HDR_LEN ||
        shp_ctl_hdr_unpack(frame, &type, &length, why) != SHP_OK ||
        type != SHP_CTL_FRAME_SEALED ||
        (size_t)length != len - SHP_CTL_HDR_LEN) {
        return shp_ctl_reject(SHP_ERR_AUTH,
                              "a frame not sealed after the handshake", why);
    }
    ct = len - SHP_CTL_HDR_LEN -
         crypto_aead_chacha20poly1305_IETF_ABYTES; /* inner type and body */
    p = malloc(SHP_CTL_HDR_LEN + ct);
    if (p == NULL) {
        return shp_ctl_reject(SHP_ERR_NO_MEMORY, "out of memory", why);
    }
    /* the inner type lands just before the body, then the header over it */
    ctl_seal_nonce(seal->rx_seq, n);
    if (crypto_aead_chacha20poly1305_ietf_decrypt_detached(
            p + SHP_CTL_HDR_LEN - 1, NULL, frame + SHP_CTL_HDR_LEN, ct,
            frame + SHP_CTL_HDR_LEN + ct, frame, SHP_CTL_HDR_LEN, n,
            seal->rx_key) != 0) {
        free(p);
        return shp_ctl_reject(SHP_ERR_AUTH,
                              "a sealed frame that does not open (forged, "
                              "replayed or out of order)",
                              why);
    }
    seal->rx_seq++;
    shp_ctl_hdr_pack(p[SHP_CTL_HDR_LEN - 1], (uint32_t)(ct - 1), p);
    *plain = p;
    *plen = SHP_CTL_HDR_LEN + ct - 1;
    return SHP_OK;
}

/* Seals a plain frame and queues it. */
static shp_status_t ctl_send_sealed(shp_conn_t *conn, const uint8_t *frame,
                                    size_t len)
{
    shp_status_t status;
    uint8_t *s;
    size_t slen;

    status = shp_ctl_seal_frame(&conn->seal, frame, len, &s, &slen);
    if (status != SHP_OK) {
        return status;
    }
    status = shp_conn_send(conn, s, slen, NULL, 0);
    free(s);
    return status;
}

shp_status_t shp_ctl_send(shp_conn_t *conn, const json_t *msg)
{
    shp_status_t status;
    uint8_t *frame;
    size_t len;

    status = shp_ctl_encode(msg, &frame, &len);
    if (status != SHP_OK) {
        return status;
    }
    status = conn->seal.on ? ctl_send_sealed(conn, frame, len)
                           : shp_conn_send(conn, frame, len, NULL, 0);
    free(frame);
    return status;
}

shp_status_t shp_ctl_send_frame(shp_conn_t *conn, uint8_t type)
{
    uint8_t hdr[SHP_CTL_HDR_LEN];

    shp_ctl_hdr_pack(type, 0, hdr);
    return conn->seal.on ? ctl_send_sealed(conn, hdr, sizeof(hdr))
                         : shp_conn_send(conn, hdr, sizeof(hdr), NULL, 0);
}

/* Typed getters ------------------------------------------------------------ */

static shp_status_t shp_json_member(const json_t *obj, const char *key,
                                    json_t **out, const char **why)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;

    if (v == NULL) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = v;
    return SHP_OK;
}

shp_status_t shp_json_get_str(const json_t *obj, const char *key,
                              const char **out, const char **why)
{
    json_t *v;

    if (shp_json_member(obj, key, &v, why) != SHP_OK || !json_is_string(v)) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = json_string_value(v);
    return SHP_OK;
}

shp_status_t shp_json_get_u64(const json_t *obj, const char *key, uint64_t *out,
                              const char **why)
{
    json_t *v;

    /* jansson integers are signed 64-bit: u64 values above INT64_MAX
     * travel as decimal strings */
    if (shp_json_member(obj, key, &v, why) != SHP_OK) {
        return SHP_ERR_PROTO;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return SHP_OK;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        unsigned long long u;
        if (*s >= '0' && *s <= '9') {
            u = strtoull(s, &end, 10);
            if (*end == '\0') {
                *out = u;
                return SHP_OK;
            }
        }
    }
    return shp_ctl_reject(SHP_ERR_PROTO, key, why);
}

shp_status_t shp_json_get_int(const json_t *obj, const char *key, int64_t min,
                              int64_t max, int64_t *out, const char **why)
{
    json_t *v;
    json_int_t i;

    if (shp_json_member(obj, key, &v, why) != SHP_OK || !json_is_integer(v)) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    i = json_integer_value(v);
    if (i < min || i > max) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = i;
    return SHP_OK;
}

shp_status_t shp_json_get_bool(const json_t *obj, const char *key, int *out,
                               const char **why)
{
    json_t *v;

    if (shp_json_member(obj, key, &v, why) != SHP_OK || !json_is_boolean(v)) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = json_is_true(v);
    return SHP_OK;
}

shp_status_t shp_json_get_array(const json_t *obj, const char *key,
                                json_t **out, const char **why)
{
    json_t *v;

    if (shp_json_member(obj, key, &v, why) != SHP_OK || !json_is_array(v)) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = v;
    return SHP_OK;
}

shp_status_t shp_json_get_object(const json_t *obj, const char *key,
                                 json_t **out, const char **why)
{
    json_t *v;

    if (shp_json_member(obj, key, &v, why) != SHP_OK || !json_is_object(v)) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    *out = v;
    return SHP_OK;
}

static int shp_hex_val(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

shp_status_t shp_json_get_hex(const json_t *obj, const char *key, void *out,
                              size_t len, const char **why)
{
    uint8_t *o = out;
    const char *s;
    size_t i;

    if (shp_json_get_str(obj, key, &s, why) != SHP_OK || strlen(s) != 2 * len) {
        return shp_ctl_reject(SHP_ERR_PROTO, key, why);
    }
    for (i = 0; i < len; i++) {
        int hi = shp_hex_val(s[2 * i]), lo = shp_hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return shp_ctl_reject(SHP_ERR_PROTO, key, why);
        }
    }
    for (i = 0; i < len; i++) {
        o[i] =
            (uint8_t)(shp_hex_val(s[2 * i]) << 4 | shp_hex_val(s[2 * i + 1]));
    }
    return SHP_OK;
}

json_t *shp_json_hex(const void *data, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *d = data;
    char *s = malloc(2 * len + 1);
    json_t *j;
    size_t i;

    if (s == NULL) {
        return NULL;
    }
    for (i = 0; i < len; i++) {
        s[2 * i] = digits[d[i] >> 4];
        s[2 * i + 1] = digits[d[i] & 15];
    }
    s[2 * len] = '\0';
    j = json_string(s);
    free(s);
    return j;
}

const char *shp_json_opt_str(const json_t *obj, const char *key,
                             const char *dflt)
{
    const char *v;

    return shp_json_get_str(obj, key, &v, NULL) == SHP_OK ? v : dflt;
}

int64_t shp_json_opt_int(const json_t *obj, const char *key, int64_t min,
                         int64_t max, int64_t dflt)
{
    int64_t v;

    return shp_json_get_int(obj, key, min, max, &v, NULL) == SHP_OK ? v : dflt;
}

json_t *shp_ctl_recv(shp_conn_t *conn, const void *frame, size_t len,
                     const char **why)
{
    json_t *msg = NULL;
    uint8_t type, *plain = NULL;
    size_t plen;
    shp_status_t status;

    *why = NULL;
    if (conn->seal.on) {
        status =
            shp_ctl_open_frame(&conn->seal, frame, len, &plain, &plen, why);
        if (status != SHP_OK) {
            shp_conn_close(conn, status);
            return NULL;
        }
        frame = plain;
        len = plen;
    }
    status = shp_ctl_decode(frame, len, &type, &msg, why);
    free(plain);
    if (status != SHP_OK) {
        shp_conn_close(conn, status == SHP_ERR_AUTH ? status : SHP_ERR_PROTO);
        return NULL;
    }
    if (type == SHP_CTL_FRAME_PING &&
        shp_ctl_send_frame(conn, SHP_CTL_FRAME_PONG) != SHP_OK) {
        shp_conn_close(conn, SHP_ERR_IO);
    }
    return msg;
}

json_t *shp_json_u64(uint64_t v)
{
    char s[24];

    snprintf(s, sizeof(s), "%" PRIu64, v);
    return json_string(s);
}

json_t *shp_ctl_reply(const char *type, int64_t id, shp_status_t status,
                      const char *error)
{
    json_t *m = json_pack("{s:s, s:I, s:i}", "type", type, "id", (json_int_t)id,
                          "status", (int)status);

    if (m != NULL && error != NULL) {
        json_object_set_new(m, "error", json_string(error));
    }
    return m;
}

json_t *shp_ctl_call_fd(int fd, const json_t *req, shp_status_t *st,
                        const char **why)
{
    int64_t id = shp_json_opt_int(req, "id", INT64_MIN, INT64_MAX, -1);
    uint8_t *frame = NULL, hdr[SHP_CTL_HDR_LEN];
    size_t len;

    *st = shp_ctl_encode(req, &frame, &len);
    if (*st != SHP_OK) {
        *why = "cannot encode the request";
        return NULL;
    }
    int sent = shp_fd_io_full(fd, frame, len, 1);
    free(frame);
    if (sent != 0) {
        *st = SHP_ERR_IO;
        *why = "cannot send the request";
        return NULL;
    }
    for (;;) {
        uint8_t type;
        uint32_t blen;
        json_t *msg = NULL;
        if (shp_fd_io_full(fd, hdr, sizeof(hdr), 0) != 0) {
            *st = SHP_ERR_IO;
            *why = "no answer";
            return NULL;
        }
        if ((*st = shp_ctl_hdr_unpack(hdr, &type, &blen, why)) != SHP_OK) {
            return NULL;
        }
        uint8_t *body = malloc(SHP_CTL_HDR_LEN + (size_t)blen);
        if (body == NULL) {
            *st = SHP_ERR_NO_MEMORY;
            *why = "no memory";
            return NULL;
        }
        memcpy(body, hdr, sizeof(hdr));
        if (shp_fd_io_full(fd, body + SHP_CTL_HDR_LEN, blen, 0) != 0) {
            free(body);
            *st = SHP_ERR_IO;
            *why = "the answer was cut short";
            return NULL;
        }
        *st = shp_ctl_decode(body, SHP_CTL_HDR_LEN + blen, &type, &msg, why);
        free(body);
        if (*st != SHP_OK) {
            return NULL;
        }
        if (msg != NULL &&
            shp_json_opt_int(msg, "id", INT64_MIN, INT64_MAX, -1) == id) {
            return msg;
        }
        json_decref(msg); /* a ping, a notification */
    }
}

void shp_ctl_on_idle(shp_conn_t *conn)
{
    if (shp_ctl_send_frame(conn, SHP_CTL_FRAME_PING) != SHP_OK) {
        shp_conn_close(conn, SHP_ERR_IO);
    }
}
