/* Topology: ibnetdiscover captures from ibsim fabrics (tests/topology/data),
 * malformed files with line numbers, the fat-tree generator, round trips. */
#include "tests/support/test_util.h"

#include "topology/topo.h"

#include <stdlib.h>

static const char *data_dir(void)
{
    const char *d = getenv("SHARP_TOPO_DATA");
    return d ? d : "tests/topology/data";
}

static shp_topo_t *load_capture(const char *name)
{
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/%s", data_dir(), name);
    shp_topo_t *t = NULL;
    if (shp_topo_load(path, &t, err, sizeof(err)) != SHP_OK)
        fail_msg("%s", err);
    return t;
}

/* Peer description of a node's port, or "" */
static const char *peer_desc(const shp_topo_t *t, int idx, int port)
{
    const shp_topo_node_t *n = shp_topo_node(t, idx);
    if (port > n->nports || n->ports[port].peer < 0)
        return "";
    return shp_topo_node(t, n->ports[port].peer)->desc;
}

/* The same fabric by descriptions and port numbers (GUIDs may differ: ibsim
 * assigns its own). */
static void assert_same_by_desc(const shp_topo_t *a, const shp_topo_t *b)
{
    assert_int_equal(shp_topo_count(a), shp_topo_count(b));
    for (size_t i = 0; i < shp_topo_count(a); i++) {
        const shp_topo_node_t *x = shp_topo_node(a, (int)i);
        int j = shp_topo_find(b, x->desc);
        assert_true(j >= 0);
        const shp_topo_node_t *y = shp_topo_node(b, j);
        assert_string_equal(x->desc, y->desc);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->nports, y->nports);
        for (int p = 1; p <= x->nports; p++) {
            assert_string_equal(peer_desc(a, (int)i, p), peer_desc(b, j, p));
            if (x->ports[p].peer >= 0)
                assert_int_equal(x->ports[p].peer_port, y->ports[p].peer_port);
        }
    }
}

static void test_capture_fat_tree(void **state)
{
    (void)state;
    shp_topo_t *t = load_capture("fat-tree-2l.ibnd");
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_SWITCH), 12);
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_CA), 32);
    assert_int_equal(shp_topo_links(t), 64);

    /* the capture is of the generator's own fabric */
    shp_fat_tree_spec_t spec = {.levels = 2, .radix = 8, .hosts = 32};
    shp_topo_t *g;
    char err[256];
    assert_int_equal(shp_topo_fat_tree(&spec, &g, err, sizeof(err)), SHP_OK);
    assert_same_by_desc(g, t);

    /* lookups: host name, description, id, GUID */
    int h = shp_topo_find(t, "n00017");
    assert_true(h >= 0);
    const shp_topo_node_t *n = shp_topo_node(t, h);
    assert_int_equal(n->type, SHP_NODE_CA);
    assert_string_equal(n->host, "n00017");
    assert_string_equal(n->desc, "n00017 HCA-1");
    assert_int_equal(shp_topo_find(t, n->id), h);
    char guid[32];
    snprintf(guid, sizeof(guid), "0x%llx", (unsigned long long)n->guid);
    assert_int_equal(shp_topo_find(t, guid), h);
    assert_true(n->ports[1].guid != 0); /* the CA's port GUID */
    assert_string_equal(peer_desc(t, h, 1), "leaf05");
    assert_int_equal(shp_topo_find(t, "no-such-node"), -1);
    shp_topo_free(g);
    shp_topo_free(t);
}

static void test_capture_ring(void **state)
{
    (void)state;
    shp_topo_t *t = load_capture("ring.ibnd");
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_SWITCH), 6);
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_CA), 12);
    assert_int_equal(shp_topo_links(t), 18);
    int r1 = shp_topo_find(t, "ring1");
    assert_string_equal(peer_desc(t, r1, 7), "ring2");
    assert_string_equal(peer_desc(t, r1, 8), "ring6");

    char why[256] = "";
    shp_topo_t *p = load_capture("parallel.ibnd");
    assert_false(shp_topo_equal(t, p, why, sizeof(why)));
    assert_string_equal(why, "18 nodes vs 6");
    shp_topo_free(p);
    assert_true(shp_topo_equal(t, t, why, sizeof(why)));
    shp_topo_free(t);
}

static void test_capture_parallel(void **state)
{
    (void)state;
    shp_topo_t *t = load_capture("parallel.ibnd");
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_SWITCH), 2);
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_CA), 4);
    assert_int_equal(shp_topo_links(t), 9);
    int a = shp_topo_find(t, "sw-a"), b = shp_topo_find(t, "sw-b");
    for (int p = 9; p <= 11; p++) {
        const shp_topo_node_t *n = shp_topo_node(t, a);
        assert_int_equal(n->ports[p].peer, b);
        assert_int_equal(n->ports[p].peer_port, p);
    }
    int pa = shp_topo_find(t, "pa");
    assert_string_equal(peer_desc(t, pa, 1), "sw-a");
    assert_string_equal(peer_desc(t, pa, 2), "sw-b");
    shp_topo_free(t);
}

