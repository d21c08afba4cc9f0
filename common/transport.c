/* Transport registry, shared delivery, and the stubs of unsupported slots. */
#include "common/transport.h"

#include "common/log.h"

#include <string.h>

const shp_tp_ops_t *shp_tp_find(const char *name)
{
    static const shp_tp_ops_t *const all[] = {&shp_tp_tcp_ops, &shp_tp_udp_ops,
                                              &shp_tp_verbs_ops};
    size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (!strcmp(all[i]->name, name)) {
            return all[i];
        }
    }
    return NULL;
}

shp_status_t shp_tp_init(shp_tp_t *tp, const shp_tp_ops_t *ops,
                         struct ev_loop *loop, uint32_t max_payload,
                         const char *local_ip)
{
    memset(tp, 0, sizeof(*tp));
    tp->ops = ops;
    tp->loop = loop;
    tp->max_payload = max_payload;
    tp->drop_seed = 0x853c49e6748fea9bull;
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
