/*
 * An administrator's settings (sharpctl an drain, tree freeze): an AN
 * drained or a tree frozen takes no new group; the groups already on it
 * run until they end.  Each change is committed to the state database
 * (settings "an_drain:NAME" and "tree_freeze:ID") before it is answered,
 * and loaded back at start; with state_dir empty they live in memory only.
 *
 * ANs are named by their topology node (what they register under), which
 * a restart keeps.  Trees are rebuilt from the topology and the live ANs,
 * and a new topology may number them otherwise: a freeze names its tree by
 * id and root, and when that id is built again with another root the
 * freeze no longer means the tree it was set on, so it is dropped (and
 * said so in the log).
 *
 * A standby keeps a copy: the active manager sends its settings to each
 * peer with its state when they changed (am_ha.c), and the standby
 * replaces its own with them, in memory and in its database, so that
 * after a takeover the settings are the ones an administrator set.
 */
#include "am/am_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#define AM_DRAIN_KEY "an_drain:"
#define AM_FREEZE_KEY "tree_freeze:"

const shp_am_drain_t *shp_am_drained(const shp_am_t *am, const char *name)
{
    for (unsigned i = 0; i < am->ndrains; i++)
        if (!strcmp(am->drains[i].name, name))
            return &am->drains[i];
    return NULL;
}

/* the root's name of a tree in use */
static const char *am_tree_root(const shp_am_t *am, int t)
{
    return shp_am_an_name(am, am->trees[t].t.root);
}

const shp_am_freeze_t *shp_am_frozen(const shp_am_t *am, int t)
{
    if (t < 0 || t >= SHP_AM_MAX_TREE_ID)
        return NULL;
    const shp_am_freeze_t *f = &am->freezes[t];
    if (!f->set || !am->trees[t].used ||
        strcmp(f->root, am_tree_root(am, t)) != 0)
        return NULL;
    return f;
}

/* A reason as stored and shown: at most SHP_AM_REASON_MAX bytes, no
 * control characters (it is printed on terminals and in logs). */
static shp_status_t am_reason_check(const char *reason, char *err,
                                    size_t errlen)
{
    if (strlen(reason) > SHP_AM_REASON_MAX) {
        snprintf(err, errlen, "the reason is longer than %d bytes",
                 SHP_AM_REASON_MAX);
        return SHP_ERR_INVALID_PARAM;
    }
    for (const unsigned char *c = (const unsigned char *)reason; *c; c++)
        if (*c < 0x20 || *c == 0x7f) {
            snprintf(err, errlen, "the reason has a control character");
            return SHP_ERR_INVALID_PARAM;
        }
    return SHP_OK;
}

/* One setting written (value NULL: removed), committed before it returns;
 * nothing without a database. */
static shp_status_t am_setting_write(shp_am_t *am, const char *key,
                                     const char *value, char *err,
                                     size_t errlen)
{
    am->settings_gen++; /* the standbys are sent the change (am_ha.c) */
    if (!am->store)
        return SHP_OK;
    shp_status_t st = shp_am_store_setting_set(am->store, key, value);
    if (st != SHP_OK) {
        snprintf(err, errlen, "%s", shp_am_store_error(am->store));
        shp_error_id("AM0503", "setting %s: %s", key, err);
    }
    return st;
}

/* room for one more drain in am->drains */
static shp_status_t am_drains_room(shp_am_t *am)
{
    if (am->ndrains < am->capdrains)
        return SHP_OK;
    unsigned cap = am->capdrains ? 2 * am->capdrains : 16;
    shp_am_drain_t *n = realloc(am->drains, sizeof(*n) * cap);
    if (!n)
        return SHP_ERR_NO_MEMORY;
    am->drains = n;
    am->capdrains = cap;
    return SHP_OK;
}

