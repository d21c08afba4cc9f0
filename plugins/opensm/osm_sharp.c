/*
 * libosm_sharp.so: an OpenSM event plugin that hands the fabric to the
 * aggregation manager.  When the subnet comes up and after every heavy
 * sweep, it walks OpenSM's subnet (nodes, ports, links), writes it in
 * ibnetdiscover format to a file (atomically: a temporary file renamed)
 * and, when given the manager's admin socket, asks the manager to load it
 * (the same request as `sharpctl topology load`).
 *
 *   # opensm.conf
 *   event_plugin_name osm_sharp
 *   event_plugin_options file=/etc/sharp/topology.ibnd,am=/run/sharp/am.sock
 *
 * (the paths of a PREFIX=/usr install; without options, the file is
 * SYSCONFDIR/sharp/topology.ibnd of the build, and no manager is told)
 *
 * OpenSM loads lib<name>.so and refuses a plugin built for another OpenSM
 * version: this one is built against the installed headers (OSM_VERSION).
 * The walk runs on a thread of its own under OpenSM's lock, never inside
 * OpenSM's event callback.
 */
#include <infiniband/opensm/osm_event_plugin.h>
#include <infiniband/opensm/osm_node.h>
#include <infiniband/opensm/osm_opensm.h>
#include <infiniband/opensm/osm_port.h>
#include <infiniband/opensm/osm_version.h>

#include "topology/topo.h"
#include "protocol/ctl.h"
#include "core/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct osm_sharp {
    osm_opensm_t *osm;
    char file[512];
    char am[512];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, stop;
    unsigned dumps;
} osm_sharp_t;

static void say(osm_sharp_t *p, osm_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(osm_sharp_t *p, osm_log_level_t level, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    osm_log(&p->osm->log, level, "osm_sharp: %s\n", msg);
}

/* "file=...,am=..." (either may be absent) */
static void parse_options(osm_sharp_t *p, const char *opts)
{
    char buf[1024], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", opts ? opts : "");
    for (char *kv = strtok_r(buf, ", ", &save); kv;
         kv = strtok_r(NULL, ", ", &save)) {
        if (!strncmp(kv, "file=", 5)) {
            snprintf(p->file, sizeof(p->file), "%s", kv + 5);
        } else if (!strncmp(kv, "am=", 3)) {
            snprintf(p->am, sizeof(p->am), "%s", kv + 3);
        }
    }
}

/* The subnet as a topology (under OpenSM's lock). */
static shp_topo_t *walk(osm_sharp_t *p)
{
    cl_qmap_t *tbl = &p->osm->subn.node_guid_tbl;
    shp_topo_t *t = shp_topo_new();
    int ok = t != NULL;
    cl_map_item_t *it;

    /* nodes first, so that links can name both ends */
    for (it = cl_qmap_head(tbl); ok && it != cl_qmap_end(tbl);
         it = cl_qmap_next(it)) {
        osm_node_t *n = (osm_node_t *)it;
        uint64_t guid = cl_ntoh64(osm_node_get_node_guid(n));
        uint8_t type = osm_node_get_type(n);
        char id[32], desc[IB_NODE_DESCRIPTION_SIZE + 1];
        shp_node_type_t ty = type == IB_NODE_TYPE_SWITCH   ? SHP_NODE_SWITCH
                             : type == IB_NODE_TYPE_ROUTER ? SHP_NODE_ROUTER
                                                           : SHP_NODE_CA;
        snprintf(id, sizeof(id), "%c-%016llx",
                 ty == SHP_NODE_SWITCH   ? 'S'
                 : ty == SHP_NODE_ROUTER ? 'R'
                                         : 'H',
                 (unsigned long long)guid);
        memcpy(desc, n->node_desc.description, IB_NODE_DESCRIPTION_SIZE);
        desc[IB_NODE_DESCRIPTION_SIZE] = '\0';
        int nports = osm_node_get_num_physp(n) - 1;
        if (shp_topo_add_node(t, ty, guid, id, desc, nports > 0 ? nports : 1) <
            0) {
            ok = 0;
        }
    }
    for (it = cl_qmap_head(tbl); ok && it != cl_qmap_end(tbl);
         it = cl_qmap_next(it)) {
        osm_node_t *n = (osm_node_t *)it;
        int a = shp_topo_find_guid(t, cl_ntoh64(osm_node_get_node_guid(n)));
        for (uint8_t pn = 1; pn < osm_node_get_num_physp(n); pn++) {
            osm_physp_t *ph = osm_node_get_physp_ptr(n, pn);
            if (ph == NULL || !osm_physp_is_valid(ph)) {
                continue;
            }
            if (osm_node_get_type(n) != IB_NODE_TYPE_SWITCH) {
                shp_topo_set_port_guid(t, a, pn,
                                       cl_ntoh64(osm_physp_get_port_guid(ph)));
            }
            osm_physp_t *rp = osm_physp_get_remote(ph);
            if (rp == NULL || rp->p_node == NULL) {
                continue;
            }
            int b = shp_topo_find_guid(
                t, cl_ntoh64(osm_node_get_node_guid(rp->p_node)));
            uint8_t rpn = osm_physp_get_port_num(rp);
            /* each link once: from its lower (node, port) end */
            if (b < 0 || b < a || (b == a && rpn < pn)) {
                continue;
            }
            if (shp_topo_link(t, a, pn, b, rpn) != SHP_OK) {
                ok = 0;
            }
        }
    }
    if (!ok) {
        shp_topo_free(t);
        return NULL;
    }
    return t;
}

/* ask the manager to load the file (admin request topology_load) */
static void notify_am(osm_sharp_t *p)
{
    struct timeval tv = {5, 0}; /* never hold the walk thread for long */
    json_t *req = json_pack("{s:s, s:i, s:s}", "type", "topology_load", "id", 1,
                            "file", p->file);
    shp_status_t st;
    const char *why;
    int fd = shp_unix_connect(p->am);

    if (fd < 0 || req == NULL ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
        say(p, OSM_LOG_ERROR, "cannot reach the aggregation manager at %s: %s",
            p->am, strerror(errno));
    } else {
        json_t *r = shp_ctl_call_fd(fd, req, &st, &why);
        if (r == NULL) {
            say(p, OSM_LOG_ERROR, "no answer from the aggregation manager: %s",
                why);
        } else if (shp_json_opt_int(r, "status", INT32_MIN, INT32_MAX, -1) ==
                   0) {
            say(p, OSM_LOG_INFO, "the aggregation manager loaded %s", p->file);
        } else {
            say(p, OSM_LOG_ERROR, "the aggregation manager refused %s: %s",
                p->file, shp_json_opt_str(r, "error", "?"));
        }
        json_decref(r);
    }
    json_decref(req);
    if (fd >= 0) {
        close(fd);
    }
}

static void dump(osm_sharp_t *p)
{
    char tmp[600];
    cl_plock_acquire(&p->osm->lock);
    shp_topo_t *t = walk(p);
    cl_plock_release(&p->osm->lock);
    if (t == NULL) {
        say(p, OSM_LOG_ERROR, "cannot build the topology (out of memory?)");
        return;
    }
    /* a name of its own, created here (O_EXCL, no link followed): in a
     * directory others can write, a planted link or file is refused */
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", p->file);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0) {
        fchmod(fd, 0644); /* a topology, read by the manager's user */
    }
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL && fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    if (f == NULL) {
        say(p, OSM_LOG_ERROR, "cannot write %s: %s", tmp, strerror(errno));
        shp_topo_free(t);
        return;
    }
    time_t now = time(NULL);
    fprintf(f,
            "#\n# Topology file: generated by the osm_sharp OpenSM plugin "
            "(%s) on %s#\n",
            OSM_VERSION, ctime(&now));
    shp_topo_write(t, f, 0);
    size_t sw = shp_topo_count_type(t, SHP_NODE_SWITCH);
    size_t ca = shp_topo_count_type(t, SHP_NODE_CA);
    shp_topo_free(t);
    if (fclose(f) != 0 || rename(tmp, p->file) != 0) {
        say(p, OSM_LOG_ERROR, "cannot write %s: %s", p->file, strerror(errno));
        unlink(tmp);
        return;
    }
    p->dumps++;
    say(p, OSM_LOG_INFO, "%s: %zu switches, %zu CAs", p->file, sw, ca);
    if (p->am[0]) {
        notify_am(p);
    }
}

