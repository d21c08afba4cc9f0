/* A host buffer as libsharp_coll's API describes it: what the tests and the
 * benchmarks that call the collectives pass for every buffer. */
#ifndef SHP_TESTS_COLL_DESC_H
#define SHP_TESTS_COLL_DESC_H

#include <sharp/api/sharp_coll.h>
#include <string.h>

static inline struct sharp_coll_data_desc test_host_desc(void *p, size_t len)
{
    struct sharp_coll_data_desc d;

    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_BUFFER;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    d.buffer.ptr = p;
    d.buffer.length = len;
    return d;
}

/* A reduction of n elements of dt by op from host buffer s (sl bytes)
 * into r (rl bytes), every other field zero */
static inline struct sharp_coll_reduce_spec
test_host_spec(void *s, size_t sl, void *r, size_t rl, enum sharp_datatype dt,
               enum sharp_reduce_op op, size_t n)
{
    struct sharp_coll_reduce_spec sp;

    memset(&sp, 0, sizeof(sp));
    sp.sbuf_desc = test_host_desc(s, sl);
    sp.rbuf_desc = test_host_desc(r, rl);
    sp.dtype = dt;
    sp.op = op;
    sp.length = n;
    return sp;
}

#endif
