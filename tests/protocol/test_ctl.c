/* Control-plane codec: frames byte by byte, and every malformed input is
 * refused with a status. */
#include "tests/support/test_util.h"

#include "protocol/ctl.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

static size_t make_frame(uint8_t *buf, uint8_t type, const char *body)
{
    size_t n = body ? strlen(body) : 0;

    shp_ctl_hdr_pack(type, (uint32_t)n, buf);
    if (n) {
        memcpy(buf + SHP_CTL_HDR_LEN, body, n);
    }
    return SHP_CTL_HDR_LEN + n;
}

static void test_hdr_bytes(void **state)
{
    uint8_t buf[8];
    static const uint8_t want[8] = {0x53, 0x48, 1, 1, 0x00, 0x01, 0x02, 0x03};
    uint8_t type;
    uint32_t len;

    (void)state;
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, 0x00010203u, buf);
    assert_memory_equal(buf, want, 8);
    assert_int_equal(shp_ctl_hdr_unpack(buf, &type, &len, NULL), SHP_OK);
    assert_int_equal(type, SHP_CTL_FRAME_MSG);
    assert_int_equal(len, 0x00010203u);
}

static void test_roundtrip(void **state)
{
    json_t *msg =
        json_pack("{s:s, s:I, s:[i,i], s:s}", "type", "group_add", "id",
                  (json_int_t)7, "children", 1, 2, "name", "caf\xc3\xa9");
    json_t *back = NULL;
    uint8_t *frame, type;
    size_t len;

    (void)state;
    assert_int_equal(shp_ctl_encode(msg, &frame, &len), SHP_OK);
    assert_int_equal(shp_ctl_decode(frame, len, &type, &back, NULL), SHP_OK);
    assert_int_equal(type, SHP_CTL_FRAME_MSG);
    assert_true(json_equal(msg, back));
    assert_string_equal(shp_ctl_type(back), "group_add");
    free(frame);
    json_decref(msg);
    json_decref(back);
}

static void test_encode_refuses(void **state)
{
    json_t *notype = json_pack("{s:i}", "id", 1);
    json_t *arr = json_array();
    uint8_t *frame;
    size_t len;

    (void)state;
    assert_int_equal(shp_ctl_encode(notype, &frame, &len),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_ctl_encode(arr, &frame, &len), SHP_ERR_INVALID_PARAM);
    json_decref(notype);
    json_decref(arr);
}

#define DECODE_FAILS(_buf, _len, _status, _substr)                             \
    do {                                                                       \
        const char *why_ = NULL;                                               \
        json_t *m_ = NULL;                                                     \
        uint8_t t_;                                                            \
        assert_int_equal(shp_ctl_decode((_buf), (_len), &t_, &m_, &why_),      \
                         (_status));                                           \
        assert_null(m_);                                                       \
        assert_non_null(strstr(why_, (_substr)));                              \
    } while (0)

static void test_decode_rejects(void **state)
{
    uint8_t buf[256];
    size_t n;

    (void)state;
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"x\"}");
    DECODE_FAILS(buf, 5, SHP_ERR_PROTO, "truncated");
    DECODE_FAILS(buf, n - 1, SHP_ERR_PROTO, "length");
    buf[0] = 'G'; /* an HTTP client, say */
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "magic");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"x\"}");
    buf[2] = 2;
    DECODE_FAILS(buf, n, SHP_ERR_VERSION, "version");
    n = make_frame(buf, 9, "{}");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "frame type");
    n = make_frame(buf, SHP_CTL_FRAME_PING, "x");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "ping");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":");
    DECODE_FAILS(buf, n, SHP_ERR_PARSE, "JSON");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"x\"} trailing");
    DECODE_FAILS(buf, n, SHP_ERR_PARSE, "JSON");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "[1,2]");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "object");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"id\":1}");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "type");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":3}");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "type");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"\"}");
    DECODE_FAILS(buf, n, SHP_ERR_PROTO, "type");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"a\",\"type\":\"b\"}");
    DECODE_FAILS(buf, n, SHP_ERR_PARSE, "JSON");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"a\\u0000b\"}");
    DECODE_FAILS(buf, n, SHP_ERR_PARSE, "JSON");
    n = make_frame(buf, SHP_CTL_FRAME_MSG, "{\"type\":\"\xff\xfe\"}");
    DECODE_FAILS(buf, n, SHP_ERR_PARSE, "JSON");
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, SHP_CTL_MAX_FRAME, buf);
    DECODE_FAILS(buf, SHP_CTL_HDR_LEN, SHP_ERR_TOO_LARGE, "large");
}

