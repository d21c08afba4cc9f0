/* sharpd's side of the cluster-secret handshake with the AM (the daemon
 * of libshp_sharpd.a, its AM connection a socketpair). */
#include "tests/support/test_util.h"

#include "protocol/ctl.h"
#include "sharpd/sharpd.h"

#include <stdlib.h>
#include <sys/socket.h>

static shp_sharpd_t d;
static int am_fd; /* the AM's end of sharpd's connection */
static shp_conn_seal_t
    am_seal; /* its frames' keys, once the handshake is done */

/* One control message from sharpd (NULL once it has closed). */
static json_t *am_read(void)
{
    uint8_t hdr[SHP_CTL_HDR_LEN], *frame;
    uint32_t len;
    uint8_t type;
    json_t *msg = NULL;

    for (int i = 0; i < 20; i++) {
        ev_run(d.loop, EVRUN_NOWAIT); /* sharpd flushes */
    }
    if (recv(am_fd, hdr, sizeof(hdr), MSG_DONTWAIT) != (ssize_t)sizeof(hdr)) {
        return NULL;
    }
    assert_int_equal(shp_ctl_hdr_unpack(hdr, &type, &len, NULL), SHP_OK);
    frame = malloc(sizeof(hdr) + len);
    assert_non_null(frame);
    memcpy(frame, hdr, sizeof(hdr));
    assert_int_equal(recv(am_fd, frame + sizeof(hdr), len, MSG_WAITALL),
                     (ssize_t)len);
    if (am_seal.on) {
        uint8_t *plain;
        size_t plen;

        assert_int_equal(type, SHP_CTL_FRAME_SEALED);
        assert_int_equal(shp_ctl_open_frame(&am_seal, frame, sizeof(hdr) + len,
                                            &plain, &plen, NULL),
                         SHP_OK);
        free(frame);
        frame = plain;
        len = (uint32_t)(plen - sizeof(hdr));
    }
    assert_int_equal(
        shp_ctl_decode(frame, sizeof(hdr) + len, &type, &msg, NULL), SHP_OK);
    free(frame);
    return msg;
}

static void am_write(json_t *msg)
{
    uint8_t *frame;
    size_t len;

    assert_int_equal(shp_ctl_encode(msg, &frame, &len), SHP_OK);
    if (am_seal.on) {
        uint8_t *sealed;

        assert_int_equal(
            shp_ctl_seal_frame(&am_seal, frame, len, &sealed, &len), SHP_OK);
        free(frame);
        frame = sealed;
    }
    assert_int_equal(send(am_fd, frame, len, 0), (ssize_t)len);
    free(frame);
    json_decref(msg);
    for (int i = 0; i < 20; i++) {
        ev_run(d.loop, EVRUN_NOWAIT); /* sharpd reads */
    }
}

