/* The providers by name, for the daemons and the library to choose from
 * (sharp_an --transport, SHARP_COLL_TRANSPORT), and which provider carries a
 * transport's multicast.  It is the one file that knows every provider: it
 * sits above them, they below it never name one another. */
#include "transport/transport.h"

#include <string.h>

const shp_tp_ops_t *shp_tp_find(const char *name)
{
    static const shp_tp_ops_t *const all[] = {
        &shp_tp_tcp_ops, &shp_tp_udp_ops, &shp_tp_verbs_ops, &shp_tp_shm_ops};
    size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (!strcmp(all[i]->name, name)) {
            return all[i];
        }
    }
    return NULL;
}

const shp_tp_ops_t *shp_tp_mcast_ops(const shp_tp_ops_t *ops)
{
    /* shm: one host, where udp multicast on loopback reaches every member */
    return ops == &shp_tp_tcp_ops || ops == &shp_tp_shm_ops ? &shp_tp_udp_ops
                                                            : ops;
}