static void test_ping(void **state)
{
    uint8_t buf[8], type;
    json_t *msg = (json_t *)1;
    size_t len = 0;

    (void)state;
    shp_ctl_hdr_pack(SHP_CTL_FRAME_PONG, 0, buf);
    assert_int_equal(shp_ctl_decode(buf, 8, &type, &msg, NULL), SHP_OK);
    assert_int_equal(type, SHP_CTL_FRAME_PONG);
    assert_null(msg);
    assert_int_equal(shp_ctl_frame_len(NULL, buf, 7, &len), SHP_INPROGRESS);
    assert_int_equal(shp_ctl_frame_len(NULL, buf, 8, &len), SHP_OK);
    assert_int_equal(len, 8);
}

/* A frame of another version is refused, and the peer is sent a bare ping
 * of this node's version first, so it can say which version it met */
static void test_version_met(void **state)
{
    uint8_t v2[SHP_CTL_HDR_LEN], got[2 * SHP_CTL_HDR_LEN];
    shp_conn_t conn;
    size_t len = 0;
    int sv[2];

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    memset(&conn, 0, sizeof(conn));
    conn.fd = sv[0];
    snprintf(conn.peer, sizeof(conn.peer), "node-v2");
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, 2, v2);
    v2[2] = SHP_CTL_VERSION + 1;
    assert_int_equal(shp_ctl_frame_len(&conn, v2, sizeof(v2), &len),
                     SHP_ERR_VERSION);
    assert_int_equal(recv(sv[1], got, sizeof(got), MSG_DONTWAIT),
                     SHP_CTL_HDR_LEN);
    assert_memory_equal(got, "SH", 2);
    assert_int_equal(got[2], SHP_CTL_VERSION);
    assert_int_equal(got[3], SHP_CTL_FRAME_PING);
    assert_memory_equal(got + 4, "\0\0\0\0", 4);
    /* not a sharp peer at all: nothing is sent to it */
    v2[0] = 'X';
    assert_int_equal(shp_ctl_frame_len(&conn, v2, sizeof(v2), &len),
                     SHP_ERR_PROTO);
    assert_int_equal(recv(sv[1], got, sizeof(got), MSG_DONTWAIT), -1);
    close(sv[0]);
    close(sv[1]);
}

