/*
 * The aggregation node's data path: links, groups, operation slots, the
 * fixed-order fold, result distribution, retransmits and faults.
 *
 * Operation slots: a group with a quota of `osts` outstanding operations has
 * 2 x osts slots, slot = seq mod 2 x osts.  A child sends seq s only after
 * it received the result of s - osts, so s - osts was produced at the top,
 * so every child everywhere sent s - osts, so every member already holds
 * the result of s - 2 x osts: the slot s reuses is free of any obligation
 * (docs/an.md).  The same argument bounds the window: a valid s satisfies
 * s < folded + osts, where `folded` counts the operations folded here.
 */
#include "an/an.h"

#include "protocol/ctl.h"
#include "reduce/exact.h"
#include "core/log.h"
#include "core/time.h"

#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* seq arithmetic modulo 2^32 */
static inline int32_t shp_seq_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

static int shp_an_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        d |= a[i] ^ b[i];
    }
    return d == 0;
}

/* Events, to whoever drives the core (shp_an_set_events) --------------- */

void shp_an_set_events(shp_an_t *an, const shp_an_events_t *events, void *arg)
{
    an->events = events;
    an->events_arg = arg;
}

static void shp_an_tell_group_failed(shp_an_t *an, const shp_an_group_t *g,
                                     const char *reason)
{
    if (an->events != NULL && an->events->group_failed != NULL) {
        an->events->group_failed(an->events_arg, g, reason);
    }
}

static void shp_an_tell_group_add_done(shp_an_t *an, int64_t req_id,
                                       shp_status_t status, const char *error)
{
    if (an->events != NULL && an->events->group_add_done != NULL) {
        an->events->group_add_done(an->events_arg, req_id, status, error);
    }
}

/* Links ---------------------------------------------------------------------- */

static void shp_an_link_on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                               const void *payload);
static void shp_an_link_on_close(shp_tp_ep_t *ep, shp_status_t reason);
static void shp_an_link_on_connect(shp_tp_ep_t *ep);

static const shp_tp_ep_cbs_t shp_an_link_cbs = {
    .on_msg = shp_an_link_on_msg,
    .on_connect = shp_an_link_on_connect,
    .on_close = shp_an_link_on_close,
};

static shp_an_link_t *shp_an_link_new(shp_an_t *an)
{
    shp_an_link_t *l = calloc(1, sizeof(*l));

    if (l != NULL) {
        l->an = an;
        l->next = an->links;
        an->links = l;
    }
    return l;
}

static void shp_an_link_free(shp_an_link_t *l)
{
    shp_an_t *an = l->an;
    shp_an_link_t **pp;

    an->nquiet -= l->quiet != 0;
    for (pp = &an->links; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    if (l->is_parent) {
        HASH_DEL(an->parents, l);
    }
    free(l->groups);
    free(l);
}

static shp_status_t shp_an_link_add_group(shp_an_link_t *l, uint32_t gid)
{
    unsigned i;

    for (i = 0; i < l->ngroups; i++) {
        if (l->groups[i] == gid) {
            return SHP_OK;
        }
    }
    if (l->ngroups == l->cap_groups) {
        unsigned cap = l->cap_groups ? 2 * l->cap_groups : 8;
        uint32_t *g = realloc(l->groups, cap * sizeof(*g));
        if (g == NULL) {
            return SHP_ERR_NO_MEMORY;
        }
        l->groups = g;
        l->cap_groups = cap;
    }
    l->groups[l->ngroups++] = gid;
    return SHP_OK;
}

static void shp_an_link_del_group(shp_an_link_t *l, uint32_t gid)
{
    unsigned i;

    for (i = 0; i < l->ngroups; i++) {
        if (l->groups[i] == gid) {
            l->groups[i] = l->groups[--l->ngroups];
            return;
        }
    }
}

static void shp_an_send(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                        const void *payload)
{
    shp_status_t status;

    if (l == NULL || l->ep == NULL) {
        return;
    }
    status = shp_tp_send(l->ep, hdr, payload);
    if (status != SHP_OK) {
        shp_warn_sparse(1000, "send to %s failed: %s", l->addr,
                        shp_status_str(status));
        shp_tp_close(l->ep); /* on_close fails its groups */
    }
}

static void shp_an_send_error(shp_an_link_t *l, uint16_t tree_id,
                              uint32_t group_id, uint32_t seq,
                              shp_status_t status, const char *text)
{
    shp_wire_hdr_t h;
    size_t len = text ? strlen(text) : 0;

    if (len > SHP_WIRE_ERR_MSG_MAX) {
        len = SHP_WIRE_ERR_MSG_MAX;
    }
    shp_wire_hdr_init(&h, SHP_WIRE_OP_ERROR, tree_id, group_id, seq);
    h.status = (int16_t)status;
    h.payload_len = (uint32_t)len;
    shp_an_send(l, &h, text);
}

/* Groups ----------------------------------------------------------------- */

shp_an_group_t *shp_an_group_find(shp_an_t *an, uint32_t id)
{
    shp_an_group_t *g;

    HASH_FIND(hh, an->groups, &id, sizeof(id), g);
    return g;
}

/* Fail a group: every other link of it gets an error (so members fail
 * their pending and later operations, and ANs pass it on), the AM is told.
 * `from` (may be NULL) is the link the failure came from. */
static void shp_an_group_fail(shp_an_group_t *g, shp_an_link_t *from,
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
    shp_an_tell_group_failed(g->an, g, reason);
}

static uint8_t *shp_an_buf_get(shp_an_group_t *g)
{
    if (g->nfree > 0) {
        return g->free_bufs[--g->nfree];
    }
    return malloc(g->payload ? g->payload : 1);
}

static void shp_an_buf_put(shp_an_group_t *g, uint8_t *buf)
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

static void shp_an_fold_release(void *arg, unsigned child, const void *payload)
{
    shp_an_slot_t *s = arg;
    shp_an_group_t *g = s->group;

    if (s->copies[child] != NULL && s->copies[child] == payload) {
        shp_an_buf_put(g, s->copies[child]);
        s->copies[child] = NULL;
    }
}

static void shp_an_slot_reset(shp_an_group_t *g, shp_an_slot_t *s)
{
    unsigned i;

    if (s->state == SHP_AN_SLOT_FOLD) {
        shp_fold_cleanup(&s->fold);
    }
    for (i = 0; i < g->nchildren; i++) {
        if (s->copies[i] != NULL) {
            shp_an_buf_put(g, s->copies[i]);
            s->copies[i] = NULL;
        }
        s->want[i] = 0;
    }
    s->state = SHP_AN_SLOT_FREE;
    s->arrived = 0;
}

static void shp_an_group_free(shp_an_t *an, shp_an_group_t *g)
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
    free(g->children);
    free(g);
}

