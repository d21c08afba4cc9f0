/*
 * What only the manager knows, kept in its state database (am_store.c)
 * so that a restarted manager has it: the epoch, where group ids resume,
 * the topology in use, and the scheduler's reservations (am_reserve.c
 * loads them back).  With state_dir empty (tests, --no-state) there is no
 * database and these do nothing.  The bottom of the core with
 * am_state.c: it calls no other file of the room.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/plant.h"

/* A hash of the topology file (hex), to say it changed while the manager
 * was down. */
static shp_status_t am_topology_hash(const char *path, char *hex, size_t len)
{
    unsigned char h[32], buf[65536];
    crypto_generichash_state gs;
    FILE *f = fopen(path, "re");
    size_t n;
    if (!f)
        return SHP_ERR_IO;
    crypto_generichash_init(&gs, NULL, 0, sizeof(h));
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        crypto_generichash_update(&gs, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return SHP_ERR_IO;
    crypto_generichash_final(&gs, h, sizeof(h));
    sodium_bin2hex(hex, len, h, sizeof(h));
    return SHP_OK;
}

/* The topology to load: the configuration's, or the one an administrator
 * loaded (sharpctl topology load) before the manager stopped, while the
 * configuration still names the same file as then. */
static shp_status_t am_persist_topology_pick(shp_am_t *am, char *err,
                                             size_t errlen)
{
    char was_cfg[4096], in_use[4096];
    if (shp_am_store_setting(am->store, "topology_config", was_cfg,
                             sizeof(was_cfg)) != SHP_OK ||
        shp_am_store_setting(am->store, "topology", in_use, sizeof(in_use)) !=
            SHP_OK ||
        strcmp(was_cfg, am->cfg.topology) != 0 ||
        !strcmp(in_use, am->cfg.topology))
        return SHP_OK;
    char *p = strdup(in_use);
    if (!p) {
        snprintf(err, errlen, "no memory");
        return SHP_ERR_NO_MEMORY;
    }
    shp_info("topology %s, loaded by an administrator before the restart "
             "(the configuration's is %s)",
             in_use, am->cfg.topology);
    free(am->cfg.topology);
    am->cfg.topology = p;
    return SHP_OK;
}

shp_status_t shp_am_persist_open(shp_am_t *am, char *err, size_t errlen)
{
    shp_status_t st;
    uint64_t v;
    am->epoch = 0;
    am->group_ids_left = 0;
    if (!am->cfg.state_dir || !am->cfg.state_dir[0])
        return SHP_OK; /* no state kept: am->next_group as set */
    if ((st = shp_am_store_open(am->cfg.state_dir, am->cfg.reset_state,
                                &am->store, err, errlen)) != SHP_OK)
        return st;
    if (!(am->topology_config = strdup(am->cfg.topology))) {
        snprintf(err, errlen, "no memory");
        return SHP_ERR_NO_MEMORY;
    }
    /* the last epoch this manager was active in: becoming active (at
     * once without peers, or at a takeover) commits a higher one
     * (am_epoch_commit, am_ha.c) */
    am->epoch = shp_planted("forget_epoch") ? 0 : shp_am_store_epoch(am->store);
    st = shp_am_store_counter(am->store, "group_next", &v);
    if (st == SHP_OK && v >= 1 && v < SHP_AM_GROUP_ID_END) {
        am->next_group = (uint32_t)v;
    } else if (st == SHP_OK || st == SHP_ERR_NOT_FOUND) {
        /* a new database: a random start, so that a reset one does not
         * hand out again the ids the old one did */
        uint32_t r;
        shp_auth_random(&r, sizeof(r));
        am->next_group = 1 + r % (SHP_AM_GROUP_ID_END - 1);
    } else {
        snprintf(err, errlen, "%s", shp_am_store_error(am->store));
        return st;
    }
    shp_info("state %s: epoch %" PRIu64 ", group ids from %" PRIu32 "%s",
             shp_am_store_path(am->store), am->epoch, am->next_group,
             shp_am_store_fresh(am->store) ? " (a new database)" : "");
    return am_persist_topology_pick(am, err, errlen);
}

void shp_am_persist_close(shp_am_t *am)
{
    shp_am_store_close(am->store);
    am->store = NULL;
    free(am->topology_config);
    am->topology_config = NULL;
}

shp_status_t shp_am_persist_topology(shp_am_t *am, const char *path, char *err,
                                     size_t errlen)
{
    char hash[65], was[65];
    if (!am->store)
        return SHP_OK;
    if (am_topology_hash(path, hash, sizeof(hash)) != SHP_OK) {
        snprintf(err, errlen, "cannot read %s", path);
        return SHP_ERR_IO;
    }
    if (!strcmp(path, am->cfg.topology) &&
        shp_am_store_setting(am->store, "topology_hash", was, sizeof(was)) ==
            SHP_OK &&
        strcmp(was, hash) != 0)
        shp_warn("topology %s changed since the manager last read it", path);
    shp_status_t st = shp_am_store_begin(am->store);
    if (st == SHP_OK &&
        (st = shp_am_store_setting_set(am->store, "topology_config",
                                       am->topology_config)) == SHP_OK &&
        (st = shp_am_store_setting_set(am->store, "topology", path)) ==
            SHP_OK &&
        (st = shp_am_store_setting_set(am->store, "topology_hash", hash)) ==
            SHP_OK)
        st = shp_am_store_commit(am->store);
    if (st != SHP_OK) {
        shp_am_store_rollback(am->store);
        snprintf(err, errlen, "%s", shp_am_store_error(am->store));
    }
    return st;
}

shp_status_t shp_am_persist_job(shp_am_t *am, const shp_am_job_t *j)
{
    if (!am->store || !j->reserved)
        return SHP_OK;
    char **hosts = calloc((size_t)j->nhosts + 1, sizeof(char *));
    if (!hosts)
        return SHP_ERR_NO_MEMORY;
    for (int h = 0; h < j->nhosts; h++)
        hosts[h] = (char *)shp_topo_node(am->topo, j->hosts[h])->host;
    shp_am_store_job_t sj = {.job_id = j->id,
                             .uid = (uint32_t)j->uid,
                             .max_groups = j->max_groups,
                             .osts = j->osts,
                             .payload = j->payload,
                             .nhosts = j->nhosts,
                             .hosts = hosts,
                             .held = j->held};
    memcpy(sj.key, j->key, sizeof(sj.key));
    shp_status_t st = shp_am_store_job_put(am->store, &sj);
    free(hosts);
    if (st != SHP_OK)
        shp_error_id("AM0502", "job %" PRIu64 ": %s", j->id,
                     shp_am_store_error(am->store));
    return st;
}

void shp_am_persist_job_forget(shp_am_t *am, const shp_am_job_t *j)
{
    if (!am->store || !j->reserved)
        return;
    if (shp_am_store_job_del(am->store, j->id) != SHP_OK)
        shp_error_id("AM0502", "job %" PRIu64 " ended: %s", j->id,
                     shp_am_store_error(am->store));
}
