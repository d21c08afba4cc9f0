/*
 * bench_an: the aggregation node's speed, with emulated members.
 *
 * Real sharp_am, sharp_an and one sharpd run as processes on loopback; the
 * group comes from the manager as for any job.  The members are emulated
 * in this one process (one TCP connection each, one event loop), so what
 * is measured is the aggregation nodes, not member processes competing for
 * the two cores.
 *
 *  (a) latency: a 2-level tree (examples/small-2l.ibnd: 1 spine, 2 leaves,
 *      8 hosts), one 8-byte operation (2 x int32 sum) at a time: member ->
 *      leaf -> spine -> leaf -> member; next to one loopback TCP round trip
 *      measured in the same run
 *  (b) message rate: one AN with 16 members (a star: one switch, 16
 *      hosts), 64 operations outstanding, 8-byte payloads; every operation
 *      is 16 messages in and 16 out
 *
 * Every result is checked.
 * Last line: RESULT an_8B_latency_over_rtt=<x> an_msgs_per_s=<y>
 */
#include "topology/topo.h"
#include "bench/bench_util.h"
#include "tests/support/ctl_client.h"
#include "tests/support/fabric.h"
#include "transport/transport.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static test_fabric_t fab;
static char secret[600];

static void cleanup(void)
{
    test_fabric_stop(&fab);
    if (test_fabric_sh("rm -rf %s", fab.dir) != 0) {
        fprintf(stderr, "cannot remove %s\n", fab.dir);
    }
}

/* The fabric of `topo` (a file) up, a job over `nhosts` hosts and a group
 * of them.  Returns the group descriptor. */
static json_t *fabric_group(const char *topo, int nhosts, int osts,
                            const char *net)
{
    char sock[600], osts_s[16], err[256];
    shp_topo_t *t;
    if (shp_topo_load(topo, &t, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    snprintf(osts_s, sizeof(osts_s), "%d", osts);
    snprintf(sock, sizeof(sock), "%s/sd-%s.sock", fab.dir, net);
    test_fabric_spawn_daemons(&fab, secret, t, topo, net, osts_s, sock);
    shp_topo_free(t);
    json_t *hosts = test_fabric_hosts(nhosts), *g = NULL;
    int fd = test_fabric_job_begin(sock, hosts);
    if (fd >= 0) {
        json_t *r =
            call(fd, json_pack("{s:s, s:o, s:O, s:s}", "type", "group_create",
                               "job_id", shp_json_u64(1), "members", hosts,
                               "dist", "rc"));
        if (status_of(r) == 0 && json_object_get(r, "group")) {
            g = json_incref(json_object_get(r, "group"));
        }
        json_decref(r);
        /* fd stays open: the job lives as long as its process is there */
    }
    json_decref(hosts);
    if (g == NULL) {
        fprintf(stderr, "bench_an: no group (logs in %s)\n", fab.dir);
        exit(1);
    }
    return g;
}

/* Emulated members ---------------------------------------------------------- */

typedef struct {
    shp_tp_ep_t *ep;
    uint32_t child; /* its place at its leaf AN, from the manager */
    int joined;
    uint32_t results; /* results received, in order */
} member_t;

static struct {
    struct ev_loop *loop;
    shp_tp_t tp;
    member_t m[64];
    int n, depth, errors;
    uint32_t sent, done, nops;
    uint16_t tree;
    uint32_t group;
    uint8_t key[32];
    uint64_t job;
} em;

static void em_send(uint32_t seq)
{
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    shp_wire_hdr_t h;
    for (int i = 0; i < em.n; i++) {
        int32_t v[2] = {i, (int32_t)seq};
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, em.tree, em.group, seq,
                              &d, 2);
        if (shp_tp_send(em.m[i].ep, &h, v) != SHP_OK) {
            em.errors++;
        }
    }
}

static void em_pump(void)
{
    while (em.sent < em.nops && em.sent < em.done + (uint32_t)em.depth) {
        em_send(em.sent++);
    }
}

/* the leaf AN's nonce, first on the link: the join proves the job key
 * over it */
static void em_nonce(shp_tp_ep_t *ep, member_t *m, const void *nonce)
{
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;
    shp_wire_join_make(em.key, nonce, em.tree, em.group, em.job, m->child, &h,
                       payload);
    if (shp_tp_send(ep, &h, payload) != SHP_OK) {
        em.errors++;
    }
}

static void em_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    member_t *m = ep->arg;
    if (hdr->opcode == SHP_WIRE_OP_GROUP_LEAVE) {
        return;
    }
    if (hdr->opcode == SHP_WIRE_OP_JOIN_NONCE) {
        em_nonce(ep, m, payload);
        return;
    }
    if (hdr->opcode == SHP_WIRE_OP_GROUP_JOIN_ACK) {
        m->joined = hdr->status == SHP_OK ? 1 : -1;
        return;
    }
    if (hdr->opcode != SHP_WIRE_OP_AGG_RESULT || hdr->seq != m->results) {
        em.errors++;
        return;
    }
    int32_t v[2];
    memcpy(v, payload, sizeof(v));
    if (hdr->payload_len != 8 || v[0] != em.n * (em.n - 1) / 2 ||
        v[1] != (int32_t)hdr->seq * em.n) {
        em.errors++;
    }
    m->results++;
    /* an operation is done when every member has its result */
    uint32_t all = m->results;
    for (int i = 0; i < em.n; i++) {
        all = em.m[i].results < all ? em.m[i].results : all;
    }
    if (all > em.done) {
        em.done = all;
        em_pump();
    }
}

