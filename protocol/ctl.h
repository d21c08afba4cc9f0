/*
 * Control-plane messages: length-prefixed, versioned frames carrying JSON
 * objects (jansson), between sharpd, the AM, the ANs and sharpctl.
 *
 * Frame: an 8-byte header, then `length` bytes.
 *   off size
 *     0  2   magic 0x5348 ("SH"), big-endian
 *     2  1   version SHP_CTL_VERSION
 *     3  1   type: 1 message (JSON object), 2 ping, 3 pong, 4 sealed
 *     4  4   length, big-endian
 * A message is a JSON object with a string member "type" naming it
 * ("an_register", "group_add", ...) and, for requests, an integer "id" the
 * answer echoes.  Decoders reject anything else with a status and a reason,
 * never crash: not JSON, not an object, duplicate keys, no "type".
 *
 * Sealed frames: once a connection's handshake is done (protocol/auth.h)
 * every frame on it, both ways, is type 4, its body
 *   ChaCha20-Poly1305(key of the direction, nonce = the direction's frame
 *                     count, 64-bit little-endian, 4 zero bytes;
 *                     additional data = this 8-byte header;
 *                     plaintext = inner type (1 byte) | inner body)
 *   followed by its 16-byte tag.  A frame that does not open, comes out of
 *   order, is replayed or is not sealed closes the connection.  Job keys and
 *   everything else after the handshake travel confidential and intact.
 *
 * A frame of another version closes the connection; first the peer is
 * sent a bare ping of this version (shp_ctl_frame_len), so each side can
 * log both versions.  The data path's version (SHP_WIRE_VERSION) changes
 * only with this one: a node reaches the data path only through a
 * manager that took its registration over this protocol.
 *
 * Version history:
 *   1  first version.
 */
#ifndef SHP_COMMON_CTL_H
#define SHP_COMMON_CTL_H

#include "core/conn.h"
#include "core/status.h"

#include <jansson.h>
#include <stdint.h>

#define SHP_CTL_MAGIC 0x5348u
#define SHP_CTL_VERSION 1
#define SHP_CTL_HDR_LEN 8
#define SHP_CTL_MAX_FRAME (4u * 1024 * 1024)
/* the largest frame a peer may send before it has proved the cluster
 * secret, or a local client before its hello (the handshake's messages
 * are under 1 KiB; a hello is a few bytes) */
#define SHP_CTL_PREAUTH_MAX_FRAME (4u * 1024)

typedef enum shp_ctl_frame_type {
    SHP_CTL_FRAME_MSG = 1,
    SHP_CTL_FRAME_PING = 2,
    SHP_CTL_FRAME_PONG = 3,
    SHP_CTL_FRAME_SEALED = 4,
} shp_ctl_frame_type_t;

/* what sealing adds to a frame: the inner type and the tag */
#define SHP_CTL_SEAL_OVERHEAD 17

/* How a group's results go down from its top AN ("dist" in the manager's
 * group_add and in group requests), one encoding everywhere: a set of ways,
 * so a value is its own bit mask.  AUTO (requests and the manager's
 * configuration only) lets the manager choose when it places the group. */
typedef enum shp_dist {
    SHP_DIST_AUTO = 0,
    SHP_DIST_RC = 1,    /* down the tree's connections */
    SHP_DIST_MCAST = 2, /* by multicast from the top */
    SHP_DIST_BOTH = SHP_DIST_RC | SHP_DIST_MCAST,
} shp_dist_t;

/* Indexed by shp_dist_t: "auto", "rc", "mcast", "both", then NULL (an
 * option table's enum). */
extern const char *const shp_dist_names[];

/* The value of a name, -1 for none. */
int shp_dist_parse(const char *name);

/* Header <-> bytes. */
void shp_ctl_hdr_pack(uint8_t type, uint32_t length, void *buf);
SHP_WUR shp_status_t shp_ctl_hdr_unpack(const void *buf, uint8_t *type,
                                        uint32_t *length, const char **why);

/* conn framing for control connections (shp_conn_ops_t.frame_len). */
SHP_WUR shp_status_t shp_ctl_frame_len(shp_conn_t *conn, const void *buf,
                                       size_t avail, size_t *len);

/* Encode `msg` (a JSON object with a "type") into a newly allocated frame. */
SHP_WUR shp_status_t shp_ctl_encode(const json_t *msg, uint8_t **frame,
                                    size_t *len);