static void test_getters(void **state)
{
    json_t *o = json_pack(
        "{s:s, s:I, s:I, s:b, s:[], s:{}, s:s, s:s, s:s}", "s", "str", "n",
        (json_int_t)42, "neg", (json_int_t)-1, "b", 1, "a", "o", "big",
        "18446744073709551615", "hex", "00ff10ab", "badhex", "zz");
    const char *s, *why;
    uint64_t u;
    int64_t i;
    json_t *j;
    uint8_t key[4];
    int b;

    (void)state;
    assert_int_equal(shp_json_get_str(o, "s", &s, &why), SHP_OK);
    assert_string_equal(s, "str");
    assert_int_equal(shp_json_get_str(o, "n", &s, &why), SHP_ERR_PROTO);
    assert_string_equal(why, "n");
    assert_int_equal(shp_json_get_str(o, "missing", &s, &why), SHP_ERR_PROTO);
    assert_string_equal(why, "missing");
    assert_int_equal(shp_json_get_u64(o, "n", &u, &why), SHP_OK);
    assert_int_equal(u, 42);
    assert_int_equal(shp_json_get_u64(o, "neg", &u, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_u64(o, "big", &u, &why), SHP_OK);
    assert_true(u == UINT64_MAX);
    assert_int_equal(shp_json_get_u64(o, "s", &u, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_int(o, "neg", -5, 5, &i, &why), SHP_OK);
    assert_int_equal(i, -1);
    assert_int_equal(shp_json_get_int(o, "n", 0, 10, &i, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_bool(o, "b", &b, &why), SHP_OK);
    assert_int_equal(b, 1);
    assert_int_equal(shp_json_get_bool(o, "n", &b, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_array(o, "a", &j, &why), SHP_OK);
    assert_int_equal(shp_json_get_array(o, "o", &j, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_object(o, "o", &j, &why), SHP_OK);
    assert_int_equal(shp_json_get_hex(o, "hex", key, 4, &why), SHP_OK);
    assert_int_equal(key[1], 0xff);
    assert_int_equal(key[3], 0xab);
    assert_int_equal(shp_json_get_hex(o, "hex", key, 3, &why), SHP_ERR_PROTO);
    assert_int_equal(shp_json_get_hex(o, "badhex", key, 1, &why),
                     SHP_ERR_PROTO);
    j = shp_json_hex(key, 4);
    assert_string_equal(json_string_value(j), "00ff10ab");
    json_decref(j);
    /* not an object at all */
    assert_int_equal(shp_json_get_str(json_object_get(o, "a"), "x", &s, &why),
                     SHP_ERR_PROTO);
    json_decref(o);
}

/* Random bytes after a valid header never crash the decoder. */
static void test_decode_random(void **state)
{
    uint8_t buf[SHP_CTL_HDR_LEN + 64];
    uint64_t seed = 99;
    json_t *msg;
    uint8_t type;
    int i, j, ok = 0;

    (void)state;
    for (i = 0; i < 20000; i++) {
        size_t n = test_rand(&seed) % 64;
        for (j = 0; j < (int)n; j++) {
            buf[SHP_CTL_HDR_LEN + j] =
                (uint8_t)("{}\"type:x,1[]"[test_rand(&seed) % 13]);
        }
        shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, (uint32_t)n, buf);
        if (shp_ctl_decode(buf, SHP_CTL_HDR_LEN + n, &type, &msg, NULL) ==
            SHP_OK) {
            ok++;
            assert_true(json_is_object(msg));
            json_decref(msg);
        }
    }
    (void)ok;
}

/* the peer's side of a blocking call: frames written before the call */
static void put_msg(int fd, json_t *m)
{
    uint8_t *f;
    size_t len;
    assert_int_equal(shp_ctl_encode(m, &f, &len), SHP_OK);
    assert_int_equal(shp_fd_io_full(fd, f, len, 1), 0);
    free(f);
    json_decref(m);
}

static void test_call_fd(void **state)
{
    int sv[2];
    shp_status_t st;
    const char *why;
    uint8_t ping[SHP_CTL_HDR_LEN];
    json_t *req = json_pack("{s:s, s:i}", "type", "stats", "id", 7);
    (void)state;

    /* a ping and an answer to another id are skipped */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    shp_ctl_hdr_pack(SHP_CTL_FRAME_PING, 0, ping);
    assert_int_equal(shp_fd_io_full(sv[1], ping, sizeof(ping), 1), 0);
    put_msg(sv[1], json_pack("{s:s, s:i}", "type", "x_reply", "id", 6));
    put_msg(sv[1], json_pack("{s:s, s:i, s:i}", "type", "stats_reply", "id", 7,
                             "status", 0));
    json_t *r = shp_ctl_call_fd(sv[0], req, &st, &why);
    assert_non_null(r);
    assert_string_equal(shp_ctl_type(r), "stats_reply");
    json_decref(r);
    /* the request went out whole */
    uint8_t hdr[SHP_CTL_HDR_LEN];
    uint8_t type;
    uint32_t blen;
    assert_int_equal(shp_fd_io_full(sv[1], hdr, sizeof(hdr), 0), 0);
    assert_int_equal(shp_ctl_hdr_unpack(hdr, &type, &blen, NULL), SHP_OK);
    assert_int_equal(type, SHP_CTL_FRAME_MSG);

    /* a frame that is not ours: refused with the decoder's status */
    memset(hdr, 0x41, sizeof(hdr));
    assert_int_equal(shp_fd_io_full(sv[1], hdr, sizeof(hdr), 1), 0);
    assert_null(shp_ctl_call_fd(sv[0], req, &st, &why));
    assert_int_equal(st, SHP_ERR_PROTO);

    /* the peer gone: SHP_ERR_IO, no hang */
    close(sv[1]);
    assert_null(shp_ctl_call_fd(sv[0], req, &st, &why));
    assert_int_equal(st, SHP_ERR_IO);
    close(sv[0]);
    json_decref(req);

    /* a socket path that cannot be: ENAMETOOLONG */
    char longp[200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(shp_unix_connect(longp), -1);
    assert_int_equal(errno, ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_bytes),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_version_met),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_decode_random),
        cmocka_unit_test(test_call_fd),
    };
    return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
