/*
 * sharp-hello: "why does my job not get sharp?", answered on a compute
 * node, as the user.  It checks, one step after the other, what a job
 * needs (checks.c: sharpd, the manager, a tree, quota, a group, an
 * allreduce), and stops at the first that fails with its cause and a
 * remedy.
 *
 * With --peers HOST:PORT --rank R --size N (or the rank and size a
 * launcher sets: SLURM_PROCID/SLURM_NPROCS, OMPI_COMM_WORLD_RANK/SIZE,
 * PMI_RANK/PMI_SIZE) N copies, one per host, make steps 5 and 6 one job
 * and one group of N members: rank 0 listens on HOST:PORT, the others
 * connect to it, and the out-of-band collectives go through rank 0
 * (peers.c).
 *
 * Its options are rows of an option table, as the daemons' are: the
 * command line, the SHARP_HELLO_* environment, --help, --dump-config and
 * the man page's OPTIONS come from it.  The exit status is the number of
 * the step that failed (0: all passed, 64: usage).  --json prints one
 * JSON object instead of text.
 */
#include "cli/hello/hello.h"

#include "core/config.h"
#include "core/paths.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

enum { EXIT_USAGE_ = 64 };

static const shp_config_range_t hello_count_range = {1, 1 << 20};
static const shp_config_range_t hello_hold_range = {0, 86400};
static const shp_config_range_t hello_rank_range = {-1, 1 << 20};

static const shp_config_opt_t hello_opts[] = {
    {"socket", "",
     "this host's sharpd (empty: $SHARP_COLL_SHARPD_SOCKET, "
     "else " SHP_PATH_SHARPD_SOCK ")",
     offsetof(shp_hello_cfg_t, socket), &shp_cfg_string},
    {"count", "1000", "elements of the test allreduce",
     offsetof(shp_hello_cfg_t, count), &shp_cfg_uint, &hello_count_range},
    {"hold", "0",
     "keep the job and its group this many seconds after the allreduce (to "
     "see them in sharpctl jobs and sharpctl groups)",
     offsetof(shp_hello_cfg_t, hold), &shp_cfg_uint, &hello_hold_range},
    {"json", "no",
     "one JSON object on standard output: ok (true or false), failed_step "
     "(0 or the step's number) and steps, an array of {step, name, ok, "
     "detail, cause, remedy}",
     offsetof(shp_hello_cfg_t, json), &shp_cfg_bool},
    {"peers", "",
     "HOST:PORT where the copies meet: rank 0 listens on that IPv4 address "
     "and port, the others connect to it (for 30 s at most); steps 5 and 6 "
     "make one job of every copy, its out-of-band exchanges through rank 0",
     offsetof(shp_hello_cfg_t, peers), &shp_cfg_string},
    {"rank", "-1",
     "with --peers, this copy's rank (-1: the one a launcher sets: "
     "SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)",
     offsetof(shp_hello_cfg_t, rank), &shp_cfg_int, &hello_rank_range},
    {"size", "-1",
     "with --peers, the number of copies (-1: the one a launcher sets: "
     "SLURM_NPROCS, OMPI_COMM_WORLD_SIZE or PMI_SIZE)",
     offsetof(shp_hello_cfg_t, size), &shp_cfg_int, &hello_rank_range},
    {NULL}};

static const shp_config_table_t hello_table = {"sharp_hello", "SHARP_HELLO_",
                                               NULL, hello_opts};

static const char usage_text[] =
    "Usage: sharp-hello [--socket PATH] [--json] [--count N] [--hold S]\n"
    "                   [--peers HOST:PORT [--rank R --size N]]\n"
    "\n"
    "Why does my job not get sharp?  Run on a compute node, as the user:\n"
    "checks step by step that this host's sharpd answers (and who it takes\n"
    "you for), that it is registered with the manager, that the manager\n"
    "admits a job here (a tree covers this host, quota is left), and runs\n"
    "an allreduce of one member through the fabric.  Each failed step\n"
    "prints its cause and a remedy.\n"
    "\n"
    "Exit status: 0 every step passed; 1 sharpd, 2 manager, 3 tree, 4 quota,\n"
    "5 group, 6 allreduce: the step that failed; 64 usage.";

/* --peers: this copy's rank and size, given or the launcher's; 0 or why
 * not on stderr and EXIT_USAGE_ */
static int hello_ranks(const shp_hello_cfg_t *cfg)
{
    if (cfg->peers[0] != '\0') {
        int lr = -1, ls = -1;
        shp_hello_launcher_rank(&lr, &ls);
        shp_hello_rank = cfg->rank >= 0 ? cfg->rank : lr;
        shp_hello_size = cfg->size >= 0 ? cfg->size : ls;
        if (shp_hello_size < 1 || shp_hello_rank < 0 ||
            shp_hello_rank >= shp_hello_size) {
            fprintf(stderr, "sharp-hello: --peers needs --rank R --size N "
                            "(0 <= R < N) or a launcher's rank and size\n");
            return EXIT_USAGE_;
        }
    } else if (cfg->rank >= 0 || cfg->size >= 0) {
        fprintf(stderr, "sharp-hello: --rank and --size go with --peers\n");
        return EXIT_USAGE_;
    }
    return 0;
}

/* the steps in order, until one fails */
static int hello_run(shp_hello_t *h)
{
    int (*const checks[])(shp_hello_t *) = {
        shp_hello_sharpd, shp_hello_manager, shp_hello_admission,
        shp_hello_group, shp_hello_allreduce};
    int failed = 0;

    h->sock = h->cfg.socket[0] != '\0' ? h->cfg.socket
                                       : getenv("SHARP_COLL_SHARPD_SOCKET");
    if (h->sock == NULL || *h->sock == '\0')
        h->sock = SHP_PATH_SHARPD_SOCK;
    h->steps = json_array();
    for (size_t i = 0; !failed && i < sizeof(checks) / sizeof(checks[0]); i++)
        failed = checks[i](h);
    failed = shp_hello_finish(h, failed);
    json_decref(h->hello);
    return failed;
}

int main(int argc, char **argv)
{
    static shp_hello_t h;
    shp_config_action_t action;
    shp_config_err_t err;
    int rc = 0;

    if (shp_config_load(&hello_table, &h.cfg, argc, argv, usage_text, &action,
                        &err) != SHP_OK) {
        fprintf(stderr, "sharp-hello: %s\n", err.msg);
        rc = EXIT_USAGE_;
    } else if (action == SHP_CONFIG_VERSION) {
        printf("sharp-hello %s\n", SHP_VERSION);
    } else if (action == SHP_CONFIG_RUN) {
        rc = hello_ranks(&h.cfg);
        if (rc == 0)
            rc = hello_run(&h);
    }
    shp_config_release(&hello_table, &h.cfg);
    return rc;
}
