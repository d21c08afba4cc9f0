/*
 * Group ids: each manager of a pair (or more) hands out its own stripe of
 * the 24-bit space (am_ids.h).
 *
 * Before this, a manager taking over skipped a margin past the last id it
 * had heard of its predecessor; with a partition between them both go on
 * creating groups, and two takeovers of a margin of half the space each
 * brought one manager's ids back into the other's (a nemesis run, seed
 * 95770: group 15337784 acknowledged to two jobs).  Disjoint stripes hold
 * whatever the two do meanwhile.
 */
#include "am/am_ids.h"

#include <stdlib.h>
#include <string.h>

#include "am/am_store.h"
#include "core/log.h"
#include "core/plant.h"

static int ids_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void shp_am_ids_stripe(shp_am_t *am, const char *self,
                       const shp_am_list_t *peers)
{
    const char *all[SHP_AM_LIST_MAX + 1];
    int n = 0, rank = 0;
    all[n++] = self;
    for (int i = 0; i < peers->n; i++)
        if (strcmp(peers->addr[i], self))
            all[n++] = peers->addr[i];
    qsort(all, (size_t)n, sizeof(all[0]), ids_cmp);
    for (int i = 0; i < n; i++)
        if (!strcmp(all[i], self))
            rank = i;
    /* planted: every manager in one space, as before the stripes */
    am->id_stride = n > 1 && !shp_planted("group_ids") ? SHP_AM_LIST_MAX : 1;
    am->id_stripe = am->id_stride > 1 ? (uint32_t)rank : 0;
    am->next_group = shp_am_ids_align(am, am->next_group);
    am->group_ids_left = 0; /* the next id commits a block from here */
    if (am->id_stride > 1)
        shp_info("group ids: stripe %u of %u (this manager's rank among "
                 "the %d managers' addresses)",
                 am->id_stripe, am->id_stride, n);
}

uint32_t shp_am_ids_align(const shp_am_t *am, uint64_t v)
{
    uint32_t stride = am->id_stride;
    uint32_t first = am->id_stripe ? am->id_stripe : stride;
    if (v < first || v >= SHP_AM_GROUP_ID_END)
        return first;
    v += (am->id_stripe + stride - v % stride) % stride;
    return v < SHP_AM_GROUP_ID_END ? (uint32_t)v : first;
}

void shp_am_ids_seen(shp_am_t *am, uint32_t id)
{
    if (id % am->id_stride != am->id_stripe || id < am->next_group)
        return; /* another manager's, or behind us */
    am->next_group = shp_am_ids_align(am, (uint64_t)id + 1);
    am->group_ids_left = 0;
}

int shp_am_ids_clash(const shp_am_t *am, uint32_t peer_next)
{
    return am->id_stride > 1 && peer_next &&
           peer_next % am->id_stride == am->id_stripe;
}

/* The block of ids from here committed: a restart resumes after it. */
static int ids_commit(shp_am_t *am)
{
    if (!am->store || am->group_ids_left > 0)
        return 0;
    uint64_t resume = shp_am_ids_align(
        am, am->next_group + (uint64_t)SHP_AM_GROUP_ID_BLOCK * am->id_stride);
    if (shp_am_store_counter_set(am->store, "group_next", resume) != SHP_OK) {
        shp_error_id("AM0501", "group ids: %s", shp_am_store_error(am->store));
        return -1;
    }
    am->group_ids_left = SHP_AM_GROUP_ID_BLOCK;
    return 0;
}

uint32_t shp_am_ids_next(shp_am_t *am)
{
    if (ids_commit(am) != 0)
        return 0;
    if (am->group_ids_left)
        am->group_ids_left--;
    uint32_t id = am->next_group;
    am->next_group = shp_am_ids_align(am, (uint64_t)id + 1);
    return id;
}
