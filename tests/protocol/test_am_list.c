/* A node's managers and its epoch rules (protocol/am_list.h), and the
 * epoch's proof (protocol/auth.h): the list parsed, tried in turn with the
 * backoff between rounds, a standby's answer followed, a lower epoch
 * refused, a higher one kept with its proof, a proof no node can make. */
#include "tests/support/test_util.h"

#include "protocol/am_list.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"

static shp_auth_key_t cluster;

static json_t *ack_ok(uint64_t epoch)
{
    char proof[SHP_AUTH_EPOCH_PROOF_LEN + 1];
    shp_auth_epoch_proof(&cluster, epoch, proof);
    return json_pack("{s:s, s:i, s:I, s:s}", "type", "an_register_ack",
                     "status", 0, "epoch", (json_int_t)epoch, "epoch_proof",
                     proof);
}

static json_t *ack_standby(const char *active, int retry_ms)
{
    json_t *r = json_pack("{s:s, s:i}", "type", "an_register_ack", "status",
                          (int)SHP_ERR_STANDBY);
    if (active)
        json_object_set_new(r, "active", json_string(active));
    if (retry_ms)
        json_object_set_new(r, "retry_ms", json_integer(retry_ms));
    return r;
}

static shp_status_t ack(shp_am_list_t *l, json_t *msg)
{
    char why[300];
    shp_status_t st = shp_am_list_ack(l, msg, why, sizeof(why));
    json_decref(msg);
    return st;
}

