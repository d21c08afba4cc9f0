/* The aggregation node's links against its transport's contract, on an
 * in-memory transport: what happens when a send fails while the AN is
 * inside one of its own callbacks. */
#include "../test_util.h"

#include "an/an.h"
#include "common/ctl.h"

#include <stdlib.h>

const char *const shp_an_transports[] = {"tcp", NULL};

static struct ev_loop *loop;

/* The transport: connect hands out an endpoint; sends fail (a peer that
 * does not read); close calls on_close at once, as tcp does outside
 * on_msg, and frees the endpoint. */
static int sends, closes, opened;

static shp_status_t mem_init(shp_tp_t *tp)
{
    (void)tp;
    return SHP_OK;
}

static shp_status_t mem_connect(shp_tp_t *tp, const char *addr,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **ep)
{
    shp_tp_ep_t *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    e->tp = tp;
    e->cbs = cbs;
    e->arg = arg;
    snprintf(e->peer, sizeof(e->peer), "%s", addr);
    *ep = e;
    opened++;
    return SHP_OK;
}

static shp_status_t mem_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    (void)ep;
    (void)hdr;
    (void)payload;
    sends++;
    return SHP_ERR_NO_RESOURCE;
}

static void mem_close(shp_tp_ep_t *ep)
{
    closes++;
    ep->cbs->on_close(ep, SHP_ERR_CANCELED);
    free(ep);
}

static const shp_tp_ops_t mem_ops = {
    .name = "mem",
    .init = mem_init,
    .cleanup = shp_tp_stub_cleanup,
    .listen = shp_tp_stub_listen,
    .listen_addr = shp_tp_stub_listen_addr,
    .connect = mem_connect,
    .send = mem_send,
    .close = mem_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
    .dump = shp_tp_stub_dump,
};

static void add_group(shp_an_t *an, int gid)
{
    json_t *req = json_pack(
        "{s:i, s:i, s:s, s:s, s:i, s:i, s:[{s:s}], s:b, s:i}", "group_id", gid,
        "tree_id", 0, "job_id", "5", "job_key",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        "osts", 2, "payload", 64, "children", "kind", "member", "top", 0,
        "parent_index", 0);
    const char *why = NULL;

    assert_non_null(req);
    /* not the top: answered once the parent AN is joined */
    assert_int_equal(shp_an_group_add(an, req, gid, &why), SHP_INPROGRESS);
    json_decref(req);
}

/* Found by tests/fuzz/fuzz_an: the parent connection comes up, the join
 * of the first group cannot be sent, the transport closes the link at
 * once (on_close frees it), and on_connect went on with the next group on
 * the freed link.  (Under SAN=1 a heap-use-after-free; here freed memory
 * is scribbled on, so the old code follows garbage.) */
static void test_send_fails_in_on_connect(void **state)
{
    static char name[] = "an0", empty[] = "";
    static shp_an_t an;
    const char *why = NULL;
    json_t *tree;
    shp_tp_ep_t *parent;

    (void)state;
    memset(&an, 0, sizeof(an));
    an.loop = loop;
    an.cfg.name = name;
    an.cfg.am = empty;
    an.cfg.max_trees = 4;
    an.cfg.max_groups = 8;
    an.cfg.max_osts = 4;
    an.cfg.max_payload = 4096;
    an.cfg.join_timeout_ms = 5000;
    assert_int_equal(shp_tp_init(&an.tp, &mem_ops, loop, 4096, NULL), SHP_OK);
    tree = json_pack("{s:i, s:s}", "tree_id", 0, "parent", "10.0.0.1:7000");
    assert_int_equal(shp_an_tree_set(&an, tree, &why), SHP_OK);
    json_decref(tree);
    add_group(&an, 1);
    add_group(&an, 2);
    add_group(&an, 3);
    assert_int_equal(opened, 1); /* one link to the parent for all */
    assert_int_equal(sends, 0);  /* nothing before it is connected */

    parent = an.parents->ep;
    parent->cbs->on_connect(parent);
    /* one join tried, the link closed and gone, the groups failed */
    assert_int_equal(sends, 1);
    assert_int_equal(closes, 1);
    assert_null(an.parents);
    assert_null(an.links);
    assert_int_equal(an.stats.groups_failed, 3);
    assert_true(shp_an_group_find(&an, 2)->failed);

    an.stopping = 1;
    for (uint32_t g = 1; g <= 3; g++) {
        assert_int_equal(shp_an_group_remove(&an, g), SHP_OK);
    }
    shp_tp_cleanup(&an.tp);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_fails_in_on_connect),
    };

    /* freed memory filled with 0x5a, no per-thread cache that skips it:
     * a use after free reads garbage (glibc reads these at start) */
    (void)argc;
    if (getenv("SHP_TEST_PERTURBED") == NULL) {
        setenv("SHP_TEST_PERTURBED", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        setenv("MALLOC_PERTURB_", "165", 1);
        execv("/proc/self/exe", argv);
    }

    shp_log_set_level(SHP_LOG_ERROR);
    loop = ev_default_loop(0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