static void *worker(void *arg)
{
    osm_sharp_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->pending && !p->stop) {
            pthread_cond_wait(&p->cv, &p->mu);
        }
        if (p->stop) {
            break;
        }
        p->pending = 0;
        pthread_mutex_unlock(&p->mu);
        dump(p);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void *plugin_create(osm_opensm_t *osm)
{
    osm_sharp_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    p->osm = osm;
    snprintf(p->file, sizeof(p->file), "%s",
             getenv("SHARP_OSM_FILE") ? getenv("SHARP_OSM_FILE")
                                      : SHP_PATH_TOPOLOGY);
    snprintf(p->am, sizeof(p->am), "%s",
             getenv("SHARP_OSM_AM") ? getenv("SHARP_OSM_AM") : "");
    parse_options(p, osm->subn.opt.event_plugin_options);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, worker, p) != 0) {
        free(p);
        return NULL;
    }
    say(p, OSM_LOG_INFO, "writing the fabric to %s%s%s", p->file,
        p->am[0] ? ", telling the aggregation manager at " : "", p->am);
    return p;
}

static void plugin_delete(void *data)
{
    osm_sharp_t *p = data;
    if (p == NULL) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

static void plugin_report(void *data, osm_epi_event_id_t id, void *event)
{
    osm_sharp_t *p = data;
    (void)event;
    if (p == NULL ||
        (id != OSM_EVENT_ID_SUBNET_UP && id != OSM_EVENT_ID_HEAVY_SWEEP_DONE)) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->pending = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

__attribute__((visibility("default"))) osm_event_plugin_t osm_event_plugin = {
    .osm_version = OSM_VERSION,
    .create = plugin_create,
    .delete = plugin_delete,
    .report = plugin_report,
};
