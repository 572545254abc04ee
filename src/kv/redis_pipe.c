/* Pipelined single-key commands over Redis nodes (redis_pipe.h). */
#include "kv/redis_pipe.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

static kvs_redis_conn *conn_of(kvs_redis_nodes *m, int node, int wr) {
    return wr ? &m->node[node]->wr : &m->node[node]->rd;
}

static int append_item(redisContext *ctx, const kvs_redis_batch *b, int i) {
    const char *argv[KVS_REDIS_MAX_ARGS];
    size_t argvlen[KVS_REDIS_MAX_ARGS];
    int argc = b->command(b->user, i, argv, argvlen);
    return redisAppendCommandArgv(ctx, argc, argv, argvlen) == REDIS_OK ? 0 : -1;
}

static uint64_t bytes_of(const kvs_redis_batch *b, int i) { return b->item_bytes ? b->item_bytes[i] : 0; }

/* An item alone on node (after a redirection), following further
 * redirections up to KVS_REDIS_MAX_HOPS, each hop within its budget and
 * all of them by redir_due, the one budget of the batch's redirected items:
 * a node answering every key with a redirection to itself just under the
 * timeout had cost keys x hops x its delay (a 2,421-token lookup 5.2 s
 * where the prefill takes 1.9). */
static void run_redirected(kvs_redis_nodes *m, const kvs_redis_batch *b, int i, int node, int ask,
                           int64_t redir_due, kvs_redis_batch_counts *cnt) {
    for (int hop = 0; hop < KVS_REDIS_MAX_HOPS && node >= 0 && kvs_redis_mono_ns() < redir_due; hop++) {
        kvs_redis_conn *c = conn_of(m, node, b->use_writer_conn);
        redisContext *ctx = kvs_redis_conn_acquire(c);
        if (!ctx) break;
        redisReply *r = NULL, *asking = NULL;
        const int64_t item_due = kvs_redis_due_ns(m->policy, bytes_of(b, i));
        const int64_t due = item_due < redir_due ? item_due : redir_due;
        int ok = (!ask || redisAppendCommand(ctx, "ASKING") == REDIS_OK) && append_item(ctx, b, i) == 0 &&
                 (!ask || kvs_redis_reply_by(c, due, &asking) == 0) && kvs_redis_reply_by(c, due, &r) == 0;
        if (asking) freeReplyObject(asking);
        kvs_redis_conn_release(c, ok);
        if (!ok) {
            if (r) freeReplyObject(r);
            break;
        }
        int next = kvs_redis_redirect(m, r, &ask);
        if (next == node) { /* to the node that answered: no cluster does that, a broken or hostile node */
            freeReplyObject(r);
            break;
        }
        if (next < 0) {
            b->reply(b->user, i, r);
            freeReplyObject(r);
            return;
        }
        freeReplyObject(r);
        node = next;
    }
    cnt->no_answer++;
    b->reply(b->user, i, NULL);
}