static void em_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    (void)reason;
    member_t *m = ep->arg;
    m->ep = NULL;
    em.errors++;
}

static const shp_tp_ep_cbs_t em_cbs = {em_msg, NULL, em_close};

static void quiet_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *h, const void *p)
{
    (void)ep;
    (void)h;
    (void)p;
}

static void quiet_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    (void)ep;
    (void)reason;
}

static const shp_tp_ep_cbs_t em_quiet = {quiet_msg, NULL, quiet_close};

/* join every member of group g (child indexes as the manager says), run
 * `warm` operations, then `nops` more with `depth` in flight; returns the
 * seconds of the latter */
/* Until every operation is done: the members wait as libsharp_coll's do
 * over tcp (SHARP_COLL_SOCK_SPIN_US, 200 us): poll, yielding the core,
 * until 200 us pass without a result, then sleep on the sockets. */
static void em_wait(void)
{
    uint32_t seen = em.done;
    uint64_t from = shp_time_ns();
    while (em.done < em.nops && !em.errors) {
        if (shp_time_ns() - from < 200 * SHP_NSEC_PER_USEC) {
            ev_run(em.loop, EVRUN_NOWAIT);
            if (em.done == seen) {
                sched_yield();
            }
        } else {
            ev_run(em.loop, EVRUN_ONCE);
        }
        if (em.done != seen) {
            seen = em.done;
            from = shp_time_ns();
        }
    }
}

static double emulate(json_t *g, int depth, uint32_t warm, uint32_t nops)
{
    json_t *members = json_object_get(g, "members");
    memset(&em, 0, sizeof(em));
    em.loop = ev_loop_new(EVFLAG_AUTO);
    em.n = (int)json_array_size(members);
    em.depth = depth;
    em.nops = warm;
    em.tree = (uint16_t)shp_json_opt_int(g, "tree_id", 0, 65535, 0);
    em.group = (uint32_t)shp_json_opt_int(g, "group_id", 0, UINT32_MAX, 0);
    em.job = 1;
    if (shp_json_get_hex(g, "job_key", em.key, 32, NULL) != SHP_OK ||
        shp_tp_init(&em.tp, &shp_tp_tcp_ops, em.loop, 1 << 16, NULL) !=
            SHP_OK) {
        exit(1);
    }
    /* member i (rank i) at its leaf AN, under the child index it was given */
    for (int i = 0; i < em.n; i++) {
        json_t *me = json_array_get(members, (size_t)i);
        member_t *m = &em.m[i];
        m->child = (uint32_t)shp_json_opt_int(me, "child_index", 0, 63, 0);
        if (em.tp.ops->connect(&em.tp, shp_json_opt_str(me, "addr", ""),
                               &em_cbs, m, &m->ep) != SHP_OK) {
            exit(1);
        }
    }
    /* every member joined */
    int joined = 0;
    uint64_t deadline = shp_time_ns() + 10 * SHP_NSEC_PER_SEC;
    while (!joined && !em.errors && shp_time_ns() < deadline) {
        ev_run(em.loop, EVRUN_NOWAIT);
        joined = 1;
        for (int i = 0; i < em.n; i++) {
            joined &= em.m[i].joined == 1;
            em.errors += em.m[i].joined < 0;
        }
    }
    if (!joined) {
        fprintf(stderr, "bench_an: members could not join\n");
        exit(1);
    }
    em_pump();
    em_wait();
    uint64_t t0 = shp_time_ns();
    em.nops = warm + nops;
    em_pump();
    em_wait();
    double secs = (double)(shp_time_ns() - t0) / 1e9;
    if (em.errors) {
        fprintf(stderr, "bench_an: %d errors (wrong or missing results)\n",
                em.errors);
        exit(1);
    }
    /* leave cleanly, then close */
    for (int i = 0; i < em.n; i++) {
        shp_wire_hdr_t h;
        shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_LEAVE, em.tree, em.group,
                          em.sent);
        (void)shp_tp_send(em.m[i].ep, &h, NULL);
    }
    ev_run(em.loop, EVRUN_NOWAIT);
    for (int i = 0; i < em.n; i++) {
        em.m[i].ep->cbs = &em_quiet;
        shp_tp_close(em.m[i].ep);
    }
    ev_run(em.loop, EVRUN_NOWAIT);
    shp_tp_cleanup(&em.tp);
    ev_loop_destroy(em.loop);
    return secs;
}

