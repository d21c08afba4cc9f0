/* Sealed control connections: the handshake's session keys, and frames on a
 * real libev loop over socket pairs.  The client's frames are caught on the
 * wire (a socket the test reads), looked at, altered, replayed, and handed
 * to the AM's side by hand: what is sealed is not readable on the wire,
 * arrives intact and in order, and anything altered, replayed, reflected or
 * unsealed closes the connection. */
#include "tests/support/test_util.h"

#include "protocol/auth.h"
#include "protocol/ctl.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    shp_conn_t conn;
    json_t *got[8];
    int ngot, pongs, closes;
    shp_status_t reason;
} side_t;

static struct ev_loop *loop;
static shp_auth_session_t client_keys, server_keys;

static void side_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    side_t *s = conn->arg;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);

    if (msg != NULL && s->ngot < 8) {
        s->got[s->ngot++] = msg;
    } else if (msg != NULL) {
        json_decref(msg);
    } else if (conn->state == SHP_CONN_OPEN) {
        s->pongs++; /* a ping answered, or a pong */
    }
}

static void side_close(shp_conn_t *conn, shp_status_t reason)
{
    side_t *s = conn->arg;

    s->closes++;
    s->reason = reason;
}

static const shp_conn_ops_t side_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = side_frame,
    .on_close = side_close,
};

/* A conn on one end of a socket pair; *other gets the raw end. */
static void side_open(side_t *s, int *other)
{
    int sv[2];

    memset(s, 0, sizeof(*s));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_conn_init(&s->conn, loop, &side_ops, s, SHP_CTL_MAX_FRAME);
    assert_int_equal(shp_conn_open_fd(&s->conn, sv[0]), SHP_OK);
    *other = sv[1];
}

static void side_done(side_t *s)
{
    int i;

    shp_conn_close(&s->conn, SHP_ERR_CANCELED);
    for (i = 0; i < s->ngot; i++) {
        json_decref(s->got[i]);
    }
}

static void spin(void)
{
    int i;

    for (i = 0; i < 20; i++) {
        ev_run(loop, EVRUN_NOWAIT);
        usleep(1000);
    }
}

/* What arrived on a raw socket so far. */
static size_t drain(int fd, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;

    spin();
    while (n < cap && (r = recv(fd, buf + n, cap - n, MSG_DONTWAIT)) > 0) {
        n += (size_t)r;
    }
    return n;
}

static int contains(const uint8_t *buf, size_t n, const char *s)
{
    return memmem(buf, n, s, strlen(s)) != NULL;
}

/* The handshake between a client and the AM, in memory: both sides end
 * with the same two keys, and different ones for a different secret. */
static void handshake(const char *secret_c, const char *secret_s)
{
    shp_auth_key_t kc, ks;
    shp_auth_client_t c;
    shp_auth_server_t s;
    json_t *hello, *chal = NULL, *auth = NULL;
    const char *why;

    memset(&s, 0, sizeof(s));
    shp_auth_key_from_bytes(secret_c, strlen(secret_c), &kc);
    shp_auth_key_from_bytes(secret_s, strlen(secret_s), &ks);
    hello = shp_auth_client_hello(&c, "an", "an-1");
    assert_int_equal(shp_auth_server_hello(&s, &ks, hello, &chal, &why),
                     SHP_OK);
    assert_int_equal(shp_auth_client_answer(&c, &kc, chal, &auth, &why),
                     SHP_OK);
    assert_int_equal(shp_auth_server_verify(&s, &ks, auth, &why), SHP_OK);
    client_keys = c.session;
    server_keys = s.session;
    json_decref(hello);
    json_decref(chal);
    json_decref(auth);
}

static int setup(void **state)
{
    (void)state;
    loop = ev_loop_new(EVFLAG_AUTO);
    assert_int_equal(shp_auth_init(), SHP_OK);
    handshake("one secret", "one secret");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ev_loop_destroy(loop);
    return 0;
}

static void test_keys(void **state)
{
    (void)state;
    assert_memory_equal(client_keys.c2s, server_keys.c2s, 32);
    assert_memory_equal(client_keys.s2c, server_keys.s2c, 32);
    assert_memory_not_equal(client_keys.c2s, client_keys.s2c, 32);
}

static void send_msg(shp_conn_t *conn, const char *type, const char *key)
{
    json_t *m = json_pack("{s:s, s:s}", "type", type, "job_key", key);

    assert_int_equal(shp_ctl_send(conn, m), SHP_OK);
    json_decref(m);
}

