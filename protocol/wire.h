/*
 * The data-path wire format: fixed binary headers between clients and
 * aggregation nodes and between ANs.
 *
 * Every message is a 32-byte header followed by `payload_len` bytes of
 * payload.  Header fields are big-endian (network order); reduction payloads
 * are little-endian.  Packing and unpacking live in wire.c, nowhere else.
 *
 *  off size field
 *    0  1   version      SHP_WIRE_VERSION
 *    1  1   opcode       shp_wire_opcode_t
 *    2  2   flags        SHP_WIRE_F_*
 *    4  2   tree_id
 *    6  2   status       int16 shp_status_t (ERROR, JOIN_ACK), else 0
 *    8  4   group_id
 *   12  4   seq          operation sequence number (per group)
 *   16  1   dtype        shp_dtype_t
 *   17  1   op           shp_op_t
 *   18  1   tag_dtype    shp_dtype_t, MINLOC/MAXLOC only, else NULL
 *   19  1   lanes        exact mode (flag EXACT): int64 lanes per element,
 *                        else 0 on send, ignored on receive
 *   20  4   count        elements
 *   24  4   payload_len  bytes after the header
 *   28  4   reserved     0 on send, ignored on receive
 *
 * Version history (never reuse a retired value or bit):
 *   1  first version (opcode 7, group_leave, added compatibly: an AN
 *      that does not know it closes the link, as before; flag MAC: every
 *      multicast result carries a tag, and members take no multicast
 *      result without a valid one; opcode 8, join_nonce, and a join that
 *      proves the job key instead of carrying it: a peer from before it
 *      is refused at the join; flag BCAST, a tree bcast: an AN from
 *      before it refuses a bcast's requests as unknown flags, which fails
 *      the group, so its members get an error, not a hang; flag FREE, a
 *      bcast only its root sends: an AN from before it refuses it alike;
 *      flag SPARSE, a block-sparse payload: refused alike by an AN from
 *      before it, and sent only when the member's setting allows).
 *
 * Multicast results are authenticated (anyone on the data network can send
 * a datagram to a group's address): a Poly1305 tag over the packed header
 * and the result, with a one-time key made by ChaCha20 as RFC 8439 (2.6)
 * makes it (libsodium's primitives) keyed by a key derived from the
 * job key for the tree and group, and the operation's 64-bit number as
 * nonce (so a result replayed after the 32-bit seq wraps does not verify).
 *
 * Joins prove the job key without sending it: an AN sends every link it
 * accepts a fresh random nonce (JOIN_NONCE) first, and a join on that link
 * carries an HMAC, keyed by a key derived from the job key for the tree
 * and group, over that nonce and the join's fields (tree, group, job,
 * child index).  A join recorded on one link does not verify on another.
 */
#ifndef SHP_COMMON_WIRE_H
#define SHP_COMMON_WIRE_H

#include "reduce/reduce.h"
#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

#define SHP_WIRE_VERSION 1
#define SHP_WIRE_HDR_LEN 32
#define SHP_WIRE_JOIN_LEN 48
#define SHP_WIRE_JOB_KEY_LEN 32
#define SHP_WIRE_JOIN_KEY_LEN 32 /* a group's join key (from the job key) */
#define SHP_WIRE_NONCE_LEN 32    /* JOIN_NONCE's payload */
#define SHP_WIRE_PROOF_LEN 32    /* a join's proof of the job key */
#define SHP_WIRE_ERR_MSG_MAX 256

typedef enum shp_wire_opcode {
    SHP_WIRE_OP_AGG_REQ = 1,        /* child -> parent: payload to reduce */
    SHP_WIRE_OP_AGG_RESULT = 2,     /* parent -> child / multicast: result */
    SHP_WIRE_OP_ERROR = 3,          /* either way: status + text */
    SHP_WIRE_OP_RETRANS_REQ = 4,    /* member -> AN: resend result `seq` */
    SHP_WIRE_OP_GROUP_JOIN = 5,     /* child -> AN: join, proving the key */
    SHP_WIRE_OP_GROUP_JOIN_ACK = 6, /* AN -> child: status of the join */
    SHP_WIRE_OP_GROUP_LEAVE = 7,    /* member -> AN: leaving, cleanly */
    SHP_WIRE_OP_JOIN_NONCE = 8,     /* AN -> child, first: the link's nonce */
    SHP_WIRE_OP_LAST
} shp_wire_opcode_t;

