/*
 * The shm transport's shared segment: what both processes of a connection
 * read and write (transport/shm/shm.c says how it is used).  Kept in a header
 * of its own so that tests can build a peer by hand.
 */
#ifndef SHP_COMMON_TP_SHM_H
#define SHP_COMMON_TP_SHM_H

#include <stdatomic.h>
#include <stdint.h>

#define SHM_MAGIC 0x73687031u /* "shp1" */
#define SHM_VERSION 2
#define SHM_REC_HDR 8
#define SHM_WRAP UINT32_MAX
#define SHM_MIN_CAP (64u * 1024)
#define SHM_MAX_CAP (64u * 1024 * 1024)

typedef struct {
    _Atomic uint64_t head; /* bytes published by the producer */
    char pad0[56];
    _Atomic uint64_t tail; /* bytes released by the consumer */
    char pad1[56];
    _Atomic uint32_t sleeping; /* the consumer may block: ring it */
    _Atomic uint32_t waiting;  /* the producer waits for space: ring it */
    char pad2[56];
} shm_ring_t;

typedef struct {
    uint32_t magic, version, cap, pad;
    char pad0[48];
    shm_ring_t ring[2]; /* [0] connector -> acceptor, [1] the other way */
    /* then the two rings' data, cap bytes each */
} shm_seg_t;

/* the connector's first message on the socket (with the memfd) */
typedef struct {
    uint32_t magic, version, cap, max_payload;
} shm_hello_t;

/* A listener's board, shared with every process connected to it (passed
 * in the answer to the hello, a shm_hello_t with cap 0): before it sleeps
 * the listener stores how many contributions it waits for in `need`; a
 * connector that publishes one counts it down and rings only the last. */
typedef struct {
    uint32_t magic, version;
    char pad0[56];
    _Atomic int32_t need;
    char pad1[60];
} shm_board_t;

#define SHM_BOARD_LEN 4096

#endif