/* Decode one whole frame.  For SHP_CTL_FRAME_MSG *msg gets a new reference
 * (json_decref it); for ping/pong *msg is NULL. */
SHP_WUR shp_status_t shp_ctl_decode(const void *frame, size_t len,
                                    uint8_t *type, json_t **msg,
                                    const char **why);

/* For on_frame callbacks: decodes a frame, answers a ping, and returns the
 * message (a new reference) or NULL.  A bad frame closes the connection
 * (SHP_ERR_PROTO) and sets *why; a ping, pong or failed pong leaves *why
 * NULL. */
json_t *shp_ctl_recv(shp_conn_t *conn, const void *frame, size_t len,
                     const char **why);

/* Send a message / a bare ping or pong on a connection. */
SHP_WUR shp_status_t shp_ctl_send(shp_conn_t *conn, const json_t *msg);
SHP_WUR shp_status_t shp_ctl_send_frame(shp_conn_t *conn, uint8_t type);

/* From now on every frame sent on conn is sealed with tx_key and every frame
 * received must be sealed with rx_key (see above).  The keys come from the
 * handshake (shp_auth_session_t: a client sends with c2s and receives with
 * s2c, the AM the other way round). */
void shp_ctl_seal(shp_conn_t *conn, const uint8_t tx_key[32],
                  const uint8_t rx_key[32]);

/* The same on frames in memory, for a peer that is no shp_conn_t: seals a
 * plain frame with seal's tx side, opens a sealed one with its rx side
 * (SHP_ERR_AUTH with the reason in why if it does not open).  The result is
 * malloc'd. */
SHP_WUR shp_status_t shp_ctl_seal_frame(shp_conn_seal_t *seal,
                                        const uint8_t *frame, size_t len,
                                        uint8_t **sealed, size_t *slen);
SHP_WUR shp_status_t shp_ctl_open_frame(shp_conn_seal_t *seal,
                                        const uint8_t *frame, size_t len,
                                        uint8_t **plain, size_t *plen,
                                        const char **why);

/* The message's "type" (never NULL after a successful decode). */
const char *shp_ctl_type(const json_t *msg);

/* Typed, checked access to members.  Missing or of the wrong type:
 * SHP_ERR_PROTO, and *why (if not NULL) names the member. */
SHP_WUR shp_status_t shp_json_get_str(const json_t *obj, const char *key,
                                      const char **out, const char **why);
SHP_WUR shp_status_t shp_json_get_u64(const json_t *obj, const char *key,
                                      uint64_t *out, const char **why);
SHP_WUR shp_status_t shp_json_get_int(const json_t *obj, const char *key,
                                      int64_t min, int64_t max, int64_t *out,
                                      const char **why);
SHP_WUR shp_status_t shp_json_get_bool(const json_t *obj, const char *key,
                                       int *out, const char **why);
SHP_WUR shp_status_t shp_json_get_array(const json_t *obj, const char *key,
                                        json_t **out, const char **why);
SHP_WUR shp_status_t shp_json_get_object(const json_t *obj, const char *key,
                                         json_t **out, const char **why);
/* Fixed-length binary as lowercase hex (job keys, GUIDs). */
SHP_WUR shp_status_t shp_json_get_hex(const json_t *obj, const char *key,
                                      void *out, size_t len, const char **why);
json_t *shp_json_hex(const void *data, size_t len);

/* A u64 as the decimal string shp_json_get_u64 reads (jansson integers
 * are signed). */
json_t *shp_json_u64(uint64_t v);

/* A reply {type, id, status, error?} (a new reference; error may be NULL). */
json_t *shp_ctl_reply(const char *type, int64_t id, shp_status_t status,
                      const char *error);

/* Blocking, for command-line clients: send `req` (which carries an "id") on
 * a connected socket and return the first message answering that id (a new
 * reference); pings and unrelated messages are skipped.  NULL on failure:
 * *st is SHP_ERR_IO when the socket failed or closed, else the decoder's
 * status for a bad frame; *why says what happened. */
json_t *shp_ctl_call_fd(int fd, const json_t *req, shp_status_t *st,
                        const char **why);

/* on_idle of control connections: a ping, or close if it cannot be sent. */
void shp_ctl_on_idle(shp_conn_t *conn);

/* Optional members: the value, or dflt when absent or of the wrong kind. */
const char *shp_json_opt_str(const json_t *obj, const char *key,
                             const char *dflt);
int64_t shp_json_opt_int(const json_t *obj, const char *key, int64_t min,
                         int64_t max, int64_t dflt);

#endif
