/* Redis node routing: plain node or the client side of Redis Cluster (redis_cluster.h). */
#include "kv/redis_cluster.h"

#include "base/error.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NO_NODE 0xffff /* (memset with 0xff bytes writes it) */
#define REFRESH_GAP_NS (100 * 1000000LL) /* between map refreshes, from the end of one */
#define REFRESH_ASK_TIMEOUTS 2           /* a refresh starts no ask past this many timeouts */

uint16_t kvs_redis_crc16(const void *data, size_t len) {
    /* CRC16-CCITT, XMODEM variant: poly 0x1021, init 0, no reflection. */
    const uint8_t *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)p[i] << 8);
        for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int kvs_redis_key_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
        if (close && close > open + 1) return kvs_redis_crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return kvs_redis_crc16(key, len) & 16383;
}

/* The index of host:port among the known nodes, or -1. Called with the lock. */
static int find_node_locked(const kvs_redis_nodes *m, const char *host, int port) {
    for (int i = 0; i < m->n_nodes; i++)
        if (m->node[i]->rd.port == port && !strcasecmp(m->node[i]->rd.host, host)) return i;
    return -1;
}

static int node_index_locked(kvs_redis_nodes *m, const char *host, int port) {
    const int known = find_node_locked(m, host, port);
    if (known >= 0) return known;
    if (m->n_nodes >= KVS_REDIS_MAX_NODES) {
        if (!m->nodes_full[0])
            snprintf(m->nodes_full, sizeof m->nodes_full,
                     "cluster node %.255s:%d not used: more than %d node addresses (the slots it serves are missed)",
                     host, port, KVS_REDIS_MAX_NODES);
        return -1;
    }
    kvs_redis_node *n = calloc(1, sizeof *n);
    if (!n) return -1;
    kvs_redis_conn_init(&n->rd, host, port, m->policy);
    kvs_redis_conn_init(&n->wr, host, port, m->policy);
    m->node[m->n_nodes] = n;
    return m->n_nodes++;
}

int kvs_redis_node_index(kvs_redis_nodes *m, const char *host, int port) {
    pthread_rwlock_wrlock(&m->lock);
    int i = node_index_locked(m, host, port);
    pthread_rwlock_unlock(&m->lock);
    return i;
}

static void init_common(kvs_redis_nodes *m, int cluster, const kvs_redis_policy *policy) {
    memset(m, 0, sizeof *m);
    m->cluster = cluster;
    m->policy = policy;
    pthread_rwlock_init(&m->lock, NULL);
    memset(m->slot_node, cluster ? 0xff : 0, sizeof m->slot_node); /* NO_NODE, or node 0 */
}

int kvs_redis_nodes_init_single(kvs_redis_nodes *m, const char *host, int port, const kvs_redis_policy *policy) {
    init_common(m, 0, policy);
    if (node_index_locked(m, host, port) != 0) {
        kvs_redis_nodes_destroy(m);
        return kvs_error(KVS_ERR_NOMEM, "redis: out of memory");
    }
    return KVS_OK;
}

/* Seed i's numeric addresses (getaddrinfo, as hiredis connects), once:
 * matched to the nodes, a seed given by host name is not asked again
 * beside its node (a stalled one had cost a second timeout per refresh). A
 * name that does not resolve keeps none. */
static void resolve_seed(kvs_redis_nodes *m, int i) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(m->seed_host[i], NULL, &hints, &res)) return;
    int n = 0;
    for (const struct addrinfo *a = res; a && n < KVS_REDIS_SEED_ADDRS; a = a->ai_next) {
        char num[NI_MAXHOST];
        if (getnameinfo(a->ai_addr, a->ai_addrlen, num, sizeof num, NULL, 0, NI_NUMERICHOST) ||
            strlen(num) >= sizeof m->seed_addr[i][0]) /* (an IPv6 address with a long scope) */
            continue;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp(m->seed_addr[i][k], num);
        if (!seen) memcpy(m->seed_addr[i][n++], num, strlen(num) + 1); /* (its length checked above) */
    }
    freeaddrinfo(res);
}

/* Whether seed i is asked beside the known nodes: not when it is one by
 * its name (that node is asked, or its breaker is open), nor when one of
 * its addresses is a node that is asked. A seed known only by an address
 * whose node's breaker is open is asked by its name: the name may now
 * resolve elsewhere (a cluster whose pods all came back on new IPs had
 * left no candidate, the tier down for good). */
