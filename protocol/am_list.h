/*
 * The managers a node (an AN or a sharpd) may register with, and the
 * epoch rules it keeps (docs/am.md, "A standby manager").
 *
 * The node's `am` option is a comma-separated list of host:port.  The node
 * tries them in turn and stays with the one that takes its registration:
 *
 * - a manager that is standby answers the registration with
 *   SHP_ERR_STANDBY, the active one's address if it knows it (followed
 *   when it is in the node's own list) and when it expects to take over
 *   (retry_ms); the node moves on at once;
 * - a manager that cannot be reached, or closes before registering the
 *   node, is passed over at once; when every one failed in a round the
 *   node waits the backoff (0.1 s doubling to 5 s, as with a single
 *   manager), or the nearest takeover a standby announced;
 * - the node keeps the highest epoch a manager registered it with (and
 *   that manager's proof of it, protocol/auth.h) and reports both in its
 *   next registration; a manager whose epoch is lower is refused
 *   (SHP_ERR_STALE_EPOCH: the node logs it, tells the manager with
 *   am_refused and moves on);
 * - a node that lost the manager it was registered with says so in its
 *   registrations ("lost": that manager's address) until one takes it: a
 *   standby asked so by most of the fabric's nodes while it still hears
 *   that manager takes over (am/am_ha_lost.h).
 *
 * The epoch is kept in memory only: a node that restarts has no groups to
 * protect and learns the epoch again from the first manager that takes it,
 * and the managers never go back (the active one's epoch is the highest).
 */
#ifndef SHP_PROTOCOL_AM_LIST_H
#define SHP_PROTOCOL_AM_LIST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/auth.h"
#include "core/status.h"

#define SHP_AM_LIST_MAX 8 /* managers in a node's list, at most */
#define SHP_AM_LIST_ADDR 64

typedef struct shp_am_list {
    char addr[SHP_AM_LIST_MAX][SHP_AM_LIST_ADDR];
    int n;
    int cur;        /* the manager tried, or registered with, now */
    int failed;     /* managers passed over in a row in this round */
    double backoff; /* between rounds, s */
    double hint;    /* a standby's announced takeover, s (0: none) */
    uint64_t epoch; /* the highest epoch a manager registered us with */
    char proof[SHP_AUTH_EPOCH_PROOF_LEN + 1]; /* that manager's proof */
    char lost[SHP_AM_LIST_ADDR]; /* the registered manager lost, until the
                                    next registration ("": none) */
} shp_am_list_t;

/* The list from the option's value ("host:port[,host:port...]"); an empty
 * one has n 0.  SHP_ERR_INVALID_PARAM (with err) if an entry is empty, too
 * long or there are more than SHP_AM_LIST_MAX. */
SHP_WUR shp_status_t shp_am_list_parse(shp_am_list_t *l, const char *spec,
                                       char *err, size_t errlen);

/* The manager to connect to now. */
const char *shp_am_list_current(const shp_am_list_t *l);

/* The current manager failed: not reached, closed before it registered
 * us, standby, or stale.  Moves on; the seconds to wait before connecting
 * to the new current one. */
double shp_am_list_failed(shp_am_list_t *l);

/* The registered connection was lost: the seconds before connecting again
 * (the same manager first); it is named in the registrations until one
 * takes the node. */
double shp_am_list_lost(shp_am_list_t *l);

/* Adds the epoch the node has seen (and its proof), and the manager it
 * lost if it did, to a registration. */
void shp_am_list_stamp(const shp_am_list_t *l, json_t *reg);

/* The manager's answer to the registration: SHP_OK (registered: its epoch
 * kept if higher, the round reset), SHP_ERR_STANDBY (its hint kept, the
 * active one followed next if it is in the list), SHP_ERR_STALE_EPOCH (its
 * epoch is below the one seen: refuse it), or the manager's own refusal.
 * why says what, for the log. */
SHP_WUR shp_status_t shp_am_list_ack(shp_am_list_t *l, const json_t *ack,
                                     char *why, size_t whylen);

/* The message that tells a stale manager why it is refused (a new
 * reference). */
json_t *shp_am_list_refusal(const shp_am_list_t *l);

#endif
