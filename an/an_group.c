/*
 * The aggregation node's groups.  The manager sets a group up with one
 * JSON request (group_add: its tree, job key, children, place in the tree,
 * distribution, quota and payload size); a group below the top then joins
 * its parent AN, retrying while the parent does not know it yet, and the
 * request is answered only once that join is done.  Children join with the
 * job key (compared in constant time) and their index, and may leave
 * cleanly.  A group fails as a whole: every other link of it gets the
 * error and the driver is told (shp_an_events_t).  Removal tells children
 * still joined; teardown frees the slots, buffers and link places.
 */
#include "an/an_int.h"

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/plant.h"

#include <sodium.h>
#include "core/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events, to whoever drives the core (shp_an_set_events) --------------- */

static void an_tell_group_failed(shp_an_t *an, const shp_an_group_t *g,
                                 const char *reason)
{
    if (an->events != NULL && an->events->group_failed != NULL) {
        an->events->group_failed(an->events_arg, g, reason);
    }
}

static void an_tell_group_add_done(shp_an_t *an, int64_t req_id,
                                   shp_status_t status, const char *error)
{
    if (an->events != NULL && an->events->group_add_done != NULL) {
        an->events->group_add_done(an->events_arg, req_id, status, error);
    }
}

/* Lookup, failure and teardown ------------------------------------------- */

shp_an_group_t *shp_an_group_find(shp_an_t *an, uint32_t id)
{
    shp_an_group_t *g;

    HASH_FIND(hh, an->groups, &id, sizeof(id), g);
    return g;
}

/* The group and child index of a member's request, or NULL after
 * answering an unknown group, an unjoined sender or a failed group with an
 * error. */
shp_an_group_t *shp_an_request_group(shp_an_link_t *l,
                                     const shp_wire_hdr_t *hdr, unsigned *child)
{
    shp_an_t *an = l->an;
    shp_an_group_t *g = shp_an_group_find(an, hdr->group_id);
    unsigned ci;

    if (g == NULL) {
        an->stats.err_unknown_group++;
        shp_an_send_error(l, hdr->tree_id, hdr->group_id, hdr->seq,
                          SHP_ERR_GROUP_UNKNOWN, "unknown group");
        return NULL;
    }
    for (ci = 0; ci < g->nchildren && g->children[ci].link != l; ci++) {
    }
    if (ci == g->nchildren) {
        an->stats.err_protocol++;
        shp_an_send_error(l, hdr->tree_id, hdr->group_id, hdr->seq,
                          SHP_ERR_PERM, "not joined to this group");
        return NULL;
    }
    g->news = 1; /* its quiet links are worth a read (shp_an_run) */
    if (g->failed) {
        shp_an_send_error(l, g->tree_id, g->id, hdr->seq, g->fail_status,
                          "group failed");
        return NULL;
    }
    *child = ci;
    return g;
}

void shp_an_slot_reset(shp_an_group_t *g, shp_an_slot_t *s)
{
    unsigned i;

    if (s->state == SHP_AN_SLOT_FOLD && !(s->flags & SHP_WIRE_F_BCAST) &&
        !s->sparse) {
        shp_fold_cleanup(&s->fold); /* a bcast's or sparse slot has none */
    }
    s->sparse = 0;
    for (i = 0; i < g->nchildren; i++) {
        if (s->copies[i] != NULL) {
            an_buf_put(g, s->copies[i]);
            s->copies[i] = NULL;
        }
        s->want[i] = 0;
    }
    s->state = SHP_AN_SLOT_FREE;
    s->arrived = 0;
}

/* Fail a group: every other link of it gets an error (so members fail
 * their pending and later operations, and ANs pass it on), the AM is told.
 * `from` (may be NULL) is the link the failure came from. */
