/*
 * Topology graph and the ibnetdiscover parser.
 *
 * ibnetdiscover writes one record per node: optional "key=value" lines
 * (vendid, devid, sysimgguid, switchguid=0xG(portguid), caguid=0xG,
 * rtguid=0xG), a header line
 *
 *     Switch  24 "S-0002c90300000001"   # "leaf01" enhanced port 0 lid 3 lmc 0
 *     Ca      2 "H-0002c90400000001"    # "n00001 HCA-1"
 *
 * and one line per connected port:
 *
 *     [1]     "H-0002c90400000001"[1](2c90400000002)   # "n00001 HCA-1" lid 4 4xEDR
 *     [1](2c90400000002)   "S-0002c90300000001"[1]     # lid 4 lmc 0 "leaf01" lid 3 4xEDR
 *     [3][ext 7]  "S-..."[2][ext 1]                     (chassis external ports)
 *
 * Links appear at both ends; they are resolved after the whole file is read
 * and must agree.  Comments start with '#'.
 */
#include "topology/topo.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

typedef struct name_ent {
    char *key;
    int idx;
    UT_hash_handle hh;
} name_ent_t;

typedef struct guid_ent {
    uint64_t guid;
    int idx;
    UT_hash_handle hh;
} guid_ent_t;

struct shp_topo {
    shp_topo_node_t *nodes;
    size_t n, cap;
    guid_ent_t *by_guid;
    name_ent_t *by_name; /* ids, descriptions and host names */
};

shp_topo_t *shp_topo_new(void)
{
    return calloc(1, sizeof(shp_topo_t));
}

void shp_topo_free(shp_topo_t *topo)
{
    if (!topo)
        return;
    for (size_t i = 0; i < topo->n; i++) {
        free(topo->nodes[i].id);
        free(topo->nodes[i].desc);
        free(topo->nodes[i].host);
        free(topo->nodes[i].ports);
    }
    free(topo->nodes);
    guid_ent_t *g, *gt;
    HASH_ITER(hh, topo->by_guid, g, gt)
    {
        HASH_DEL(topo->by_guid, g);
        free(g);
    }
    name_ent_t *e, *et;
    HASH_ITER(hh, topo->by_name, e, et)
    {
        HASH_DEL(topo->by_name, e);
        free(e->key);
        free(e);
    }
    free(topo);
}

size_t shp_topo_count(const shp_topo_t *topo)
{
    return topo->n;
}

const shp_topo_node_t *shp_topo_node(const shp_topo_t *topo, int idx)
{
    if (idx < 0 || (size_t)idx >= topo->n)
        return NULL;
    return &topo->nodes[idx];
}

size_t shp_topo_count_type(const shp_topo_t *topo, shp_node_type_t type)
{
    size_t c = 0;
    for (size_t i = 0; i < topo->n; i++)
        c += topo->nodes[i].type == type;
    return c;
}

size_t shp_topo_links(const shp_topo_t *topo)
{
    size_t c = 0;
    for (size_t i = 0; i < topo->n; i++) {
        const shp_topo_node_t *nd = &topo->nodes[i];
        for (int p = 1; p <= nd->nports; p++) {
            int q = nd->ports[p].peer;
            if (q < 0)
                continue;
            /* count each link at its lower (node, port) end */
            if ((size_t)q > i || ((size_t)q == i && nd->ports[p].peer_port > p))
                c++;
        }
    }
    return c;
}

/* First name wins: an id, a description or a host name already indexed
 * keeps pointing at its first node (descriptions need not be unique) --
 * except that an id takes its key from a description or host name that
 * happens to read the same, so links (which name ids) find their node
 * whatever the order of the nodes. */
static int index_name(shp_topo_t *topo, const char *key, int idx, int is_id)
{
    name_ent_t *e;
    HASH_FIND_STR(topo->by_name, key, e);
    if (e) {
        if (is_id && strcmp(topo->nodes[e->idx].id, key) != 0)
            e->idx = idx;
        return 0;
    }
    e = calloc(1, sizeof(*e));
    if (!e || !(e->key = strdup(key))) {
        free(e);
        return -1;
    }
    e->idx = idx;
    HASH_ADD_KEYPTR(hh, topo->by_name, e->key, strlen(e->key), e);
    return 0;
}