/* Sealed both ways: nothing readable on the wire, everything arrives. */
static void test_sealed_roundtrip(void **state)
{
    side_t cl, am;
    int wire, inject;
    uint8_t buf[4096];
    size_t n;

    (void)state;
    side_open(&cl, &wire);
    side_open(&am, &inject);
    shp_ctl_seal(&cl.conn, client_keys.c2s, client_keys.s2c);
    shp_ctl_seal(&am.conn, server_keys.s2c, server_keys.c2s);
    send_msg(&cl.conn, "group_add", "00112233445566778899aabbccddeeff");
    send_msg(&cl.conn, "job_ack", "the second frame");
    assert_int_equal(shp_ctl_send_frame(&cl.conn, SHP_CTL_FRAME_PING), SHP_OK);
    n = drain(wire, buf, sizeof(buf));
    assert_true(n > 2 * SHP_CTL_HDR_LEN);
    assert_false(contains(buf, n, "00112233445566778899aabbccddeeff"));
    assert_false(contains(buf, n, "group_add"));
    assert_int_equal(buf[3], SHP_CTL_FRAME_SEALED);
    assert_int_equal(write(inject, buf, n), (ssize_t)n);
    spin();
    assert_int_equal(am.closes, 0);
    assert_int_equal(am.ngot, 2);
    assert_string_equal(shp_ctl_type(am.got[0]), "group_add");
    assert_string_equal(
        json_string_value(json_object_get(am.got[0], "job_key")),
        "00112233445566778899aabbccddeeff");
    assert_string_equal(shp_ctl_type(am.got[1]), "job_ack");
    /* the ping was answered, sealed the other way: the client opens it */
    n = drain(inject, buf, sizeof(buf));
    assert_int_equal(n, SHP_CTL_HDR_LEN + SHP_CTL_SEAL_OVERHEAD);
    assert_int_equal(buf[3], SHP_CTL_FRAME_SEALED);
    assert_int_equal(write(wire, buf, n), (ssize_t)n);
    spin();
    assert_int_equal(cl.closes, 0);
    assert_int_equal(cl.pongs, 1);
    side_done(&cl);
    side_done(&am);
    close(wire);
    close(inject);
}

enum { ALTER, REPLAY, REFLECT, PLAIN, SEALED_TO_PLAIN, TRUNCATE };

/* One bad frame to the AM's side: it closes, with SHP_ERR_AUTH (or a
 * protocol error for a frame that cannot even be a sealed one). */
static void bad_frame(int how, shp_status_t want)
{
    side_t cl, am;
    int wire, inject;
    uint8_t buf[4096];
    size_t n, first;

    side_open(&cl, &wire);
    side_open(&am, &inject);
    shp_ctl_seal(&cl.conn, client_keys.c2s, client_keys.s2c);
    if (how != SEALED_TO_PLAIN) {
        shp_ctl_seal(&am.conn, server_keys.s2c, server_keys.c2s);
    }
    send_msg(&cl.conn, "group_add", "k1");
    first = drain(wire, buf, sizeof(buf));
    n = first;
    switch (how) {
    case ALTER: buf[SHP_CTL_HDR_LEN + 3] ^= 0x40; break;
    case REPLAY:
        memcpy(buf + first, buf, first); /* the same frame twice */
        n = 2 * first;
        break;
    case REFLECT: /* the AM's own direction's key: a frame sent back */
        shp_ctl_seal(&cl.conn, server_keys.s2c, client_keys.s2c);
        send_msg(&cl.conn, "group_add", "k1");
        n = drain(wire, buf, sizeof(buf));
        break;
    case PLAIN: {
        json_t *m = json_pack("{s:s}", "type", "group_add");
        uint8_t *f;

        assert_int_equal(shp_ctl_encode(m, &f, &n), SHP_OK);
        memcpy(buf, f, n);
        free(f);
        json_decref(m);
        break;
    }
    case TRUNCATE: /* a header that announces less than a tag */
        buf[4] = buf[5] = buf[6] = 0;
        buf[7] = SHP_CTL_SEAL_OVERHEAD - 1;
        n = SHP_CTL_HDR_LEN + SHP_CTL_SEAL_OVERHEAD - 1;
        break;
    default: break;
    }
    assert_int_equal(write(inject, buf, n), (ssize_t)n);
    spin();
    assert_int_equal(am.closes, 1);
    assert_int_equal(am.reason, want);
    assert_int_equal(am.ngot, how == REPLAY ? 1 : 0);
    side_done(&cl);
    side_done(&am);
    close(wire);
    close(inject);
}

static void test_altered(void **state)
{
    (void)state;
    bad_frame(ALTER, SHP_ERR_AUTH);
}

static void test_replayed(void **state)
{
    (void)state;
    bad_frame(REPLAY, SHP_ERR_AUTH);
}

static void test_reflected(void **state)
{
    (void)state;
    bad_frame(REFLECT, SHP_ERR_AUTH);
}

static void test_plain_after_seal(void **state)
{
    (void)state;
    bad_frame(PLAIN, SHP_ERR_AUTH);
}

static void test_sealed_before_handshake(void **state)
{
    (void)state;
    bad_frame(SEALED_TO_PLAIN, SHP_ERR_AUTH);
}

static void test_too_short(void **state)
{
    (void)state;
    bad_frame(TRUNCATE, SHP_ERR_PROTO);
}

/* Another secret: the handshake fails before any key is used; keys
 * derived with a different secret open nothing. */
static void test_other_secret_keys(void **state)
{
    shp_auth_session_t mine = client_keys;

    (void)state;
    handshake("another secret", "another secret");
    assert_memory_not_equal(mine.c2s, client_keys.c2s, 32);
    handshake("one secret", "one secret");
    assert_memory_not_equal(mine.c2s, client_keys.c2s, 32); /* new nonces */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_sealed_roundtrip),
        cmocka_unit_test(test_altered),
        cmocka_unit_test(test_replayed),
        cmocka_unit_test(test_reflected),
        cmocka_unit_test(test_plain_after_seal),
        cmocka_unit_test(test_sealed_before_handshake),
        cmocka_unit_test(test_too_short),
        cmocka_unit_test(test_other_secret_keys),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
