/*
 * Planted faults: bugs put in on purpose, to show that the partition
 * checker (tests/partition/checker.py) catches what it says it checks.
 * They exist only in a build with -DSHP_PLANT (make PLANT=1, its own
 * O=build/plant); in every other build shp_planted() is the constant 0
 * and the compiler drops the code it guards.  In a planted build a
 * daemon runs the faults SHARP_PLANT names (comma-separated):
 *
 *   epoch          a manager does not step down on a higher epoch
 *   group_ids      a standby taking over gives ids from where it last
 *                  heard its peer, without the margin (am_ha.c)
 *   silent_revoke  the manager revokes groups without telling the jobs
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
    return p != NULL && strstr(p, name) != NULL;
}
#else
#define shp_planted(name) 0
#endif

#endif