static int seed_asked_locked(const kvs_redis_nodes *m, int i) {
    if (find_node_locked(m, m->seed_host[i], m->seed_port[i]) >= 0) return 0;
    for (int k = 0; k < KVS_REDIS_SEED_ADDRS && m->seed_addr[i][k][0]; k++) {
        const int node = find_node_locked(m, m->seed_addr[i][k], m->seed_port[i]);
        if (node >= 0 && !atomic_load(&m->node[node]->rd.breaker_open)) return 0;
    }
    return 1;
}

int kvs_redis_nodes_init_cluster(kvs_redis_nodes *m, const char *seeds, const kvs_redis_policy *policy) {
    init_common(m, 1, policy);
    for (const char *s = seeds; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (m->n_seeds >= KVS_REDIS_MAX_NODES ||
            kvs_redis_parse_hostport(s, len, m->seed_host[m->n_seeds], sizeof m->seed_host[0],
                                     &m->seed_port[m->n_seeds])) {
            kvs_redis_nodes_destroy(m);
            return kvs_error(KVS_ERR_INVALID_ARG, "--redis-cluster: '%.*s' is not host:port (in '%s')", (int)len, s,
                             seeds);
        }
        resolve_seed(m, m->n_seeds++);
        s = comma ? comma + 1 : s + len;
    }
    if (!m->n_seeds) {
        kvs_redis_nodes_destroy(m);
        return kvs_error(KVS_ERR_INVALID_ARG, "--redis-cluster: no host:port given");
    }
    kvs_redis_refresh(m, 1);
    return KVS_OK;
}

void kvs_redis_nodes_destroy(kvs_redis_nodes *m) {
    if (!m->policy) return;
    for (int i = 0; i < m->n_nodes; i++) {
        kvs_redis_conn_destroy(&m->node[i]->rd);
        kvs_redis_conn_destroy(&m->node[i]->wr);
        free(m->node[i]);
    }
    m->n_nodes = 0;
    pthread_rwlock_destroy(&m->lock);
    m->policy = NULL; /* destroyed: a second destroy is a no-op */
}

int kvs_redis_route(kvs_redis_nodes *m, const char *key, size_t len) {
    if (!m->cluster) return 0;
    int slot = kvs_redis_key_slot(key, len);
    pthread_rwlock_rdlock(&m->lock);
    int i = m->slot_node[slot];
    pthread_rwlock_unlock(&m->lock);
    return i == NO_NODE ? -1 : i;
}

/* CLUSTER SLOTS from host:port on a short-lived connection. NULL if it
 * fails, and why in why (the server's words where it gave some: a Redis
 * without cluster support says so). */
static redisReply *cluster_slots(kvs_redis_nodes *m, const char *host, int port, char *why, size_t cap) {
    kvs_redis_conn c;
    kvs_redis_conn_init(&c, host, port, m->policy);
    redisContext *ctx = kvs_redis_conn_acquire(&c);
    redisReply *r = NULL;
    if (!ctx) {
        char down[192];
        kvs_redis_conn_why_down(&c, down, sizeof down);
        snprintf(why, cap, "redis %s:%d: %s", host, port, down);
    } else {
        r = kvs_redis_command_by(&c, kvs_redis_due_ns(m->policy, 0), "CLUSTER SLOTS");
        const int ok = r && r->type == REDIS_REPLY_ARRAY, answered = r != NULL;
        if (!ok && r && r->type == REDIS_REPLY_ERROR && r->str)
            snprintf(why, cap, "redis %s:%d: CLUSTER SLOTS: %.*s", host, port, (int)r->len, r->str);
        else if (!ok && r)
            snprintf(why, cap, "redis %s:%d: CLUSTER SLOTS answered with no array of slot ranges", host, port);
        if (!ok && r) {
            freeReplyObject(r);
            r = NULL;
        }
        kvs_redis_conn_release(&c, r != NULL);
        if (!answered) { /* the transport's reason, which the release wrote (it had been "failed" alone) */
            char down[192];
            kvs_redis_conn_why_down(&c, down, sizeof down);
            snprintf(why, cap, "redis %s:%d: CLUSTER SLOTS: %s", host, port, down);
        }
    }
    kvs_redis_conn_destroy(&c);
    return r;
}

/* Entry e of a CLUSTER SLOTS reply: its master (host, port), slots
 * [*lo, *hi]; NULL when it is not a well-formed range. */
