/*
 * Which Redis node holds a key: one node (plain Redis), or the client side
 * of Redis Cluster (hiredis has none): CRC16 hash slots, the slot map read
 * with CLUSTER SLOTS, MOVED / ASK redirections, and a map refresh when the
 * topology changes (a MOVED, or a node that stops answering: after a
 * failover a replica serves its slots).
 *
 *   kvs_redis_nodes
 *   +-- seeds              host:port the user gave (the map is read from any)
 *   +-- node[0..n_nodes)   every node seen so far; each has two connections:
 *   |                        rd (requests: lookups, listing) and
 *   |                        wr (the background writer), so writes never
 *   |                        queue behind reads or the other way round
 *   +-- slot_node[16384]   slot -> node index (plain Redis: all 0)
 *
 * Nodes are never removed while the tier is open (a node index stays valid);
 * a node that left the cluster just owns no slot. The map is guarded by a
 * rwlock: routing takes it shared, a refresh exclusive.
 *
 * Slot of a key (Redis Cluster spec): CRC16-CCITT (XMODEM) of the key, or of
 * the part between the first '{' and the next '}' if that part is not
 * empty, modulo 16384.
 */
#ifndef KVS_KV_REDIS_CLUSTER_H
#define KVS_KV_REDIS_CLUSTER_H

#include "kv/redis_conn.h"

#include <stddef.h>
#include <stdint.h>

#define KVS_REDIS_SLOTS 16384
/* Node addresses one process keeps (masters, and the targets of
 * redirections; they stay after a failover). It had been 64: a cluster of
 * 80 masters lost the slots of 16, without a word. Past it, the slots of
 * the nodes left out are missed and why_down says so (nodes_full). */
#define KVS_REDIS_MAX_NODES 512
/* Numeric addresses kept per seed (IPv4 and IPv6 of a host name). */
#define KVS_REDIS_SEED_ADDRS 4

typedef struct kvs_redis_node {
    kvs_redis_conn rd, wr;
} kvs_redis_node;

typedef struct kvs_redis_nodes {
    int cluster;                       /* 0: one plain Redis node */
    const kvs_redis_policy *policy;
    pthread_rwlock_t lock;             /* guards slot_node and n_nodes */
    int n_nodes;
    kvs_redis_node *node[KVS_REDIS_MAX_NODES];
    uint16_t slot_node[KVS_REDIS_SLOTS];
    char nodes_full[400];              /* "" or the first address left out for want of room */
    char slots_why[KVS_REDIS_WHY_BYTES]; /* "" or why the last refresh found no map (no node, no slot) */
    int n_seeds;
    char seed_host[KVS_REDIS_MAX_NODES][256];
    int seed_port[KVS_REDIS_MAX_NODES];
    /* each seed's numeric addresses, resolved at open ("" past the last): a
     * seed named by host name is the node CLUSTER SLOTS names by IP */
    char seed_addr[KVS_REDIS_MAX_NODES][KVS_REDIS_SEED_ADDRS][46];
    int64_t refresh_after_ns;          /* rate limit of map refreshes (INT64_MAX: one is running) */
    unsigned refresh_turn;             /* refreshes begun: where the next starts among the candidates */
    _Atomic uint64_t refreshes, moved, ask;
} kvs_redis_nodes;

uint16_t kvs_redis_crc16(const void *data, size_t len);
/* The hash slot of a key (hash tags honoured). */
int kvs_redis_key_slot(const char *key, size_t len);

/* One plain node at host:port. */
int kvs_redis_nodes_init_single(kvs_redis_nodes *m, const char *host, int port, const kvs_redis_policy *policy);
/* A cluster from "host:port[,host:port...]"; reads the slot map (an error
 * only for a malformed list: an unreachable cluster opens with an empty
 * map, every operation a miss, and is read again later). */
int kvs_redis_nodes_init_cluster(kvs_redis_nodes *m, const char *seeds, const kvs_redis_policy *policy);
void kvs_redis_nodes_destroy(kvs_redis_nodes *m);

/* The node index serving key's slot, or -1 if no node is known for it. */
int kvs_redis_route(kvs_redis_nodes *m, const char *key, size_t len);

/* Reads the slot map again (CLUSTER SLOTS from the first node or seed that
 * answers). force = 0: at most once per 100 ms. No-op for a plain node. */
void kvs_redis_refresh(kvs_redis_nodes *m, int force);

/* Handles a "MOVED slot host:port" / "ASK slot host:port" error reply:
 * returns the node index to retry on (the map is updated for MOVED and a
 * refresh is scheduled), -1 if the reply is not a redirection. *ask = 1 for
 * ASK (the retry must be preceded by ASKING). */
int kvs_redis_redirect(kvs_redis_nodes *m, const redisReply *r, int *ask);

/* Index of the node at host:port, added if new (-1 if the table is full). */
int kvs_redis_node_index(kvs_redis_nodes *m, const char *host, int port);

/* Master indexes (nodes owning at least one slot; plain Redis: {0}). */
int kvs_redis_masters(kvs_redis_nodes *m, int *idx, int cap);

#endif
