/* Cluster-secret authentication: see auth.h for the protocol. */
#include "protocol/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/ctl.h"

shp_status_t shp_auth_init(void)
{
    return sodium_init() < 0 ? SHP_ERR_NO_RESOURCE : SHP_OK;
}

void shp_auth_key_from_bytes(const void *secret, size_t len,
                             shp_auth_key_t *key)
{
    static const uint8_t ctx[] = "sharp cluster secret v1";
    memset(key, 0, sizeof(*key));
    crypto_generichash(key->k, sizeof(key->k), secret, len, ctx,
                       sizeof(ctx) - 1);
}

#define NODE_PREFIX "sharp-node-v1:"
#define NODE_HEX 64

/* the HMAC of the cluster key over the label, role and name, in hex */
static void node_hex(const shp_auth_key_t *cluster, const char *role,
                     const char *name, char hex[NODE_HEX + 1])
{
    static const char label[] = "sharp-node-v1";
    uint8_t h[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, cluster->k, sizeof(cluster->k));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof(label));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)role, strlen(role) + 1);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)name, strlen(name));
    crypto_auth_hmacsha256_final(&st, h);
    sodium_bin2hex(hex, NODE_HEX + 1, h, sizeof(h));
    sodium_memzero(h, sizeof(h));
    sodium_memzero(&st, sizeof(st));
}

/* a node key from its HEX, role and name */
static void node_key_of(const char *hex, const char *role, const char *name,
                        shp_auth_key_t *out)
{
    shp_auth_key_from_bytes(hex, NODE_HEX, out);
    out->node = 1;
    snprintf(out->role, sizeof(out->role), "%s", role);
    snprintf(out->name, sizeof(out->name), "%s", name);
}

static int node_names_fit(const char *role, const char *name)
{
    shp_auth_key_t k;
    return role[0] != '\0' && strlen(role) < sizeof(k.role) &&
           strchr(role, ':') == NULL && name[0] != '\0' &&
           strlen(name) < sizeof(k.name) && strpbrk(name, "\r\n") == NULL;
}

shp_status_t shp_auth_node_secret(const shp_auth_key_t *cluster,
                                  const char *role, const char *name,
                                  char out[SHP_AUTH_NODE_SECRET_MAX])
{
    char hex[NODE_HEX + 1];
    if (cluster->node || !node_names_fit(role, name))
        return SHP_ERR_INVALID_PARAM;
    node_hex(cluster, role, name, hex);
    snprintf(out, SHP_AUTH_NODE_SECRET_MAX, NODE_PREFIX "%s:%s:%s", role, hex,
             name);
    sodium_memzero(hex, sizeof(hex));
    return SHP_OK;
}

shp_status_t shp_auth_node_key(const shp_auth_key_t *key, const char *role,
                               const char *name, shp_auth_key_t *out,
                               const char **why)
{
    if (key->node) {
        if (strcmp(key->role, role) != 0 || strcmp(key->name, name) != 0) {
            *why = "the secret file is the node secret of another role or "
                   "name";
            return SHP_ERR_AUTH;
        }
        *out = *key;
        return SHP_OK;
    }
    if (!node_names_fit(role, name)) {
        *why = "role or name unfit for a node key";
        return SHP_ERR_INVALID_PARAM;
    }
    char hex[NODE_HEX + 1];
    node_hex(key, role, name, hex);
    node_key_of(hex, role, name, out);
    sodium_memzero(hex, sizeof(hex));
    return SHP_OK;
}

