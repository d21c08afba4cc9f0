/*
 * sharp-hello, "why does my job not get sharp?" (see main.c): what its
 * files share.  main.c reads the options through the option table and
 * runs the checks in order; checks.c is one function a step, each
 * reporting its outcome (with a cause and a remedy when it fails); peers.c
 * is the out-of-band star of several copies (--peers), through rank 0.
 */
#ifndef SHP_CLI_HELLO_HELLO_H
#define SHP_CLI_HELLO_HELLO_H

#include <sharp/api/sharp_coll.h>

#include <jansson.h>
#include <stdint.h>

/* the options (main.c's table) */
typedef struct shp_hello_cfg {
    char *socket; /* "": $SHARP_COLL_SHARPD_SOCKET, else the default */
    int json;
    unsigned count, hold;
    char *peers;    /* HOST:PORT, or "" */
    int rank, size; /* -1: the launcher's */
} shp_hello_cfg_t;

/* one run: the options, and what the steps learn and hold */
typedef struct shp_hello {
    shp_hello_cfg_t cfg;
    const char *sock; /* the socket asked: cfg.socket or its default */
    json_t *steps;    /* --json: the steps' outcomes */
    json_t *hello;    /* sharpd's answer to hello (step 1) */
    const char *host; /* this host, as sharpd names it (in hello) */
    uint64_t probe;   /* the job of steps 3 and 4; steps 5 and 6: + 1 */
    struct sharp_coll_context *ctx;
    struct sharp_coll_comm *comm;
} shp_hello_t;

/* checks.c: each step, 0 when it passed, else its number (reported) */
int shp_hello_sharpd(shp_hello_t *h);
int shp_hello_manager(shp_hello_t *h);
int shp_hello_admission(shp_hello_t *h);
int shp_hello_group(shp_hello_t *h);
int shp_hello_allreduce(shp_hello_t *h);
/* the end: --json's object or the last line printed; failed returned */
int shp_hello_finish(shp_hello_t *h, int failed);

/* peers.c: this copy's rank and the number of copies (1: alone) */
extern int shp_hello_rank, shp_hello_size;
/* a launcher's rank and size, if it set them */
void shp_hello_launcher_rank(int *rank, int *size);
/* the star: rank 0 accepts size-1 connections on where (HOST:PORT), the
 * others connect (retrying for wait_s); NULL or why not */
const char *shp_hello_peers_connect(const char *where, int wait_s);
/* libsharp_coll's out-of-band collectives over the star */
int shp_hello_oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len);
int shp_hello_oob_bcast(void *ctx, void *buf, int len, int root);
int shp_hello_oob_barrier(void *ctx);

#endif