static char *am_freeze_value(const shp_am_freeze_t *f)
{
    json_t *v = json_pack("{s:s, s:s}", "root", f->root, "reason", f->reason);
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

shp_status_t shp_am_an_drain(shp_am_t *am, const char *name, const char *reason,
                             char *err, size_t errlen)
{
    char key[sizeof(AM_DRAIN_KEY) + sizeof(am->drains[0].name)];
    const shp_am_drain_t *d = shp_am_drained(am, name);
    int node = shp_topo_find(am->topo, name);
    shp_status_t st;
    /* an AN of the topology; one drained under an earlier topology may
     * still be undrained */
    if (!(node >= 0 && am->an_expected[node]) && !(d && !reason)) {
        snprintf(err, errlen,
                 "no AN %.128s: neither a switch nor a configured AN host of "
                 "the topology",
                 name);
        return SHP_ERR_NOT_FOUND;
    }
    if (strlen(name) >= sizeof(am->drains[0].name)) {
        snprintf(err, errlen, "the AN's name is too long");
        return SHP_ERR_INVALID_PARAM;
    }
    snprintf(key, sizeof(key), AM_DRAIN_KEY "%s", name);
    if (!reason) { /* undrain */
        if (!d)
            return SHP_OK;
        if ((st = am_setting_write(am, key, NULL, err, errlen)) != SHP_OK)
            return st;
        unsigned i = (unsigned)(d - am->drains);
        am->drains[i] = am->drains[--am->ndrains];
        return SHP_OK;
    }
    if ((st = am_reason_check(reason, err, errlen)) != SHP_OK)
        return st;
    if (!d && am->ndrains >= SHP_AM_MAX_DRAINS) {
        snprintf(err, errlen,
                 "%u ANs are drained already, the most a manager "
                 "holds",
                 am->ndrains);
        return SHP_ERR_TOO_LARGE;
    }
    if (!d && am_drains_room(am) != SHP_OK) {
        snprintf(err, errlen, "no memory");
        return SHP_ERR_NO_MEMORY;
    }
    if ((st = am_setting_write(am, key, reason, err, errlen)) != SHP_OK)
        return st;
    shp_am_drain_t *w =
        d ? &am->drains[d - am->drains] : &am->drains[am->ndrains++];
    snprintf(w->name, sizeof(w->name), "%s", name);
    snprintf(w->reason, sizeof(w->reason), "%s", reason);
    return SHP_OK;
}

shp_status_t shp_am_tree_freeze(shp_am_t *am, int t, const char *reason,
                                char *err, size_t errlen)
{
    char key[sizeof(AM_FREEZE_KEY) + 8];
    shp_status_t st;
    if (t < 0 || t >= SHP_AM_MAX_TREE_ID ||
        (!am->trees[t].used && !(am->freezes[t].set && !reason))) {
        snprintf(err, errlen, "no tree %d (sharpctl trees)", t);
        return SHP_ERR_NOT_FOUND;
    }
    snprintf(key, sizeof(key), AM_FREEZE_KEY "%d", t);
    shp_am_freeze_t *f = &am->freezes[t];
    if (!reason) { /* thaw */
        if (!f->set)
            return SHP_OK;
        if ((st = am_setting_write(am, key, NULL, err, errlen)) != SHP_OK)
            return st;
        memset(f, 0, sizeof(*f));
        return SHP_OK;
    }
    if ((st = am_reason_check(reason, err, errlen)) != SHP_OK)
        return st;
    shp_am_freeze_t nf = {.set = 1};
    snprintf(nf.root, sizeof(nf.root), "%s", am_tree_root(am, t));
    snprintf(nf.reason, sizeof(nf.reason), "%s", reason);
    char *v = am_freeze_value(&nf);
    if (!v) {
        snprintf(err, errlen, "no memory");
        return SHP_ERR_NO_MEMORY;
    }
    st = am_setting_write(am, key, v, err, errlen);
    free(v);
    if (st == SHP_OK)
        *f = nf;
    return st;
}

void shp_am_settings_tree_built(shp_am_t *am, int t)
{
    shp_am_freeze_t *f = &am->freezes[t];
    char key[sizeof(AM_FREEZE_KEY) + 8], err[256];
    if (!f->set || !strcmp(f->root, am_tree_root(am, t)))
        return;
    shp_warn("tree %d thawed: it was frozen with root %s, and is now built "
             "with root %s (the topology or the live ANs changed)",
             t, f->root, am_tree_root(am, t));
    snprintf(key, sizeof(key), AM_FREEZE_KEY "%d", t);
    /* a failed write leaves the row: the next start drops it again */
    (void)am_setting_write(am, key, NULL, err, sizeof(err));
    memset(f, 0, sizeof(*f));
}

/* --- loaded back at start ------------------------------------------------ */

typedef struct {
    shp_am_t *am;
    shp_status_t st;
    char *err;
    size_t errlen;
    const char *from; /* "the state database", "the active manager" */
} am_settings_load_t;

static void am_drain_loaded(void *arg, const char *name, const char *value)
{
    am_settings_load_t *l = arg;
    const char *an = name + strlen(AM_DRAIN_KEY);
    if (l->st != SHP_OK)
        return;
    if (strlen(an) >= sizeof(l->am->drains[0].name) ||
        strlen(value) > SHP_AM_REASON_MAX) {
        shp_warn("%s: drain of AN %.128s ignored: too long", l->from, an);
        return;
    }
    /* kept even when the topology has no such AN now (it may again);
     * sharpctl an undrain forgets it */
    int node = shp_topo_find(l->am->topo, an);
    if (node < 0 || !l->am->an_expected[node])
        shp_warn("AN %s is drained but is no AN of topology %s", an,
                 l->am->cfg.topology);
    if ((l->st = am_drains_room(l->am)) != SHP_OK) {
        snprintf(l->err, l->errlen, "no memory");
        return;
    }
    shp_am_drain_t *d = &l->am->drains[l->am->ndrains++];
    snprintf(d->name, sizeof(d->name), "%s", an);
    snprintf(d->reason, sizeof(d->reason), "%s", value);
    shp_info("AN %s drained (from %s): %s", an, l->from, value);
}

static void am_freeze_loaded(void *arg, const char *name, const char *value)
{
    am_settings_load_t *l = arg;
    const char *id = name + strlen(AM_FREEZE_KEY);
    char *end;
    long t = strtol(id, &end, 10);
    json_t *v = json_loads(value, 0, NULL);
    const char *root = json_string_value(json_object_get(v, "root"));
    const char *reason = json_string_value(json_object_get(v, "reason"));
    if (l->st == SHP_OK) {
        if (!*id || *end || t < 0 || t >= SHP_AM_MAX_TREE_ID || !root ||
            !reason || strlen(root) >= sizeof(l->am->freezes[0].root) ||
            strlen(reason) > SHP_AM_REASON_MAX) {
            shp_warn("%s: setting %s ignored: not a freeze this manager reads",
                     l->from, name);
        } else {
            shp_am_freeze_t *f = &l->am->freezes[t];
            f->set = 1;
            snprintf(f->root, sizeof(f->root), "%s", root);
            snprintf(f->reason, sizeof(f->reason), "%s", reason);
            /* the trees are built later: a tree t of another root drops
             * it then (shp_am_settings_tree_built) */
            shp_info("tree %ld frozen (from %s), if its root is still %s: %s",
                     t, l->from, root, reason);
        }
    }
    json_decref(v);
}

shp_status_t shp_am_settings_load(shp_am_t *am, char *err, size_t errlen)
{
    am_settings_load_t l = {am, SHP_OK, err, errlen, "the state database"};
    shp_status_t st;
    if (!am->store)
        return SHP_OK;
    if ((st = shp_am_store_settings(am->store, AM_DRAIN_KEY, SHP_AM_MAX_DRAINS,
                                    am_drain_loaded, &l)) != SHP_OK ||
        (st = l.st) != SHP_OK ||
        (st =
             shp_am_store_settings(am->store, AM_FREEZE_KEY, SHP_AM_MAX_TREE_ID,
                                   am_freeze_loaded, &l)) != SHP_OK ||
        (st = l.st) != SHP_OK) {
        if (l.st == SHP_OK)
            snprintf(err, errlen, "%s", shp_am_store_error(am->store));
        return st;
    }
    return SHP_OK;
}

void shp_am_settings_free(shp_am_t *am)
{
    free(am->drains);
    am->drains = NULL;
    am->ndrains = am->capdrains = 0;
    memset(am->freezes, 0, sizeof(am->freezes));
}

/* --- a standby's copy ------------------------------------------------------ */

json_t *shp_am_settings_rows(const shp_am_t *am)
{
    json_t *rows = json_object();
    char key[sizeof(AM_DRAIN_KEY) + sizeof(am->drains[0].name)];
    for (unsigned i = 0; rows && i < am->ndrains; i++) {
        snprintf(key, sizeof(key), AM_DRAIN_KEY "%s", am->drains[i].name);
        json_object_set_new(rows, key, json_string(am->drains[i].reason));
    }
    for (int t = 0; rows && t < SHP_AM_MAX_TREE_ID; t++) {
        char *v = am->freezes[t].set ? am_freeze_value(&am->freezes[t]) : NULL;
        if (v) {
            snprintf(key, sizeof(key), AM_FREEZE_KEY "%d", t);
            json_object_set_new(rows, key, json_string(v));
            free(v);
        }
    }
    return rows;
}

void shp_am_settings_replace(shp_am_t *am, const json_t *rows, const char *from)
{
    char err[256];
    const char *key;
    json_t *v, *old;
    if (!json_is_object(rows) ||
        json_object_size(rows) > SHP_AM_MAX_DRAINS + SHP_AM_MAX_TREE_ID)
        return;
    /* a drain or a freeze each, of the sizes this manager keeps: the rest
     * of the settings table (the topology, the epoch) is its own */
    json_object_foreach((json_t *)rows, key, v)
    {
        if (!json_is_string(v) || strlen(json_string_value(v)) > 1024 ||
            strlen(key) >= sizeof(AM_DRAIN_KEY) + sizeof(am->drains[0].name) ||
            (strncmp(key, AM_DRAIN_KEY, strlen(AM_DRAIN_KEY)) != 0 &&
             strncmp(key, AM_FREEZE_KEY, strlen(AM_FREEZE_KEY)) != 0)) {
            shp_warn_sparse(1000,
                            "settings from %s refused: %.64s is no "
                            "drain or freeze this manager keeps",
                            from, key);
            return;
        }
    }
    if (!(old = shp_am_settings_rows(am)))
        return;
    if (json_equal(old, (json_t *)rows)) {
        json_decref(old);
        return;
    }
    /* the database: what went, what is new or changed (each its commit) */
    json_object_foreach(old, key, v)
    {
        if (!json_object_get(rows, key))
            (void)am_setting_write(am, key, NULL, err, sizeof(err));
    }
    json_object_foreach((json_t *)rows, key, v)
    {
        json_t *was = json_object_get(old, key);
        if (!was || !json_equal(was, v))
            (void)am_setting_write(am, key, json_string_value(v), err,
                                   sizeof(err));
    }
    json_decref(old);
    /* memory: read again as at start */
    am->ndrains = 0;
    memset(am->freezes, 0, sizeof(am->freezes));
    am_settings_load_t l = {am, SHP_OK, err, sizeof(err), from};
    json_object_foreach((json_t *)rows, key, v)
    {
        if (!strncmp(key, AM_DRAIN_KEY, strlen(AM_DRAIN_KEY)) &&
            am->ndrains < SHP_AM_MAX_DRAINS)
            am_drain_loaded(&l, key, json_string_value(v));
        else if (!strncmp(key, AM_FREEZE_KEY, strlen(AM_FREEZE_KEY)))
            am_freeze_loaded(&l, key, json_string_value(v));
    }
    unsigned nfrozen = 0;
    for (unsigned t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        nfrozen += am->freezes[t].set != 0;
    }
    shp_info("settings taken from %s: %u ANs drained, %u trees frozen", from,
             am->ndrains, nfrozen);
}