/* a node secret file's text (n bytes, trimmed) into key */
static shp_status_t node_parse(const char *t, size_t n, shp_auth_key_t *key)
{
    char role[16], hex[NODE_HEX + 1], name[128];
    size_t pl = strlen(NODE_PREFIX);
    const char *r = t + pl, *c = memchr(r, ':', n - pl);
    if (c == NULL || (size_t)(c - r) >= sizeof(role) ||
        (size_t)(t + n - (c + 1)) < NODE_HEX + 2 || c[1 + NODE_HEX] != ':')
        return SHP_ERR_INVALID_PARAM;
    memcpy(role, r, (size_t)(c - r));
    role[c - r] = '\0';
    memcpy(hex, c + 1, NODE_HEX);
    hex[NODE_HEX] = '\0';
    size_t nl = (size_t)(t + n - (c + 2 + NODE_HEX));
    if (nl >= sizeof(name) || strspn(hex, "0123456789abcdef") != NODE_HEX)
        return SHP_ERR_INVALID_PARAM;
    memcpy(name, c + 2 + NODE_HEX, nl);
    name[nl] = '\0';
    if (!node_names_fit(role, name) || memchr(name, '\0', nl) != NULL)
        return SHP_ERR_INVALID_PARAM;
    node_key_of(hex, role, name, key);
    sodium_memzero(hex, sizeof(hex));
    return SHP_OK;
}

shp_status_t shp_auth_key_load(const char *path, shp_auth_key_t *key, char *err,
                               size_t errlen)
{
    uint8_t buf[4096];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cluster secret %s: %s", path, strerror(e));
        return shp_status_from_errno(e);
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "cluster secret %s: not a regular file", path);
        return SHP_ERR_INVALID_PARAM;
    }
    if (st.st_uid != geteuid()) { /* another user could have written it */
        close(fd);
        snprintf(err, errlen,
                 "cluster secret %s: owned by uid %u, not by this process's "
                 "user (%u); chown it",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return SHP_ERR_PERM;
    }
    if (st.st_mode & 077) {
        close(fd);
        snprintf(err, errlen,
                 "cluster secret %s: mode %04o lets others read it; "
                 "chmod 600 it",
                 path, (unsigned)(st.st_mode & 07777));
        return SHP_ERR_PERM;
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "cluster secret %s: %s", path, strerror(errno));
        return SHP_ERR_IO;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    if (n < 16) {
        snprintf(err, errlen,
                 "cluster secret %s: empty or shorter than 16 bytes", path);
        return SHP_ERR_INVALID_PARAM;
    }
    shp_status_t rc = SHP_OK;
    if ((size_t)n >= strlen(NODE_PREFIX) &&
        memcmp(buf, NODE_PREFIX, strlen(NODE_PREFIX)) == 0) {
        if ((rc = node_parse((const char *)buf, (size_t)n, key)) != SHP_OK)
            snprintf(err, errlen,
                     "cluster secret %s: a malformed node secret (want "
                     "sharp-node-v1:ROLE:HEX:NAME, as sharp_am --node-secret "
                     "prints it)",
                     path);
    } else {
        shp_auth_key_from_bytes(buf, (size_t)n, key);
    }
    sodium_memzero(buf, sizeof(buf));
    return rc;
}

void shp_auth_random(void *buf, size_t len)
{
    randombytes_buf(buf, len);
}

void shp_auth_key_fp(const uint8_t key[32], uint64_t job_id,
                     char out[SHP_AUTH_FP_HEX])
{
    static const char label[] = "sharp job key fingerprint v1";
    uint8_t in[sizeof(label) + 8], h[16];
    memcpy(in, label, sizeof(label));
    for (int i = 0; i < 8; i++)
        in[sizeof(label) + (size_t)i] = (uint8_t)(job_id >> (8 * i));
    crypto_generichash(h, sizeof(h), in, sizeof(in), key, 32);
    sodium_bin2hex(out, SHP_AUTH_FP_HEX, h, sizeof(h));
}

void shp_auth_group_fp(const uint8_t join_key[32], const uint8_t mcast_key[32],
                       uint64_t job_id, char out[SHP_AUTH_FP_HEX])
{
    static const char label[] = "sharp group keys fingerprint v1";
    uint8_t in[sizeof(label) + 8 + 32], h[16];
    memcpy(in, label, sizeof(label));
    for (int i = 0; i < 8; i++)
        in[sizeof(label) + (size_t)i] = (uint8_t)(job_id >> (8 * i));
    memcpy(in + sizeof(label) + 8, mcast_key, 32);
    crypto_generichash(h, sizeof(h), in, sizeof(in), join_key, 32);
    sodium_memzero(in, sizeof(in));
    sodium_bin2hex(out, SHP_AUTH_FP_HEX, h, sizeof(h));
}