int main(int argc, char **argv)
{
    char dir[64], star[600];
    snprintf(dir, sizeof(dir), "/tmp/sharp-bench-an.%d", (int)getpid());
    if (test_fabric_init(&fab, "", dir) != 0 || argc < 2) {
        fprintf(stderr, "usage: bench_an examples/small-2l.ibnd\n");
        return 2;
    }
    if (mkdir(dir, 0700) != 0) {
        return 1;
    }
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);
    if (test_fabric_secret(&fab, secret, sizeof(secret)) != 0) {
        return 1;
    }

    /* (a) latency through the 2-level tree (not flattened: flat_max 0) */
    setenv("SHARP_AM_FLAT_MAX", "0", 1);
    json_t *g = fabric_group(argv[1], 8, 16, "127.22");
    unsetenv("SHARP_AM_FLAT_MAX");
    uint32_t lat_ops = 3000;
    double lat_us = emulate(g, 1, 200, lat_ops) * 1e6 / lat_ops;
    json_decref(g);
    test_fabric_stop(&fab);

    /* (b) one AN, 16 members, 64 outstanding */
    shp_topo_t *t = shp_topo_new();
    int sw = shp_topo_add_node(t, SHP_NODE_SWITCH, 0x2c90300000001ull,
                               "S-0002c90300000001", "sw01", 16);
    for (int h = 0; h < 16; h++) {
        char id[32], desc[32];
        uint64_t guid = 0x2c90400000000ull + 2u * (unsigned)(h + 1);
        snprintf(id, sizeof(id), "H-%016llx", (unsigned long long)guid);
        snprintf(desc, sizeof(desc), "n%05d HCA-1", h + 1);
        int c = shp_topo_add_node(t, SHP_NODE_CA, guid, id, desc, 1);
        if (c < 0 || shp_topo_link(t, sw, h + 1, c, 1) != SHP_OK) {
            return 1;
        }
        shp_topo_set_port_guid(t, c, 1, guid + 1);
    }
    snprintf(star, sizeof(star), "%s/star.ibnd", fab.dir);
    FILE *f = fopen(star, "w");
    shp_topo_write(t, f, 0);
    fclose(f);
    shp_topo_free(t);
    g = fabric_group(star, 16, 64, "127.23");
    uint32_t rate_ops = 30000;
    double secs = emulate(g, 64, 2000, rate_ops);
    json_decref(g);
    double ops_s = rate_ops / secs, msgs_s = ops_s * 32;

    double rtt = bench_tcp_rtt_us();
    printf("aggregation nodes on loopback, members emulated in one process\n");
    printf("(a) 2-level tree (1 spine, 2 leaves, 8 members), 8-byte "
           "operations one at a time:\n");
    printf("    %.1f us per operation (member -> leaf -> spine -> leaf -> "
           "member)\n",
           lat_us);
    printf("    ratio to the one-core round trip: %.2f\n", lat_us / rtt);
    printf("(b) one AN, 16 members, 64 operations outstanding, 8-byte "
           "payloads:\n");
    printf("    %.0f operations/s = %.0f messages/s (16 in + 16 out each)\n",
           ops_s, msgs_s);
    printf("RESULT an_8B_latency_over_rtt=%.2f an_msgs_per_s=%.0f\n",
           lat_us / rtt, msgs_s);
    return 0;
}
