/*
 * A local fabric of real daemons, for the tests and the benchmarks
 * (bench/ includes tests/support/; both link tests/support/fabric.c from
 * libshp_testsupport.a).  Two ways to bring one up:
 *
 * - through sharp-fabric (cli/sharp-fabric): sharp_am, one sharp_an per
 *   switch and one sharpd per host of a topology, on loopback addresses
 *   NET.x.y or each in a network namespace of its own (root);
 *   test_fabric_up, test_fabric_do, test_fabric_down, and in a member
 *   process test_fabric_become_host;
 * - the daemons started directly, with one sharpd (host n00001) that the
 *   caller talks to itself: test_fabric_spawn_daemons, test_fabric_stop.
 */
#ifndef SHP_TEST_FABRIC_H
#define SHP_TEST_FABRIC_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "topology/topo.h"

#define TEST_FABRIC_MAX_PIDS 256

typedef struct test_fabric {
    char bin[512];  /* the programs: sharp-fabric, sharp-topo, the daemons */
    char dir[300];  /* the fabric's directory (sharp-fabric --dir) */
    char net[32];   /* its addresses A.B (10.77 in namespaces) */
    char netns[32]; /* in namespaces: their prefix; "" on loopback */
    pid_t pids[TEST_FABRIC_MAX_PIDS]; /* test_fabric_spawn's daemons */
    int npids;
} test_fabric_t;

/* f->bin: the directory of this program followed by to_bin ("" for a
 * program in bin/, "/../../bin" for a test in tests/ROOM/); f->dir: dir.
 * -1 if /proc/self/exe cannot be read. */
int test_fabric_init(test_fabric_t *f, const char *to_bin, const char *dir);

/* system() of a command line formatted as printf does */
int test_fabric_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* `sharp-topo ARGS > OUT`: 0 if it succeeded */
int test_fabric_topo(const test_fabric_t *f, const char *args, const char *out);

/* `ENV sharp-fabric --dir DIR up TOPO --net NET REDIR`, or `--netns` when
 * net is NULL (f->netns then read from DIR/netns): ENV variable
 * assignments ("" none), REDIR a shell redirection of its output (e.g.
 * ">/dev/null", "" none).  0 once every daemon registered. */
int test_fabric_up(test_fabric_t *f, const char *env, const char *topo,
                   const char *net, const char *redir);

/* The command line `sharp-fabric --dir DIR ARGS` in out (ARGS formatted as
 * printf does: a subcommand, its arguments, redirections). */
void test_fabric_cmd(const test_fabric_t *f, char *out, size_t len,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs it (kill, start, link, loss, ...): system()'s answer. */
int test_fabric_do(const test_fabric_t *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* `sharp-fabric --dir DIR down REDIR`: -1 if it failed, as it does when
 * a daemon's log holds a sanitizer report (on the standard error) */
int test_fabric_down(const test_fabric_t *f, const char *redir);

/* DIR/hosts/n<host+1>.sock: the socket of host `host`'s sharpd */
void test_fabric_host_sock(const test_fabric_t *f, int host, char *out,
                           size_t len);

/* In a member process: the process of host `host` (its sharpd's socket
 * and its address for libsharp_coll; in namespaces it enters the host's,
 * or exits with status 2). */
void test_fabric_become_host(const test_fabric_t *f, int host);

/* A cluster secret (mode 0600) at DIR/secret; its path in out.  0 if
 * made. */
int test_fabric_secret(const test_fabric_t *f, char *out, size_t len);

/* Starts argv[0], stdout and stderr appended to `log`, to be stopped by
 * test_fabric_stop: its pid, or -1. */
pid_t test_fabric_spawn(test_fabric_t *f, char *const argv[], const char *log);

/* Starts the daemons of `topo` (file topo_path) directly: the manager at
 * NET.0.1:6126 (osts: its group_osts, "" for its default), an AN per
 * switch at NET.(1+k/250).(1+k%250), one sharpd (host n00001) with its
 * socket at sd_sock.  Logs in DIR/{am,an,sd}.log. */
void test_fabric_spawn_daemons(test_fabric_t *f, const char *secret,
                               const shp_topo_t *topo, const char *topo_path,
                               const char *net, const char *osts,
                               const char *sd_sock);

/* SIGTERM to every daemon test_fabric_spawn started, and waits for them. */
void test_fabric_stop(test_fabric_t *f);

/* Hosts n00001 .. n<n> as a JSON array (a new reference). */
json_t *test_fabric_hosts(int n);

/* Job 1 over `hosts` through the sharpd at sd_sock, retried (every
 * 100 ms, for up to 30 s) while the daemons come up and the trees settle:
 * the connection to sharpd, or -1. */
int test_fabric_job_begin(const char *sd_sock, json_t *hosts);

#endif
