/*
 * The nodes that told a standby they lost the active manager (see
 * am_ha_lost.h): a hash of "role:name" to the latest time, kept in the
 * order they were heard, so that the expired ones go from the front.
 */
#include "am/am_ha_lost.h"

#include "topology/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

typedef struct am_ha_lost_node {
    char key[160]; /* role:name */
    uint64_t at;
    struct am_ha_lost_node *prev, *next; /* by time heard */
    UT_hash_handle hh;
} am_ha_lost_node_t;

struct am_ha_lost {
    am_ha_lost_node_t *by_key;
    am_ha_lost_node_t *first, *last;
    int n;
    uint64_t since; /* when the first of those remembered said so */
};

am_ha_lost_t *am_ha_lost_new(void)
{
    return calloc(1, sizeof(am_ha_lost_t));
}

static void lost_unlink(am_ha_lost_t *l, am_ha_lost_node_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        l->first = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        l->last = x->prev;
    x->prev = x->next = NULL;
}

static void lost_drop(am_ha_lost_t *l, am_ha_lost_node_t *x)
{
    lost_unlink(l, x);
    HASH_DEL(l->by_key, x);
    l->n--;
    free(x);
}

int am_ha_lost_note(am_ha_lost_t *l, const char *role, const char *name,
                    uint64_t now, uint64_t window)
{
    char key[160];
    am_ha_lost_node_t *x = NULL;
    while (l->first && now - l->first->at > window)
        lost_drop(l, l->first);
    if (l->n == 0)
        l->since = now;
    snprintf(key, sizeof(key), "%s:%s", role, name);
    HASH_FIND_STR(l->by_key, key, x);
    if (x) {
        lost_unlink(l, x);
    } else {
        if (l->n >= AM_HA_LOST_MAX)
            lost_drop(l, l->first);
        x = calloc(1, sizeof(*x));
        if (!x)
            return l->n;
        memcpy(x->key, key, sizeof(x->key));
        HASH_ADD_STR(l->by_key, key, x);
        l->n++;
    }
    x->at = now;
    x->prev = l->last; /* the newest, at the back */
    if (l->last)
        l->last->next = x;
    else
        l->first = x;
    l->last = x;
    return l->n;
}

void am_ha_lost_clear(am_ha_lost_t *l)
{
    while (l && l->first)
        lost_drop(l, l->first);
}

void am_ha_lost_free(am_ha_lost_t *l)
{
    am_ha_lost_clear(l);
    free(l);
}

int am_ha_lost_quorum(am_ha_lost_t *l, shp_am_t *am, const shp_am_peer_t *p,
                      uint64_t now, char *why, size_t whylen)
{
    if (!l)
        return 0;
    uint64_t window = ((uint64_t)am->cfg.keepalive_ms * 3 + 5000) * 1000000u;
    int n = am_ha_lost_note(l, p->auth.role, p->auth.name, now, window);
    size_t all = shp_topo_count_type(am->topo, SHP_NODE_SWITCH) +
                 shp_topo_count_type(am->topo, SHP_NODE_CA);
    /* and for takeover_after at least since the first said so: a manager
     * killed or stopped is the silence's to take over from (am_ha.c),
     * with the settings it sent until then */
    uint64_t age = (uint64_t)am->cfg.takeover_after_ms * 1000000u;
    if (2 * (size_t)n <= all || now - l->since < age)
        return 0;
    snprintf(why, whylen,
             "%d of the fabric's %zu nodes lost the active manager, which "
             "this one still hears (cut off from them)",
             n, all);
    am_ha_lost_clear(l);
    return 1;
}