static const redisReply *slot_range(const redisReply *e, int *lo, int *hi) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return NULL;
    const redisReply *l = e->element[0], *h = e->element[1], *master = e->element[2];
    if (l->type != REDIS_REPLY_INTEGER || h->type != REDIS_REPLY_INTEGER || master->type != REDIS_REPLY_ARRAY ||
        master->elements < 2 || master->element[0]->type != REDIS_REPLY_STRING ||
        master->element[1]->type != REDIS_REPLY_INTEGER)
        return NULL;
    if (l->integer < 0 || h->integer >= KVS_REDIS_SLOTS || l->integer > h->integer) return NULL;
    if (master->element[1]->integer < 1 || master->element[1]->integer > 65535) return NULL; /* (0: no address) */
    *lo = (int)l->integer;
    *hi = (int)h->integer;
    return master;
}

/* The distinct slots a CLUSTER SLOTS reply maps (ranges that overlap or
 * repeat count once). */
static int slots_mapped(const redisReply *r) {
    uint64_t seen[KVS_REDIS_SLOTS / 64] = {0};
    int n = 0, lo, hi;
    for (size_t i = 0; i < r->elements; i++)
        if (slot_range(r->element[i], &lo, &hi))
            for (int s = lo; s <= hi; s++)
                if (!(seen[s / 64] >> (s % 64) & 1)) {
                    seen[s / 64] |= (uint64_t)1 << (s % 64);
                    n++;
                }
    return n;
}

/* Applies a CLUSTER SLOTS reply (asked of host) to the map. Called with the write lock. */
static void apply_slots(kvs_redis_nodes *m, const redisReply *r, const char *asked_host) {
    memset(m->slot_node, 0xff, sizeof m->slot_node); /* NO_NODE */
    for (size_t i = 0; i < r->elements; i++) {
        int lo, hi;
        const redisReply *master = slot_range(r->element[i], &lo, &hi);
        if (!master) continue;
        /* An empty host means "the node you asked" (cluster-announce). */
        const char *host = master->element[0]->len ? master->element[0]->str : asked_host;
        int idx = node_index_locked(m, host, (int)master->element[1]->integer);
        if (idx < 0) continue;
        for (int s = lo; s <= hi; s++) m->slot_node[s] = (uint16_t)idx;
    }
}

/* Adds host:port to the candidates unless it is there already (a seed is
 * mostly a known node too: asked twice, a stalled one had cost twice). */
static void add_candidate(char (*host)[256], int *port, int *n, const char *h, int p) {
    for (int i = 0; i < *n; i++)
        if (port[i] == p && !strcasecmp(host[i], h)) return;
    memcpy(host[*n], h, 256);
    port[(*n)++] = p;
}