static void shp_an_group_send_join(shp_an_group_t *g)
{
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    shp_wire_join_t join;
    shp_wire_hdr_t h;

    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_JOIN, g->tree_id, g->id, 0);
    h.payload_len = SHP_WIRE_JOIN_LEN;
    join.job_id = g->job_id;
    memcpy(join.job_key, g->key, sizeof(join.job_key));
    join.child_index = g->parent_index;
    shp_wire_join_pack(&join, payload);
    if (g->join_tries++ == 0) {
        g->join_start_ns = shp_time_ns();
    }
    shp_an_send(g->parent, &h, payload);
}

static void shp_an_join_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_an_group_t *g = w->data;

    (void)loop;
    (void)revents;
    if (g->parent != NULL && g->parent->connected && !g->parent_joined) {
        shp_an_group_send_join(g);
    }
}

/* The parent's answer to our join, or its loss. */
static void shp_an_group_join_done(shp_an_group_t *g, shp_status_t status)
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
        shp_an_tell_group_add_done(g->an, g->add_req_id, status,
                                   status == SHP_OK ? NULL
                                                    : shp_status_str(status));
        g->add_req_id = -1;
    }
}

static shp_an_link_t *shp_an_parent_link(shp_an_t *an, const char *addr,
                                         uint16_t tree_id)
{
    shp_an_link_t *l;

    HASH_FIND_STR(an->parents, addr, l);
    if (l != NULL) {
        return l;
    }
    l = shp_an_link_new(an);
    if (l == NULL) {
        return NULL;
    }
    l->is_parent = 1;
    l->tree_id = tree_id;
    snprintf(l->addr, sizeof(l->addr), "%s", addr);
    if (an->tp.ops->connect(&an->tp, addr, &shp_an_link_cbs, l, &l->ep) !=
        SHP_OK) {
        shp_an_link_free(l);
        return NULL;
    }
    HASH_ADD_STR(an->parents, addr, l);
    return l;
}

static shp_status_t shp_an_reject(const char *reason, const char **why)
{
    *why = reason;
    return SHP_ERR_INVALID_PARAM;
}