static int setup(void **state)
{
    static char host[] = "n01", am[] = "";
    int sv[2];

    (void)state;
    memset(&d, 0, sizeof(d));
    memset(&am_seal, 0, sizeof(am_seal));
    d.cfg.host = host;
    d.cfg.am = am;
    shp_sharpd_init(&d, ev_default_loop(0));
    assert_int_equal(shp_auth_init(), SHP_OK);
    shp_auth_key_from_bytes("the cluster secret", 18, &d.key);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    am_fd = sv[1];
    assert_int_equal(shp_sharpd_am_attach(&d, sv[0]), SHP_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    shp_sharpd_stop(&d);
    close(am_fd);
    return 0;
}

/* The AM's side of the handshake and registration, then sealed (*out:
 * the registration, when asked for). */
static void am_handshake_reg(json_t **out)
{
    shp_auth_server_t s;
    json_t *hello, *chal = NULL, *auth, *reg;
    const char *why = NULL;

    memset(&s, 0, sizeof(s));
    memset(&am_seal, 0, sizeof(am_seal));
    hello = am_read();
    assert_non_null(hello);
    assert_int_equal(shp_auth_server_hello(&s, &d.key, hello, &chal, &why),
                     SHP_OK);
    json_decref(hello);
    am_write(chal);
    auth = am_read();
    assert_non_null(auth);
    assert_int_equal(shp_auth_server_verify(&s, &d.key, auth, &why), SHP_OK);
    json_decref(auth);
    /* from here both ways are sealed with the handshake's keys */
    memcpy(am_seal.tx_key, s.session.s2c, sizeof(am_seal.tx_key));
    memcpy(am_seal.rx_key, s.session.c2s, sizeof(am_seal.rx_key));
    am_seal.on = 1;
    reg = am_read();
    assert_non_null(reg);
    assert_string_equal(shp_ctl_type(reg), "sharpd_register");
    if (out)
        *out = reg;
    else
        json_decref(reg);
    am_write(
        json_pack("{s:s, s:i}", "type", "sharpd_register_ack", "status", 0));
    assert_int_equal(d.am_state, SHP_SHARPD_AM_REGISTERED);
}

static void am_handshake(void)
{
    am_handshake_reg(NULL);
}

/* The AM proves the secret, sharpd answers and registers, sealed: a plain
 * frame after the handshake (what a man in the middle could inject) closes
 * the connection. */
static void test_genuine_am(void **state)
{
    (void)state;
    am_handshake();
    am_seal.on = 0;
    am_write(json_pack("{s:s}", "type", "job_ack"));
    assert_false(shp_conn_is_open(&d.am));
}

/* Found by tests/fuzz/fuzz_sharpd: an AM that skipped the challenge and
 * answered the registration straight away was taken as registered, and
 * sharpd relayed its processes' requests to it. */
static void test_register_ack_without_proof(void **state)
{
    json_t *hello;

    (void)state;
    hello = am_read();
    assert_non_null(hello);
    json_decref(hello);
    am_write(
        json_pack("{s:s, s:i}", "type", "sharpd_register_ack", "status", 0));
    assert_int_not_equal(d.am_state, SHP_SHARPD_AM_REGISTERED);
    assert_false(shp_conn_is_open(&d.am));
    assert_null(am_read()); /* closed */
}

/* a request from a local process on fd, as sharpd's clients send them */
static void client_write(int fd, json_t *msg)
{
    uint8_t *frame;
    size_t len;

    assert_int_equal(shp_ctl_encode(msg, &frame, &len), SHP_OK);
    assert_int_equal(send(fd, frame, len, 0), (ssize_t)len);
    free(frame);
    json_decref(msg);
    for (int i = 0; i < 20; i++) {
        ev_run(d.loop, EVRUN_NOWAIT);
    }
}

/* sharpd's next message to the local process on fd (NULL: none) */
static json_t *client_read(int fd)
{
    uint8_t buf[4096];
    uint8_t type;
    json_t *msg = NULL;

    for (int i = 0; i < 20; i++) {
        ev_run(d.loop, EVRUN_NOWAIT);
    }
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) {
        return NULL;
    }
    assert_int_equal(shp_ctl_decode(buf, (size_t)n, &type, &msg, NULL), SHP_OK);
    return msg;
}

/* A request to join a job counts against the client's client_max_jobs
 * until answered; one failed because the AM was lost frees its place (it
 * stayed taken: after one lost AM a process with client_max_jobs 1 could
 * begin no job). */
static void test_lost_am_frees_job_place(void **state)
{
    int cv[2], sv[2];
    json_t *m;

    (void)state;
    d.cfg.client_max_jobs = 1;
    am_handshake();
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, cv), 0);
    assert_int_equal(shp_sharpd_accept(&d, cv[0]), SHP_OK);
    client_write(cv[1],
                 json_pack("{s:s, s:i, s:I, s:[s]}", "type", "job_begin", "id",
                           1, "job_id", (json_int_t)5, "hosts", "n01"));
    m = am_read();
    assert_non_null(m);
    assert_string_equal(shp_ctl_type(m), "job_begin");
    json_decref(m);
    close(am_fd); /* the AM is lost: the request fails */
    m = client_read(cv[1]);
    assert_non_null(m);
    assert_int_equal(shp_json_opt_int(m, "status", INT32_MIN, INT32_MAX, 0),
                     SHP_ERR_UNREACHABLE);
    json_decref(m);
    /* a new AM; the same request goes to it, not refused */
    ev_timer_stop(d.loop, &d.am_timer);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    am_fd = sv[1];
    assert_int_equal(shp_sharpd_am_attach(&d, sv[0]), SHP_OK);
    am_handshake();
    client_write(cv[1],
                 json_pack("{s:s, s:i, s:I, s:[s]}", "type", "job_begin", "id",
                           2, "job_id", (json_int_t)5, "hosts", "n01"));
    m = am_read();
    assert_non_null(m);
    assert_string_equal(shp_ctl_type(m), "job_begin");
    json_decref(m);
    assert_null(client_read(cv[1])); /* no refusal */
    close(cv[1]);
}