/* flags */
#define SHP_WIRE_F_MCAST (1u << 0)   /* result sent by multicast */
#define SHP_WIRE_F_RETRANS (1u << 1) /* result resent on request */
#define SHP_WIRE_F_BARRIER (1u << 2) /* no payload: a barrier */
/* a result multicast could not carry (above its MTU): ANs pass it down
 * over RC to every member */
#define SHP_WIRE_F_UNICAST (1u << 3)
/* exact mode (reduce/exact.h): the payload is int64 lanes (dtype I64, op
 * SUM), `lanes` of them per element, each within +-SHP_EXACT_LANE_MAX */
#define SHP_WIRE_F_EXACT (1u << 4)
/* on a retransmit request: the member has had none of its group's results
 * by multicast (it does not reach it), only retransmitted ones; its AN
 * sends it every later result over RC */
#define SHP_WIRE_F_RC_ONLY (1u << 5)
/* a multicast result: the last SHP_WIRE_MAC_LEN bytes of the payload are
 * its tag (shp_wire_mac), keyed per group; payload_len counts them */
#define SHP_WIRE_F_MAC (1u << 6)
/* a bcast (docs/an.md, data protocol, 5): on a request, the root's data,
 * or from every other member a header alone (count 0); on a result, the
 * root's data coming down.  Never with BARRIER or EXACT. */
#define SHP_WIRE_F_BCAST (1u << 7)
/* with BCAST, a free bcast (docs/an.md, data protocol, 5): only the root
 * sends (its data, flagged so); every other member sends nothing for it,
 * and an AN whose subtree does not hold the root sends nothing up either.
 * A member may make a bcast free only if it is a single operation of at
 * most SHP_WIRE_FREE_MAX bytes and its seq is not a multiple of
 * SHP_WIRE_FREE_SYNC (those stay ordinary bcasts, which every member
 * sends: no root runs more than SHP_WIRE_FREE_SYNC operations ahead of
 * any member), and the group's osts is at least SHP_WIRE_FREE_SYNC. */
#define SHP_WIRE_F_FREE (1u << 8)
#define SHP_WIRE_FREE_SYNC 8u
#define SHP_WIRE_FREE_MAX 4096u
/* a block-sparse payload (reduce/sparse.h), on a request or a result of a
 * reduction whose identity is all-zero bits (shp_sparse_ok): count is the
 * dense payload's, the data is
 *   u32 block (little-endian), the bitmap of the dense payload's blocks
 *   that are there (shp_sparse_bitmap_bytes), those blocks one after another
 * and a block left out stands for zeros.  Never with BARRIER or BCAST. */
#define SHP_WIRE_F_SPARSE (1u << 9)
#define SHP_WIRE_SPARSE_HDR 4u
#define SHP_WIRE_F_KNOWN                                                       \
    (SHP_WIRE_F_MCAST | SHP_WIRE_F_RETRANS | SHP_WIRE_F_BARRIER |              \
     SHP_WIRE_F_UNICAST | SHP_WIRE_F_EXACT | SHP_WIRE_F_RC_ONLY |              \
     SHP_WIRE_F_MAC | SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE | SHP_WIRE_F_SPARSE)
/* retransmitted results a member takes, none by multicast, before it sets
 * SHP_WIRE_F_RC_ONLY */
#define SHP_WIRE_RC_ONLY_AFTER 3

/* How long a member waits before retransmit request number `asks` (0: the
 * first) for a multicast result: `first`, then twice as long each time, at
 * most 64 times.  The AN answers one request over RC, at once or when the
 * result comes, so the later ones are a backstop only. */
static inline uint64_t shp_wire_retrans_gap(uint64_t first, unsigned asks)
{
    return first << (asks < 6 ? asks : 6);
}

/* A header in host order, unpacked. */
typedef struct shp_wire_hdr {
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    uint16_t tree_id;
    int16_t status;
    uint32_t group_id;
    uint32_t seq;
    uint8_t dtype;
    uint8_t op;
    uint8_t tag_dtype;
    uint8_t lanes; /* SHP_WIRE_F_EXACT only, else 0 */
    uint32_t count;
    uint32_t payload_len;
} shp_wire_hdr_t;

/* The header as it lies on the wire. */
typedef struct __attribute__((packed)) shp_wire_hdr_raw {
    uint8_t version;
    uint8_t opcode;
    uint16_t flags_be;
    uint16_t tree_id_be;
    uint16_t status_be;
    uint32_t group_id_be;
    uint32_t seq_be;
    uint8_t dtype;
    uint8_t op;
    uint8_t tag_dtype;
    uint8_t lanes;
    uint32_t count_be;
    uint32_t payload_len_be;
    uint32_t reserved1;
} shp_wire_hdr_raw_t;
_Static_assert(sizeof(shp_wire_hdr_raw_t) == SHP_WIRE_HDR_LEN,
               "wire header is 32 bytes");