static void expect_parse_error(const char *text, const char *want)
{
    shp_topo_t *t = NULL;
    char err[512] = "";
    shp_status_t st =
        shp_topo_parse(text, strlen(text), "f", &t, err, sizeof(err));
    if (st != SHP_ERR_PARSE || !strstr(err, want))
        fail_msg("want error containing \"%s\", got %d \"%s\"", want, st, err);
    assert_null(t);
}

#define SW1 "switchguid=0x10\nSwitch\t4 \"S-1\"\t# \"s1\"\n"
#define CA1 "caguid=0x20\nCa\t1 \"H-2\"\t# \"h2 HCA-1\"\n"

static void test_malformed(void **state)
{
    (void)state;
    expect_parse_error("", "f:0: no nodes");
    expect_parse_error("# only a comment\n", "no nodes");
    expect_parse_error("Swatch 4 \"x\"\n", "f:1: expected Switch, Ca");
    expect_parse_error("Switch x \"x\"\n", "f:1: bad port count");
    expect_parse_error("Switch 300 \"x\"\n", "f:1: bad port count");
    expect_parse_error("Switch 4 x\n", "f:1: expected a quoted node id");
    expect_parse_error("[1] \"S-1\"[1]\n", "f:1: port line before any node");
    expect_parse_error(SW1 "[9]\t\"H-2\"[1]\n" CA1, "f:3: port 9 above");
    expect_parse_error(SW1 "[1]\t\"H-9\"[1]\n" CA1,
                       "f:3: port 1 links to \"H-9\", which the file does not");
    expect_parse_error(SW1 "[1]\t\"H-2\"[1]\n" CA1 "[1]\t\"S-1\"[2]\n",
                       "f:6: port 1 links to \"S-1\"[2], but \"S-1\"[1] links "
                       "to it");
    expect_parse_error(SW1 "[1]\t\"H-2\"[1]\n[2]\t\"H-2\"[1]\n" CA1
                           "[1]\t\"S-1\"[1]\n",
                       "f:4: port 2 links to \"H-2\"[1], but that port links "
                       "to \"S-1\"[1]");
    expect_parse_error(SW1 "[1]\t\"H-2\"[3]\n" CA1, "which has 1 ports");
    expect_parse_error(SW1 SW1, "f:4: node \"S-1\" (guid 0x0000000000000010) "
                                "defined twice");
    expect_parse_error(SW1 "[1]\t\"H-2\"[1]\n[1]\t\"H-2\"[1]\n" CA1,
                       "f:4: port 1 listed twice");
    expect_parse_error("switchguid=0xzz\n", "f:1: bad GUID");
    expect_parse_error(SW1 "[1](xyz)\t\"H-2\"[1]\n", "f:3: bad port GUID");
    expect_parse_error(SW1 "[1]\t\"H-2\"[1] junk\n", "f:3: unexpected \"junk");
    expect_parse_error(SW1 "[0]\t\"H-2\"[1]\n", "f:3: bad port number");
    expect_parse_error("include other.net\n", "f:1: ibsim directives");
    char longline[2000];
    memset(longline, 'x', sizeof(longline) - 2);
    longline[sizeof(longline) - 2] = '\n';
    longline[sizeof(longline) - 1] = '\0';
    expect_parse_error(longline, "f:1: line longer than");

    /* a NUL inside the text */
    static const char nul[] = "Switch 4 \"S-1\"\n\0\n";
    shp_topo_t *t = NULL;
    char err[256];
    assert_int_equal(
        shp_topo_parse(nul, sizeof(nul) - 1, "f", &t, err, sizeof(err)),
        SHP_ERR_PARSE);
    assert_non_null(strstr(err, "f:2: NUL byte"));

    /* a missing file */
    assert_int_equal(shp_topo_load("/nonexistent/x.ibnd", &t, err, sizeof(err)),
                     SHP_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "/nonexistent/x.ibnd"));
}