shp_status_t shp_an_tree_set(shp_an_t *an, const json_t *req, const char **why)
{
    const char *parent = "";
    int64_t tree_id;
    json_t *p;

    if (shp_json_get_int(req, "tree_id", 0, SHP_AN_MAX_TREES - 1, &tree_id,
                         why) != SHP_OK) {
        return shp_an_reject("bad tree_id", why);
    }
    p = json_object_get(req, "parent");
    if (p != NULL && !json_is_null(p)) {
        if (!json_is_string(p)) {
            return shp_an_reject("bad parent", why);
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

static shp_status_t shp_an_group_alloc_slots(shp_an_group_t *g)
{
    unsigned i;

    g->nslots = 2 * g->osts;
    g->slots = calloc(g->nslots, sizeof(*g->slots));
    if (g->slots == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
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

shp_status_t shp_an_group_add(shp_an_t *an, const json_t *req, int64_t req_id,
                              const char **why)
{
    int64_t gid, tree_id, osts, payload, pidx = 0;
    const char *dist = "rc", *mcast = NULL, *kind;
    json_t *children, *c;
    shp_an_group_t *g;
    uint64_t job_id;
    int top = 1;
    size_t i;

    if (shp_json_get_int(req, "group_id", 0, UINT32_MAX, &gid, why) != SHP_OK ||
        shp_json_get_int(req, "tree_id", 0, SHP_AN_MAX_TREES - 1, &tree_id,
                         why) != SHP_OK ||
        shp_json_get_u64(req, "job_id", &job_id, why) != SHP_OK ||
        shp_json_get_int(req, "osts", 1, an->cfg.max_osts, &osts, why) !=
            SHP_OK ||
        shp_json_get_int(req, "payload", 0, (int64_t)an->cfg.max_payload,
                         &payload, why) != SHP_OK ||
        shp_json_get_array(req, "children", &children, why) != SHP_OK ||
        shp_json_get_bool(req, "top", &top, why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM; /* *why names the member */
    }
    if (!top && shp_json_get_int(req, "parent_index", 0, SHP_AN_MAX_CHILDREN,
                                 &pidx, why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (json_object_get(req, "dist") != NULL &&
        shp_json_get_str(req, "dist", &dist, why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (json_array_size(children) == 0 ||
        json_array_size(children) > SHP_AN_MAX_CHILDREN) {
        return shp_an_reject("a group needs 1 to 1024 children here", why);
    }
    if (!an->trees[tree_id].configured) {
        return shp_an_reject("unknown tree", why);
    }
    if (!top && an->trees[tree_id].parent[0] == '\0') {
        return shp_an_reject("not the top of the group, but the tree root",
                             why);
    }
    if (shp_an_group_find(an, (uint32_t)gid) != NULL) {
        *why = "group exists";
        return SHP_ERR_EXISTS;
    }
    if (an->ngroups >= an->cfg.max_groups) {
        *why = "group limit reached";
        return SHP_ERR_NO_RESOURCE;
    }

    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    g->an = an;
    g->id = (uint32_t)gid;
    g->tree_id = (uint16_t)tree_id;
    g->job_id = job_id;
    g->osts = (unsigned)osts;
    g->payload = (uint32_t)payload;
    g->is_top = top;
    g->parent_index = (uint32_t)pidx;
    g->add_req_id = -1;
    g->nchildren = (unsigned)json_array_size(children);
    ev_timer_init(&g->join_timer, shp_an_join_timer_cb, 0.05, 0.);
    g->join_timer.data = g;
    g->dist = !strcmp(dist, "mcast")  ? SHP_AN_DIST_MCAST
              : !strcmp(dist, "both") ? SHP_AN_DIST_MCAST | SHP_AN_DIST_RC
              : !strcmp(dist, "rc")   ? SHP_AN_DIST_RC
                                      : 0;
    if (g->dist == 0) {
        free(g);
        return shp_an_reject("dist must be rc, mcast or both", why);
    }
    if (shp_json_get_hex(req, "job_key", g->key, sizeof(g->key), why) !=
        SHP_OK) {
        free(g);
        return SHP_ERR_INVALID_PARAM;
    }
    shp_wire_mac_key(g->key, g->tree_id, g->id, g->mac_key);
    g->children = calloc(g->nchildren, sizeof(*g->children));
    if (g->children == NULL || shp_an_group_alloc_slots(g) != SHP_OK) {
        shp_an_group_free(an, g);
        *why = "out of memory";
        return SHP_ERR_NO_MEMORY;
    }
    json_array_foreach(children, i, c)
    {
        if (shp_json_get_str(c, "kind", &kind, why) != SHP_OK ||
            (strcmp(kind, "an") && strcmp(kind, "member"))) {
            shp_an_group_free(an, g);
            return shp_an_reject("child kind must be an or member", why);
        }
        g->children[i].is_an = !strcmp(kind, "an");
    }
    if (g->is_top && (g->dist & SHP_AN_DIST_MCAST)) {
        shp_status_t st;
        if (shp_json_get_str(req, "mcast_addr", &mcast, why) != SHP_OK ||
            !an->have_mcast) {
            shp_an_group_free(an, g);
            return shp_an_reject("multicast needs mcast_addr and a multicast "
                                 "transport",
                                 why);
        }
        snprintf(g->mcast_addr, sizeof(g->mcast_addr), "%s", mcast);
        st = an->mcast_tp.ops->mcast_sender(
            &an->mcast_tp, mcast, &shp_an_link_cbs, NULL, &g->mcast_tx);
        if (st != SHP_OK) {
            shp_an_group_free(an, g);
            *why = "cannot open the multicast sender";
            return st;
        }
    }
    HASH_ADD(hh, an->groups, id, sizeof(g->id), g);
    an->ngroups++;

    if (!g->is_top) {
        g->parent =
            shp_an_parent_link(an, an->trees[tree_id].parent, g->tree_id);
        if (g->parent == NULL ||
            shp_an_link_add_group(g->parent, g->id) != SHP_OK) {
            HASH_DEL(an->groups, g);
            an->ngroups--;
            shp_an_group_free(an, g);
            *why = "cannot reach the parent AN";
            return SHP_ERR_UNREACHABLE;
        }
        g->add_req_id = req_id;
        if (g->parent->connected) {
            shp_an_group_send_join(g);
        }
        return SHP_INPROGRESS; /* answered when the parent answers */
    }
    return SHP_OK;
}

shp_status_t shp_an_group_remove(shp_an_t *an, uint32_t id)
{
    shp_an_group_t *g = shp_an_group_find(an, id);

    if (g == NULL) {
        return SHP_ERR_GROUP_UNKNOWN;
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
        shp_an_tell_group_add_done(an, g->add_req_id, SHP_ERR_CANCELED,
                                   "group removed");
    }
    shp_an_group_free(an, g);
    return SHP_OK;
}

/* Results ------------------------------------------------------------------ */

static void shp_an_result_hdr(const shp_an_group_t *g, const shp_an_slot_t *s,
                              uint16_t flags, shp_wire_hdr_t *h)
{
    shp_wire_hdr_init_agg(h, SHP_WIRE_OP_AGG_RESULT, g->tree_id, g->id, s->seq,
                          &s->desc, s->count);
    h->flags = (uint16_t)(s->flags | flags);
    h->lanes = s->lanes;
    h->payload_len = s->len;
}

/* The result of slot s is in s->acc: pass it down.  `unicast`: the top
 * could not multicast it, every member gets it over RC. */
static void shp_an_distribute(shp_an_group_t *g, shp_an_slot_t *s, int unicast)
{
    shp_wire_hdr_t h;
    unsigned i;

    s->state = SHP_AN_SLOT_DONE;
    g->an->stats.results++;
    if (g->is_top && g->mcast_tx != NULL) {
        shp_status_t st;
        /* the operation's number with its wraps: the seq is within a
         * window of the last one multicast */
        uint64_t seq64 =
            g->mcast_seq64 +
            (uint64_t)(int64_t)(int32_t)(s->seq - (uint32_t)g->mcast_seq64);
        if (seq64 > g->mcast_seq64) {
            g->mcast_seq64 = seq64;
        }
        if (SHP_MCAST_MAC) {
            shp_an_result_hdr(g, s, SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC, &h);
            h.payload_len = s->len + SHP_WIRE_MAC_LEN;
            shp_wire_mac(g->mac_key, seq64, &h, s->acc, s->acc + s->len);
        } else {
            shp_an_result_hdr(g, s, SHP_WIRE_F_MCAST, &h);
        }
        st = shp_tp_send(g->mcast_tx, &h, s->acc);
        if (st == SHP_OK) {
            g->an->stats.mcast_sent++;
        } else {
            unicast = 1; /* members must not wait for a request */
            if (!g->mcast_unfit_logged) {
                g->mcast_unfit_logged = 1;
                shp_warn_id("AN0203",
                            "group %u: cannot multicast a result of %u bytes "
                            "(%s): results go over RC",
                            g->id, s->len, shp_status_str(st));
            }
        }
    }
    for (i = 0; i < g->nchildren; i++) {
        shp_an_child_t *c = &g->children[i];
        /* ANs always get the result (their members may ask for it);
         * members over RC unless multicast alone serves them */
        if (c->is_an || (g->dist & SHP_AN_DIST_RC) || unicast || s->want[i] ||
            c->rc_only) {
            shp_an_result_hdr(g, s,
                              (s->want[i] ? SHP_WIRE_F_RETRANS : 0) |
                                  (unicast ? SHP_WIRE_F_UNICAST : 0),
                              &h);
            shp_an_send(c->link, &h, s->acc);
        }
        s->want[i] = 0;
    }
}

static void shp_an_fold_done(shp_an_group_t *g, shp_an_slot_t *s)
{
    shp_wire_hdr_t h;

    shp_fold_cleanup(&s->fold);
    g->folded++;
    g->ops++;
    g->bytes += s->len;
    g->exact_ops += (s->flags & SHP_WIRE_F_EXACT) != 0;
    g->an->stats.ops++;
    if (g->is_top) {
        shp_an_distribute(g, s, 0);
        return;
    }
    s->state = SHP_AN_SLOT_UP;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, g->tree_id, g->id, s->seq,
                          &s->desc, s->count);
    h.flags = s->flags;
    h.lanes = s->lanes;
    h.payload_len = s->len;
    shp_an_send(g->parent, &h, s->acc);
}

/* Operations -------------------------------------------------------------- */

static void shp_an_op_error(shp_an_group_t *g, const shp_wire_hdr_t *hdr,
                            shp_status_t status, const char *reason)
{
    char text[160];

    snprintf(text, sizeof(text), "operation %u: %s", hdr->seq, reason);
    /* the operation cannot complete: the whole group fails, so that every
     * member sees an error rather than a hang */
    shp_an_group_fail(g, NULL, status, text);
}

/* The group and child index of a member's request, or NULL after
 * answering an unknown group, an unjoined sender or a failed group with an
 * error. */
static shp_an_group_t *shp_an_request_group(shp_an_link_t *l,
                                            const shp_wire_hdr_t *hdr,
                                            unsigned *child)
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
    if (g->failed) {
        shp_an_send_error(l, g->tree_id, g->id, hdr->seq, g->fail_status,
                          "group failed");
        return NULL;
    }
    *child = ci;
    return g;
}

static void shp_an_agg_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                           const void *payload)
{
    shp_an_t *an = l->an;
    shp_reduce_desc_t desc = {hdr->dtype, hdr->op, hdr->tag_dtype};
    shp_an_group_t *g;
    shp_an_slot_t *s;
    shp_status_t status;
    unsigned ci;

    g = shp_an_request_group(l, hdr, &ci);
    if (g == NULL) {
        return;
    }
    /* only a group some member left pays for this check */
    for (unsigned k = 0; g->nleft > 0 && k < g->nchildren; k++) {
        if (g->children[k].left &&
            shp_seq_diff(hdr->seq, g->children[k].next_seq) >= 0) {
            shp_an_op_error(g, hdr, SHP_ERR_GROUP_FAILED,
                            "a member has left the group");
            return;
        }
    }
    if (hdr->seq != g->children[ci].next_seq) {
        an->stats.err_seq_window++;
        shp_an_op_error(g, hdr, SHP_ERR_SEQ_WINDOW,
                        "sequence number out of order");
        return;
    }
    if (shp_seq_diff(hdr->seq, g->folded) >= (int32_t)g->osts) {
        an->stats.err_seq_window++;
        shp_an_op_error(g, hdr, SHP_ERR_SEQ_WINDOW,
                        "sequence number outside the quota window");
        return;
    }
    if (hdr->payload_len > g->payload) {
        an->stats.err_malformed++;
        shp_an_op_error(g, hdr, SHP_ERR_TOO_LARGE,
                        "payload above the group's size");
        return;
    }
    if ((hdr->flags & SHP_WIRE_F_EXACT) &&
        !shp_exact_lanes_ok(payload, hdr->payload_len / sizeof(int64_t))) {
        an->stats.err_malformed++;
        shp_an_op_error(g, hdr, SHP_ERR_PROTO,
                        "malformed exact-mode accumulator: a lane outside "
                        "[-2^52, 2^52)");
        return;
    }
    s = &g->slots[hdr->seq % g->nslots];
    if (s->state == SHP_AN_SLOT_FREE || s->seq != hdr->seq) {
        /* first payload of this operation: (re)use the slot */
        shp_an_slot_reset(g, s);
        s->seq = hdr->seq;
        s->flags = hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT);
        s->lanes = hdr->lanes;
        s->desc =
            (hdr->flags & SHP_WIRE_F_BARRIER)
                ? (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL}
                : desc;
        s->count = hdr->count;
        s->len = hdr->payload_len;
        status =
            shp_fold_init(&s->fold, &s->desc, s->count, s->acc, g->nchildren,
                          s->pending, shp_an_fold_release, s);
        if (status != SHP_OK) {
            an->stats.err_mismatch++;
            shp_an_op_error(g, hdr, status, "bad datatype or op");
            return;
        }
        s->state = SHP_AN_SLOT_FOLD;
    } else if (s->state != SHP_AN_SLOT_FOLD ||
               (s->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT)) !=
                   (hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT)) ||
               s->lanes != hdr->lanes ||
               (!(s->flags & SHP_WIRE_F_BARRIER) &&
                (s->desc.dtype != desc.dtype || s->desc.op != desc.op ||
                 s->desc.tag_dtype != desc.tag_dtype)) ||
               s->count != hdr->count) {
        an->stats.err_mismatch++;
        shp_an_op_error(g, hdr, SHP_ERR_MISMATCH,
                        "datatype, op or count differs from the other "
                        "members'");
        return;
    }

    g->children[ci].next_seq++;
    s->arrived++;
    if (ci == s->fold.next) {
        status = shp_fold_add(&s->fold, ci, payload);
    } else {
        /* early: keep a copy until the children before it arrive */
        uint8_t *copy = shp_an_buf_get(g);
        if (copy == NULL) {
            shp_an_op_error(g, hdr, SHP_ERR_NO_MEMORY, "out of memory");
            return;
        }
        if (s->len > 0) {
            memcpy(copy, payload, s->len);
        }
        s->copies[ci] = copy;
        status = shp_fold_add(&s->fold, ci, copy);
    }
    if (status < 0) {
        an->stats.err_protocol++;
        shp_an_op_error(g, hdr, status, "duplicate payload");
        return;
    }
    if (shp_fold_done(&s->fold)) {
        shp_an_fold_done(g, s);
    }
}

static void shp_an_agg_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                              const void *payload)
{
    shp_an_group_t *g = shp_an_group_find(l->an, hdr->group_id);
    shp_an_slot_t *s;

    if (g == NULL || g->parent != l || g->failed) {
        return; /* a late result of a removed or failed group */
    }
    s = &g->slots[hdr->seq % g->nslots];
    if (s->seq != hdr->seq || s->state != SHP_AN_SLOT_UP) {
        if (shp_seq_diff(hdr->seq, s->seq) < 0) {
            return; /* older than the slot: nobody needs it any more */
        }
        l->an->stats.err_protocol++;
        shp_an_group_fail(g, NULL, SHP_ERR_PROTO,
                          "unexpected result from the parent AN");
        return;
    }
    if (hdr->payload_len != s->len) {
        l->an->stats.err_protocol++;
        shp_an_group_fail(g, NULL, SHP_ERR_PROTO,
                          "result of the wrong size from the parent AN");
        return;
    }
    if (s->len > 0) {
        memcpy(s->acc, payload, s->len);
    }
    shp_an_distribute(g, s, (hdr->flags & SHP_WIRE_F_UNICAST) != 0);
}

static void shp_an_retrans_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
{
    shp_wire_hdr_t h;
    shp_an_group_t *g;
    shp_an_slot_t *s;
    unsigned ci;

    g = shp_an_request_group(l, hdr, &ci);
    if (g == NULL) {
        return;
    }
    l->an->stats.retransmits++;
    if ((hdr->flags & SHP_WIRE_F_RC_ONLY) && !g->children[ci].is_an &&
        !g->children[ci].rc_only) {
        g->children[ci].rc_only = 1;
        shp_warn_id("AN0204",
                    "group %u: multicast does not reach member %u (%s): its "
                    "results go over RC",
                    g->id, ci, l->ep != NULL ? l->ep->peer : "?");
    }
    s = &g->slots[hdr->seq % g->nslots];
    if (s->seq != hdr->seq || s->state == SHP_AN_SLOT_FREE) {
        shp_an_send_error(l, g->tree_id, g->id, hdr->seq, SHP_ERR_SEQ_WINDOW,
                          "result no longer held");
        return;
    }
    if (s->state == SHP_AN_SLOT_DONE) {
        shp_an_result_hdr(g, s, SHP_WIRE_F_RETRANS, &h);
        shp_an_send(l, &h, s->acc);
    } else {
        s->want[ci] = 1; /* sent when the result arrives */
    }
}

/* `l` holds another place than `ci` among the group's children (a link is
 * one child of a group: a leave or a lost link frees one place). */
static int shp_an_child_slot_taken(const shp_an_group_t *g,
                                   const shp_an_link_t *l, uint32_t ci)
{
    unsigned i;

    for (i = 0; i < g->nchildren; i++) {
        if (i != ci && g->children[i].link == l) {
            return 1;
        }
    }
    return 0;
}

static void shp_an_join(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
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
               !shp_an_ct_equal(join.job_key, g->key, sizeof(g->key))) {
        status = SHP_ERR_BAD_KEY;
        an->stats.err_bad_key++;
        shp_warn_id("AN0101",
                    "refused join of group %u from %s: wrong job "
                    "key",
                    hdr->group_id, l->addr);
    } else if (join.child_index >= g->nchildren) {
        status = SHP_ERR_INVALID_PARAM;
    } else if ((g->children[join.child_index].link != NULL &&
                g->children[join.child_index].link != l) ||
               shp_an_child_slot_taken(g, l, join.child_index)) {
        /* a place taken by another link, or this link in another place */
        status = SHP_ERR_EXISTS;
    } else if (g->failed) {
        status = g->fail_status;
    } else if (shp_an_link_add_group(l, g->id) != SHP_OK) {
        status = SHP_ERR_NO_MEMORY;
    }
    if (status == SHP_OK) {
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
static void shp_an_leave(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
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

/* whether link l is g's parent or one of its children's links */
static int shp_an_link_in_group(const shp_an_link_t *l, const shp_an_group_t *g)
{
    if (g->parent == l) {
        return 1;
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        if (g->children[i].link == l) {
            return 1;
        }
    }
    return 0;
}

static void shp_an_link_on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                               const void *payload)
{
    shp_an_link_t *l = ep->arg;
    shp_an_group_t *g;

    if (l == NULL) {
        return; /* a multicast sender: nothing arrives there */
    }
    switch (hdr->opcode) {
    case SHP_WIRE_OP_AGG_REQ:
        if (!l->is_parent) {
            shp_an_agg_req(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_AGG_RESULT:
        if (l->is_parent) {
            shp_an_agg_result(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_RETRANS_REQ:
        if (!l->is_parent) {
            shp_an_retrans_req(l, hdr);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_JOIN:
        if (!l->is_parent) {
            shp_an_join(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_LEAVE:
        if (!l->is_parent) {
            shp_an_leave(l, hdr);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_JOIN_ACK:
        g = shp_an_group_find(l->an, hdr->group_id);
        if (l->is_parent && g != NULL && g->parent == l) {
            shp_an_group_join_done(g, hdr->status);
        }
        return;
    case SHP_WIRE_OP_ERROR:
        g = shp_an_group_find(l->an, hdr->group_id);
        if (g != NULL && !shp_an_link_in_group(l, g)) {
            /* only the group's own links may fail it */
            l->an->stats.err_forged++;
            shp_warn_sparse(1000,
                            "an error for group %u from %s, which is not "
                            "part of it: ignored",
                            hdr->group_id, l->addr);
        } else if (g != NULL) {
            char text[SHP_WIRE_ERR_MSG_MAX + 1];
            snprintf(text, sizeof(text), "%.*s", (int)hdr->payload_len,
                     (const char *)payload);
            shp_an_group_fail(g, l, hdr->status,
                              text[0] ? text : "error from a peer");
        }
        return;
    default: break;
    }
    l->an->stats.err_protocol++;
    shp_warn_sparse(1000, "unexpected %s from %s: closing the link",
                    shp_wire_opcode_name(hdr->opcode), l->addr);
    shp_tp_close(ep);
}

static void shp_an_link_on_connect(shp_tp_ep_t *ep)
{
    shp_an_link_t *l = ep->arg;
    shp_an_group_t *g;
    unsigned i;

    if (l == NULL) {
        return;
    }
    l->connected = 1;
    /* a failed send closes the link: on_close (at once, outside on_msg)
     * then leaves freeing it to us */
    l->in_connect = 1;
    for (i = 0; i < l->ngroups && l->ep != NULL; i++) {
        g = shp_an_group_find(l->an, l->groups[i]);
        if (g != NULL && g->parent == l && !g->parent_joined) {
            shp_an_group_send_join(g);
        }
    }
    l->in_connect = 0;
    if (l->ep == NULL) {
        shp_an_link_free(l);
    }
}

static void shp_an_link_on_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    shp_an_link_t *l = ep->arg;
    shp_an_t *an;
    char text[128];

    if (l == NULL) {
        return;
    }
    an = l->an;
    l->ep = NULL;
    if (!an->stopping) {
        an->stats.links_lost += l->ngroups > 0;
        snprintf(text, sizeof(text), "lost the %s link %s: %s",
                 l->is_parent ? "parent" : "child", l->addr,
                 shp_status_str(reason));
        while (l->ngroups > 0) {
            uint32_t gid = l->groups[--l->ngroups];
            shp_an_group_t *g = shp_an_group_find(an, gid);
            unsigned i;
            if (g == NULL) {
                continue;
            }
            for (i = 0; i < g->nchildren; i++) {
                if (g->children[i].link == l) {
                    g->children[i].link = NULL;
                }
            }
            if (g->parent == l) {
                g->parent = NULL;
                if (g->add_req_id >= 0) {
                    shp_an_group_join_done(g, SHP_ERR_UNREACHABLE);
                }
            }
            shp_an_group_fail(g, l, SHP_ERR_GROUP_FAILED, text);
        }
    }
    if (!l->in_connect) {
        shp_an_link_free(l);
    }
}

static void shp_an_on_accept(shp_tp_t *tp, shp_tp_ep_t *ep)
{
    shp_an_t *an = (shp_an_t *)((char *)tp - offsetof(shp_an_t, tp));
    shp_an_link_t *l = shp_an_link_new(an);

    if (l == NULL) {
        return; /* ep->cbs stays NULL: the provider closes it */
    }
    l->ep = ep;
    l->connected = 1;
    snprintf(l->addr, sizeof(l->addr), "%s", ep->peer);
    ep->cbs = &shp_an_link_cbs;
    ep->arg = l;
}

/* Start / stop ------------------------------------------------------------ */

/* How many contributions may arrive before one of them must wake us
 * (shm: the transport's wake_need): the fewest any operation still misses.
 * An operation completes only when every child's payload is in, and one
 * not begun misses them all, so no operation can finish sooner; a failed
 * group or one a member left answers every request at once (1).  Too many
 * groups to look at each turn: 1, every message wakes us as before. */
static uint32_t shp_an_wake_need(void *arg)
{
    shp_an_t *an = arg;
    unsigned need = UINT_MAX, n = 0;

    for (shp_an_group_t *g = an->groups; g != NULL; g = g->hh.next) {
        if (++n > 64 || g->failed || g->nleft > 0) {
            return 1;
        }
        unsigned g_need = g->nchildren;
        for (unsigned i = 0; i < g->nslots; i++) {
            const shp_an_slot_t *s = &g->slots[i];
            if (s->state == SHP_AN_SLOT_FOLD && s->arrived < g->nchildren &&
                g->nchildren - s->arrived < g_need) {
                g_need = g->nchildren - s->arrived;
            }
        }
        if (g_need < need) {
            need = g_need;
        }
    }
    return need == UINT_MAX || need == 0 ? 1 : need;
}

/* Messages in and out of both transports: the socket spin runs while this
 * moves. */
static uint64_t shp_an_msgs(const shp_an_t *an)
{
    return an->tp.stats.msgs_in + an->tp.stats.msgs_out +
           an->mcast_tp.stats.msgs_in + an->mcast_tp.stats.msgs_out;
}

/* Whether no more processes are runnable than there are cores (this one
 * counted), looked up at most once a millisecond: the fourth field of
 * /proc/loadavg is the number runnable now.  Unknown: no. */
static int shp_an_core_free(shp_an_t *an, uint64_t now)
{
    static long ncpu;
    char b[128];

    if (now - an->load_at < SHP_NSEC_PER_MSEC) {
        return an->core_free;
    }
    an->load_at = now;
    an->core_free = 0;
    if (ncpu == 0) {
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    }
    ssize_t n =
        an->loadavg_fd >= 0 ? pread(an->loadavg_fd, b, sizeof(b) - 1, 0) : -1;
    unsigned long running;
    if (n > 0) {
        b[n] = '\0';
        if (sscanf(b, "%*s %*s %*s %lu/", &running) == 1) {
            an->core_free = ncpu > 0 && running <= (unsigned long)ncpu;
        }
    }
    return an->core_free;
}

/* Quiet links (tcp) --------------------------------------------------------
 *
 * A sleeping AN is woken by every child's message, and an operation
 * completes only with the last one: with 8 children, 8 wake-ups (each a
 * pair of context switches on a shared core) where one would do.  So while
 * the AN sleeps, the links of each group's children are quiet (the socket
 * reports nothing below a low-water mark far above one message; see
 * shp_conn_set_quiet) except one, the sentinel: a child that still owes the
 * oldest unfolded operation, which therefore cannot complete before its
 * message comes.  When anything wakes the AN, it reads every quiet link
 * (pull), in fold order.  The sentinel stays while it owes; when it sent
 * and others still owe, one of them takes its place: a wrong guess costs a
 * wake-up, never a delay.  A lost connection still wakes the AN; any other
 * message on a quiet link (a retransmit request, a leave) waits at most
 * SHP_AN_QUIET_WAKE_NS, and after SHP_AN_QUIET_IDLE_NS without a message
 * every link is loud again. */
#define SHP_AN_QUIET_WAKE_NS (2 * SHP_NSEC_PER_MSEC)
#define SHP_AN_QUIET_IDLE_NS (20 * SHP_NSEC_PER_MSEC)

/* Groups looked at before each sleep, at most; with more, every link is
 * loud (as the shm board's count gives up: docs/an.md) */
#define SHP_AN_QUIET_MAX_GROUPS 64

/* Whether g's children may be quiet: sound, every child on a link of its
 * own (no other group's messages on it) and at most one operation ahead
 * of the oldest unfolded one (then the ones that owe it are the only news
 * that can complete anything). */
static int shp_an_quiet_ok(const shp_an_group_t *g)
{
    if (g->failed || g->nleft > 0 || g->nchildren < 2) {
        return 0;
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        const shp_an_child_t *c = &g->children[i];
        int32_t ahead = shp_seq_diff(c->next_seq, g->folded);
        if (c->link == NULL || c->link->ep == NULL || c->link->is_parent ||
            c->link->ngroups != 1 || ahead < 0 || ahead > 1) {
            return 0;
        }
    }
    return 1;
}

/* g's sentinel: the one of before while it owes the oldest operation (it
 * was the last to send the operations before: the slowest stays the
 * slowest, most often), else the first child that owes it;
 * g->nchildren if none does */
static unsigned shp_an_quiet_sentinel(const shp_an_group_t *g)
{
    if (g->sentinel < g->nchildren &&
        g->children[g->sentinel].next_seq == g->folded) {
        return g->sentinel;
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        if (g->children[i].next_seq == g->folded) {
            return i;
        }
    }
    return g->nchildren;
}

static void shp_an_quiet_set(shp_an_link_t *l, int on)
{
    if (l->quiet == on || l->ep == NULL) {
        return;
    }
    if (!on) {
        (void)l->ep->tp->ops->quiet(l->ep, 0);
        l->quiet = 0;
        l->an->nquiet--;
    } else if (l->ep->tp->ops->quiet(l->ep, 1) == SHP_OK) {
        l->quiet = 1;
        l->an->nquiet++;
    }
}

/* Before a sleep (on: quiet links wanted): every group's children but its
 * sentinel quiet where the group allows it (g->quiet), every other link
 * loud; !on: all loud */
static void shp_an_quiet_plan(shp_an_t *an, int on)
{
    shp_an_group_t *g, *tmp;
    unsigned n = 0;

    on = on && an->cfg.quiet_links && an->tp.ops->quiet != NULL &&
         an->tp.ops->quiet != shp_tp_stub_quiet && an->tp.ops->pull != NULL;
    if (on) {
        HASH_ITER(hh, an->groups, g, tmp)
        {
            if (++n > SHP_AN_QUIET_MAX_GROUPS) {
                on = 0;
                break;
            }
            g->quiet = shp_an_quiet_ok(g) &&
                       (g->sentinel = shp_an_quiet_sentinel(g)) < g->nchildren;
        }
    }
    if (!on && an->nquiet == 0) {
        return;
    }
    for (shp_an_link_t *l = an->links; l != NULL; l = l->next) {
        g = on && !l->is_parent && l->ngroups == 1
                ? shp_an_group_find(an, l->groups[0])
                : NULL;
        shp_an_quiet_set(l, g != NULL && g->quiet &&
                                l != g->children[g->sentinel].link);
    }
}

/* After a wake-up: what waits on the quiet links, each group's children
 * in fold order (a payload ahead of its turn is copied) */
static void shp_an_quiet_pull(shp_an_t *an)
{
    uint32_t ids[SHP_AN_QUIET_MAX_GROUPS];
    shp_an_group_t *g, *tmp;
    unsigned n = 0;

    if (an->nquiet == 0) {
        return;
    }
    HASH_ITER(hh, an->groups, g, tmp)
    {
        if (g->quiet && n < SHP_AN_QUIET_MAX_GROUPS) {
            ids[n++] = g->id;
        }
    }
    for (unsigned k = 0; k < n; k++) {
        g = shp_an_group_find(an, ids[k]);
        for (unsigned i = 0; g != NULL && i < g->nchildren; i++) {
            shp_an_link_t *l = g->children[i].link;
            if (l != NULL && l->quiet && l->ep != NULL) {
                uint64_t in = an->tp.stats.msgs_in;
                l->ep->tp->ops->pull(l->ep); /* may free l */
                an->stats.quiet_msgs += an->tp.stats.msgs_in - in;
                g = shp_an_group_find(an, ids[k]);
            }
        }
    }
}

static void shp_an_quiet_wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents; /* ending the loop's turn is all it is for */
}

void shp_an_run(shp_an_t *an)
{
    uint64_t spin = (uint64_t)an->cfg.sock_spin_us * SHP_NSEC_PER_USEC;

    an->stop = 0;
    if (an->tp.ops == &shp_tp_shm_ops) {
        ev_run(an->loop, 0); /* shm spins in its own way (tp_shm.c) */
        return;
    }
    an->loadavg_fd = spin == 0
                         ? -1
                         : open(an->loadavg_path != NULL ? an->loadavg_path
                                                         : "/proc/loadavg",
                                O_RDONLY | O_CLOEXEC);
    an->load_at = 0;
    ev_init(&an->quiet_wake, shp_an_quiet_wake_cb);
    an->quiet_wake.repeat = (double)SHP_AN_QUIET_WAKE_NS / 1e9;
    /* over sockets: poll for sock_spin_us after the last message in or
     * out, yielding the core when a poll brought nothing, then sleep (a
     * sleeping AN lets its core halt, and the next child's message pays
     * for waking it: one child's only, with quiet links) */
    uint64_t seen = shp_an_msgs(an), from = shp_time_ns();
    while (!an->stop) {
        uint64_t n = shp_an_msgs(an), now = shp_time_ns();
        if (n != seen) {
            seen = n;
            from = now;
        }
        if (spin != 0 && now - from < spin && shp_an_core_free(an, now)) {
            shp_an_quiet_plan(an, 0);
            ev_run(an->loop, EVRUN_NOWAIT);
            if (shp_an_msgs(an) == n) {
                sched_yield();
            }
            continue;
        }
        shp_an_quiet_plan(an, now - from < SHP_AN_QUIET_IDLE_NS);
        if (an->nquiet > 0) {
            ev_timer_again(an->loop, &an->quiet_wake);
        } else if (ev_is_active(&an->quiet_wake)) {
            ev_timer_stop(an->loop, &an->quiet_wake);
        }
        ev_run(an->loop, EVRUN_ONCE);
        shp_an_quiet_pull(an);
    }
    shp_an_quiet_plan(an, 0);
    if (ev_is_active(&an->quiet_wake)) {
        ev_timer_stop(an->loop, &an->quiet_wake);
    }
    if (an->loadavg_fd >= 0) {
        close(an->loadavg_fd);
    }
}

void shp_an_quit(shp_an_t *an)
{
    an->stop = 1;
    ev_break(an->loop, EVBREAK_ALL);
}

shp_status_t shp_an_start(shp_an_t *an, struct ev_loop *loop)
{
    const shp_tp_ops_t *ops = shp_tp_find(shp_an_transports[an->cfg.transport]);
    const char *colon;
    shp_status_t status;

    an->loop = loop;
    snprintf(an->local_ip, sizeof(an->local_ip), "%s", an->cfg.listen);
    colon = strrchr(an->local_ip, ':');
    if (colon != NULL) {
        an->local_ip[colon - an->local_ip] = '\0';
    }
    status = shp_tp_init(&an->tp, ops, loop, (uint32_t)an->cfg.max_payload,
                         an->local_ip);
    if (status != SHP_OK) {
        shp_error_id("AN0001", "transport %s: %s", ops->name,
                     shp_status_str(status));
        return status;
    }
    an->tp.spin_ns = (uint64_t)an->cfg.spin_us * 1000;
    an->tp.wake_need = shp_an_wake_need;
    an->tp.spin_many = an->cfg.spin_many;
    an->tp.wake_arg = an;
    an->tp.runs_free = 1; /* main() runs the loop until we stop */
    status = an->tp.ops->listen(&an->tp, an->cfg.listen, shp_an_on_accept);
    if (status != SHP_OK) {
        shp_error_id("AN0002", "cannot listen on %s: %s", an->cfg.listen,
                     shp_status_str(status));
        shp_tp_cleanup(&an->tp);
        return status;
    }
    {
        const char *la = an->tp.ops->listen_addr(&an->tp);
        const char *port = strrchr(la, ':');
        if (an->cfg.advertise[0] != '\0' && port != NULL) {
            snprintf(an->data_addr, sizeof(an->data_addr), "%s%s",
                     an->cfg.advertise, port);
        } else if (!strncmp(la, "0.0.0.0:", 8) || !strncmp(la, "[::]:", 5)) {
            shp_error_id("AN0010",
                         "listening on every address (%s): set --advertise "
                         "to the address children should connect to",
                         la);
            shp_tp_cleanup(&an->tp);
            return SHP_ERR_INVALID_PARAM;
        } else {
            snprintf(an->data_addr, sizeof(an->data_addr), "%s", la);
        }
    }
    an->have_mcast =
        shp_tp_init(&an->mcast_tp, shp_tp_mcast_ops(ops), loop,
                    (uint32_t)an->cfg.max_payload + SHP_WIRE_MAC_LEN,
                    an->local_ip) == SHP_OK;
    shp_info("aggregation node %s: data on %s (%s), multicast %s", an->cfg.name,
             an->data_addr, ops->name,
             an->have_mcast ? "available" : "unavailable");
    return SHP_OK;
}

void shp_an_stop(shp_an_t *an)
{
    shp_an_group_t *g, *tmp;
    shp_an_link_t *l;

    an->stopping = 1;
    HASH_ITER(hh, an->groups, g, tmp)
    {
        HASH_DEL(an->groups, g);
        shp_an_group_free(an, g);
    }
    an->ngroups = 0;
    while ((l = an->links) != NULL) {
        if (l->ep != NULL) {
            shp_tp_close(l->ep); /* frees the link */
        } else {
            shp_an_link_free(l);
        }
    }
    if (an->have_mcast) {
        shp_tp_cleanup(&an->mcast_tp);
    }
    shp_tp_cleanup(&an->tp);
}

json_t *shp_an_stats_json(const shp_an_t *an)
{
    const shp_an_stats_t *s = &an->stats;
    const shp_an_group_t *g, *tmp;
    json_t *exact = json_object();
    char key[16];

    /* exact-mode operations of the groups this AN is the top of (every
     * operation of a group reaches its top): what `sharpctl groups` shows */
    HASH_ITER(hh, an->groups, g, tmp)
    {
        if (g->is_top && g->exact_ops > 0) {
            snprintf(key, sizeof(key), "%u", g->id);
            json_object_set_new(exact, key,
                                json_integer((json_int_t)g->exact_ops));
        }
    }
    json_t *r = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
        "groups", (json_int_t)an->ngroups, "trees", (json_int_t)an->ntrees,
        "join_early", (json_int_t)s->join_early, "ops", (json_int_t)s->ops,
        "results", (json_int_t)s->results, "mcast_sent",
        (json_int_t)s->mcast_sent, "retransmits", (json_int_t)s->retransmits,
        "joins", (json_int_t)s->joins, "join_refused",
        (json_int_t)s->join_refused, "err_bad_key", (json_int_t)s->err_bad_key,
        "err_unknown_group", (json_int_t)s->err_unknown_group, "err_seq_window",
        (json_int_t)s->err_seq_window, "err_mismatch",
        (json_int_t)s->err_mismatch, "err_malformed",
        (json_int_t)(s->err_malformed + an->tp.stats.malformed), "err_protocol",
        (json_int_t)s->err_protocol, "err_forged", (json_int_t)s->err_forged,
        "groups_failed", (json_int_t)s->groups_failed, "links_lost",
        (json_int_t)s->links_lost, "bytes_in",
        (json_int_t)an->tp.stats.bytes_in, "quiet_msgs",
        (json_int_t)s->quiet_msgs);
    if (r != NULL) {
        json_object_set_new(r, "exact_ops", exact);
    } else {
        json_decref(exact);
    }
    return r;
}

/* SIGUSR1: the state of every group, to the log (what an operator needs
 * when members say they wait) */
void shp_an_dump(shp_an_t *an)
{
    const shp_an_group_t *g, *tmp;
    char line[512];

    shp_info("state: %u groups, %u trees, %" PRIu64 " operations folded, "
             "%" PRIu64 " messages in, %" PRIu64 " out",
             an->ngroups, an->ntrees, an->stats.ops, an->tp.stats.msgs_in,
             an->tp.stats.msgs_out);
    an->tp.ops->dump(&an->tp);
    if (an->have_mcast) {
        an->mcast_tp.ops->dump(&an->mcast_tp);
    }
    HASH_ITER(hh, an->groups, g, tmp)
    {
        size_t n = 0;
        unsigned i;

        n += (size_t)snprintf(line + n, sizeof(line) - n,
                              "group %u (job %" PRIu64 ", tree %u)%s%s: "
                              "folded %u, children next",
                              g->id, g->job_id, g->tree_id,
                              g->is_top ? " top" : "",
                              g->failed ? " FAILED" : "", g->folded);
        for (i = 0; i < g->nchildren && n < sizeof(line) - 16; i++) {
            n += (size_t)snprintf(line + n, sizeof(line) - n, " %u%s",
                                  g->children[i].next_seq,
                                  g->children[i].link == NULL ? "(gone)" : "");
        }
        shp_info("%s", line);
        for (i = 0; i < g->nslots; i++) {
            const shp_an_slot_t *s = &g->slots[i];
            static const char *const names[] = {"free", "fold", "up", "done"};
            if (s->state == SHP_AN_SLOT_FOLD || s->state == SHP_AN_SLOT_UP) {
                shp_info("group %u slot %u: op %u %s, %u of %u arrived", g->id,
                         i, s->seq, names[s->state], s->arrived, g->nchildren);
            }
        }
    }
}