void shp_an_group_fail(shp_an_group_t *g, shp_an_link_t *from,
                       shp_status_t status, const char *reason)
{
    unsigned i;

    if (g->failed) {
        return;
    }
    g->failed = 1;
    g->fail_status = status;
    g->an->stats.groups_failed++;
    shp_warn_id("AN0201", "group %u (job %llu) failed: %s", g->id,
                (unsigned long long)g->job_id, reason);
    for (i = 0; i < g->nchildren; i++) {
        if (g->children[i].link != NULL && g->children[i].link != from) {
            shp_an_send_error(g->children[i].link, g->tree_id, g->id, 0, status,
                              reason);
        }
    }
    if (g->parent != NULL && g->parent != from && g->parent_joined) {
        shp_an_send_error(g->parent, g->tree_id, g->id, 0, status, reason);
    }
    an_tell_group_failed(g->an, g, reason);
}

void shp_an_group_free(shp_an_t *an, shp_an_group_t *g)
{
    unsigned i;

    for (i = 0; i < g->nslots; i++) {
        shp_an_slot_t *s = &g->slots[i];
        if (s->copies != NULL && s->want != NULL) {
            shp_an_slot_reset(g, s);
        }
        free(s->copies);
        free(s->acc);
        free(s->pending);
        free(s->want);
        free(s->seen); /* a sparse slot's (an_sparse.c) */
        free(s->ones);
        free(s->sbuf);
        free(s->clen);
    }
    for (i = 0; i < g->nfree; i++) {
        free(g->free_bufs[i]);
    }
    for (i = 0; i < g->nchildren; i++) {
        if (g->children[i].link != NULL) {
            shp_an_link_del_group(g->children[i].link, g->id);
        }
    }
    if (g->parent != NULL) {
        shp_an_link_del_group(g->parent, g->id);
    }
    if (g->mcast_tx != NULL) {
        shp_tp_close(g->mcast_tx);
    }
    ev_timer_stop(an->loop, &g->join_timer);
    free(g->free_bufs);
    free(g->slots);
    sodium_memzero(g->join_key, sizeof(g->join_key));
    sodium_memzero(g->mac_key, sizeof(g->mac_key));
    free(g->children);
    free(g);
}

/* Joining the parent ---------------------------------------------------- */

void shp_an_group_send_join(shp_an_group_t *g)
{
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;

    shp_wire_join_make_keyed(g->join_key, g->parent->nonce, g->tree_id, g->id,
                             g->job_id, g->parent_index, &h, payload);
    if (g->join_tries++ == 0) {
        g->join_start_ns = shp_time_ns();
    }
    shp_an_send(g->parent, &h, payload);
}

static void an_join_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_an_group_t *g = w->data;

    (void)loop;
    (void)revents;
    if (g->parent != NULL && g->parent->have_nonce && !g->parent_joined) {
        shp_an_group_send_join(g);
    }
}

/* The parent's answer to our join, or its loss. */
void shp_an_group_join_done(shp_an_group_t *g, shp_status_t status)
{
    /* the AM configures every AN of a group at once, so the parent usually
     * learns of it within a millisecond or two: retry soon, then back off
     * (1, 2, 4 ... 50 ms) */
    int shift = g->join_tries < 7 ? g->join_tries - 1 : 6;
    double retry = 0.001 * (double)(1 << (shift > 0 ? shift : 0));
    uint64_t waited = shp_time_ns() - g->join_start_ns;

    if (retry > 0.05) {
        retry = 0.05;
    }
    if (status == SHP_ERR_GROUP_UNKNOWN &&
        waited < (uint64_t)g->an->cfg.join_timeout_ms * SHP_NSEC_PER_MSEC) {
        /* the AM may still be configuring the parent: try again */
        ev_timer_set(&g->join_timer, retry, 0.);
        ev_timer_start(g->an->loop, &g->join_timer);
        return;
    }
    if (status == SHP_OK) {
        g->parent_joined = 1;
    } else {
        shp_an_group_fail(g, g->parent, status, "cannot join the parent AN");
    }
    if (g->add_req_id >= 0) {
        an_tell_group_add_done(g->an, g->add_req_id, status,
                               status == SHP_OK ? NULL
                                                : shp_status_str(status));
        g->add_req_id = -1;
    }
}

