/*
 * Internal to an/: what the files of the aggregation node share.  an/an.h
 * is the room's face (the types, and what main.c, the control link and the
 * tests call); this header is the seams between its parts.  Each file
 * calls only those listed before it (no two call each other, straight or
 * through others: scripts/check-layers.sh):
 *
 *   an_link.c   links: connections to children and parents, their
 *               transport endpoints, sends
 *   an_group.c  groups: set-up from the manager's JSON, joins and leaves,
 *               failure, removal, teardown; slots and their buffers
 *   an_dist.c   results down: RC, multicast, retransmits
 *   an_sparse.c sparse payloads folded (a slot's sparse fold), results
 *               packed sparse, sparse children into dense slots
 *   an_fold.c   the data path: a child's payload checked and folded in
 *               child order, the result sent up (or down: an_dist.c)
 *   an_recv.c   what arrives on links: the endpoints' callbacks, the
 *               dispatch by opcode
 *   an_run.c    the loop: socket spin, quiet links, shm wake-ups
 *   an.c        start, stop, counters (stats), the state dump
 *   an_ctl.c    the control link to the manager: drives the rest, hears
 *               of it through shp_an_events_t only
 *
 * The calls between them are plain calls (no tables on the data path but
 * the transport's own callbacks).
 */
#ifndef SHP_AN_INT_H
#define SHP_AN_INT_H

#include "an/an.h"

#include <stdlib.h>

/* seq arithmetic modulo 2^32 */
static inline int32_t an_seq_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

/* Whether one more message of g's children may complete its oldest
 * operation, as a free bcast's root's does: g carries free bcasts and
 * nothing of that operation is here yet (the loop then wakes on any
 * message: an_run.c) */
static inline int an_free_next(const shp_an_group_t *g)
{
    const shp_an_slot_t *s = &g->slots[g->folded % g->nslots];
    return g->free_seen &&
           !(s->seq == g->folded && s->state == SHP_AN_SLOT_FOLD &&
             !(s->flags & SHP_WIRE_F_FREE));
}

/* an_link.c */
shp_an_link_t *shp_an_link_new(shp_an_t *an);
void shp_an_link_free(shp_an_link_t *l);
/* l is part of group gid (a list of ids, for its loss) / no longer */
SHP_WUR shp_status_t shp_an_link_add_group(shp_an_link_t *l, uint32_t gid);
void shp_an_link_del_group(shp_an_link_t *l, uint32_t gid);
/* Send on l (NULL or closed: nothing); a failed send closes the link. */
void shp_an_send(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                 const void *payload);
void shp_an_send_error(shp_an_link_t *l, uint16_t tree_id, uint32_t group_id,
                       uint32_t seq, shp_status_t status, const char *text);
/* The link to the parent AN at addr, connected (or connecting) once for
 * every group whose parent it is */
shp_an_link_t *shp_an_parent_link(shp_an_t *an, const char *addr,
                                  uint16_t tree_id);

/* an_group.c */
/* The group and child index of a member's request, or NULL after
 * answering an unknown group, an unjoined sender or a failed group */
shp_an_group_t *shp_an_request_group(shp_an_link_t *l,
                                     const shp_wire_hdr_t *hdr,
                                     unsigned *child);
void shp_an_slot_reset(shp_an_group_t *g, shp_an_slot_t *s);
void shp_an_group_fail(shp_an_group_t *g, shp_an_link_t *from,
                       shp_status_t status, const char *reason);
void shp_an_group_free(shp_an_t *an, shp_an_group_t *g);
void shp_an_group_send_join(shp_an_group_t *g);
void shp_an_group_join_done(shp_an_group_t *g, shp_status_t status);
void shp_an_join(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                 const void *payload);
void shp_an_leave(shp_an_link_t *l, const shp_wire_hdr_t *hdr);

/* A buffer of the group's payload size (recycled), or NULL */
static inline uint8_t *an_buf_get(shp_an_group_t *g)
{
    if (g->nfree > 0) {
        return g->free_bufs[--g->nfree];
    }
    return malloc(g->payload ? g->payload : 1);
}

/* A payload copy back to the group's free list (an_group.c, an_fold.c,
 * an_sparse.c) */
static inline void an_buf_put(shp_an_group_t *g, uint8_t *buf)
{
    if (g->nfree == g->cap_free) {
        unsigned cap = g->cap_free ? 2 * g->cap_free : 16;
        uint8_t **p = realloc(g->free_bufs, cap * sizeof(*p));
        if (p == NULL) {
            free(buf);
            return;
        }
        g->free_bufs = p;
        g->cap_free = cap;
    }
    g->free_bufs[g->nfree++] = buf;
}

/* an_dist.c */
void shp_an_distribute(shp_an_group_t *g, shp_an_slot_t *s, int unicast);
/* A result from the parent: passed down.  Its group if it was a free
 * bcast's this AN had no part of (the operations after it may go now:
 * shp_an_result), else NULL. */
shp_an_group_t *shp_an_agg_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                                  const void *payload);
void shp_an_retrans_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr);

/* an_sparse.c */
/* Slot s, just opened by hdr's SPARSE payload, made a sparse fold */
SHP_WUR shp_status_t shp_an_sparse_open(shp_an_group_t *g, shp_an_slot_t *s,
                                        const shp_wire_hdr_t *hdr,
                                        const void *payload);
/* Child ci's payload (sparse or dense) into sparse slot s: 1 when every
 * child is in (the result in acc, sparse or dense, s->len its bytes), 0
 * not yet, -1 a duplicate, a bad payload or no memory */
int shp_an_sparse_add(shp_an_group_t *g, shp_an_slot_t *s, unsigned ci,
                      const shp_wire_hdr_t *hdr, const void *payload);
/* A SPARSE payload for dense slot s, expanded into a buffer of the
 * group's (an_buf_get); NULL: it does not fit s, or no memory */
uint8_t *shp_an_sparse_expand(shp_an_group_t *g, const shp_an_slot_t *s,
                              const shp_wire_hdr_t *hdr, const void *payload);

/* an_fold.c */
void shp_an_agg_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                    const void *payload);
/* A result from the parent (shp_an_agg_result), and what it lets go */
void shp_an_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                   const void *payload);

/* an_recv.c: the links' endpoint callbacks (an->link_cbs), and the
 * transport's accept callback */
extern const shp_tp_ep_cbs_t shp_an_link_cbs;
void shp_an_on_accept(shp_tp_t *tp, shp_tp_ep_t *ep);

/* an_run.c */
uint32_t shp_an_wake_need(void *arg);

#endif
