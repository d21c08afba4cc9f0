/*
 * am_ha_lost: a standby's count of the nodes that lost the active manager
 * (am/am_ha_lost.h): each node counted once however often it asks, the
 * ones not heard within the window forgotten, at most AM_HA_LOST_MAX
 * remembered (the oldest go first).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "am/am_ha_lost.h"

#define MS 1000000ull

static void test_once_each(void **state)
{
    (void)state;
    am_ha_lost_t *l = am_ha_lost_new();
    assert_non_null(l);
    assert_int_equal(am_ha_lost_note(l, "an", "leaf01", 1000 * MS, 8000 * MS),
                     1);
    assert_int_equal(am_ha_lost_note(l, "an", "leaf01", 1100 * MS, 8000 * MS),
                     1);
    /* the same name in another role is another node */
    assert_int_equal(
        am_ha_lost_note(l, "sharpd", "leaf01", 1200 * MS, 8000 * MS), 2);
    assert_int_equal(am_ha_lost_note(l, "an", "leaf02", 1300 * MS, 8000 * MS),
                     3);
    am_ha_lost_clear(l);
    assert_int_equal(am_ha_lost_note(l, "an", "leaf02", 1400 * MS, 8000 * MS),
                     1);
    am_ha_lost_free(l);
}

static void test_window(void **state)
{
    (void)state;
    am_ha_lost_t *l = am_ha_lost_new();
    am_ha_lost_note(l, "an", "a", 0, 5000 * MS);
    am_ha_lost_note(l, "an", "b", 3000 * MS, 5000 * MS);
    /* a asked last 6 s ago: forgotten; b 3 s ago: kept */
    assert_int_equal(am_ha_lost_note(l, "an", "c", 6000 * MS, 5000 * MS), 2);
    /* a node that keeps asking stays */
    assert_int_equal(am_ha_lost_note(l, "an", "b", 7900 * MS, 5000 * MS), 2);
    assert_int_equal(am_ha_lost_note(l, "an", "d", 12000 * MS, 5000 * MS), 2);
    am_ha_lost_free(l);
}

static void test_bounded(void **state)
{
    (void)state;
    am_ha_lost_t *l = am_ha_lost_new();
    char name[32];
    int n = 0;
    for (int i = 0; i < AM_HA_LOST_MAX + 100; i++) {
        snprintf(name, sizeof(name), "n%06d", i);
        n = am_ha_lost_note(l, "sharpd", name, (uint64_t)i, 1000 * MS);
    }
    assert_int_equal(n, AM_HA_LOST_MAX);
    /* the oldest went first: n000000 is new again */
    assert_int_equal(
        am_ha_lost_note(l, "sharpd", "n000000", 1000000, 1000 * MS),
        AM_HA_LOST_MAX);
    am_ha_lost_free(l);
    am_ha_lost_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once_each),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
