/*
 * Planted faults: bugs put in on purpose, to show that the partition
 * checker (tests/partition/checker.py) catches what it says it checks.
 * They exist only in a build with -DSHP_PLANT (make PLANT=1, its own
 * O=build/plant); in every other build shp_planted() is the constant 0
 * and the compiler drops the code it guards.  In a planted build a
 * daemon runs the faults SHARP_PLANT names (comma-separated):
 *
 *   stay_active    a manager does not step down on a higher epoch
 *   same_epoch     a standby takes over at the epoch it knows, not above
 *   forget_epoch   a manager starts at epoch 0, not its stored one
 *   group_ids      the managers share one id space (no stripes, am_ids.c)
 *                  and a standby taking over gives ids from where it
 *                  last heard its peer (am_ha.c)
 *   same_key       every job gets the same key
 *   silent_revoke  the manager revokes groups without telling the jobs
 *   mute_sharpd    sharpd does not answer a group_create it cannot pass on
 *   an_leak        an AN answers group_remove and keeps the group
 *   wrong          the top AN flips a bit of one result in 97
 */
#ifndef SHP_CORE_PLANT_H
#define SHP_CORE_PLANT_H

#ifdef SHP_PLANT
#include <stdlib.h>
#include <string.h>

static inline int shp_planted(const char *name)
{
    const char *p = getenv("SHARP_PLANT");
    size_t n = strlen(name);

    while (p != NULL && *p) { /* a whole name of the list */
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0')) {
            return 1;
        }
        p = strchr(p, ',');
        p = p != NULL ? p + 1 : NULL;
    }
    return 0;
}
#else
#define shp_planted(name) 0
#endif

#endif