static void proof(const shp_auth_key_t *key, const char *label,
                  const uint8_t *n1, const uint8_t *n2, const char *role,
                  const char *name, uint8_t out[crypto_auth_hmacsha256_BYTES])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key->k, sizeof(key->k));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label,
                                  strlen(label) + 1);
    crypto_auth_hmacsha256_update(&st, n1, SHP_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, n2, SHP_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)role, strlen(role) + 1);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)name, strlen(name));
    crypto_auth_hmacsha256_final(&st, out);
}

static json_t *hex(const uint8_t *b, size_t len)
{
    char s[2 * 64 + 1];
    sodium_bin2hex(s, sizeof(s), b, len);
    return json_string(s);
}

static shp_status_t get_bytes(const json_t *msg, const char *key, uint8_t *out,
                              size_t len, const char **why)
{
    const char *s;
    size_t got;
    if (shp_json_get_str(msg, key, &s, why) != SHP_OK || strlen(s) != 2 * len ||
        sodium_hex2bin(out, len, s, strlen(s), NULL, &got, NULL) != 0 ||
        got != len) {
        *why = "malformed authentication message";
        return SHP_ERR_PROTO;
    }
    return SHP_OK;
}

json_t *shp_auth_client_hello(shp_auth_client_t *c, const char *role,
                              const char *name)
{
    snprintf(c->role, sizeof(c->role), "%s", role);
    snprintf(c->name, sizeof(c->name), "%s", name);
    randombytes_buf(c->nonce, sizeof(c->nonce));
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "hello", "role", c->role,
                     "name", c->name, "nonce", hex(c->nonce, sizeof(c->nonce)));
}

/* The two directions' keys of a connection whose handshake succeeded. */
static void session_keys(const shp_auth_key_t *key, const uint8_t *cnonce,
                         const uint8_t *snonce, const char *role,
                         const char *name, shp_auth_session_t *out)
{
    proof(key, "sharp-c2s", cnonce, snonce, role, name, out->c2s);
    proof(key, "sharp-s2c", cnonce, snonce, role, name, out->s2c);
}

shp_status_t shp_auth_client_answer(shp_auth_client_t *c,
                                    const shp_auth_key_t *key,
                                    const json_t *challenge, json_t **auth,
                                    const char **why)
{
    uint8_t snonce[SHP_AUTH_NONCE_LEN], got[32], want[32];
    shp_auth_key_t nk;
    shp_status_t st;
    if (strcmp(shp_ctl_type(challenge), "challenge") != 0) {
        *why = "expected a challenge";
        return SHP_ERR_PROTO;
    }
    if (get_bytes(challenge, "nonce", snonce, sizeof(snonce), why) ||
        get_bytes(challenge, "proof", got, sizeof(got), why))
        return SHP_ERR_PROTO;
    if ((st = shp_auth_node_key(key, c->role, c->name, &nk, why)) != SHP_OK)
        return st;
    proof(&nk, "sharp-am", c->nonce, snonce, c->role, c->name, want);
    if (crypto_verify_32(got, want) != 0) {
        sodium_memzero(&nk, sizeof(nk));
        *why = "the aggregation manager does not know the cluster secret";
        return SHP_ERR_AUTH;
    }
    proof(&nk, "sharp-peer", snonce, c->nonce, c->role, c->name, want);
    session_keys(&nk, c->nonce, snonce, c->role, c->name, &c->session);
    sodium_memzero(&nk, sizeof(nk));
    *auth = json_pack("{s:s, s:o}", "type", "auth", "proof",
                      hex(want, sizeof(want)));
    return *auth ? SHP_OK : SHP_ERR_NO_MEMORY;
}