/* GROUP_JOIN payload, unpacked. */
typedef struct shp_wire_join {
    uint64_t job_id;
    uint8_t proof[SHP_WIRE_PROOF_LEN]; /* shp_wire_join_prove */
    uint32_t child_index; /* this member's place among the AN's children */
} shp_wire_join_t;

typedef struct __attribute__((packed)) shp_wire_join_raw {
    uint64_t job_id_be;
    uint8_t proof[SHP_WIRE_PROOF_LEN];
    uint32_t child_index_be;
    uint32_t reserved;
} shp_wire_join_raw_t;
_Static_assert(sizeof(shp_wire_join_raw_t) == SHP_WIRE_JOIN_LEN,
               "join payload is 48 bytes");

/* Writes exactly SHP_WIRE_HDR_LEN bytes (reserved fields zero). */
void shp_wire_hdr_pack(const shp_wire_hdr_t *hdr, void *buf);
/* Reads SHP_WIRE_HDR_LEN bytes; never fails (validate after). */
void shp_wire_hdr_unpack(const void *buf, shp_wire_hdr_t *hdr);

void shp_wire_join_pack(const shp_wire_join_t *join, void *buf);
void shp_wire_join_unpack(const void *buf, shp_wire_join_t *join);

/* A subkey of the job key for one group and one use: crypto_kdf(job key,
 * tree << 32 | group, ctx) (ctx: 8 characters, the use's name; len:
 * crypto_kdf's bounds, 16 to 64 bytes) */
void shp_wire_group_subkey(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                           uint16_t tree_id, uint32_t group_id,
                           const char ctx[8], uint8_t *key, size_t len);
/* A group's join key: the subkey "shp_join".  The manager gives it to the
 * group's ANs (never the job key); a member makes it from the job key it
 * holds. */
void shp_wire_join_key(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                       uint16_t tree_id, uint32_t group_id,
                       uint8_t key[SHP_WIRE_JOIN_KEY_LEN]);
/* A join's proof of the group's join key: HMAC-SHA-512-256 (crypto_auth)
 * keyed by it over the link's nonce, tree, group, job id and child index;
 * written to join->proof from its other fields. */
void shp_wire_join_prove(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                         const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                         uint16_t tree_id, uint32_t group_id,
                         shp_wire_join_t *join);
/* Whether join->proof is right for this join key, nonce, tree and group
 * (compared in constant time). */
int shp_wire_join_proof_ok(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                           const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                           uint16_t tree_id, uint32_t group_id,
                           const shp_wire_join_t *join);
/* A fresh random nonce for a link an AN accepted, and the header of the
 * JOIN_NONCE that carries it (tree and group 0) */
void shp_wire_nonce_new(uint8_t nonce[SHP_WIRE_NONCE_LEN], shp_wire_hdr_t *hdr);
/* A whole join message, header and payload (SHP_WIRE_JOIN_LEN bytes), as a
 * member sends it on a link whose nonce it got, from its job key. */
void shp_wire_join_make(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                        const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                        uint16_t tree_id, uint32_t group_id, uint64_t job_id,
                        uint32_t child_index, shp_wire_hdr_t *hdr,
                        uint8_t payload[SHP_WIRE_JOIN_LEN]);
/* The same from the group's join key, as an AN joins its parent. */
void shp_wire_join_make_keyed(const uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN],
                              const uint8_t nonce[SHP_WIRE_NONCE_LEN],
                              uint16_t tree_id, uint32_t group_id,
                              uint64_t job_id, uint32_t child_index,
                              shp_wire_hdr_t *hdr,
                              uint8_t payload[SHP_WIRE_JOIN_LEN]);

/* Fill a header with no reduction in it (join, join ack, error, retransmit
 * request, barrier): dtype, op and tag type NULL, everything else zero. */
void shp_wire_hdr_init(shp_wire_hdr_t *hdr, shp_wire_opcode_t opcode,
                       uint16_t tree_id, uint32_t group_id, uint32_t seq);

/* Fill a header for a reduction message (AGG_REQ / AGG_RESULT). */
void shp_wire_hdr_init_agg(shp_wire_hdr_t *hdr, shp_wire_opcode_t opcode,
                           uint16_t tree_id, uint32_t group_id, uint32_t seq,
                           const shp_reduce_desc_t *desc, uint32_t count);