static void test_minimal_and_crlf(void **state)
{
    (void)state;
    const char *txt = "vendid=0x2c9\r\n" SW1 "[1]\t\"H-2\"[1](21)\r\n"
                      "\r\n" CA1 "[1](21)\t\"S-1\"[1]\t\t# lid 1 \"s1\"\r\n";
    shp_topo_t *t;
    char err[256];
    assert_int_equal(
        shp_topo_parse(txt, strlen(txt), "f", &t, err, sizeof(err)), SHP_OK);
    assert_int_equal(shp_topo_count(t), 2);
    assert_int_equal(shp_topo_links(t), 1);
    int h = shp_topo_find(t, "h2");
    assert_int_equal(shp_topo_node(t, h)->guid, 0x20);
    assert_int_equal(shp_topo_node(t, h)->ports[1].guid, 0x21);
    assert_int_equal(shp_topo_find(t, "0x10"), shp_topo_find(t, "s1"));
    shp_topo_free(t);
}

/* Found by tests/fuzz/fuzz_topo: a switch described as "H-2", the id of a
 * CA defined after it; the link to "H-2" found the switch's description
 * first and the file did not parse (or parsed only in the other order). */
static void test_desc_reads_like_an_id(void **state)
{
    (void)state;
    const char *txt =
        "switchguid=0x10\nSwitch\t4 \"S-1\"\t# \"H-2\"\n"
        "[1]\t\"H-2\"[1](21)\n\n" CA1 "[1](21)\t\"S-1\"[1]\t\t# lid 1 \"s1\"\n";
    shp_topo_t *t;
    char err[256];
    assert_int_equal(
        shp_topo_parse(txt, strlen(txt), "f", &t, err, sizeof(err)), SHP_OK);
    assert_int_equal(shp_topo_links(t), 1);
    int h = shp_topo_find(t, "H-2");
    assert_int_equal(shp_topo_node(t, h)->type, SHP_NODE_CA);
    assert_int_equal(shp_topo_node(t, h)->ports[1].peer,
                     shp_topo_find(t, "S-1"));
    shp_topo_free(t);
}

static void round_trip(const shp_fat_tree_spec_t *spec)
{
    shp_topo_t *g, *p;
    char err[256];
    assert_int_equal(shp_topo_fat_tree(spec, &g, err, sizeof(err)), SHP_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    shp_topo_write(g, f, 0);
    fclose(f);
    assert_int_equal(shp_topo_parse(buf, len, "mem", &p, err, sizeof(err)),
                     SHP_OK);
    char why[256];
    if (!shp_topo_equal(g, p, why, sizeof(why)))
        fail_msg("round trip differs: %s", why);
    free(buf);

    /* and through the ibsim dialect, compared by descriptions */
    f = open_memstream(&buf, &len);
    shp_topo_write(g, f, SHP_TOPO_IBSIM);
    fclose(f);
    shp_topo_free(p);
    assert_int_equal(shp_topo_parse(buf, len, "mem", &p, err, sizeof(err)),
                     SHP_OK);
    assert_same_by_desc(g, p);
    free(buf);
    shp_topo_free(p);
    shp_topo_free(g);
}

static void test_fat_tree_generator(void **state)
{
    (void)state;
    shp_topo_t *t;
    char err[256];
    shp_fat_tree_spec_t s2 = {.levels = 2, .radix = 8, .hosts = 30};
    assert_int_equal(shp_topo_fat_tree(&s2, &t, err, sizeof(err)), SHP_OK);
    /* 4 spines, 8 leaves (the last with 2 hosts), one link leaf-spine each */
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_SWITCH), 12);
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_CA), 30);
    assert_int_equal(shp_topo_links(t), 30 + 8 * 4);
    shp_topo_free(t);

    shp_fat_tree_spec_t s3 = {.levels = 3, .radix = 8, .hosts = 100};
    assert_int_equal(shp_topo_fat_tree(&s3, &t, err, sizeof(err)), SHP_OK);
    /* 16 hosts a pod -> 7 pods; 16 cores; 4 agg a pod; edges: 6x4 + 1 */
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_SWITCH), 16 + 28 + 25);
    assert_int_equal(shp_topo_count_type(t, SHP_NODE_CA), 100);
    assert_int_equal(shp_topo_links(t), 100 + 25 * 4 + 28 * 4);
    shp_topo_free(t);

    round_trip(&s2);
    round_trip(&s3);
    shp_fat_tree_spec_t one = {.levels = 2, .radix = 4, .hosts = 1};
    round_trip(&one);

    shp_fat_tree_spec_t bad[] = {{1, 8, 4},  {2, 7, 4},   {2, 2, 1},
                                 {2, 8, 33}, {3, 8, 129}, {2, 8, 0}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(shp_topo_fat_tree(&bad[i], &t, err, sizeof(err)),
                         SHP_ERR_INVALID_PARAM);
        assert_true(strlen(err) > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_fat_tree),
        cmocka_unit_test(test_capture_ring),
        cmocka_unit_test(test_capture_parallel),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_minimal_and_crlf),
        cmocka_unit_test(test_desc_reads_like_an_id),
        cmocka_unit_test(test_fat_tree_generator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
