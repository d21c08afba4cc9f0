/*
 * Cluster-secret authentication of control connections (AM <-> AN, AM <->
 * sharpd), with libsodium's HMAC-SHA-256.
 *
 * The secret is a root-only file (mode 0600 or stricter); its contents are
 * hashed (BLAKE2b) into a 32-byte key.  Mutual challenge-response, neither
 * side sends the secret:
 *
 *   client -> AM  hello     {role, name, nonce}
 *   AM -> client  challenge {nonce, proof}   proof = HMAC(key, "sharp-am" |
 *                                            client nonce | AM nonce | role |
 *                                            0 | name)
 *   client -> AM  auth      {proof}          proof = HMAC(key, "sharp-peer" |
 *                                            AM nonce | client nonce | role |
 *                                            0 | name)
 *
 * Node keys: the handshake of role R and name N is keyed with the node key
 * of (R, N), made from the cluster key (shp_auth_node_secret), never with
 * the cluster key itself.  The AM holds the cluster secret and derives the
 * node key of whatever a hello claims.  An AN or sharpd holds either its
 * own node secret ("sharp-node-v1:ROLE:HEX:NAME", what `sharp_am
 * --node-secret ROLE:NAME` prints), which proves that one role and name
 * only, or the cluster secret (a small cluster, the manager's own host),
 * from which it derives its node key.  So root on a compute node given
 * its node secret speaks for its own host only, not as another host's
 * sharpd nor as an AN.
 *
 * Nonces are 32 random bytes; everything travels as hex.  Both sides then
 * hold two session keys, one per direction, HMAC(key, "sharp-c2s" | ...)
 * and HMAC(key, "sharp-s2c" | ...) over the same nonces, role and name, with
 * which every later frame of the connection is sealed (shp_ctl_seal()):
 * the client right after it sends its auth, the AM right after it checked
 * it.  The client checks
 * the AM's proof before it answers, so a false AM learns nothing useful and
 * is refused; the AM refuses (and logs) a client whose proof is wrong and
 * accepts nothing else from it before a valid proof.
 */
#ifndef SHP_COMMON_AUTH_H
#define SHP_COMMON_AUTH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define SHP_AUTH_KEY_LEN 32
#define SHP_AUTH_NONCE_LEN 32

typedef struct shp_auth_key {
    uint8_t k[SHP_AUTH_KEY_LEN];
    int node;      /* a node key (of role, name), not the cluster key */
    char role[16]; /* node: whose */
    char name[128];
} shp_auth_key_t;

/* libsodium initialisation; call before anything else here (idempotent). */
SHP_WUR shp_status_t shp_auth_init(void);

/* Reads the secret file: the cluster secret, or a node secret (key->node).
 * Refuses a file that is not regular, is empty, or can be read or written
 * by group or others (SHP_ERR_PERM), or a malformed node secret, with the
 * reason in err. */
SHP_WUR shp_status_t shp_auth_key_load(const char *path, shp_auth_key_t *key,
                                       char *err, size_t errlen);
void shp_auth_key_from_bytes(const void *secret, size_t len,
                             shp_auth_key_t *key);

/* The node secret of ROLE NAME as its file holds it (NUL-terminated):
 * "sharp-node-v1:ROLE:HEX:NAME", HEX the HMAC-SHA-256 of the cluster key
 * over "sharp-node-v1", the role and the name.  SHP_ERR_INVALID_PARAM if
 * the role or name does not fit (role: no ':'), or cluster is a node key. */
#define SHP_AUTH_NODE_SECRET_MAX (14 + 16 + 64 + 128 + 4)
SHP_WUR shp_status_t shp_auth_node_secret(const shp_auth_key_t *cluster,
                                          const char *role, const char *name,
                                          char out[SHP_AUTH_NODE_SECRET_MAX]);

/* The key that proves ROLE NAME from key: a node key of exactly that role
 * and name, or the one the cluster key derives; SHP_ERR_AUTH (with why) for
 * another node's key. */
