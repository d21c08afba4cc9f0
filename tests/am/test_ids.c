/*
 * Group ids (am/am_ids.h): managers of one pair hand out disjoint ids
 * whatever they do, one without peers every id; ids wrap within the
 * stripe, reported ids are skipped, a clash of stripes is seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "am/am_ids.h"

static void set_stripe(shp_am_t *am, const char *self, const char *peers)
{
    shp_am_list_t l;
    char err[200];
    memset(am, 0, sizeof(*am));
    am->next_group = 1;
    assert_int_equal(shp_am_list_parse(&l, peers, err, sizeof(err)), SHP_OK);
    shp_am_ids_stripe(am, self, &l);
}

/* the rank among the sorted addresses, whether the list names itself */
static void test_ranks(void **state)
{
    (void)state;
    shp_am_t a, b, c;
    set_stripe(&a, "10.0.0.2:6126", "10.0.0.1:6126,10.0.0.2:6126");
    set_stripe(&b, "10.0.0.1:6126", "10.0.0.2:6126");
    assert_int_equal(a.id_stride, SHP_AM_LIST_MAX);
    assert_int_equal(a.id_stripe, 1);
    assert_int_equal(b.id_stripe, 0);
    assert_int_equal(b.next_group, SHP_AM_LIST_MAX); /* not 0 */
    assert_int_equal(a.next_group, 1);
    set_stripe(&c, "10.0.0.3:6126", "");
    assert_int_equal(c.id_stride, 1);
    assert_int_equal(c.id_stripe, 0);
    /* without peers, every id in turn */
    for (uint32_t i = 1; i < 100; i++)
        assert_int_equal(shp_am_ids_next(&c), i);
}

/* two managers each taking ids from wherever they were left: never one
 * id twice, whatever the other did (the partition's case) */
static void test_disjoint(void **state)
{
    (void)state;
    shp_am_t a, b;
    set_stripe(&a, "h1:1", "h1:1,h2:1");
    set_stripe(&b, "h2:1", "h1:1,h2:1");
    unsigned char *seen = calloc(SHP_AM_GROUP_ID_END, 1);
    assert_non_null(seen);
    srand(7);
    /* each starts where the other's last was heard, as a takeover with a
     * margin used to, then both hand out; twice round the space */
    a.next_group = shp_am_ids_align(&a, 16000000);
    b.next_group = shp_am_ids_align(&b, 16000000);
    for (uint32_t n = 0; n < 2 * (SHP_AM_GROUP_ID_END / SHP_AM_LIST_MAX); n++) {
        uint32_t x = shp_am_ids_next(&a), y = shp_am_ids_next(&b);
        assert_true(x > 0 && x < SHP_AM_GROUP_ID_END);
        assert_true(y > 0 && y < SHP_AM_GROUP_ID_END);
        assert_int_not_equal(x, y);
        assert_int_equal(x % SHP_AM_LIST_MAX, a.id_stripe);
        assert_int_equal(y % SHP_AM_LIST_MAX, b.id_stripe);
        seen[x] |= 1;
        seen[y] |= 2;
        if (rand() % 1000 == 0) /* a takeover: b jumps anywhere */
            b.next_group = shp_am_ids_align(&b, (uint64_t)rand() % (1u << 25));
    }
    for (uint32_t i = 0; i < SHP_AM_GROUP_ID_END; i++)
        assert_true(seen[i] != 3);
    assert_int_equal(seen[0], 0);
    free(seen);
}

static void test_align_wrap(void **state)
{
    (void)state;
    shp_am_t a;
    set_stripe(&a, "h1:1", "h0:1,h1:1,h2:1"); /* rank 1 */
    assert_int_equal(shp_am_ids_align(&a, 0), 1);
    assert_int_equal(shp_am_ids_align(&a, 2), 9);
    assert_int_equal(shp_am_ids_align(&a, 9), 9);
    assert_int_equal(shp_am_ids_align(&a, SHP_AM_GROUP_ID_END - 1), 1);
    assert_int_equal(shp_am_ids_align(&a, SHP_AM_GROUP_ID_END - 7),
                     SHP_AM_GROUP_ID_END - 7);
    a.next_group = SHP_AM_GROUP_ID_END - 7;
    assert_int_equal(shp_am_ids_next(&a), SHP_AM_GROUP_ID_END - 7);
    assert_int_equal(shp_am_ids_next(&a), 1);
}

/* an id a node reports: ours moves past it, another's does not matter */
static void test_seen(void **state)
{
    (void)state;
    shp_am_t a;
    set_stripe(&a, "h1:1", "h0:1,h1:1");
    a.next_group = 81;
    shp_am_ids_seen(&a, 1000); /* stripe 0's */
    assert_int_equal(a.next_group, 81);
    shp_am_ids_seen(&a, 1001);
    assert_int_equal(a.next_group, 1009);
    shp_am_ids_seen(&a, 17); /* behind */
    assert_int_equal(a.next_group, 1009);
    assert_int_equal(shp_am_ids_next(&a), 1009);
    assert_true(shp_am_ids_clash(&a, 2001));
    assert_false(shp_am_ids_clash(&a, 2000));
    assert_false(shp_am_ids_clash(&a, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_disjoint),
        cmocka_unit_test(test_align_wrap),
        cmocka_unit_test(test_seen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
