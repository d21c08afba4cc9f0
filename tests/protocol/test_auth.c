/* Cluster-secret authentication: key files, the handshake, and every way it
 * must refuse. */
#include "tests/support/test_util.h"

#include "protocol/auth.h"
#include "protocol/ctl.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[] = "/tmp/shp-auth-XXXXXX";

static const char *write_secret(const char *name, const char *text, int mode)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, (mode_t)mode), 0);
    return path;
}

static void test_key_files(void **state)
{
    (void)state;
    shp_auth_key_t a, b;
    char err[256];
    assert_non_null(mkdtemp(dir));
    const char *p = write_secret("ok", "0123456789abcdef-secret\n", 0600);
    assert_int_equal(shp_auth_key_load(p, &a, err, sizeof(err)), SHP_OK);
    /* trailing whitespace does not change the key */
    p = write_secret("ok2", "0123456789abcdef-secret", 0400);
    assert_int_equal(shp_auth_key_load(p, &b, err, sizeof(err)), SHP_OK);
    assert_memory_equal(a.k, b.k, sizeof(a.k));

    p = write_secret("open", "0123456789abcdef-secret\n", 0644);
    assert_int_equal(shp_auth_key_load(p, &b, err, sizeof(err)), SHP_ERR_PERM);
    assert_non_null(strstr(err, "chmod 600"));
    p = write_secret("short", "tiny\n", 0600);
    assert_int_equal(shp_auth_key_load(p, &b, err, sizeof(err)),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err, "shorter than 16"));
    assert_int_equal(
        shp_auth_key_load("/nonexistent/secret", &b, err, sizeof(err)),
        SHP_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "/nonexistent/secret"));
    assert_int_equal(shp_auth_key_load(dir, &b, err, sizeof(err)),
                     SHP_ERR_INVALID_PARAM);
    /* 0600 but another user's (root can make one): that user could have
     * written it */
    if (geteuid() == 0) {
        p = write_secret("theirs", "0123456789abcdef-secret\n", 0600);
        assert_int_equal(chown(p, 65534, 65534), 0);
        assert_int_equal(shp_auth_key_load(p, &b, err, sizeof(err)),
                         SHP_ERR_PERM);
        assert_non_null(strstr(err, "chown"));
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* One full handshake; returns the status of the step that failed (or OK). */
static shp_status_t handshake(const shp_auth_key_t *ck,
                              const shp_auth_key_t *sk, int *step)
{
    shp_auth_client_t c;
    shp_auth_server_t s = {0};
    json_t *hello = shp_auth_client_hello(&c, "an", "leaf01"), *chal = NULL,
           *auth = NULL;
    const char *why = NULL;
    shp_status_t st = shp_auth_server_hello(&s, sk, hello, &chal, &why);
    *step = 1;
    if (st == SHP_OK) {
        *step = 2;
        st = shp_auth_client_answer(&c, ck, chal, &auth, &why);
    }
    if (st == SHP_OK) {
        *step = 3;
        st = shp_auth_server_verify(&s, sk, auth, &why);
    }
    if (st == SHP_OK)
        assert_int_equal(s.state, 2);
    json_decref(hello);
    json_decref(chal);
    json_decref(auth);
    return st;
}

static void test_handshake(void **state)
{
    (void)state;
    shp_auth_key_t k1, k2;
    shp_auth_key_from_bytes("secret-one-0123456789", 21, &k1);
    shp_auth_key_from_bytes("secret-two-0123456789", 21, &k2);
    int step;
    assert_int_equal(handshake(&k1, &k1, &step), SHP_OK);
    /* a client with the wrong secret sees that the AM is not its AM */
    assert_int_equal(handshake(&k2, &k1, &step), SHP_ERR_AUTH);
    assert_int_equal(step, 2);
}

/* a node secret: its text, loaded from a file; it proves its own role and
 * name and no other; the cluster key derives the same key; a node key is
 * refused as the AM's */
static void test_node_secrets(void **state)
{
    (void)state;
    shp_auth_key_t cl, other, nk, nk2, d;
    char text[SHP_AUTH_NODE_SECRET_MAX], err[256],
        tmpl[] = "/tmp/shp-node-XXXXXX";
    const char *why = NULL;
    int step;
    shp_auth_key_from_bytes("secret-one-0123456789", 21, &cl);
    shp_auth_key_from_bytes("secret-two-0123456789", 21, &other);
    assert_int_equal(shp_auth_node_secret(&cl, "an", "leaf01", text), SHP_OK);
    assert_int_equal(strncmp(text, "sharp-node-v1:an:", 17), 0);
    assert_int_equal(strlen(text), strlen("sharp-node-v1:an::leaf01") + 64);
    assert_non_null(strstr(text, ":leaf01"));
    /* a name with a colon or a space (switch descriptions have them) */
    assert_int_equal(shp_auth_node_secret(&cl, "an", "MF0;sw:1 U1", text),
                     SHP_OK);
    assert_non_null(mkdtemp(tmpl));
    strcpy(dir, tmpl);
    const char *p = write_secret("colon", text, 0600);
    assert_int_equal(shp_auth_key_load(p, &nk, err, sizeof(err)), SHP_OK);
    assert_true(nk.node);
    assert_string_equal(nk.role, "an");
    assert_string_equal(nk.name, "MF0;sw:1 U1");
    /* the file's key is the one the cluster key derives */
    assert_int_equal(shp_auth_node_secret(&cl, "an", "leaf01", text), SHP_OK);
    p = write_secret("leaf01", text, 0600);
    assert_int_equal(shp_auth_key_load(p, &nk, err, sizeof(err)), SHP_OK);
    assert_int_equal(shp_auth_node_key(&cl, "an", "leaf01", &d, &why), SHP_OK);
    assert_memory_equal(nk.k, d.k, sizeof(d.k));
    assert_memory_not_equal(cl.k, d.k, sizeof(d.k));
    /* with its own name: a handshake; another name, role or cluster: no */
    assert_int_equal(handshake(&nk, &cl, &step), SHP_OK);
    assert_int_equal(handshake(&nk, &other, &step), SHP_ERR_AUTH);
    assert_int_equal(step, 2);
    assert_int_equal(shp_auth_node_key(&nk, "an", "leaf02", &d, &why),
                     SHP_ERR_AUTH);
    assert_non_null(strstr(why, "another role or name"));
    assert_int_equal(shp_auth_node_key(&nk, "sharpd", "leaf01", &d, &why),
                     SHP_ERR_AUTH);
    assert_int_equal(shp_auth_node_secret(&cl, "sharpd", "leaf02", text),
                     SHP_OK);
    p = write_secret("leaf02", text, 0600);
    assert_int_equal(shp_auth_key_load(p, &nk2, err, sizeof(err)), SHP_OK);
    assert_int_equal(handshake(&nk2, &cl, &step), SHP_ERR_AUTH);
    assert_int_equal(step, 2); /* the client names its file the culprit */
    /* the cluster key as a client's: derives its node key */
    assert_int_equal(handshake(&cl, &cl, &step), SHP_OK);
    /* a node key is no AM's key; a node key makes no node secret */
    assert_int_equal(handshake(&nk, &nk, &step), SHP_ERR_AUTH);
    assert_int_equal(step, 1);
    assert_int_equal(shp_auth_node_secret(&nk, "an", "x", text),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_auth_node_secret(&cl, "a:n", "x", text),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_auth_node_secret(&cl, "an", "x\ny", text),
                     SHP_ERR_INVALID_PARAM);
    /* malformed node secrets are refused with what the form is */
    const char *bad[] = {
        "sharp-node-v1:an:1234:leaf01",
        "sharp-node-v1:an:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeX:l",
        "sharp-node-v1:an:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef:",
        "sharp-node-v1:an:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "sharp-node-v1:anxxxxxxxxxxxxxxxxxxxxxxxxxxx:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef:l",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = write_secret("bad", bad[i], 0600);
        assert_int_equal(shp_auth_key_load(p, &d, err, sizeof(err)),
                         SHP_ERR_INVALID_PARAM);
        assert_non_null(strstr(err, "sharp-node-v1:ROLE:HEX:NAME"));
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_server_refusals(void **state)
{
    (void)state;
    shp_auth_key_t k, bad;
    shp_auth_key_from_bytes("secret-one-0123456789", 21, &k);
    shp_auth_key_from_bytes("secret-two-0123456789", 21, &bad);
    const char *why;
    shp_auth_client_t c;
    shp_auth_server_t s = {0};
    json_t *chal = NULL, *auth = NULL, *hello;

    /* anything before hello */
    json_t *reg = json_pack("{s:s}", "type", "an_register");
    assert_int_equal(shp_auth_server_hello(&s, &k, reg, &chal, &why),
                     SHP_ERR_AUTH);
    assert_int_equal(shp_auth_server_verify(&s, &k, reg, &why), SHP_ERR_AUTH);
    json_decref(reg);

    /* malformed nonce */
    hello = json_pack("{s:s, s:s, s:s, s:s}", "type", "hello", "role", "an",
                      "name", "x", "nonce", "abcd");
    assert_int_equal(shp_auth_server_hello(&s, &k, hello, &chal, &why),
                     SHP_ERR_PROTO);
    json_decref(hello);

    /* a proof computed with the wrong key (as a client without the secret
     * would have to guess) */
    hello = shp_auth_client_hello(&c, "sharpd", "n00001");
    assert_int_equal(shp_auth_server_hello(&s, &k, hello, &chal, &why), SHP_OK);
    shp_auth_client_t forged = c;
    /* the forger answers with its own key: its check of the AM fails, so
     * build the proof by answering a challenge it signed itself */
    shp_auth_server_t fake = {0};
    json_t *fchal;
    assert_int_equal(shp_auth_server_hello(&fake, &bad, hello, &fchal, &why),
                     SHP_OK);
    /* graft the real AM's nonce into the forger's view */
    json_object_set(fchal, "nonce", json_object_get(chal, "nonce"));
    assert_int_equal(shp_auth_client_answer(&forged, &bad, fchal, &auth, &why),
                     SHP_ERR_AUTH);
    json_decref(fchal);
    /* a replayed proof from another session */
    auth = json_pack("{s:s, s:s}", "type", "auth", "proof",
                     "00000000000000000000000000000000"
                     "00000000000000000000000000000000");
    assert_int_equal(shp_auth_server_verify(&s, &k, auth, &why), SHP_ERR_AUTH);
    assert_string_equal(
        why,
        "wrong cluster secret (or not the node secret of this role and name)");
    assert_int_equal(s.state, 1);
    json_decref(auth);
    json_decref(hello);
    json_decref(chal);

    /* a valid proof for another name is refused */
    shp_auth_server_t s2 = {0};
    hello = shp_auth_client_hello(&c, "an", "leaf01");
    assert_int_equal(shp_auth_server_hello(&s2, &k, hello, &chal, &why),
                     SHP_OK);
    shp_auth_client_t other = c;
    snprintf(other.name, sizeof(other.name), "leaf02");
    /* the client checks the AM's proof over its own name: mismatch */
    assert_int_equal(shp_auth_client_answer(&other, &k, chal, &auth, &why),
                     SHP_ERR_AUTH);
    json_decref(hello);
    json_decref(chal);
}

int main(void)
{
    assert_int_equal(shp_auth_init(), SHP_OK);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_files),
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_node_secrets),
        cmocka_unit_test(test_server_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