SHP_WUR shp_status_t shp_auth_node_key(const shp_auth_key_t *key,
                                       const char *role, const char *name,
                                       shp_auth_key_t *out, const char **why);

/* Fills buf with random bytes from the OS's source (getrandom). */
void shp_auth_random(void *buf, size_t len);

/* A job key's fingerprint, as 32 hex digits and a NUL: a keyed hash
 * (BLAKE2b, the key as its key) of a label and the job id, so that an AN
 * and a sharpd can show a manager that restarted which key they hold
 * without sending it (docs/security.md). */
#define SHP_AUTH_FP_HEX 33
void shp_auth_key_fp(const uint8_t key[32], uint64_t job_id,
                     char out[SHP_AUTH_FP_HEX]);

/* A group's keys' fingerprint, the same form: keyed by its join key, over
 * a label, the job id and its multicast key.  What an AN reports to a
 * restarted manager for a group it serves; the manager derives both keys
 * from the job key and compares. */
void shp_auth_group_fp(const uint8_t join_key[32], const uint8_t mcast_key[32],
                       uint64_t job_id, char out[SHP_AUTH_FP_HEX]);

/* The session keys of a connection: client -> AM, AM -> client. */
typedef struct shp_auth_session {
    uint8_t c2s[SHP_AUTH_KEY_LEN], s2c[SHP_AUTH_KEY_LEN];
} shp_auth_session_t;

typedef struct shp_auth_client {
    uint8_t nonce[SHP_AUTH_NONCE_LEN];
    char role[16];
    char name[128];
    shp_auth_session_t session; /* once shp_auth_client_answer() succeeded */
} shp_auth_client_t;

/* The hello message (a new reference). */
json_t *shp_auth_client_hello(shp_auth_client_t *c, const char *role,
                              const char *name);
/* Checks the AM's challenge with the node key of c's role and name (key:
 * the cluster key, or that node key); on success *auth is the answer to
 * send, and c->session the keys to seal the connection with once it is
 * sent. */
SHP_WUR shp_status_t shp_auth_client_answer(shp_auth_client_t *c,
                                            const shp_auth_key_t *key,
                                            const json_t *challenge,
                                            json_t **auth, const char **why);

typedef struct shp_auth_server {
    uint8_t cnonce[SHP_AUTH_NONCE_LEN], snonce[SHP_AUTH_NONCE_LEN];
    char role[16];
    char name[128];
    shp_auth_key_t key; /* the node key of role and name (from hello on) */
    int state;          /* 0 wait hello, 1 wait auth, 2 authenticated */
    shp_auth_session_t session; /* once authenticated */
} shp_auth_server_t;

/* key: the cluster key; the peer's node key is derived from it in hello
 * (verify's key is not read: hello's choice is used). */
SHP_WUR shp_status_t shp_auth_server_hello(shp_auth_server_t *s,
                                           const shp_auth_key_t *key,
                                           const json_t *hello,
                                           json_t **challenge,
                                           const char **why);
SHP_WUR shp_status_t shp_auth_server_verify(shp_auth_server_t *s,
                                            const shp_auth_key_t *key,
                                            const json_t *auth,
                                            const char **why);

/* Epochs (docs/am.md, "A standby manager"): the active manager's epoch
 * goes to the nodes with a proof, HMAC-SHA-256 of the cluster key over
 * "sharp-epoch-v1" and the epoch (8 bytes, big-endian), in hex.  Only a
 * holder of the cluster secret (a manager) makes one; a node holding its
 * node secret can repeat an epoch it was given, not invent a higher one,
 * so a node cannot fence the real manager with a made-up epoch. */
#define SHP_AUTH_EPOCH_PROOF_LEN 64 /* hex digits */
void shp_auth_epoch_proof(const shp_auth_key_t *cluster, uint64_t epoch,
                          char out[SHP_AUTH_EPOCH_PROOF_LEN + 1]);
/* 1 if hex is the proof of epoch under the cluster key, else 0 */
int shp_auth_epoch_check(const shp_auth_key_t *cluster, uint64_t epoch,
                         const char *hex);

#endif