static void test_parse(void **state)
{
    (void)state;
    shp_am_list_t l;
    char err[200];
    assert_int_equal(shp_am_list_parse(&l, "", err, sizeof(err)), SHP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(shp_am_list_parse(&l, "10.0.0.1:6126", err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(shp_am_list_current(&l), "10.0.0.1:6126");
    assert_int_equal(shp_am_list_parse(&l, " a:1, b:2 ,c:3,", err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.addr[1], "b:2");
    assert_string_equal(l.addr[2], "c:3");
    assert_int_equal(shp_am_list_parse(&l,
                                       "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1",
                                       err, sizeof(err)),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err, "more than 8"));
    char lng[200];
    memset(lng, 'x', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    assert_int_equal(shp_am_list_parse(&l, lng, err, sizeof(err)),
                     SHP_ERR_INVALID_PARAM);
}

/* every manager in turn at once, the backoff only between rounds; one
 * alone keeps today's backoff (0.1 s doubling to 5 s) */
static void test_turns_and_backoff(void **state)
{
    (void)state;
    shp_am_list_t l;
    char err[200];
    assert_int_equal(shp_am_list_parse(&l, "a:1,b:2,c:3", err, sizeof(err)),
                     SHP_OK);
    assert_true(shp_am_list_failed(&l) == 0.);
    assert_string_equal(shp_am_list_current(&l), "b:2");
    assert_true(shp_am_list_failed(&l) == 0.);
    assert_string_equal(shp_am_list_current(&l), "c:3");
    assert_true(shp_am_list_failed(&l) == 0.1);
    assert_string_equal(shp_am_list_current(&l), "a:1");
    shp_am_list_failed(&l);
    shp_am_list_failed(&l);
    assert_true(shp_am_list_failed(&l) == 0.2);

    assert_int_equal(shp_am_list_parse(&l, "a:1", err, sizeof(err)), SHP_OK);
    double want[] = {0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_true(shp_am_list_failed(&l) == want[i]);
        assert_string_equal(shp_am_list_current(&l), "a:1");
    }
    /* registered: the backoff starts over; lost: the same one first */
    assert_int_equal(ack(&l, ack_ok(1)), SHP_OK);
    assert_true(shp_am_list_lost(&l) == 0.1);
    assert_string_equal(shp_am_list_current(&l), "a:1");
}

/* a node that lost its manager names it in its registrations until one
 * takes it (a standby counts those: am/am_ha_lost.h) */
static void test_lost_named(void **state)
{
    (void)state;
    shp_am_list_t l;
    char err[200];
    assert_int_equal(shp_am_list_parse(&l, "a:1,b:2", err, sizeof(err)),
                     SHP_OK);
    json_t *reg = json_object();
    shp_am_list_stamp(&l, reg);
    assert_null(json_object_get(reg, "lost")); /* never registered */
    assert_int_equal(ack(&l, ack_ok(1)), SHP_OK);
    shp_am_list_lost(&l);
    shp_am_list_failed(&l); /* a:1 again, not reached: b:2 next */
    assert_string_equal(shp_am_list_current(&l), "b:2");
    shp_am_list_stamp(&l, reg);
    assert_string_equal(json_string_value(json_object_get(reg, "lost")), "a:1");
    assert_int_equal(ack(&l, ack_ok(2)), SHP_OK); /* b:2 took it */
    json_decref(reg);
    reg = json_object();
    shp_am_list_stamp(&l, reg);
    assert_null(json_object_get(reg, "lost"));
    json_decref(reg);
}

/* a standby sends the node on: to the active one it names when the node
 * knows it, and its takeover time shortens the wait between rounds */
static void test_standby_answer(void **state)
{
    (void)state;
    shp_am_list_t l;
    char err[200];
    assert_int_equal(shp_am_list_parse(&l, "a:1,b:2,c:3", err, sizeof(err)),
                     SHP_OK);
    assert_int_equal(ack(&l, ack_standby("c:3", 0)), SHP_ERR_STANDBY);
    assert_true(shp_am_list_failed(&l) == 0.);
    assert_string_equal(shp_am_list_current(&l), "c:3");
    /* an active one outside the list is not followed */
    assert_int_equal(ack(&l, ack_standby("x:9", 0)), SHP_ERR_STANDBY);
    shp_am_list_failed(&l);
    assert_string_equal(shp_am_list_current(&l), "a:1");
    /* none active yet, takeover in 30 ms: the round (three managers
     * passed over) ends with a wait of 30 ms, not the backoff (0.1 s) */
    assert_int_equal(ack(&l, ack_standby(NULL, 30)), SHP_ERR_STANDBY);
    assert_true(shp_am_list_failed(&l) == 0.03);
    /* the hint is spent: the next round ends with the backoff */
    assert_true(shp_am_list_failed(&l) == 0.);
    assert_true(shp_am_list_failed(&l) == 0.);
    assert_true(shp_am_list_failed(&l) == 0.2);
    /* a hint longer than the backoff does not lengthen it */
    assert_int_equal(ack(&l, ack_standby(NULL, 60000)), SHP_ERR_STANDBY);
    shp_am_list_failed(&l);
    shp_am_list_failed(&l);
    assert_true(shp_am_list_failed(&l) == 0.4);
}

/* the highest epoch is kept with its proof and reported; a lower one is
 * refused, an equal or higher one taken */
static void test_epochs(void **state)
{
    (void)state;
    shp_am_list_t l;
    char err[200];
    assert_int_equal(shp_am_list_parse(&l, "a:1,b:2", err, sizeof(err)),
                     SHP_OK);
    json_t *reg = json_object();
    shp_am_list_stamp(&l, reg);
    assert_null(json_object_get(reg, "epoch")); /* nothing seen yet */
    assert_int_equal(ack(&l, ack_ok(3)), SHP_OK);
    assert_int_equal(l.epoch, 3);
    shp_am_list_stamp(&l, reg);
    assert_int_equal(json_integer_value(json_object_get(reg, "epoch")), 3);
    assert_true(shp_auth_epoch_check(
        &cluster, 3, json_string_value(json_object_get(reg, "epoch_proof"))));
    json_decref(reg);

    assert_int_equal(ack(&l, ack_ok(2)), SHP_ERR_STALE_EPOCH);
    assert_int_equal(l.epoch, 3);
    json_t *refusal = shp_am_list_refusal(&l);
    assert_string_equal(shp_ctl_type(refusal), "am_refused");
    assert_int_equal(json_integer_value(json_object_get(refusal, "epoch")), 3);
    assert_int_equal(json_integer_value(json_object_get(refusal, "status")),
                     SHP_ERR_STALE_EPOCH);
    json_decref(refusal);
    /* a manager without an epoch is older than any */
    assert_int_equal(ack(&l, json_pack("{s:s, s:i}", "type", "an_register_ack",
                                       "status", 0)),
                     SHP_ERR_STALE_EPOCH);
    assert_int_equal(ack(&l, ack_ok(3)), SHP_OK);
    assert_int_equal(ack(&l, ack_ok(7)), SHP_OK);
    assert_int_equal(l.epoch, 7);
    /* a refusal is the manager's own status */
    assert_int_equal(
        ack(&l, json_pack("{s:s, s:i, s:s}", "type", "an_register_ack",
                          "status", (int)SHP_ERR_NOT_FOUND, "error", "x")),
        SHP_ERR_NOT_FOUND);
}

/* only the cluster key makes an epoch's proof: not a node key, not for
 * another epoch, not a forged string */
static void test_epoch_proof(void **state)
{
    (void)state;
    char p[SHP_AUTH_EPOCH_PROOF_LEN + 1], q[SHP_AUTH_EPOCH_PROOF_LEN + 1];
    const char *why;
    shp_auth_key_t node;
    shp_auth_epoch_proof(&cluster, 5, p);
    assert_int_equal(strlen(p), SHP_AUTH_EPOCH_PROOF_LEN);
    assert_true(shp_auth_epoch_check(&cluster, 5, p));
    assert_false(shp_auth_epoch_check(&cluster, 6, p));
    assert_false(shp_auth_epoch_check(&cluster, 5, ""));
    assert_false(shp_auth_epoch_check(&cluster, 5, NULL));
    p[0] = p[0] == '0' ? '1' : '0';
    assert_false(shp_auth_epoch_check(&cluster, 5, p));
    /* a node's key (what a compromised sharpd holds) */
    assert_int_equal(shp_auth_node_key(&cluster, "sharpd", "n1", &node, &why),
                     SHP_OK);
    shp_auth_epoch_proof(&node, 99, q);
    assert_false(shp_auth_epoch_check(&cluster, 99, q));
    /* and the check needs the cluster key */
    shp_auth_epoch_proof(&cluster, 99, q);
    assert_false(shp_auth_epoch_check(&node, 99, q));
}

int main(void)
{
    assert_int_equal(shp_auth_init(), SHP_OK);
    shp_auth_key_from_bytes("am-list-test-cluster-secret", 27, &cluster);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_turns_and_backoff),
        cmocka_unit_test(test_standby_answer),
        cmocka_unit_test(test_lost_named),
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_epoch_proof),
    };
    return cmocka_run_group_tests_name("am_list", tests, NULL, NULL);
}