int shp_topo_add_node(shp_topo_t *topo, shp_node_type_t type, uint64_t guid,
                      const char *id, const char *desc, int nports)
{
    if (nports < 1 || nports > 255 || !id || !*id)
        return SHP_ERR_INVALID_PARAM;
    guid_ent_t *g;
    HASH_FIND(hh, topo->by_guid, &guid, sizeof(guid), g);
    if (g)
        return SHP_ERR_EXISTS;
    name_ent_t *e;
    HASH_FIND_STR(topo->by_name, id, e);
    if (e && strcmp(topo->nodes[e->idx].id, id) == 0)
        return SHP_ERR_EXISTS;

    if (topo->n == topo->cap) {
        size_t cap = topo->cap ? topo->cap * 2 : 64;
        shp_topo_node_t *nodes = realloc(topo->nodes, cap * sizeof(*nodes));
        if (!nodes)
            return SHP_ERR_NO_MEMORY;
        topo->nodes = nodes;
        topo->cap = cap;
    }
    int idx = (int)topo->n;
    shp_topo_node_t *nd = &topo->nodes[idx];
    memset(nd, 0, sizeof(*nd));
    nd->type = type;
    nd->guid = guid;
    nd->nports = nports;
    nd->id = strdup(id);
    nd->desc = strdup(desc ? desc : id);
    nd->ports = calloc((size_t)nports + 1, sizeof(*nd->ports));
    g = calloc(1, sizeof(*g));
    if (!nd->id || !nd->desc || !nd->ports || !g)
        goto nomem;
    for (int p = 0; p <= nports; p++)
        nd->ports[p].peer = -1;
    if (type == SHP_NODE_CA) {
        size_t hl = strcspn(nd->desc, " \t");
        nd->host = strndup(nd->desc, hl);
        if (!nd->host)
            goto nomem;
    }
    g->guid = guid;
    g->idx = idx;
    HASH_ADD(hh, topo->by_guid, guid, sizeof(g->guid), g);
    topo->n++;
    /* ids before descriptions: an id lookup must never hit another node */
    if (index_name(topo, nd->id, idx, 1) ||
        index_name(topo, nd->desc, idx, 0) ||
        (nd->host && index_name(topo, nd->host, idx, 0)))
        return SHP_ERR_NO_MEMORY;
    return idx;
nomem:
    free(nd->id);
    free(nd->desc);
    free(nd->host);
    free(nd->ports);
    free(g);
    return SHP_ERR_NO_MEMORY;
}

shp_status_t shp_topo_link(shp_topo_t *topo, int a, int pa, int b, int pb)
{
    if (a < 0 || b < 0 || (size_t)a >= topo->n || (size_t)b >= topo->n)
        return SHP_ERR_INVALID_PARAM;
    shp_topo_node_t *na = &topo->nodes[a], *nb = &topo->nodes[b];
    if (pa < 1 || pa > na->nports || pb < 1 || pb > nb->nports)
        return SHP_ERR_INVALID_PARAM;
    if (a == b && pa == pb)
        return SHP_ERR_INVALID_PARAM;
    shp_topo_port_t *x = &na->ports[pa], *y = &nb->ports[pb];
    if ((x->peer >= 0 && (x->peer != b || x->peer_port != pb)) ||
        (y->peer >= 0 && (y->peer != a || y->peer_port != pa)))
        return SHP_ERR_EXISTS;
    x->peer = b;
    x->peer_port = pb;
    y->peer = a;
    y->peer_port = pa;
    return SHP_OK;
}

void shp_topo_set_port_guid(shp_topo_t *topo, int idx, int port, uint64_t guid)
{
    if (idx >= 0 && (size_t)idx < topo->n && port >= 1 &&
        port <= topo->nodes[idx].nports)
        topo->nodes[idx].ports[port].guid = guid;
}

int shp_topo_find_guid(const shp_topo_t *topo, uint64_t guid)
{
    guid_ent_t *g;
    HASH_FIND(hh, topo->by_guid, &guid, sizeof(guid), g);
    return g ? g->idx : -1;
}

