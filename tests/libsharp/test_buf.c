/* libsharp_coll's buffer-form rules (libsharp/coll_buf.c), without a
 * fabric: what a call's buffers and lengths become (the byte stream, where
 * the result lands), and what is refused before anything is sent.  The
 * forms are those of docs/libsharp.md, "Buffers and lengths": per rank, in
 * place (UCC's tl/sharp), a window (NCCL's CollNet plugin). */
#include "tests/support/test_util.h"

#include "libsharp/coll_comm.h"
#include "tests/support/coll_desc.h"

#include <stdlib.h>

static coll_comm_t comm4; /* rank 1 of 4 */

static int setup(void **state)
{
    (void)state;
    comm4.rank = 1;
    comm4.size = 4;
    return 0;
}

static struct sharp_coll_reduce_spec spec_of(void *s, size_t sl, void *r,
                                             size_t rl, size_t length)
{
    return test_host_spec(s, sl, r, rl, SHARP_DTYPE_INT, SHARP_OP_SUM, length);
}

/* allreduce: the stream is the vector, the result the whole of it; a short
 * buffer is refused */
static void test_allreduce(void **state)
{
    int32_t s[8], r[8];
    struct sharp_coll_reduce_spec sp = spec_of(s, sizeof(s), r, sizeof(r), 8);
    coll_req_t *q = NULL;

    (void)state;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_ALLREDUCE, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 32);
    assert_ptr_equal(q->src, (uint8_t *)s);
    assert_ptr_equal(q->dst, (uint8_t *)r);
    assert_int_equal(q->r_hi - q->r_lo, 32);
    coll_req_release(q);
    sp.length = 9; /* one element more than either buffer holds */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_ALLREDUCE, &q),
                     SHARP_COLL_EINVAL);
    sp = spec_of(s, sizeof(s), r, 16, 8); /* a receive buffer too short */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_ALLREDUCE, &q),
                     SHARP_COLL_EINVAL);
}

/* in place is the one overlap allowed; a shifted one is refused */
static void test_overlap(void **state)
{
    int32_t v[16];
    struct sharp_coll_reduce_spec sp = spec_of(v, 32, v, 32, 8);
    coll_req_t *q = NULL;

    (void)state;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_ALLREDUCE, &q),
                     SHARP_COLL_SUCCESS);
    coll_req_release(q);
    sp = spec_of(v, 32, v + 1, 32, 8);
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_ALLREDUCE, &q),
                     SHARP_COLL_EINVAL);
}

/* reduce: only the root keeps a result; a root out of range is refused */
static void test_reduce_root(void **state)
{
    int32_t s[4], r[4];
    struct sharp_coll_reduce_spec sp = spec_of(s, sizeof(s), r, sizeof(r), 4);
    coll_req_t *q = NULL;

    (void)state;
    sp.root = 0; /* not us */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->r_hi, 0);
    coll_req_release(q);
    sp.root = 1;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->r_hi - q->r_lo, 16);
    coll_req_release(q);
    sp.root = 4;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE, &q),
                     SHARP_COLL_EINVAL);
}

/* reduce-scatter, per rank: sbuf holds 4 blocks of `length`, the result is
 * rank 1's block, written from rbuf's first byte */
static void test_rs_per_rank(void **state)
{
    int32_t s[8], r[2];
    struct sharp_coll_reduce_spec sp = spec_of(s, sizeof(s), r, sizeof(r), 2);
    coll_req_t *q = NULL;

    (void)state;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 32);
    assert_ptr_equal(q->dst, (uint8_t *)r);
    assert_int_equal(q->r_lo, 8); /* rank 1's block in the stream */
    assert_int_equal(q->r_hi, 16);
    coll_req_release(q);
}

/* in place, UCC's way: one buffer, the receive length the whole vector's
 * count as `length`: the block lands at the member's offset */
static void test_rs_in_place_ucc(void **state)
{
    int32_t v[8];
    struct sharp_coll_reduce_spec sp = spec_of(v, sizeof(v), v, 8, 8);
    coll_req_t *q = NULL;

    (void)state;
    sp.rbuf_desc.buffer.length = 32;
    sp.sbuf_desc.buffer.length = 32 * 4; /* count x size, as UCC says */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 32);
    assert_ptr_equal(q->dst, (uint8_t *)v + 8); /* rank 1 x 2 elements */
    assert_int_equal(q->r_lo, 8);
    assert_int_equal(q->r_hi, 16);
    coll_req_release(q);
    /* a vector that does not split into 4 blocks */
    sp.length = 6;
    sp.rbuf_desc.buffer.length = 24;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_EINVAL);
}

