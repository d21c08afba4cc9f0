/*
 * The authentication handshake (protocol/auth.c).  The first byte picks:
 *   0: the AM's side fed the peer's messages (JSON texts, one a line):
 *      hello, then auth, then anything; a proof the input makes up must
 *      never be accepted;
 *   1: a client's side fed the AM's challenge: never accepted either;
 *   2: a full handshake between both sides with the role and name the
 *      input gives: it must succeed, and fail once any byte of either
 *      proof is changed;
 *   3: the rest of the input as a secret file: a node secret it takes
 *      names a fit role and name, and proves those only.
 */
#include "tests/fuzz/fuzz.h"

#include "protocol/auth.h"
#include "protocol/ctl.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static shp_auth_key_t key, other;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    FZ_CHECK(shp_auth_init() == SHP_OK);
    shp_auth_key_from_bytes("fuzzing cluster secret", 22, &key);
    shp_auth_key_from_bytes("another cluster secret", 22, &other);
    return 0;
}

/* The next line of the input as JSON (NULL if it is not). */
static json_t *next_msg(fz_in_t *in)
{
    const uint8_t *nl = memchr(in->p, '\n', in->n);
    size_t len = nl ? (size_t)(nl - in->p) : in->n;
    json_t *m =
        json_loadb((const char *)in->p, len, JSON_REJECT_DUPLICATES, NULL);

    in->p += len + (nl != NULL);
    in->n -= len + (nl != NULL);
    return m;
}

static void server(fz_in_t *in)
{
    shp_auth_server_t s;
    memset(&s, 0, sizeof(s));
    while (fz_more(in)) {
        json_t *m = next_msg(in), *chal = NULL;
        const char *why = NULL;
        shp_status_t st;
        int before = s.state;

        if (s.state == 0) {
            st = shp_auth_server_hello(&s, &key, m, &chal, &why);
            if (st == SHP_OK) {
                FZ_CHECK(chal != NULL && s.state == 1);
                FZ_CHECK(strlen(s.role) < sizeof(s.role));
                json_decref(chal);
            }
        } else {
            st = shp_auth_server_verify(&s, &key, m, &why);
            FZ_CHECK(st != SHP_OK); /* a made-up proof */
        }
        if (st != SHP_OK) {
            FZ_CHECK(why != NULL && s.state == before);
        }
        json_decref(m);
    }
}

static void client(fz_in_t *in)
{
    shp_auth_client_t c;
    json_t *hello = shp_auth_client_hello(&c, "an", "leaf01");
    json_decref(hello);
    while (fz_more(in)) {
        json_t *m = next_msg(in), *auth = NULL;
        const char *why = NULL;
        FZ_CHECK(shp_auth_client_answer(&c, &key, m, &auth, &why) != SHP_OK);
        FZ_CHECK(why != NULL && auth == NULL);
        json_decref(m);
    }
}

static void flip(json_t *msg, const char *member, size_t at)
{
    char *s = strdup(json_string_value(json_object_get(msg, member)));
    size_t len = strlen(s);
    FZ_CHECK(len > 0);
    s[at % len] = s[at % len] == '0' ? '1' : '0';
    json_object_set_new(msg, member, json_string(s));
    free(s);
}

static void handshake(fz_in_t *in)
{
    char role[40], name[200];
    uint8_t how = fz_u8(in);
    size_t at = fz_u8(in);
    shp_auth_client_t c;
    shp_auth_server_t s;
    json_t *hello, *chal = NULL, *auth = NULL;
    const char *why = NULL;

    fz_bytes(in, role, sizeof(role) - 1);
    role[sizeof(role) - 1] = '\0';
    fz_bytes(in, name, sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    memset(&s, 0, sizeof(s));
    hello = shp_auth_client_hello(&c, role, name);
    if (hello == NULL) {
        return; /* not UTF-8: json_pack refuses it */
    }
    /* a role and name a node key can be made for: the AM takes the hello
     * (as the client keeps them: within its fields) */
    int fit = c.role[0] != '\0' && strchr(c.role, ':') == NULL &&
              c.name[0] != '\0' && strpbrk(c.name, "\r\n") == NULL;
    shp_status_t hs = shp_auth_server_hello(&s, &key, hello, &chal, &why);
    json_decref(hello);
    if (!fit) {
        FZ_CHECK(hs == SHP_ERR_PROTO && chal == NULL);
        return;
    }
    FZ_CHECK(hs == SHP_OK);
    switch (how % 4) {
    case 0:
        FZ_CHECK(shp_auth_client_answer(&c, &key, chal, &auth, &why) == SHP_OK);
        FZ_CHECK(shp_auth_server_verify(&s, &key, auth, &why) == SHP_OK);
        FZ_CHECK(s.state == 2);
        break;
    case 1: /* the AM's proof changed */
        flip(chal, "proof", at);
        FZ_CHECK(shp_auth_client_answer(&c, &key, chal, &auth, &why) ==
                 SHP_ERR_AUTH);
        break;
    case 2: /* the peer's proof changed */
        FZ_CHECK(shp_auth_client_answer(&c, &key, chal, &auth, &why) == SHP_OK);
        flip(auth, "proof", at);
        FZ_CHECK(shp_auth_server_verify(&s, &key, auth, &why) != SHP_OK);
        FZ_CHECK(s.state == 1);
        break;
    default: /* the peer does not know the secret */
        FZ_CHECK(shp_auth_client_answer(&c, &other, chal, &auth, &why) ==
                 SHP_ERR_AUTH);
        break;
    }
    json_decref(chal);
    json_decref(auth);
}

/* the input as a secret file (the cluster's or a node's) */
static void key_file(fz_in_t *in)
{
    static char path[64];
    char err[300];
    shp_auth_key_t k, d;
    const char *why = NULL;
    if (path[0] == '\0')
        snprintf(path, sizeof(path), "/tmp/fuzz-auth-key-%d", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FZ_CHECK(fd >= 0);
    FZ_CHECK(write(fd, in->p, in->n) == (ssize_t)in->n);
    close(fd);
    if (shp_auth_key_load(path, &k, err, sizeof(err)) != SHP_OK || !k.node)
        return;
    FZ_CHECK(k.role[0] != '\0' && strchr(k.role, ':') == NULL &&
             k.name[0] != '\0' && strpbrk(k.name, "\r\n") == NULL);
    FZ_CHECK(shp_auth_node_key(&k, k.role, k.name, &d, &why) == SHP_OK);
    FZ_CHECK(memcmp(d.k, k.k, sizeof(d.k)) == 0);
    FZ_CHECK(shp_auth_node_key(&k, k.role, "", &d, &why) != SHP_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = {data, size};

    switch (fz_u8(&in) % 4) {
    case 0: server(&in); break;
    case 1: client(&in); break;
    case 2: handshake(&in); break;
    default: key_file(&in); break;
    }
    return 0;
}
