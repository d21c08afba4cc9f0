/*
 * A group_add as the tests write it, with the job key, made into what the
 * manager sends an AN: the group's join and multicast keys derived from it
 * (protocol/wire.h), never the job key.  Header-only.
 */
#ifndef SHP_TEST_GROUP_KEYS_H
#define SHP_TEST_GROUP_KEYS_H

#include "protocol/ctl.h"
#include "protocol/wire.h"

/* req's "job_key" (hex) replaced by "join_key" and "mcast_key" for its
 * tree_id and group_id; req returned (as is without a job_key) */
static inline json_t *group_keys(json_t *req)
{
    uint8_t job[SHP_WIRE_JOB_KEY_LEN], jk[SHP_WIRE_JOIN_KEY_LEN],
        mk[SHP_WIRE_MAC_KEY_LEN];
    if (req == NULL ||
        shp_json_get_hex(req, "job_key", job, sizeof(job), NULL) != SHP_OK) {
        return req;
    }
    uint16_t tree = (uint16_t)shp_json_opt_int(req, "tree_id", 0, 65535, 0);
    uint32_t group =
        (uint32_t)shp_json_opt_int(req, "group_id", 0, UINT32_MAX, 0);
    shp_wire_join_key(job, tree, group, jk);
    shp_wire_mac_key(job, tree, group, mk);
    json_object_del(req, "job_key");
    json_object_set_new(req, "join_key", shp_json_hex(jk, sizeof(jk)));
    json_object_set_new(req, "mcast_key", shp_json_hex(mk, sizeof(mk)));
    return req;
}

#endif