/* a window, NCCL's way: sbuf holds `length` elements at byte `offset` of
 * the whole vector, a block is the receive length */
static void test_rs_window(void **state)
{
    int32_t s[3], r[4]; /* blocks of 16 bytes; the window 12 bytes at 20 */
    struct sharp_coll_reduce_spec sp = spec_of(s, sizeof(s), r, sizeof(r), 3);
    coll_req_t *q = NULL;

    (void)state;
    sp.offset = 20;
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 12);
    /* rank 1's block is bytes [16, 32): the window covers [20, 32) */
    assert_int_equal(q->r_lo, 0);
    assert_int_equal(q->r_hi, 12);
    coll_req_release(q);
    sp.offset = 22; /* not on an element */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_EINVAL);
    sp.offset = 60; /* past the vector's end */
    assert_int_equal(coll_reduce_req(&comm4, &sp, K_REDUCE_SCATTER, &q),
                     SHARP_COLL_EINVAL);
}

/* bcast: the root sends, the others receive, marked for the tree; a short
 * buffer is refused */
static void test_bcast(void **state)
{
    uint8_t b[64];
    struct sharp_coll_bcast_spec sp;
    coll_req_t *q = NULL;

    (void)state;
    memset(&sp, 0, sizeof(sp));
    sp.buf_desc = test_host_desc(b, sizeof(b));
    sp.size = 64;
    sp.root = 1;
    assert_int_equal(coll_bcast_req(&comm4, &sp, &q), SHARP_COLL_SUCCESS);
    assert_int_equal(q->s_hi, 64);
    assert_null(q->dst);
    assert_true(q->bcast); /* a tree bcast where tree_bcast is on */
    coll_req_release(q);
    sp.root = 2;
    assert_int_equal(coll_bcast_req(&comm4, &sp, &q), SHARP_COLL_SUCCESS);
    assert_int_equal(q->s_hi, 0);
    assert_ptr_equal(q->dst, b);
    coll_req_release(q);
    sp.size = 65;
    assert_int_equal(coll_bcast_req(&comm4, &sp, &q), SHARP_COLL_EINVAL);
    sp.root = -1;
    sp.size = 8;
    assert_int_equal(coll_bcast_req(&comm4, &sp, &q), SHARP_COLL_EINVAL);
}

/* allgather: the member's block at its place in the whole; a window of it */
static void test_allgather(void **state)
{
    uint8_t s[8], r[32];
    struct sharp_coll_gather_spec sp;
    coll_req_t *q = NULL;

    (void)state;
    memset(&sp, 0, sizeof(sp));
    sp.sbuf_desc = test_host_desc(s, sizeof(s));
    sp.rbuf_desc = test_host_desc(r, sizeof(r));
    sp.dtype = SHARP_DTYPE_INT;
    assert_int_equal(coll_allgather_req(&comm4, &sp, &q), SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 32);
    assert_int_equal(q->s_lo, 8); /* rank 1's block */
    assert_int_equal(q->s_hi, 16);
    coll_req_release(q);
    sp.offset = 12; /* the window [12, 32): rank 1 gives [12, 16) */
    sp.rbuf_desc = test_host_desc(r, 20);
    assert_int_equal(coll_allgather_req(&comm4, &sp, &q), SHARP_COLL_SUCCESS);
    assert_int_equal(q->total, 20);
    assert_int_equal(q->s_lo, 0);
    assert_int_equal(q->s_hi, 4);
    coll_req_release(q);
    sp.offset = 32; /* nothing left of the vector */
    assert_int_equal(coll_allgather_req(&comm4, &sp, &q), SHARP_COLL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_reduce_root),
        cmocka_unit_test(test_rs_per_rank),
        cmocka_unit_test(test_rs_in_place_ucc),
        cmocka_unit_test(test_rs_window),
        cmocka_unit_test(test_bcast),
        cmocka_unit_test(test_allgather),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
