/*
 * Fabric topology: the graph of switches, channel adapters (hosts) and
 * routers that the aggregation manager builds trees over.
 *
 * Sources: ibnetdiscover's text output (parsed here, the real format with
 * every optional field), the OpenSM plugin (which fills the same structure
 * through shp_topo_add_node/shp_topo_link), and the synthetic fat-tree
 * generator (topo_gen.c), which writes ibnetdiscover text.
 */
#ifndef SHP_AM_TOPO_H
#define SHP_AM_TOPO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

typedef enum shp_node_type {
    SHP_NODE_SWITCH = 1,
    SHP_NODE_CA = 2,
    SHP_NODE_ROUTER = 3,
} shp_node_type_t;

typedef struct shp_topo_port {
    int peer;      /* node index, -1 when the port is not connected */
    int peer_port; /* port number on the peer */
    uint64_t guid; /* port GUID when known (CA ports), else 0 */
} shp_topo_port_t;

typedef struct shp_topo_node {
    shp_node_type_t type;
    uint64_t guid; /* node GUID */
    char *id;      /* the quoted node id, e.g. "S-0002c90300000001" */
    char *desc;    /* node description, e.g. "leaf01" or "n01 HCA-1" */
    char *host;    /* CAs: the host name (desc up to the first blank) */
    int nports;
    shp_topo_port_t *ports; /* [0..nports], index = port number */
    int line;               /* where it was defined (0 if not from a file) */
} shp_topo_node_t;

typedef struct shp_topo shp_topo_t;

shp_topo_t *shp_topo_new(void);
void shp_topo_free(shp_topo_t *topo);

size_t shp_topo_count(const shp_topo_t *topo);
const shp_topo_node_t *shp_topo_node(const shp_topo_t *topo, int idx);
size_t shp_topo_count_type(const shp_topo_t *topo, shp_node_type_t type);

/* Number of links (each counted once; parallel links counted each). */
size_t shp_topo_links(const shp_topo_t *topo);

/* Add a node; returns its index or a negative status (duplicate GUID/id). */
int shp_topo_add_node(shp_topo_t *topo, shp_node_type_t type, uint64_t guid,
                      const char *id, const char *desc, int nports);

/* Connect port pa of a to port pb of b (both directions). */
SHP_WUR shp_status_t shp_topo_link(shp_topo_t *topo, int a, int pa, int b,
                                   int pb);

void shp_topo_set_port_guid(shp_topo_t *topo, int idx, int port, uint64_t guid);

/* Look a node up by GUID ("0x..." or bare hex), by id, by description or,
 * for CAs, by host name.  Returns the index or -1. */
int shp_topo_find(const shp_topo_t *topo, const char *key);
int shp_topo_find_guid(const shp_topo_t *topo, uint64_t guid);

/* Parse ibnetdiscover output.  On error returns SHP_ERR_PARSE and writes
 * "NAME:LINE: reason" to err. */
SHP_WUR shp_status_t shp_topo_parse(const char *text, size_t len,
                                    const char *name, shp_topo_t **out,
                                    char *err, size_t errlen);
SHP_WUR shp_status_t shp_topo_load(const char *path, shp_topo_t **out,
                                   char *err, size_t errlen);

/* Write the topology in ibnetdiscover format (parseable by shp_topo_parse).
 * SHP_TOPO_IBSIM writes an ibsim net file instead: node ids are the
 * descriptions (which ibsim turns into node descriptions) and no GUIDs. */
enum { SHP_TOPO_IBSIM = 1 };
void shp_topo_write(const shp_topo_t *topo, FILE *out, int flags);

/* Two topologies describe the same fabric: same nodes (by GUID, type,
 * description) and the same links.  On a difference, writes it to why. */
int shp_topo_equal(const shp_topo_t *a, const shp_topo_t *b, char *why,
                   size_t whylen);

/* Synthetic fat-trees (topo_gen.c).  levels 2: leaf and spine switches;
 * levels 3: edge, aggregation and core switches in pods.  radix is the
 * switch port count (even, >= 4).  Hosts are named n00001.. */
typedef struct shp_fat_tree_spec {
    int levels;
    int radix;
    int hosts;
} shp_fat_tree_spec_t;

SHP_WUR shp_status_t shp_topo_fat_tree(const shp_fat_tree_spec_t *spec,
                                       shp_topo_t **out, char *err,
                                       size_t errlen);

#endif