int kvs_redis_run_batch(kvs_redis_nodes *m, const kvs_redis_batch *b, kvs_redis_batch_counts *cnt) {
    kvs_redis_batch_counts local = {0};
    if (!cnt) cnt = &local;
    if (b->n <= 0) return KVS_OK;
    const int n = b->n;
    int *node_of = malloc((size_t)n * sizeof *node_of), *order = malloc((size_t)n * sizeof *order);
    int *redir_node = malloc((size_t)n * sizeof *redir_node), *redir_ask = malloc((size_t)n * sizeof *redir_ask);
    if (!node_of || !order || !redir_node || !redir_ask) {
        free(node_of);
        free(order);
        free(redir_node);
        free(redir_ask);
        return kvs_error(KVS_ERR_NOMEM, "redis: out of memory for a batch of %d", n);
    }
    int trouble = 0;
    int start[KVS_REDIS_MAX_NODES + 1] = {0};
    uint64_t node_bytes[KVS_REDIS_MAX_NODES] = {0};
    for (int i = 0; i < n; i++) {
        node_of[i] = kvs_redis_route(m, b->keys[i], b->key_lens[i]);
        redir_node[i] = -1;
        if (node_of[i] >= 0) {
            start[node_of[i] + 1]++;
            node_bytes[node_of[i]] += bytes_of(b, i);
        }
    }
    for (int k = 0; k < KVS_REDIS_MAX_NODES; k++) start[k + 1] += start[k];
    int fill[KVS_REDIS_MAX_NODES];
    memcpy(fill, start, sizeof fill);
    for (int i = 0; i < n; i++) {
        if (node_of[i] >= 0) order[fill[node_of[i]]++] = i;
        else {
            trouble = 1;
            cnt->no_answer++;
            b->reply(b->user, i, NULL);
        }
    }
    /* Send: every node's pipeline before any reply is read. Locks are
     * taken in ascending node order (no deadlock between batches). */
    redisContext *ctx[KVS_REDIS_MAX_NODES] = {0};
    int64_t sent_ns[KVS_REDIS_MAX_NODES];
    for (int k = 0; k < KVS_REDIS_MAX_NODES; k++) {
        if (start[k] == start[k + 1]) continue;
        sent_ns[k] = kvs_redis_mono_ns(); /* (a node whose send blocks delays the later nodes' sends) */
        kvs_redis_conn *c = conn_of(m, k, b->use_writer_conn);
        uint64_t skipped0 = atomic_load(&c->n.skipped);
        ctx[k] = kvs_redis_conn_acquire(c);
        int ok = ctx[k] != NULL && kvs_redis_conn_set_timeout(c, kvs_redis_budget_ms(m->policy, node_bytes[k])) == 0; /* the send */
        for (int j = start[k]; ok && j < start[k + 1]; j++) ok = append_item(ctx[k], b, order[j]) == 0;
        if (ok) ok = kvs_redis_flush(ctx[k]) == 0;
        if (!ok) {
            if (ctx[k]) kvs_redis_conn_release(c, 0);
            else if (atomic_load(&c->n.skipped) != skipped0) cnt->skipped += (uint64_t)(start[k + 1] - start[k]);
            ctx[k] = NULL;
            trouble = 1;
            for (int j = start[k]; j < start[k + 1]; j++) {
                cnt->no_answer++;
                b->reply(b->user, order[j], NULL);
            }
        }
    }
    /* Read, node by node, in the order sent: node k's replies are due by
     * the start of its send + the budget of the bytes of nodes 0..k (this
     * thread reads the earlier nodes first; node k works on its pipeline
     * meanwhile), plus the time spent in reply callbacks (decoding is ours,
     * not Redis's). From the batch's start, a node that was not reading
     * (asleep: the send blocked for its budget) had spent the later nodes'
     * time too. */
    int n_redir = 0;
    uint64_t bytes_due = 0;
    int64_t cb_ns = 0;
    for (int k = 0; k < KVS_REDIS_MAX_NODES; k++) {
        if (!ctx[k]) continue;
        kvs_redis_conn *c = conn_of(m, k, b->use_writer_conn);
        bytes_due += node_bytes[k];
        const int64_t due = sent_ns[k] + (int64_t)kvs_redis_budget_ms(m->policy, bytes_due) * 1000000;
        int ok = 1;
        for (int j = start[k]; j < start[k + 1]; j++) {
            int i = order[j];
            redisReply *r = NULL;
            if (ok && kvs_redis_reply_by(c, due + cb_ns, &r)) ok = 0;
            if (!ok) {
                if (r) freeReplyObject(r);
                trouble = 1;
                cnt->no_answer++;
                b->reply(b->user, i, NULL);
                continue;
            }
            int ask = 0, to = kvs_redis_redirect(m, r, &ask);
            if (to == k) { /* a redirection to the node that sent it (Redis never does): no answer, at once */
                freeReplyObject(r);
                trouble = 1;
                cnt->no_answer++;
                b->reply(b->user, i, NULL);
                continue;
            }
            if (to >= 0) {
                redir_node[i] = to;
                redir_ask[i] = ask;
                n_redir++;
            } else {
                int64_t c0 = kvs_redis_mono_ns();
                b->reply(b->user, i, r);
                cb_ns += kvs_redis_mono_ns() - c0;
            }
            freeReplyObject(r);
        }
        kvs_redis_conn_release(c, ok);
    }
    if (n_redir) {
        uint64_t redir_bytes = 0;
        for (int i = 0; i < n; i++)
            if (redir_node[i] >= 0) redir_bytes += bytes_of(b, i);
        const int64_t redir_due = kvs_redis_due_ns(m->policy, redir_bytes);
        for (int i = 0; i < n; i++)
            if (redir_node[i] >= 0) run_redirected(m, b, i, redir_node[i], redir_ask[i], redir_due, cnt);
    }
    if (trouble || n_redir) kvs_redis_refresh(m, 0);
    free(node_of);
    free(order);
    free(redir_node);
    free(redir_ask);
    return KVS_OK;
}
