/*
 * The recovery service of libsharp_mpi, inside: the wire's messages, a
 * record's state and the service's, shared by the records and the decision
 * (recover.c) and the service's thread (recover_svc.c).  Nothing here is
 * for the callers of recover.h.
 */
#ifndef SMR_RECOVER_INT_H
#define SMR_RECOVER_INT_H

#include "mpi-coll/recover.h"

#include <pthread.h>
#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define H_MAGIC 0x534d5248u /* "SMRH" */
#define Q_MAGIC 0x534d5251u /* "SMRQ" */
#define A_MAGIC 0x534d5241u /* "SMRA" */
#define VERSION 3u
#define IO_TIMEOUT_MS 2000 /* an asker's wait for each read and write */
#define CONN_MS 2000       /* a connection's whole life at the service */
#define MAX_CONNS 64       /* served at once */
#define NONCE 16
#define MAC crypto_auth_hmacsha256_BYTES

/* posted: what a member is inside */
enum { OUT = 0, IN_OP = 1, IN_WIN = 2 };

/* a windowed result's slot: op's result, len bytes (op 0: none) */
typedef struct {
    uint64_t op;
    size_t len;
} wslot_t;

struct smr_rec {
    uint64_t id;
    int rank, size;
    smr_addr_t *peers;
    uint64_t done;            /* operations completed */
    uint64_t taken;           /* of them, taken by the caller (smr_take) */
    uint64_t decided;         /* F, once decided */
    int posted;               /* inside operation done + 1: IN_OP, IN_WIN */
    int frozen;               /* asked, or failed: post nothing more */
    uint64_t asked_inside_ns; /* first asked while inside it (0: not) */
    void (*cancel)(void *);   /* smr_set_cancel */
    void *cancel_arg;
    uint64_t cancel_ns;
    int canceled; /* in this operation */
    char *buf;    /* the last result (rlen bytes, of bop), or the next one's */
    size_t cap, rlen;
    uint64_t bop;
    unsigned small; /* operations in a row that needed a quarter of cap */
    int windowed;   /* smr_allow_window */
    char *win;      /* SMR_WIN slots of SMR_WIN_BYTES (NULL: none yet) */
    wslot_t ws[SMR_WIN];
    struct smr_rec *next;
};

/* the result of op that r holds, and its length: NULL if none (under
 * smr_svc.mu; recover.c) */
const char *smr_held(const smr_rec_t *r, uint64_t op, size_t *len);

typedef struct {
    uint32_t magic, version;
    unsigned char nonce[NONCE];
} hello_t;

typedef struct {
    uint32_t magic, version;
    uint64_t id, k;
    uint32_t flags, pad;
    unsigned char nonce[NONCE];
    unsigned char mac[MAC]; /* over the hello's nonce and the above */
} question_t;

typedef struct {
    uint32_t magic, known, posted, held;
    uint64_t done, decided, len;
    unsigned char mac[MAC]; /* over both nonces, the above and the data */
} answer_t;

/* one connection at the service */
typedef struct {
    int fd; /* -1: free */
    int answering;
    uint64_t born, deadline;
    hello_t hello;
    size_t hsent;
    question_t q;
    size_t qgot;
    char *out; /* the answer and its result */
    size_t olen, osent;
} conn_t;

/* the service's state, and the records it serves (recover.c) */
typedef struct smr_svc {
    pthread_mutex_t mu; /* the records and the list */
    smr_rec_t *recs;
    int lfd, stop[2];
    pthread_t thread;
    int running;
    unsigned char key[SMR_KEY_LEN];
    conn_t conns[MAX_CONNS];
} smr_svc_t;

extern smr_svc_t smr_svc;

/* the MACs (recover.c): a question's over the hello's nonce; an answer's
 * over both nonces, the answer and its data */
void smr_q_mac(const question_t *q, const unsigned char *hnonce,
               unsigned char *mac);
void smr_a_mac(const answer_t *a, const unsigned char *hnonce,
               const unsigned char *qnonce, const void *data, size_t len,
               unsigned char *mac);

#pragma GCC visibility pop

#endif