void kvs_redis_refresh(kvs_redis_nodes *m, int force) {
    if (!m->cluster) return;
    int64_t now = kvs_redis_mono_ns();
    pthread_rwlock_wrlock(&m->lock);
    if (!force && now < m->refresh_after_ns) {
        pthread_rwlock_unlock(&m->lock);
        return;
    }
    m->refresh_after_ns = INT64_MAX; /* one refresh at a time; set again at its end */
    /* Candidates: known nodes first (the cluster as it is now), then seeds;
     * each once, and not a node whose breaker is open (it failed requests
     * just now: asked again, each stalled node had cost a timeout per
     * refresh and request). */
    int n_cand = 0;
    char (*host)[256] = malloc(sizeof(char[256]) * 2 * KVS_REDIS_MAX_NODES);
    int port[2 * KVS_REDIS_MAX_NODES];
    if (!host) {
        m->refresh_after_ns = now + REFRESH_GAP_NS;
        pthread_rwlock_unlock(&m->lock);
        return;
    }
    for (int i = 0; i < m->n_nodes; i++)
        if (!atomic_load(&m->node[i]->rd.breaker_open))
            add_candidate(host, port, &n_cand, m->node[i]->rd.host, m->node[i]->rd.port);
    for (int i = 0; i < m->n_seeds; i++)
        if (seed_asked_locked(m, i)) add_candidate(host, port, &n_cand, m->seed_host[i], m->seed_port[i]);
    const unsigned first = m->refresh_turn++; /* each refresh starts at the next candidate */
    pthread_rwlock_unlock(&m->lock);
    /* Ask outside the lock (requests keep routing with the old map). The
     * first map of every slot is taken; else the fullest one: a node that
     * maps no slot (not in the cluster, or restarted without its
     * nodes.conf) had been taken as the cluster's word, and with it first
     * among the seeds the tier was off. No candidate is asked once the
     * refresh has run for REFRESH_ASK_TIMEOUTS timeouts: with every node
     * stalled, a refresh had asked each (seeds twice) a full timeout, 20
     * asks in one request (2 s at the default 50 ms, 21 s at 1 s). */
    const int64_t stop_asking = now + (int64_t)REFRESH_ASK_TIMEOUTS * m->policy->timeout_ms * 1000000LL;
    redisReply *best = NULL;
    int best_slots = 0, best_at = -1;
    char why[KVS_REDIS_WHY_BYTES] = "";
    for (int k = 0; k < n_cand && best_slots < KVS_REDIS_SLOTS; k++) {
        if (k && kvs_redis_mono_ns() >= stop_asking) {
            snprintf(why + strlen(why), sizeof why - strlen(why), "%s(%d of %d nodes asked within the refresh's time)",
                     why[0] ? " " : "", k, n_cand);
            break;
        }
        const int i = (int)((first + (unsigned)k) % (unsigned)n_cand);
        redisReply *r = cluster_slots(m, host[i], port[i], why, sizeof why);
        if (!r) continue;
        const int n = slots_mapped(r);
        if (n > best_slots) {
            if (best) freeReplyObject(best);
            best = r;
            best_slots = n;
            best_at = i;
        } else {
            if (!n) snprintf(why, sizeof why, "redis %s:%d: CLUSTER SLOTS maps no slot (a node not in the cluster?)",
                             host[i], port[i]);
            freeReplyObject(r);
        }
    }
    if (!n_cand) snprintf(why, sizeof why, "every node's circuit breaker is open (they failed just now)");
    pthread_rwlock_wrlock(&m->lock);
    if (best) apply_slots(m, best, host[best_at]);
    snprintf(m->slots_why, sizeof m->slots_why, "%s", best ? "" : why);
    /* the gap from the end (a refresh that took seconds had run again at
     * the next batch); a refresh that found no map waits as an open breaker
     * does */
    m->refresh_after_ns = kvs_redis_mono_ns() + (best ? REFRESH_GAP_NS : (int64_t)m->policy->breaker_open_ms * 1000000LL);
    pthread_rwlock_unlock(&m->lock);
    if (best) {
        freeReplyObject(best);
        atomic_fetch_add(&m->refreshes, 1);
    }
    free(host);
}

int kvs_redis_redirect(kvs_redis_nodes *m, const redisReply *r, int *ask) {
    if (!m->cluster || r->type != REDIS_REPLY_ERROR || !r->str) return -1;
    int is_moved = !strncmp(r->str, "MOVED ", 6), is_ask = !strncmp(r->str, "ASK ", 4);
    if (!is_moved && !is_ask) return -1;
    const char *p = r->str + (is_moved ? 6 : 4);
    char *end;
    long slot = strtol(p, &end, 10);
    if (end == p || *end != ' ' || slot < 0 || slot >= KVS_REDIS_SLOTS) return -1;
    char host[256];
    int port;
    const char *addr = end + 1;
    if (kvs_redis_parse_hostport(addr, strlen(addr), host, sizeof host, &port)) return -1;
    pthread_rwlock_wrlock(&m->lock);
    int idx = node_index_locked(m, host, port);
    if (idx >= 0 && is_moved) m->slot_node[slot] = (uint16_t)idx;
    pthread_rwlock_unlock(&m->lock);
    *ask = is_ask;
    atomic_fetch_add(is_moved ? &m->moved : &m->ask, 1);
    return idx;
}

int kvs_redis_masters(kvs_redis_nodes *m, int *idx, int cap) {
    if (!m->cluster) {
        if (cap > 0) idx[0] = 0;
        return 1;
    }
    uint8_t seen[KVS_REDIS_MAX_NODES] = {0};
    int n = 0;
    pthread_rwlock_rdlock(&m->lock);
    for (int s = 0; s < KVS_REDIS_SLOTS; s++) {
        int i = m->slot_node[s];
        if (i != NO_NODE && !seen[i]) {
            seen[i] = 1;
            if (n < cap) idx[n] = i;
            n++;
        }
    }
    pthread_rwlock_unlock(&m->lock);
    return n < cap ? n : cap;
}