/* Set-up and removal, for the manager ----------------------------------- */

static shp_status_t an_reject(const char *reason, const char **why)
{
    *why = reason;
    return SHP_ERR_INVALID_PARAM;
}

static shp_status_t an_no_memory(const char **why)
{
    *why = "out of memory";
    return SHP_ERR_NO_MEMORY;
}

shp_status_t shp_an_tree_set(shp_an_t *an, const json_t *req, const char **why)
{
    const char *parent = "";
    int64_t tree_id;
    json_t *p;

    if (shp_json_get_int(req, "tree_id", 0, SHP_AN_MAX_TREES - 1, &tree_id,
                         why) != SHP_OK) {
        return an_reject("bad tree_id", why);
    }
    p = json_object_get(req, "parent");
    if (p != NULL && !json_is_null(p)) {
        if (!json_is_string(p)) {
            return an_reject("bad parent", why);
        }
        parent = json_string_value(p);
    }
    if (!an->trees[tree_id].configured) {
        if (an->ntrees >= an->cfg.max_trees) {
            *why = "tree limit reached";
            return SHP_ERR_NO_RESOURCE;
        }
        an->ntrees++;
    }
    an->trees[tree_id].configured = 1;
    snprintf(an->trees[tree_id].parent, sizeof(an->trees[tree_id].parent), "%s",
             parent);
    return SHP_OK;
}

/* A group_add request, read and checked before anything is built */
typedef struct an_group_req {
    int64_t gid, tree_id, osts, payload, pidx;
    uint64_t job_id;
    int top;
    const char *dist_name;
    int dist; /* shp_dist_t, never AUTO */
    json_t *children;
    const char *mcast; /* the top's multicast address (dist mcast, both) */
    uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN];
    uint8_t mac_key[SHP_WIRE_MAC_KEY_LEN];
} an_group_req_t;

/* The request's members, each of the right type and range */
static shp_status_t an_group_read(const shp_an_t *an, const json_t *req,
                                  an_group_req_t *r, const char **why)
{
    r->pidx = 0;
    r->top = 1;
    r->dist_name = "rc";
    if (shp_json_get_int(req, "group_id", 0, UINT32_MAX, &r->gid, why) !=
            SHP_OK ||
        shp_json_get_int(req, "tree_id", 0, SHP_AN_MAX_TREES - 1, &r->tree_id,
                         why) != SHP_OK ||
        shp_json_get_u64(req, "job_id", &r->job_id, why) != SHP_OK ||
        shp_json_get_int(req, "osts", 1, an->cfg.max_osts, &r->osts, why) !=
            SHP_OK ||
        shp_json_get_int(req, "payload", 0, (int64_t)an->cfg.max_payload,
                         &r->payload, why) != SHP_OK ||
        shp_json_get_array(req, "children", &r->children, why) != SHP_OK ||
        shp_json_get_bool(req, "top", &r->top, why) != SHP_OK ||
        (!r->top &&
         shp_json_get_int(req, "parent_index", 0, SHP_AN_MAX_CHILDREN, &r->pidx,
                          why) != SHP_OK) ||
        (json_object_get(req, "dist") != NULL &&
         shp_json_get_str(req, "dist", &r->dist_name, why) != SHP_OK)) {
        return SHP_ERR_INVALID_PARAM; /* *why names the member */
    }
    return SHP_OK;
}

/* Whether the group has a place here: its size, its tree, its position in
 * the tree, its id, the limit */
static shp_status_t an_group_fits(shp_an_t *an, const an_group_req_t *r,
                                  const char **why)
{
    size_t n = json_array_size(r->children);

    if (n == 0 || n > SHP_AN_MAX_CHILDREN) {
        return an_reject("a group needs 1 to 1024 children here", why);
    }
    if (!an->trees[r->tree_id].configured) {
        return an_reject("unknown tree", why);
    }
    if (!r->top && an->trees[r->tree_id].parent[0] == '\0') {
        return an_reject("not the top of the group, but the tree root", why);
    }
    if (shp_an_group_find(an, (uint32_t)r->gid) != NULL) {
        *why = "group exists";
        return SHP_ERR_EXISTS;
    }
    if (an->ngroups >= an->cfg.max_groups) {
        *why = "group limit reached";
        return SHP_ERR_NO_RESOURCE;
    }
    return SHP_OK;
}

