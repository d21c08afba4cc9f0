/*
 * The aggregation node: start (the data transport and its listener, the
 * advertised address, multicast if the transport has it), stop, the
 * counters the manager polls (shp_an_stats_json) and the state dump
 * (SIGUSR1).  Who drives the node hears of its events through the table
 * given to shp_an_set_events.  The parts: see an/an_int.h.
 */
#include "an/an_int.h"

#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *const shp_an_transports[] = {"tcp", "verbs", "shm", NULL};

shp_status_t shp_an_start(shp_an_t *an, struct ev_loop *loop)
{
    const shp_tp_ops_t *ops = shp_tp_find(shp_an_transports[an->cfg.transport]);
    const char *colon;
    shp_status_t status;

    an->loop = loop;
    an->link_cbs = &shp_an_link_cbs;
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
    an->tp.shm.spin_ns = (uint64_t)an->cfg.spin_us * 1000;
    an->tp.shm.wake_need = shp_an_wake_need;
    an->tp.shm.spin_many = an->cfg.spin_many;
    an->tp.shm.wake_arg = an;
    an->tp.shm.runs_free = 1; /* main() runs the loop until we stop */
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

void shp_an_set_events(shp_an_t *an, const shp_an_events_t *events, void *arg)
{
    an->events = events;
    an->events_arg = arg;
}

static void an_stat(json_t *obj, const char *key, uint64_t value)
{
    json_object_set_new(obj, key, json_integer((json_int_t)value));
}

/* exact-mode operations of the groups this AN is the top of (every
 * operation of a group reaches its top): what `sharpctl groups` shows */
static json_t *an_exact_ops_json(const shp_an_t *an)
{
    const shp_an_group_t *g, *tmp;
    json_t *exact = json_object();
    char key[16];

    HASH_ITER(hh, an->groups, g, tmp)
    {
        if (g->is_top && g->exact_ops > 0) {
            snprintf(key, sizeof(key), "%u", g->id);
            an_stat(exact, key, g->exact_ops);
        }
    }
    return exact;
}

/* The counters, one key at a time (the AM's stats_req, sharpctl) */
json_t *shp_an_stats_json(const shp_an_t *an)
{
    const shp_an_stats_t *s = &an->stats;
    json_t *r = json_object();

    if (r == NULL) {
        return NULL;
    }
    an_stat(r, "groups", an->ngroups);
    an_stat(r, "trees", an->ntrees);
    an_stat(r, "join_early", s->join_early);
    an_stat(r, "ops", s->ops);
    an_stat(r, "results", s->results);
    an_stat(r, "mcast_sent", s->mcast_sent);
    an_stat(r, "retransmits", s->retransmits);
    an_stat(r, "joins", s->joins);
    an_stat(r, "join_refused", s->join_refused);
    an_stat(r, "err_bad_key", s->err_bad_key);
    an_stat(r, "err_unknown_group", s->err_unknown_group);
    an_stat(r, "err_seq_window", s->err_seq_window);
    an_stat(r, "err_mismatch", s->err_mismatch);
    an_stat(r, "err_malformed", s->err_malformed + an->tp.stats.malformed);
    an_stat(r, "err_protocol", s->err_protocol);
    an_stat(r, "err_forged", s->err_forged);
    an_stat(r, "groups_failed", s->groups_failed);
    an_stat(r, "links_lost", s->links_lost);
    an_stat(r, "join_deadline", s->join_deadline);
    an_stat(r, "unjoined", an->nunjoined);
    an_stat(r, "unjoined_refused", s->unjoined_refused);
    an_stat(r, "unjoined_evicted", s->unjoined_evicted);
    an_stat(r, "bytes_in", an->tp.stats.bytes_in);
    an_stat(r, "quiet_msgs", s->quiet_msgs);
    an_stat(r, "quiet_reads", s->quiet_reads);
    an_stat(r, "sparse_in", s->sparse_in);
    an_stat(r, "sparse_out", s->sparse_out);
    an_stat(r, "sparse_blocks_skipped", s->sparse_blocks_skipped);
    an_stat(r, "pass_fold", s->pass_fold);
    an_stat(r, "pass_copy", s->pass_copy);
    an_stat(r, "pass_tag", s->pass_tag);
    json_object_set_new(r, "exact_ops", an_exact_ops_json(an));
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
