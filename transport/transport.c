/* What every transport provider shares: set-up and clean-up of a transport
 * around its ops table, the delivery of a received message (header checked
 * before any callback sees it), the datagram-drop hook of the tests, and the
 * stubs that fill the slots a provider does not support.  The providers
 * (tcp/, udp/, shm/, verbs/) call into this file; the list of providers is
 * in registry.c, above them all. */
#include "transport/transport.h"

#include "core/log.h"

#include <string.h>

shp_status_t shp_tp_init(shp_tp_t *tp, const shp_tp_ops_t *ops,
                         struct ev_loop *loop, uint32_t max_payload,
                         const char *local_ip)
{
    memset(tp, 0, sizeof(*tp));
    tp->ops = ops;
    tp->loop = loop;
    tp->max_payload = max_payload;
    tp->drop_seed = 0x853c49e6748fea9bull;
    tp->shm.trust_uid = (uid_t)-1;
    if (local_ip != NULL) {
        snprintf(tp->local_ip, sizeof(tp->local_ip), "%s", local_ip);
    }
    return ops->init(tp);
}

void shp_tp_cleanup(shp_tp_t *tp)
{
    if (tp->ops != NULL) {
        tp->ops->cleanup(tp);
        tp->ops = NULL;
    }
}

shp_status_t shp_tp_deliver(shp_tp_ep_t *ep, const void *msg, size_t len)
{
    shp_wire_hdr_t hdr;
    const char *why = "?";
    shp_status_t status;

    if (len < SHP_WIRE_HDR_LEN) {
        ep->tp->stats.malformed++;
        shp_warn_sparse(1000, "truncated message from %s (%zu bytes)", ep->peer,
                        len);
        return SHP_ERR_PROTO;
    }
    shp_wire_hdr_unpack(msg, &hdr);
    status = shp_wire_validate(&hdr, len, ep->tp->max_payload, &why);
    if (status == SHP_OK && (hdr.flags & SHP_WIRE_F_SPARSE)) {
        shp_wire_sparse_t v; /* its bitmap and blocks, before anyone reads */
        size_t mac = hdr.flags & SHP_WIRE_F_MAC ? SHP_WIRE_MAC_LEN : 0;
        status =
            shp_wire_sparse_view(&hdr, (const uint8_t *)msg + SHP_WIRE_HDR_LEN,
                                 hdr.payload_len - mac, &v, &why);
    }
    if (status != SHP_OK) {
        ep->tp->stats.malformed++;
        shp_warn_sparse(1000, "malformed %s message from %s: %s",
                        shp_wire_opcode_name(hdr.opcode), ep->peer, why);
        return status;
    }
    ep->tp->stats.msgs_in++;
    ep->tp->stats.bytes_in += len;
    ep->cbs->on_msg(ep, &hdr, (const uint8_t *)msg + SHP_WIRE_HDR_LEN);
    return SHP_OK;
}

int shp_tp_drop_datagram(shp_tp_t *tp)
{
    if (tp->mcast_drop <= 0) {
        return 0;
    }
    /* xorshift: cheap and deterministic from the seed */
    tp->drop_seed ^= tp->drop_seed << 13;
    tp->drop_seed ^= tp->drop_seed >> 7;
    tp->drop_seed ^= tp->drop_seed << 17;
    if ((double)(tp->drop_seed >> 11) / 9007199254740992.0 < tp->mcast_drop) {
        tp->stats.mcast_dropped++;
        return 1;
    }
    return 0;
}

/* Stubs of unsupported slots ---------------------------------------------- */

shp_status_t shp_tp_stub_init(shp_tp_t *tp)
{
    (void)tp;
    return SHP_ERR_UNSUPPORTED;
}

void shp_tp_stub_cleanup(shp_tp_t *tp)
{
    (void)tp;
}

void shp_tp_stub_dump(shp_tp_t *tp)
{
    (void)tp;
}

shp_status_t shp_tp_stub_quiet(shp_tp_ep_t *ep, int on)
{
    (void)ep;
    (void)on;
    return SHP_ERR_UNSUPPORTED;
}

void shp_tp_stub_pull(shp_tp_ep_t *ep)
{
    (void)ep;
}

shp_status_t shp_tp_stub_listen(shp_tp_t *tp, const char *addr,
                                shp_tp_accept_cb_t on_accept)
{
    (void)tp;
    (void)addr;
    (void)on_accept;
    return SHP_ERR_UNSUPPORTED;
}

const char *shp_tp_stub_listen_addr(shp_tp_t *tp)
{
    (void)tp;
    return NULL;
}

shp_status_t shp_tp_stub_ep(shp_tp_t *tp, const char *addr,
                            const shp_tp_ep_cbs_t *cbs, void *arg,
                            shp_tp_ep_t **ep)
{
    (void)tp;
    (void)addr;
    (void)cbs;
    (void)arg;
    (void)ep;
    return SHP_ERR_UNSUPPORTED;
}

shp_status_t shp_tp_stub_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                              const void *payload)
{
    (void)ep;
    (void)hdr;
    (void)payload;
    return SHP_ERR_UNSUPPORTED;
}

void shp_tp_stub_close(shp_tp_ep_t *ep)
{
    (void)ep;
}