int shp_topo_find(const shp_topo_t *topo, const char *key)
{
    name_ent_t *e;
    HASH_FIND_STR(topo->by_name, key, e);
    if (e)
        return e->idx;
    const char *h = key;
    if (h[0] == '0' && (h[1] == 'x' || h[1] == 'X'))
        h += 2;
    if (!*h || strlen(h) > 16 || h[strspn(h, "0123456789abcdefABCDEF")])
        return -1;
    return shp_topo_find_guid(topo, strtoull(h, NULL, 16));
}

/* Parser ------------------------------------------------------------------ */

typedef struct pending_link {
    int node, port;
    char *peer_id;
    int peer_port;
    int line;
} pending_link_t;

typedef struct parser {
    const char *name;
    int line;
    char *err;
    size_t errlen;
    shp_topo_t *topo;
    /* key=value lines seen since the last node */
    uint64_t guid;
    int have_guid;
    int cur; /* current node index, -1 before the first */
    pending_link_t *links;
    size_t nlinks, caplinks;
} parser_t;

static shp_status_t perr(parser_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static shp_status_t perr(parser_t *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%d: ", p->name, p->line);
    if (n < 0 || (size_t)n >= p->errlen)
        return SHP_ERR_PARSE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return SHP_ERR_PARSE;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* A quoted string; returns a pointer past the closing quote or NULL. */
static const char *quoted(const char *s, char *out, size_t outlen)
{
    if (*s != '"')
        return NULL;
    const char *e = strchr(s + 1, '"');
    if (!e || (size_t)(e - s - 1) >= outlen)
        return NULL;
    memcpy(out, s + 1, (size_t)(e - s - 1));
    out[e - s - 1] = '\0';
    return e + 1;
}

static int parse_hex(const char *s, const char **end, uint64_t *v)
{
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    if (!isxdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *e;
    unsigned long long x = strtoull(s, &e, 16);
    if (errno || e - s > 16)
        return -1;
    *v = x;
    *end = e;
    return 0;
}

/* "[N]" optionally followed by "[ext N]"; returns past them or NULL. */
static const char *port_num(const char *s, int *port)
{
    if (*s != '[')
        return NULL;
    char *e;
    long v = strtol(s + 1, &e, 10);
    if (e == s + 1 || *e != ']' || v < 1 || v > 255)
        return NULL;
    *port = (int)v;
    s = e + 1;
    if (strncmp(s, "[ext ", 5) == 0) {
        const char *x = strchr(s, ']');
        if (!x)
            return NULL;
        s = x + 1;
    }
    return s;
}

/* "(hex)" port GUID, optional. */
static const char *port_guid(const char *s, uint64_t *guid)
{
    if (*s != '(')
        return s;
    const char *e;
    if (parse_hex(s + 1, &e, guid) || *e != ')')
        return NULL;
    return e + 1;
}

static void comment_desc(const char *s, char *out, size_t outlen)
{
    out[0] = '\0';
    s = skip_ws(s);
    if (*s != '#')
        return;
    s = skip_ws(s + 1);
    if (!quoted(s, out, outlen))
        out[0] = '\0';
}

static shp_status_t parse_header(parser_t *p, const char *s)
{
    shp_node_type_t type;
    size_t kw;
    if (strncmp(s, "Switch", 6) == 0) {
        type = SHP_NODE_SWITCH;
        kw = 6;
    } else if (strncmp(s, "Ca", 2) == 0) {
        type = SHP_NODE_CA;
        kw = 2;
    } else if (strncmp(s, "Hca", 3) == 0) {
        type = SHP_NODE_CA; /* ibsim's net files say Hca */
        kw = 3;
    } else if (strncmp(s, "Rt", 2) == 0) {
        type = SHP_NODE_ROUTER;
        kw = 2;
    } else {
        return perr(p, "expected Switch, Ca, Hca or Rt, found \"%.20s\"", s);
    }
    s += kw;
    if (*s != ' ' && *s != '\t')
        return perr(p, "expected a port count after the node type");
    char *e;
    long nports = strtol(s, &e, 10);
    if (e == s || nports < 1 || nports > 255)
        return perr(p, "bad port count (1..255)");
    char id[256], desc[256];
    const char *r = quoted(skip_ws(e), id, sizeof(id));
    if (!r || !id[0])
        return perr(p, "expected a quoted node id");
    comment_desc(r, desc, sizeof(desc));

    uint64_t guid;
    if (p->have_guid) {
        guid = p->guid;
    } else {
        /* ibnetdiscover ids are S-/H-/R- and the GUID in hex; ibsim net
         * files have none: derive a stable one from the id. */
        const char *ge;
        if (strlen(id) > 2 && id[1] == '-' &&
            parse_hex(id + 2, &ge, &guid) == 0 && *ge == '\0') {
        } else {
            guid = 14695981039346656037ull;
            for (const char *c = id; *c; c++)
                guid = (guid ^ (unsigned char)*c) * 1099511628211ull;
        }
    }
    int idx = shp_topo_add_node(p->topo, type, guid, id, desc[0] ? desc : id,
                                (int)nports);
    if (idx == SHP_ERR_EXISTS)
        return perr(p, "node \"%s\" (guid 0x%016" PRIx64 ") defined twice", id,
                    guid);
    if (idx < 0)
        return perr(p, "out of memory");
    p->topo->nodes[idx].line = p->line;
    p->cur = idx;
    p->have_guid = 0;
    return SHP_OK;
}

static shp_status_t parse_port(parser_t *p, const char *s)
{
    if (p->cur < 0)
        return perr(p, "port line before any node");
    int port, peer_port;
    uint64_t g = 0;
    const char *r = port_num(s, &port);
    if (!r)
        return perr(p, "bad port number");
    shp_topo_node_t *nd = &p->topo->nodes[p->cur];
    if (port > nd->nports)
        return perr(p, "port %d above the node's %d ports", port, nd->nports);
    if (!(r = port_guid(r, &g)))
        return perr(p, "bad port GUID");
    nd->ports[port].guid = g;
    char peer[256];
    r = quoted(skip_ws(r), peer, sizeof(peer));
    if (!r || !peer[0])
        return perr(p, "expected the quoted id of the peer node");
    if (!(r = port_num(r, &peer_port)))
        return perr(p, "bad peer port number");
    uint64_t pg;
    if (!(r = port_guid(r, &pg)))
        return perr(p, "bad peer port GUID");
    r = skip_ws(r);
    if (*r && *r != '#')
        return perr(p, "unexpected \"%.20s\" after the peer port", r);
    if (nd->ports[port].peer_port != 0)
        return perr(p, "port %d listed twice", port);
    nd->ports[port].peer_port = -1; /* listed; resolved later */
    if (p->nlinks == p->caplinks) {
        size_t cap = p->caplinks ? p->caplinks * 2 : 256;
        pending_link_t *l = realloc(p->links, cap * sizeof(*l));
        if (!l)
            return perr(p, "out of memory");
        p->links = l;
        p->caplinks = cap;
    }
    pending_link_t *l = &p->links[p->nlinks];
    if (!(l->peer_id = strdup(peer)))
        return perr(p, "out of memory");
    p->nlinks++;
    l->node = p->cur;
    l->port = port;
    l->peer_port = peer_port;
    l->line = p->line;
    return SHP_OK;
}

static shp_status_t parse_kv(parser_t *p, const char *s)
{
    static const char *const guid_keys[] = {
        "switchguid=", "caguid=", "rtguid="};
    for (size_t i = 0; i < sizeof(guid_keys) / sizeof(guid_keys[0]); i++) {
        size_t kl = strlen(guid_keys[i]);
        if (strncmp(s, guid_keys[i], kl) == 0) {
            const char *e;
            if (parse_hex(s + kl, &e, &p->guid))
                return perr(p, "bad GUID in %.*s", (int)kl - 1, s);
            p->have_guid = 1;
            return SHP_OK;
        }
    }
    /* vendid, devid, sysimgguid and whatever later versions add */
    return SHP_OK;
}

static shp_status_t resolve_links(parser_t *p)
{
    for (size_t i = 0; i < p->nlinks; i++) {
        pending_link_t *l = &p->links[i];
        p->line = l->line;
        name_ent_t *e;
        HASH_FIND_STR(p->topo->by_name, l->peer_id, e);
        if (!e || strcmp(p->topo->nodes[e->idx].id, l->peer_id) != 0)
            return perr(p,
                        "port %d links to \"%s\", which the file does not "
                        "describe",
                        l->port, l->peer_id);
        shp_topo_node_t *peer = &p->topo->nodes[e->idx];
        if (l->peer_port > peer->nports)
            return perr(p,
                        "port %d links to port %d of \"%s\", which has %d "
                        "ports",
                        l->port, l->peer_port, l->peer_id, peer->nports);
        shp_status_t st =
            shp_topo_link(p->topo, l->node, l->port, e->idx, l->peer_port);
        if (st == SHP_ERR_EXISTS) {
            const shp_topo_port_t *pp = &peer->ports[l->peer_port];
            if (pp->peer < 0) {
                /* our own port is taken: the other end named it first */
                pp = &p->topo->nodes[l->node].ports[l->port];
                return perr(p,
                            "port %d links to \"%s\"[%d], but \"%s\"[%d] "
                            "links to it",
                            l->port, l->peer_id, l->peer_port,
                            p->topo->nodes[pp->peer].id, pp->peer_port);
            }
            return perr(p,
                        "port %d links to \"%s\"[%d], but that port links "
                        "to \"%s\"[%d]",
                        l->port, l->peer_id, l->peer_port,
                        p->topo->nodes[pp->peer].id, pp->peer_port);
        }
        if (st != SHP_OK)
            return perr(p, "port %d: bad link to \"%s\"[%d]", l->port,
                        l->peer_id, l->peer_port);
    }
    return SHP_OK;
}

shp_status_t shp_topo_parse(const char *text, size_t len, const char *name,
                            shp_topo_t **out, char *err, size_t errlen)
{
    parser_t p = {.name = name ? name : "topology",
                  .err = err,
                  .errlen = errlen,
                  .cur = -1};
    shp_status_t st = SHP_OK;
    if (!(p.topo = shp_topo_new()))
        return SHP_ERR_NO_MEMORY;
    const char *s = text, *end = text + len;
    char buf[1024];
    while (s < end && st == SHP_OK) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t ll = nl ? (size_t)(nl - s) : (size_t)(end - s);
        p.line++;
        if (ll >= sizeof(buf)) {
            st = perr(&p, "line longer than %zu bytes", sizeof(buf) - 1);
            break;
        }
        memcpy(buf, s, ll);
        buf[ll] = '\0';
        s += ll + (nl != NULL);
        if (memchr(buf, '\0', ll)) {
            st = perr(&p, "NUL byte in the line");
            break;
        }
        if (ll && buf[ll - 1] == '\r')
            buf[ll - 1] = '\0';
        const char *l = skip_ws(buf);
        if (!*l || *l == '#')
            continue;
        if (*l == '[')
            st = parse_port(&p, l);
        else if (strchr(l, '=') && !strchr(l, '"'))
            st = parse_kv(&p, l);
        else if (strncmp(l, "include ", 8) == 0 || strncmp(l, "do ", 3) == 0)
            st = perr(&p, "ibsim directives (include/do) are not topology");
        else
            st = parse_header(&p, l);
    }
    if (st == SHP_OK && p.topo->n == 0) {
        p.line = 0;
        st = perr(&p, "no nodes");
    }
    if (st == SHP_OK)
        st = resolve_links(&p);
    for (size_t i = 0; i < p.nlinks; i++)
        free(p.links[i].peer_id);
    free(p.links);
    if (st != SHP_OK) {
        shp_topo_free(p.topo);
        return st;
    }
    *out = p.topo;
    return SHP_OK;
}

shp_status_t shp_topo_load(const char *path, shp_topo_t **out, char *err,
                           size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return shp_status_from_errno(e);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "%s: out of memory", path);
                return SHP_ERR_NO_MEMORY;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    int rerr = ferror(f);
    fclose(f);
    shp_status_t st;
    if (rerr) {
        snprintf(err, errlen, "%s: read error", path);
        st = SHP_ERR_IO;
    } else {
        st = shp_topo_parse(buf, len, path, out, err, errlen);
    }
    free(buf);
    return st;
}

/* Writer ------------------------------------------------------------------ */

static const char *type_kw(shp_node_type_t t)
{
    return t == SHP_NODE_SWITCH ? "Switch" : t == SHP_NODE_CA ? "Ca" : "Rt";
}

static const char *guid_kw(shp_node_type_t t)
{
    return t == SHP_NODE_SWITCH ? "switchguid"
           : t == SHP_NODE_CA   ? "caguid"
                                : "rtguid";
}

void shp_topo_write(const shp_topo_t *topo, FILE *out, int flags)
{
    int ibsim = flags & SHP_TOPO_IBSIM;
    fprintf(out, "#\n# Topology file: generated by sharp\n#\n");
    for (size_t i = 0; i < topo->n; i++) {
        const shp_topo_node_t *nd = &topo->nodes[i];
        if (ibsim) {
            fprintf(out, "\n%s\t%d \"%s\"\n",
                    nd->type == SHP_NODE_CA ? "Hca" : type_kw(nd->type),
                    nd->nports, nd->desc);
        } else {
            fprintf(out,
                    "\nvendid=0x2c9\ndevid=0x0\nsysimgguid=0x%" PRIx64 "\n",
                    nd->guid);
            if (nd->type == SHP_NODE_SWITCH)
                fprintf(out, "%s=0x%" PRIx64 "(%" PRIx64 ")\n",
                        guid_kw(nd->type), nd->guid, nd->guid);
            else
                fprintf(out, "%s=0x%" PRIx64 "\n", guid_kw(nd->type), nd->guid);
            fprintf(out, "%s\t%d \"%s\"\t\t# \"%s\"\n", type_kw(nd->type),
                    nd->nports, nd->id, nd->desc);
        }
        for (int p = 1; p <= nd->nports; p++) {
            const shp_topo_port_t *pt = &nd->ports[p];
            if (pt->peer < 0)
                continue;
            const shp_topo_node_t *peer = &topo->nodes[pt->peer];
            if (ibsim) {
                fprintf(out, "[%d]\t\"%s\"[%d]\n", p, peer->desc,
                        pt->peer_port);
                continue;
            }
            fprintf(out, "[%d]", p);
            if (nd->type != SHP_NODE_SWITCH && pt->guid)
                fprintf(out, "(%" PRIx64 ")", pt->guid);
            fprintf(out, "\t\"%s\"[%d]", peer->id, pt->peer_port);
            const shp_topo_port_t *pp = &peer->ports[pt->peer_port];
            if (peer->type != SHP_NODE_SWITCH && pp->guid)
                fprintf(out, "(%" PRIx64 ")", pp->guid);
            fprintf(out, "\t\t# \"%s\"\n", peer->desc);
        }
    }
}

/* Comparison -------------------------------------------------------------- */

int shp_topo_equal(const shp_topo_t *a, const shp_topo_t *b, char *why,
                   size_t whylen)
{
    if (a->n != b->n) {
        snprintf(why, whylen, "%zu nodes vs %zu", a->n, b->n);
        return 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        const shp_topo_node_t *x = &a->nodes[i];
        int j = shp_topo_find_guid(b, x->guid);
        if (j < 0) {
            snprintf(why, whylen, "node 0x%016" PRIx64 " (%s) missing", x->guid,
                     x->desc);
            return 0;
        }
        const shp_topo_node_t *y = &b->nodes[j];
        if (x->type != y->type || strcmp(x->desc, y->desc) != 0 ||
            x->nports != y->nports) {
            snprintf(why, whylen,
                     "node 0x%016" PRIx64 " differs: %s %d \"%s\""
                     " vs %s %d \"%s\"",
                     x->guid, type_kw(x->type), x->nports, x->desc,
                     type_kw(y->type), y->nports, y->desc);
            return 0;
        }
        for (int p = 1; p <= x->nports; p++) {
            const shp_topo_port_t *px = &x->ports[p], *py = &y->ports[p];
            uint64_t gx = px->peer < 0 ? 0 : a->nodes[px->peer].guid;
            uint64_t gy = py->peer < 0 ? 0 : b->nodes[py->peer].guid;
            if ((px->peer < 0) != (py->peer < 0) || gx != gy ||
                (px->peer >= 0 && px->peer_port != py->peer_port)) {
                snprintf(why, whylen, "%s port %d: link differs", x->desc, p);
                return 0;
            }
        }
    }
    return 1;
}
