/*
 * One batch of single-key commands over the nodes that hold the keys: the
 * commands of each node go out as one pipeline, every node's pipeline is
 * sent before any reply is read (the nodes work at the same time), then the
 * replies are read node by node. So n keys cost one round trip per node.
 *
 *   item i --route(key i)--> node k --append--> [pipeline of node k]
 *   flush every pipeline; read node 0's replies, node 1's, ...
 *   MOVED / ASK replies: the item is sent again, alone, to the node named
 *   (ASK: preceded by ASKING), at most KVS_REDIS_MAX_HOPS times.
 *
 * A node that is down, skipped by its breaker, or fails during the batch
 * gives every item it had left a NULL reply. Deadlines (redis_conn.h): a
 * node's pipeline is sent within the budget of its bytes, and its replies
 * must arrive by start + the budget of the bytes of that node and of the
 * nodes read before it (they are read one node after the other); each
 * reply's socket waits are bounded by the time left (a server that
 * trickles bytes can stretch one reply, a silent one cannot). Cluster: a
 * failed node or an unrouted key triggers a (rate-limited) slot map refresh.
 */
#ifndef KVS_KV_REDIS_PIPE_H
#define KVS_KV_REDIS_PIPE_H

#include "kv/redis_cluster.h"

#define KVS_REDIS_MAX_HOPS 2
#define KVS_REDIS_MAX_ARGS 8

typedef struct kvs_redis_batch {
    int n;                         /* items */
    const char *const *keys;       /* (n) key of item i (routing) */
    const size_t *key_lens;        /* (n) */
    /* The command of item i: fills argv/argvlen (argv[1] is usually the
     * key), returns argc (<= KVS_REDIS_MAX_ARGS). */
    int (*command)(void *user, int i, const char **argv, size_t *argvlen);
    /* Called once per item with its reply (NULL: no answer: node down,
     * skipped, timeout, unroutable). The reply is freed after the call. */
    void (*reply)(void *user, int i, const redisReply *r);
    void *user;
    int use_writer_conn;           /* 1: the nodes' wr connections (the writer thread) */
    /* (n) bytes item i moves, request and reply (a value written or the
     * value expected back), for its node's deadline; NULL: small items. */
    const size_t *item_bytes;
} kvs_redis_batch;

/* Counts of what the batch met (added to, not reset). */
typedef struct kvs_redis_batch_counts {
    uint64_t no_answer;            /* items with a NULL reply */
    uint64_t skipped;              /* of those, nodes skipped by backoff / breaker */
} kvs_redis_batch_counts;

/* Runs the batch. Returns KVS_OK, or KVS_ERR_NOMEM (no reply callbacks made). */
int kvs_redis_run_batch(kvs_redis_nodes *m, const kvs_redis_batch *b, kvs_redis_batch_counts *counts);

#endif
