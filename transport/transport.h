/*
 * Data-path transports: one ops table, several providers.
 *
 *   tcp   reliable, ordered connections (the RC analogue)
 *   udp   IPv4 multicast datagrams (the UD-multicast analogue), for results
 *   verbs InfiniBand / RoCE (RC for the tree, UD multicast for results)
 *   shm   rings in shared memory between processes of one host
 *
 * Messages are a wire header (protocol/wire.h) and its payload.  Providers
 * check every received message with shp_wire_validate() before delivering
 * it; a malformed message closes a connection (or drops a datagram) and
 * counts in stats.malformed.  Every slot of an ops table is set: what a
 * provider does not support returns SHP_ERR_UNSUPPORTED.
 *
 * Endpoint lifetime: on_close is called exactly once for every endpoint
 * (also after shp_tp_close(), deferred while inside on_msg); the provider
 * frees the endpoint after on_close returns.
 */
#ifndef SHP_COMMON_TRANSPORT_H
#define SHP_COMMON_TRANSPORT_H

#include "core/status.h"
#include "protocol/wire.h"

#include <ev.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct shp_tp shp_tp_t;
typedef struct shp_tp_ep shp_tp_ep_t;

typedef struct shp_tp_ep_cbs {
    void (*on_msg)(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                   const void *payload);
    /* the endpoint is ready: connected, or (verbs) joined to its multicast
     * group; may be NULL */
    void (*on_connect)(shp_tp_ep_t *ep);
    void (*on_close)(shp_tp_ep_t *ep, shp_status_t reason);
} shp_tp_ep_cbs_t;

struct shp_tp_ep {
    shp_tp_t *tp;
    const shp_tp_ep_cbs_t *cbs;
    void *arg; /* the owner's */
    char peer[64];
    /* the largest message (header and payload) the owner takes on it now;
     * a larger one closes it (SHP_ERR_TOO_LARGE).  0: the transport's
     * max_payload.  While set, a stream transport keeps no read buffer
     * between messages.  (The AN's child links that joined nothing yet.) */
    size_t rx_limit;
};

/* A new inbound endpoint; set ep->cbs and ep->arg before returning. */
typedef void (*shp_tp_accept_cb_t)(shp_tp_t *tp, shp_tp_ep_t *ep);

typedef struct shp_tp_stats {
    uint64_t msgs_in, msgs_out, bytes_in, bytes_out;
    uint64_t malformed;     /* refused by the validator */
    uint64_t mcast_dropped; /* dropped on purpose (drop probability) */
    uint64_t bells;         /* shm: messages that had to wake a sleeper */
} shp_tp_stats_t;

typedef struct shp_tp_ops {
    const char *name;
    shp_status_t (*init)(shp_tp_t *tp);
    void (*cleanup)(shp_tp_t *tp);
    /* accept reliable connections on "ip:port" (port 0: any) */
    shp_status_t (*listen)(shp_tp_t *tp, const char *addr,
                           shp_tp_accept_cb_t on_accept);
    /* the address actually listened on ("127.0.0.2:41234") */
    const char *(*listen_addr)(shp_tp_t *tp);
    shp_status_t (*connect)(shp_tp_t *tp, const char *addr,
                            const shp_tp_ep_cbs_t *cbs, void *arg,
                            shp_tp_ep_t **ep);
    shp_status_t (*send)(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                         const void *payload);
    void (*close)(shp_tp_ep_t *ep);
    /* receive datagrams sent to multicast "group:port" */
    shp_status_t (*mcast_join)(shp_tp_t *tp, const char *group,
                               const shp_tp_ep_cbs_t *cbs, void *arg,
                               shp_tp_ep_t **ep);
    /* an endpoint that sends to multicast "group:port" */
    shp_status_t (*mcast_sender)(shp_tp_t *tp, const char *group,
                                 const shp_tp_ep_cbs_t *cbs, void *arg,
                                 shp_tp_ep_t **ep);
    /* log the state of every endpoint (diagnostics, SIGUSR1) */
    void (*dump)(shp_tp_t *tp);
    /* quiet (1): the peer's messages stop waking the loop (they wait,
     * read by `pull`); a lost connection still wakes it.  0: as before.
     * SHP_ERR_UNSUPPORTED where the provider cannot (only tcp can) */
    shp_status_t (*quiet)(shp_tp_ep_t *ep, int on);
    /* deliver what the peer sent and waits (a quiet endpoint's messages);
     * may close the endpoint (on_close) */
    void (*pull)(shp_tp_ep_t *ep);
} shp_tp_ops_t;

/* How the shm provider waits for its rings, set by the transport's owner
 * (the other providers ignore it). */