/* The values the group is built from: distribution, its keys, the kinds of
 * its children, the multicast address */
static shp_status_t an_group_read_setup(const shp_an_t *an, const json_t *req,
                                        an_group_req_t *r, const char **why)
{
    const char *kind, *d = r->dist_name;
    json_t *c;
    size_t i;

    r->dist = shp_dist_parse(d);
    if (r->dist <= SHP_DIST_AUTO) { /* the manager chose before it asked */
        return an_reject("dist must be rc, mcast or both", why);
    }
    if (shp_json_get_hex(req, "join_key", r->join_key, sizeof(r->join_key),
                         why) != SHP_OK ||
        shp_json_get_hex(req, "mcast_key", r->mac_key, sizeof(r->mac_key),
                         why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    json_array_foreach(r->children, i, c)
    {
        if (shp_json_get_str(c, "kind", &kind, why) != SHP_OK ||
            (strcmp(kind, "an") && strcmp(kind, "member"))) {
            return an_reject("child kind must be an or member", why);
        }
    }
    r->mcast = NULL;
    if (r->top && (r->dist & SHP_DIST_MCAST) &&
        (shp_json_get_str(req, "mcast_addr", &r->mcast, why) != SHP_OK ||
         !an->have_mcast)) {
        return an_reject("multicast needs mcast_addr and a multicast "
                         "transport",
                         why);
    }
    return SHP_OK;
}

static shp_status_t an_group_alloc_slots(shp_an_group_t *g)
{
    /* 2 x osts, and SHP_WIRE_FREE_SYNC more: a member may be that many
     * operations behind a root of free bcasts (an_fold.c) */
    unsigned n = 2 * g->osts + SHP_WIRE_FREE_SYNC, i;
    shp_an_slot_t *slots = calloc(n, sizeof(*slots));

    if (slots == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    g->slots = slots;
    g->nslots = n;
    for (i = 0; i < g->nslots; i++) {
        shp_an_slot_t *s = &g->slots[i];
        s->group = g;
        s->copies = calloc(g->nchildren, sizeof(*s->copies));
        s->pending = calloc(g->nchildren, sizeof(*s->pending));
        s->want = calloc(g->nchildren, 1);
        s->acc = malloc(g->payload + SHP_WIRE_MAC_LEN); /* room for a tag */
        if (s->copies == NULL || s->pending == NULL || s->want == NULL ||
            s->acc == NULL) {
            return SHP_ERR_NO_MEMORY;
        }
    }
    return SHP_OK;
}

/* The group of a checked request, with its children and slots, not yet
 * known to anyone (*out: what there is of it, for shp_an_group_free) */
static shp_status_t an_group_build(shp_an_t *an, const an_group_req_t *r,
                                   shp_an_group_t **out, const char **why)
{
    shp_an_group_t *g = calloc(1, sizeof(*g));
    size_t n = json_array_size(r->children), i;
    json_t *c;

    *out = g;
    if (g == NULL) {
        return an_no_memory(why);
    }
    g->an = an;
    g->id = (uint32_t)r->gid;
    g->tree_id = (uint16_t)r->tree_id;
    g->job_id = r->job_id;
    g->osts = (unsigned)r->osts;
    g->payload = (uint32_t)r->payload;
    g->is_top = r->top;
    g->parent_index = (uint32_t)r->pidx;
    g->add_req_id = -1;
    g->dist = r->dist;
    ev_timer_init(&g->join_timer, an_join_timer_cb, 0.05, 0.);
    g->join_timer.data = g;
    memcpy(g->join_key, r->join_key, sizeof(g->join_key));
    memcpy(g->mac_key, r->mac_key, sizeof(g->mac_key));
    g->children = calloc(n, sizeof(*g->children));
    if (g->children == NULL) {
        return an_no_memory(why);
    }
    g->nchildren = (unsigned)n;
    json_array_foreach(r->children, i, c)
    {
        const char *kind = json_string_value(json_object_get(c, "kind"));
        g->children[i].is_an = !strcmp(kind, "an"); /* checked: a string */
    }
    if (an_group_alloc_slots(g) != SHP_OK) {
        return an_no_memory(why);
    }
    return SHP_OK;
}

/* Open the group's multicast sender, make it known, and below the top
 * join the parent AN: SHP_INPROGRESS, answered when the parent answers */
static shp_status_t an_group_open(shp_an_t *an, shp_an_group_t *g,
                                  const an_group_req_t *r, int64_t req_id,
                                  const char **why)
{
    shp_status_t st;

    if (r->mcast != NULL) {
        snprintf(g->mcast_addr, sizeof(g->mcast_addr), "%s", r->mcast);
        st = an->mcast_tp.ops->mcast_sender(&an->mcast_tp, r->mcast,
                                            an->link_cbs, NULL, &g->mcast_tx);
        if (st != SHP_OK) {
            *why = "cannot open the multicast sender";
            return st;
        }
    }
    HASH_ADD(hh, an->groups, id, sizeof(g->id), g);
    an->ngroups++;
    if (g->is_top) {
        return SHP_OK;
    }
    g->parent =
        shp_an_parent_link(an, an->trees[g->tree_id].parent, g->tree_id);
    if (g->parent == NULL ||
        shp_an_link_add_group(g->parent, g->id) != SHP_OK) {
        *why = "cannot reach the parent AN";
        return SHP_ERR_UNREACHABLE;
    }
    g->add_req_id = req_id;
    if (g->parent->have_nonce) {
        shp_an_group_send_join(g);
    }
    return SHP_INPROGRESS;
}

/* Read and check the request, build the group, open it; a failure after
 * the build is undone in one place (out). */
shp_status_t shp_an_group_add(shp_an_t *an, const json_t *req, int64_t req_id,
                              const char **why)
{
    an_group_req_t r;
    shp_an_group_t *g = NULL;
    shp_status_t status;

    status = an_group_read(an, req, &r, why);
    if (status != SHP_OK) {
        goto out;
    }
    status = an_group_fits(an, &r, why);
    if (status != SHP_OK) {
        goto out;
    }
    status = an_group_read_setup(an, req, &r, why);
    if (status != SHP_OK) {
        goto out;
    }
    status = an_group_build(an, &r, &g, why);
    if (status != SHP_OK) {
        goto out;
    }
    status = an_group_open(an, g, &r, req_id, why);
out:
    if (status < 0 && g != NULL) {
        if (shp_an_group_find(an, g->id) == g) {
            HASH_DEL(an->groups, g);
            an->ngroups--;
        }
        shp_an_group_free(an, g);
    }
    return status;
}

shp_status_t shp_an_group_remove(shp_an_t *an, uint32_t id)
{
    shp_an_group_t *g = shp_an_group_find(an, id);

    if (g == NULL) {
        return SHP_ERR_GROUP_UNKNOWN;
    }
    if (shp_planted("an_leak")) {
        return SHP_OK;
    }
    if (!g->failed) {
        /* Children still joined are told: after an orderly destroy every
         * member has left, but a revoked group is removed while members may
         * be inside an operation, and the error that failed it elsewhere
         * may reach this AN after the removal (and then finds no group):
         * nothing may wait on a group that is gone.  (Sent while the group
         * can still be found: a send that fails closes its link, and the
         * close clears the link's places.) */
        unsigned i;
        g->failed = 1;
        g->fail_status = SHP_ERR_GROUP_REVOKED;
        for (i = 0; i < g->nchildren; i++) {
            if (g->children[i].link != NULL) {
                shp_an_send_error(g->children[i].link, g->tree_id, g->id, 0,
                                  SHP_ERR_GROUP_REVOKED,
                                  "the aggregation manager removed the group");
            }
        }
    }
    HASH_DEL(an->groups, g);
    an->ngroups--;
    if (g->add_req_id >= 0) {
        an_tell_group_add_done(an, g->add_req_id, SHP_ERR_CANCELED,
                               "group removed");
    }
    shp_an_group_free(an, g);
    return SHP_OK;
}

/* Children joining and leaving ------------------------------------------ */

/* `l` holds another place than `ci` among the group's children (a link is
 * one child of a group: a leave or a lost link frees one place). */
static int an_child_slot_taken(const shp_an_group_t *g, const shp_an_link_t *l,
                               uint32_t ci)
{
    unsigned i;

    for (i = 0; i < g->nchildren; i++) {
        if (i != ci && g->children[i].link == l) {
            return 1;
        }
    }
    return 0;
}

void shp_an_join(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                 const void *payload)
{
    shp_an_t *an = l->an;
    shp_an_group_t *g = shp_an_group_find(an, hdr->group_id);
    shp_status_t status = SHP_OK;
    shp_wire_join_t join;
    shp_wire_hdr_t ack;

    shp_wire_join_unpack(payload, &join);
    if (g == NULL) {
        status = SHP_ERR_GROUP_UNKNOWN;
        an->stats.join_early++;
    } else if (join.job_id != g->job_id ||
               !shp_wire_join_proof_ok(g->join_key, l->nonce, g->tree_id, g->id,
                                       &join)) {
        /* the proof is over this link's nonce: one recorded on another
         * link does not verify here */
        status = SHP_ERR_BAD_KEY;
        an->stats.err_bad_key++;
        shp_warn_id("AN0101",
                    "refused join of group %u from %s: no proof of the "
                    "job key",
                    hdr->group_id, l->addr);
    } else if (join.child_index >= g->nchildren) {
        status = SHP_ERR_INVALID_PARAM;
    } else if ((g->children[join.child_index].link != NULL &&
                g->children[join.child_index].link != l) ||
               an_child_slot_taken(g, l, join.child_index)) {
        /* a place taken by another link, or this link in another place */
        status = SHP_ERR_EXISTS;
    } else if (g->failed) {
        status = g->fail_status;
    } else if (shp_an_link_add_group(l, g->id) != SHP_OK) {
        status = SHP_ERR_NO_MEMORY;
    }
    if (status == SHP_OK) {
        ev_timer_stop(an->loop, &l->join_deadline); /* it joined in time */
        if (l->unjoined) { /* a member now: full-sized messages */
            l->unjoined = 0;
            an->nunjoined--;
            l->ep->rx_limit = 0;
        }
        g->children[join.child_index].link = l;
        g->children[join.child_index].rc_only = 0;
        if (g->children[join.child_index].left) {
            g->children[join.child_index].left = 0;
            g->nleft--;
        }
        an->stats.joins++;
    } else {
        an->stats.join_refused++;
    }
    shp_wire_hdr_init(&ack, SHP_WIRE_OP_GROUP_JOIN_ACK, hdr->tree_id,
                      hdr->group_id, 0);
    ack.status = (int16_t)status;
    shp_an_send(l, &ack, NULL);
}

/* A member leaves cleanly (its communicator is being destroyed): its link
 * closing no longer fails the group, but an operation that would need it
 * does (nothing may wait for a member that is gone). */
void shp_an_leave(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
{
    unsigned ci;
    shp_an_group_t *g = shp_an_request_group(l, hdr, &ci);

    if (g == NULL) {
        return;
    }
    g->children[ci].left = 1;
    g->nleft++;
    g->children[ci].link = NULL;
    shp_an_link_del_group(l, g->id);
    /* the echo tells the member that nothing more of this group follows:
     * it may close without losing anything in flight */
    shp_wire_hdr_t ack;
    shp_wire_hdr_init(&ack, SHP_WIRE_OP_GROUP_LEAVE, g->tree_id, g->id,
                      hdr->seq);
    shp_an_send(l, &ack, NULL);
}