/* A SPARSE payload's parts (its data: payload_len less any tag). */
typedef struct shp_wire_sparse {
    uint32_t block;
    size_t dense_len; /* count x element size */
    const uint8_t *bitmap;
    const uint8_t *packed;
    size_t packed_len;
} shp_wire_sparse_t;

/* The parts of hdr's SPARSE payload (data: data_len bytes), checked: the
 * block fits the type and the dense size, no bit past the last block, the
 * packed bytes those of the blocks the bitmap has.  Every SPARSE message
 * a transport delivers was checked so (shp_tp_deliver). */
SHP_WUR shp_status_t shp_wire_sparse_view(const shp_wire_hdr_t *hdr,
                                          const void *data, size_t data_len,
                                          shp_wire_sparse_t *v,
                                          const char **why);

/* Writes a SPARSE payload's block at out, whose bitmap the caller made at
 * out + SHP_WIRE_SPARSE_HDR; returns the head's bytes, block and bitmap
 * (the packed blocks go right after). */
size_t shp_wire_sparse_head(void *out, uint32_t block, size_t dense_len);

/*
 * Checks a received message: `msg_len` is the number of bytes it occupies
 * (header + payload), `max_payload` the negotiated maximum (a multicast
 * result's tag comes on top of it: payload_len counts data and tag).  Rejects an
 * unknown version (SHP_ERR_VERSION) or opcode, a length mismatch, count x
 * element size != payload_len, a dtype/op combination that makes no sense
 * (SHP_ERR_UNSUPPORTED), a payload above the maximum (SHP_ERR_TOO_LARGE).
 * The reason goes to *why if not NULL.
 */
SHP_WUR shp_status_t shp_wire_validate(const shp_wire_hdr_t *hdr,
                                       size_t msg_len, uint32_t max_payload,
                                       const char **why);

/*
 * For stream transports: given the first `avail` bytes of a stream, the
 * total length of the next message.  SHP_INPROGRESS if fewer than
 * SHP_WIRE_HDR_LEN bytes are there; an error if the header cannot start a
 * valid message (bad version or opcode, payload above max_payload).
 */
SHP_WUR shp_status_t shp_wire_frame_len(const void *buf, size_t avail,
                                        uint32_t max_payload, size_t *len);

/* Convert `count` elements between host order and the little-endian wire
 * order (the same operation both ways; nothing to do on little-endian
 * hosts). */
void shp_wire_payload_swap(const shp_reduce_desc_t *desc, void *buf,
                           size_t count);
/* Byte-swap every element unconditionally (what payload_swap does on a
 * big-endian host). */
void shp_wire_bswap_elems(const shp_reduce_desc_t *desc, void *buf,
                          size_t count);

const char *shp_wire_opcode_name(unsigned opcode);

#define SHP_WIRE_MAC_LEN 16
#define SHP_WIRE_MAC_KEY_LEN 32
/* Multicast results carry tags, and members take none without a right one.
 * 0 only in the build `make bench-mpi` makes to measure what the tags cost
 * (such a build takes forged results): there is no run-time switch. */
#ifndef SHP_MCAST_MAC
#define SHP_MCAST_MAC 1
#endif

/* The key of a group's multicast results, from its job's key: only the
 * job's members and the manager can make it; the manager gives it to the
 * group's ANs. */
void shp_wire_mac_key(const uint8_t job_key[SHP_WIRE_JOB_KEY_LEN],
                      uint16_t tree_id, uint32_t group_id,
                      uint8_t key[SHP_WIRE_MAC_KEY_LEN]);
/* The tag of a multicast result: hdr as sent (flags MAC, payload_len with
 * the tag), its payload_len - SHP_WIRE_MAC_LEN bytes of data, operation
 * number seq64 (seq with its wraps). */
void shp_wire_mac(const uint8_t key[SHP_WIRE_MAC_KEY_LEN], uint64_t seq64,
                  const shp_wire_hdr_t *hdr, const void *data,
                  uint8_t tag[SHP_WIRE_MAC_LEN]);
/* Whether payload (data, then the tag) carries the right tag (compared in
 * constant time); hdr must have the MAC flag and room for the tag. */
int shp_wire_mac_ok(const uint8_t key[SHP_WIRE_MAC_KEY_LEN], uint64_t seq64,
                    const shp_wire_hdr_t *hdr, const void *payload);

#endif