shp_status_t shp_auth_server_hello(shp_auth_server_t *s,
                                   const shp_auth_key_t *key,
                                   const json_t *hello, json_t **challenge,
                                   const char **why)
{
    const char *role, *name;
    uint8_t p[32];
    if (s->state != 0 || strcmp(shp_ctl_type(hello), "hello") != 0) {
        *why = "expected hello";
        return SHP_ERR_AUTH;
    }
    if (shp_json_get_str(hello, "role", &role, why) != SHP_OK ||
        shp_json_get_str(hello, "name", &name, why) != SHP_OK ||
        strlen(role) >= sizeof(s->role) || strlen(name) >= sizeof(s->name) ||
        get_bytes(hello, "nonce", s->cnonce, sizeof(s->cnonce), why)) {
        *why = "malformed hello";
        return SHP_ERR_PROTO;
    }
    snprintf(s->role, sizeof(s->role), "%s", role);
    snprintf(s->name, sizeof(s->name), "%s", name);
    if (key->node) {
        *why = "the manager's secret file is a node secret, not the cluster "
               "secret";
        return SHP_ERR_AUTH;
    }
    /* the key of the role and name claimed, and no other */
    if (shp_auth_node_key(key, s->role, s->name, &s->key, why) != SHP_OK) {
        *why = "malformed hello";
        return SHP_ERR_PROTO;
    }
    randombytes_buf(s->snonce, sizeof(s->snonce));
    proof(&s->key, "sharp-am", s->cnonce, s->snonce, s->role, s->name, p);
    *challenge = json_pack("{s:s, s:o, s:o}", "type", "challenge", "nonce",
                           hex(s->snonce, sizeof(s->snonce)), "proof",
                           hex(p, sizeof(p)));
    if (!*challenge)
        return SHP_ERR_NO_MEMORY;
    s->state = 1;
    return SHP_OK;
}

shp_status_t shp_auth_server_verify(shp_auth_server_t *s,
                                    const shp_auth_key_t *key,
                                    const json_t *auth, const char **why)
{
    uint8_t got[32], want[32];
    (void)key; /* hello chose s->key */
    if (s->state != 1 || strcmp(shp_ctl_type(auth), "auth") != 0) {
        *why = "expected auth";
        return SHP_ERR_AUTH;
    }
    if (get_bytes(auth, "proof", got, sizeof(got), why))
        return SHP_ERR_PROTO;
    proof(&s->key, "sharp-peer", s->snonce, s->cnonce, s->role, s->name, want);
    if (crypto_verify_32(got, want) != 0) {
        *why = "wrong cluster secret (or not the node secret of this role "
               "and name)";
        return SHP_ERR_AUTH;
    }
    session_keys(&s->key, s->cnonce, s->snonce, s->role, s->name, &s->session);
    sodium_memzero(&s->key, sizeof(s->key));
    s->state = 2;
    return SHP_OK;
}

void shp_auth_epoch_proof(const shp_auth_key_t *cluster, uint64_t epoch,
                          char out[SHP_AUTH_EPOCH_PROOF_LEN + 1])
{
    static const char label[] = "sharp-epoch-v1";
    uint8_t be[8], h[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(epoch >> (56 - 8 * i));
    crypto_auth_hmacsha256_init(&st, cluster->k, sizeof(cluster->k));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof(label));
    crypto_auth_hmacsha256_update(&st, be, sizeof(be));
    crypto_auth_hmacsha256_final(&st, h);
    sodium_bin2hex(out, SHP_AUTH_EPOCH_PROOF_LEN + 1, h, sizeof(h));
    sodium_memzero(&st, sizeof(st));
}

int shp_auth_epoch_check(const shp_auth_key_t *cluster, uint64_t epoch,
                         const char *hex)
{
    char want[SHP_AUTH_EPOCH_PROOF_LEN + 1];
    if (cluster->node || hex == NULL || strlen(hex) != SHP_AUTH_EPOCH_PROOF_LEN)
        return 0;
    shp_auth_epoch_proof(cluster, epoch, want);
    return sodium_memcmp(want, hex, SHP_AUTH_EPOCH_PROOF_LEN) == 0;
}
