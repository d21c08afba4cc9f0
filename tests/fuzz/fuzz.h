/*
 * Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c) and the seed
 * generator (gen_seeds.c): a byte reader that never runs past the input
 * (what is missing reads as zero), and the encodings of the stateful
 * harnesses' operations, so seeds and harnesses agree.
 */
#ifndef SHP_TESTS_FUZZ_H
#define SHP_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in_t;

static inline int fz_more(const fz_in_t *in)
{
    return in->n > 0;
}

static inline uint8_t fz_u8(fz_in_t *in)
{
    if (in->n == 0) {
        return 0;
    }
    in->n--;
    return *in->p++;
}

static inline uint16_t fz_u16(fz_in_t *in)
{
    uint16_t hi = fz_u8(in);
    return (uint16_t)(hi << 8 | fz_u8(in));
}

static inline uint32_t fz_u32(fz_in_t *in)
{
    uint32_t hi = fz_u16(in);
    return hi << 16 | fz_u16(in);
}

/* Up to `len` bytes into out; the rest of out is zero.  Returns how many
 * came from the input. */
static inline size_t fz_bytes(fz_in_t *in, void *out, size_t len)
{
    size_t n = len < in->n ? len : in->n;

    memcpy(out, in->p, n);
    memset((uint8_t *)out + n, 0, len - n);
    in->p += n;
    in->n -= n;
    return n;
}

/* A check that stops the fuzzer with a message (abort: libFuzzer reports
 * it as a crash and keeps the input). */
#define FZ_CHECK(cond)                                                         \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* fuzz_an: one operation is an opcode byte and its arguments. */
enum {
    FZ_AN_TREE = 0,  /* u8: tree id (low 2 bits), bit 7 a parent, bit 6
                         a tree id out of range */
    FZ_AN_GROUP_ADD, /* u8 gid, u8 tree, u8 flags, u8 osts, u8 payload,
                         u8 nchildren, u8 kinds, u8 parent index */
    FZ_AN_GROUP_RM,  /* u8 gid */
    FZ_AN_ACCEPT,    /* a child connects */
    FZ_AN_CLOSE,     /* u8 endpoint: the transport closes it */
    FZ_AN_CONNECT,   /* u8 endpoint: a parent connection comes up */
    FZ_AN_MSG,       /* u8 ep, then a structured message (fuzz_an.c) */
    FZ_AN_RAW,       /* u8 ep, u16 length, bytes: delivered as they are */
    FZ_AN_TIMERS,    /* every armed join timer fires */
    FZ_AN_DUMP,      /* SIGUSR1 dump and the stats message */
    FZ_AN_CTL,       /* u8 mode: the AM connection comes up (bit 0: it
                        already proved the secret), or when it is down the
                        reconnect timer fires; bit 1: the AM hangs up */
    FZ_AN_CTL_SEND,  /* u16 length, JSON body: a message from the AM */
    FZ_AN_NOPS
};

/* FZ_AN_GROUP_ADD flags */
#define FZ_AN_G_TOP 0x01
#define FZ_AN_G_DIST(f) (((f) >> 1) & 3) /* rc, mcast, both, bogus */
#define FZ_AN_G_BADKEY 0x08
#define FZ_AN_G_NOMCAST 0x10 /* no mcast_addr */

/* FZ_AN_MSG: u8 opcode (mod 9), u8 gid, u8 seq, u8 flags (mod 16), u8
 * dtype, u8 op, u8 tag dtype (each mod 14), u8 count, u8 extra; then, if
 * extra says so, u16 payload_len, u8 status, u32 seq; then the payload.
 * payload_len is otherwise count x element size (48 for a join, whose
 * payload the harness makes unless FZ_AN_M_OWNJOIN: proved over the nonce
 * the AN sent that link; 32 for a join nonce). */
#define FZ_AN_M_BADKEY 0x01         /* join: proved with a wrong job key */
#define FZ_AN_M_RAWLEN 0x02         /* payload_len from the input */
#define FZ_AN_M_STATUS 0x04         /* status from the input (negated) */
#define FZ_AN_M_SEQ32 0x08          /* seq from the input, 32 bits */
#define FZ_AN_M_OWNJOIN 0x10        /* join payload from the input */
#define FZ_AN_M_CHILD(e) ((e) >> 5) /* join: child index */

#define FZ_AN_NGROUPS 8
#define FZ_AN_NEPS 16
#define FZ_AN_PARENT "127.0.0.9:9000"

static inline uint64_t fz_an_job_id(uint32_t gid)
{
    return 1000 + gid;
}

static inline void fz_an_job_key(uint32_t gid, uint8_t key[32])
{
    for (unsigned i = 0; i < 32; i++) {
        key[i] = (uint8_t)(gid * 31 + i);
    }
}

/* fuzz_am: one operation is an opcode byte and its arguments. */
enum {
    FZ_AM_PEER = 0, /* u8 mode (0 unauthenticated, 1 AN, 2 sharpd), u8
                       node: a control peer connects */
    FZ_AM_ADMIN,    /* sharpctl connects to the admin socket */
    FZ_AM_SEND,     /* u8 peer, u16 length, JSON body: one message */
    FZ_AM_RAW,      /* u8 peer, u16 length, bytes: as they are */
    FZ_AM_CLOSE,    /* u8 peer: the peer hangs up */
    FZ_AM_TIMERS,   /* the settle, stats and group timers fire */
    FZ_AM_ACK,      /* u8 peer, u8 status: the AN answers what it was asked */
    FZ_AM_NOPS
};

/* fuzz_sharpd: one operation is an opcode byte and its arguments; peer 0
 * is the aggregation manager's end, the others local processes. */
enum {
    FZ_SD_CLIENT = 0, /* a local process connects */
    FZ_SD_AM,         /* u8 mode: the AM connection comes up (bit 0: it
                         already registered sharpd, else sharpd waits for
                         the AM's challenge) */
    FZ_SD_SEND,       /* u8 peer, u16 length, JSON body */
    FZ_SD_RAW,        /* u8 peer, u16 length, bytes */
    FZ_SD_CLOSE,      /* u8 peer: it hangs up */
    FZ_SD_ANSWER,     /* u8 status: the AM answers what sharpd relayed */
    FZ_SD_NOPS
};

/* the fabric fuzz_am runs (a second one, 6 hosts, is "topo2.ibnd") */
#define FZ_AM_LEVELS 2
#define FZ_AM_RADIX 4
#define FZ_AM_HOSTS 4

#endif
