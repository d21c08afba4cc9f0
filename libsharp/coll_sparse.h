/*
 * libsharp_coll: block-sparse fragments out and results in (coll_sparse.c).
 */
#ifndef SHP_LIBSHARP_COLL_SPARSE_H
#define SHP_LIBSHARP_COLL_SPARSE_H

#include "libsharp/coll_comm.h"

/* The payload to send for fragment h of r (dense: its len bytes): dense
 * itself, or comm's sparse form of it with h's flag and length set. */
const void *coll_sparse_frag(coll_comm_t *comm, const coll_req_t *r,
                             const void *dense, size_t len, shp_wire_hdr_t *h);

/* A SPARSE result of a fragment of len dense bytes: its bytes [lo, hi)
 * into dst.  -1: it is not such a result. */
int coll_sparse_take(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                     const void *payload, size_t len, uint8_t *dst, size_t lo,
                     size_t hi);

#endif