typedef struct shp_tp_shm_opts {
    /* before the loop sleeps with nothing in the rings, keep looking
     * at them this long, yielding the core between looks; 0: sleep at once.
     * The owner may change it between turns of the loop. */
    uint64_t spin_ns;
    /* with spin_ns: messages found before the loop would poll are
     * delivered at once and the turn ends there (ev_break), without the
     * poll's system call; at least one whole turn a millisecond still
     * polls every descriptor and runs the timers.  Only for an owner that
     * runs the loop a turn at a time (EVRUN_ONCE) and looks at what
     * arrived after each. */
    int spin_break;
    /* the owner runs the loop until it stops it (an AN), not a turn
     * at a time: messages found before a poll are delivered there and the
     * loop goes on (a poll that would find nothing else is a system call
     * saved), at least one whole turn a millisecond as above.  Sends the
     * owner queues for a prepare watcher of its own (shp_conn's flush)
     * from a handler run there wait for the next wake-up: such an owner
     * writes them at once (the AN's control link does) */
    int runs_free;
    /* a listener: how many contributions (AGG_REQ) from its
     * connectors may arrive before one of them must wake it; asked before
     * each sleep, NULL: 1 (every message wakes a sleeper).  The owner
     * answers the fewest that could let any operation complete: waking
     * early is safe, waking late would delay it (see shm/shm.c). */
    uint32_t (*wake_need)(void *arg);
    void *wake_arg;
    /* a listener with wake_need: spin (spin_ns) also while it waits
     * for several contributions, instead of sleeping at once on the board
     * (pays where a process switch is cheap: the spin's yields hand the
     * core to the members that owe them, and no wake-up is paid) */
    int spin_many;
    /* a connector: besides root and its own user, the user a listener may
     * run as ((uid_t)-1: none; shp_tp_init sets that) */
    uid_t trust_uid;
} shp_tp_shm_opts_t;

struct shp_tp {
    const shp_tp_ops_t *ops;
    struct ev_loop *loop;
    uint32_t max_payload; /* largest payload accepted */
    char local_ip[64];    /* source address for connections and multicast */
    double mcast_drop;    /* tests: drop this fraction of datagrams */
    uint64_t drop_seed;
    shp_tp_shm_opts_t shm; /* the shm provider's: how it waits */
    shp_tp_stats_t stats;
    void *priv;
};

/* "tcp", "udp", "verbs", "shm"; NULL if unknown. */
const shp_tp_ops_t *shp_tp_find(const char *name);

/* The provider that carries multicast results beside `ops`: udp beside
 * tcp and shm, verbs (UD) beside verbs (RC). */
const shp_tp_ops_t *shp_tp_mcast_ops(const shp_tp_ops_t *ops);

/* Bind a provider to a loop.  `local_ip` may be NULL (any). */
SHP_WUR shp_status_t shp_tp_init(shp_tp_t *tp, const shp_tp_ops_t *ops,
                                 struct ev_loop *loop, uint32_t max_payload,
                                 const char *local_ip);
void shp_tp_cleanup(shp_tp_t *tp);

static inline shp_status_t
shp_tp_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr, const void *payload)
{
    return ep->tp->ops->send(ep, hdr, payload);
}

static inline void shp_tp_close(shp_tp_ep_t *ep)
{
    ep->tp->ops->close(ep);
}

/* For providers: the test drop of received datagrams (tp->mcast_drop):
 * 1 if this one is to be dropped (and counted). */
int shp_tp_drop_datagram(shp_tp_t *tp);

/* For providers: validate and deliver a received message, or count and
 * refuse it.  Returns the validator's status. */
shp_status_t shp_tp_deliver(shp_tp_ep_t *ep, const void *msg, size_t len);

/* Stubs for the slots a provider does not support: they answer
 * SHP_ERR_UNSUPPORTED (or NULL / nothing), so no slot is ever NULL. */
shp_status_t shp_tp_stub_init(shp_tp_t *tp);
void shp_tp_stub_cleanup(shp_tp_t *tp);
void shp_tp_stub_dump(shp_tp_t *tp);
shp_status_t shp_tp_stub_listen(shp_tp_t *tp, const char *addr,
                                shp_tp_accept_cb_t on_accept);
const char *shp_tp_stub_listen_addr(shp_tp_t *tp);
shp_status_t shp_tp_stub_ep(shp_tp_t *tp, const char *addr,
                            const shp_tp_ep_cbs_t *cbs, void *arg,
                            shp_tp_ep_t **ep);
shp_status_t shp_tp_stub_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                              const void *payload);
void shp_tp_stub_close(shp_tp_ep_t *ep);
shp_status_t shp_tp_stub_quiet(shp_tp_ep_t *ep, int on);
void shp_tp_stub_pull(shp_tp_ep_t *ep);

extern const shp_tp_ops_t shp_tp_tcp_ops;
extern const shp_tp_ops_t shp_tp_udp_ops;
extern const shp_tp_ops_t shp_tp_verbs_ops;
extern const shp_tp_ops_t shp_tp_shm_ops;

#endif