/* A lost AM takes nothing from the processes: they are told nothing, the
 * job and its group stay, and the next AM hears them (key, quotas, hosts,
 * the group with its members) to take them back; a job_attach that comes
 * meanwhile waits for it (am_wait) and goes to it, a job_end fails at once. */
static void test_lost_am_keeps_jobs(void **state)
{
    int cv[2], sv[2];
    json_t *m, *reg;
    int64_t id;
    static const char key[] =
        "1111111111111111111111111111111111111111111111111111111111111111";

    (void)state;
    am_handshake();
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, cv), 0);
    assert_int_equal(shp_sharpd_accept(&d, cv[0]), SHP_OK);
    client_write(cv[1], json_pack("{s:s, s:i, s:I, s:[s, s]}", "type",
                                  "job_begin", "id", 1, "job_id", (json_int_t)5,
                                  "hosts", "n01", "n02"));
    m = am_read();
    id = json_integer_value(json_object_get(m, "id"));
    json_decref(m);
    am_write(json_pack("{s:s, s:I, s:i, s:s, s:i, s:i, s:i}", "type",
                       "job_begin_ack", "id", (json_int_t)id, "status", 0,
                       "job_key", key, "max_groups", 4, "osts", 2, "payload",
                       1024));
    json_decref(client_read(cv[1]));
    client_write(cv[1], json_pack("{s:s, s:i, s:I, s:[s, s]}", "type",
                                  "group_create", "id", 2, "job_id",
                                  (json_int_t)5, "members", "n02", "n01"));
    m = am_read();
    id = json_integer_value(json_object_get(m, "id"));
    json_decref(m);
    am_write(json_pack("{s:s, s:I, s:i, s:{s:i, s:o}}", "type",
                       "group_create_ack", "id", (json_int_t)id, "status", 0,
                       "group", "group_id", 9, "job_id", shp_json_u64(5)));
    json_decref(client_read(cv[1]));

    close(am_fd); /* the AM is lost: the process hears nothing */
    assert_null(client_read(cv[1]));
    d.cfg.am_wait_ms = 10000;
    client_write(cv[1], json_pack("{s:s, s:i, s:I}", "type", "job_attach", "id",
                                  3, "job_id", (json_int_t)5));
    assert_null(client_read(cv[1])); /* it waits */
    /* a job's end does not wait (every rank's finalize would, behind it):
     * it fails at once, and the job stays for the next AM's report */
    client_write(cv[1], json_pack("{s:s, s:i, s:I}", "type", "job_end", "id", 4,
                                  "job_id", (json_int_t)5));
    m = client_read(cv[1]);
    assert_non_null(m);
    assert_string_equal(shp_ctl_type(m), "job_end_ack");
    assert_int_equal(json_integer_value(json_object_get(m, "status")),
                     SHP_ERR_UNREACHABLE);
    json_decref(m);

    ev_timer_stop(d.loop, &d.am_timer);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    am_fd = sv[1];
    assert_int_equal(shp_sharpd_am_attach(&d, sv[0]), SHP_OK);
    am_handshake_reg(&reg);
    json_t *j = json_array_get(json_object_get(reg, "jobs"), 0);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "key")), key);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "req"), "max_groups")),
                     4);
    assert_int_equal(json_array_size(json_object_get(j, "hosts")), 2);
    json_t *g = json_array_get(json_object_get(j, "groups"), 0);
    assert_int_equal(json_integer_value(json_object_get(g, "group_id")), 9);
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(g, "members"), 0)),
        "n02");
    json_decref(reg);
    m = am_read(); /* the job_attach that waited */
    assert_non_null(m);
    assert_string_equal(shp_ctl_type(m), "job_attach");
    json_decref(m);
    close(cv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_genuine_am, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_ack_without_proof, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lost_am_frees_job_place, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lost_am_keeps_jobs, setup,
                                        teardown),
    };

    shp_log_set_level(SHP_LOG_OFF);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
