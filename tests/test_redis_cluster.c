/* The Redis Cluster tier against a real 3-master + 3-replica cluster on
 * loopback that this test starts: hash slots (CRC16 vectors), chunks spread
 * over all masters, MOVED after a manual failover, a master killed while
 * requests run (bounded latency, no wrong bytes, service back after the
 * replica takes over), listing and clearing by prefix on every master;
 * and fake nodes: one that redirects every key to itself. */
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#include <signal.h>
#include "kv/keys.h"
#include "test_redis_util.h"

#include "kv/redis_cluster.h"
#include "kv/tier_redis.h"

static const kvs_kv_shape SHAPE = {2, 2, 32, KVS_KV_F16};
#define N_CHUNKS 48

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST(hash_slots_match_redis) {
    /* The spec's check value, and hash tags. */
    CHECK_EQ_INT(kvs_redis_crc16("123456789", 9), 0x31C3);
    CHECK_EQ_INT(kvs_redis_key_slot("{user1000}.following", 20), kvs_redis_key_slot("user1000", 8));
    CHECK_EQ_INT(kvs_redis_key_slot("foo{}{bar}", 10), kvs_redis_crc16("foo{}{bar}", 10) & 16383);
    CHECK_EQ_INT(kvs_redis_key_slot("foo{{bar}}zap", 13), kvs_redis_crc16("{bar", 4) & 16383);
    /* and against a live server's CLUSTER KEYSLOT */
    rt_redis r;
    if (rt_redis_start(&r, 1)) {
        CHECK(0);
        return;
    }
    uint64_t seed = 3;
    for (int i = 0; i < 200; i++) {
        char key[96];
        snprintf(key, sizeof key, "kvs:%08x:%08x%08x", rt_rand(&seed), rt_rand(&seed), rt_rand(&seed));
        redisReply *x = rt_cmd(r.port, "CLUSTER KEYSLOT %s", key);
        CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == kvs_redis_key_slot(key, strlen(key)));
        if (x) freeReplyObject(x);
    }
    rt_redis_stop(&r);
}

static void make_chunks(const kvs_key *fp, kvs_chunk **c, uint64_t seed) {
    for (int i = 0; i < N_CHUNKS; i++)
        c[i] = rt_make_chunk(&SHAPE, fp, i ? &c[i - 1]->prefix_key : NULL, 32 * i, 32, seed + (uint64_t)i);
}

static int served(kvs_tier *t, kvs_chunk **c) {
    kvs_key keys[N_CHUNKS];
    kvs_chunk *out[N_CHUNKS];
    for (int i = 0; i < N_CHUNKS; i++) keys[i] = c[i]->prefix_key;
    CHECK_EQ_INT(t->ops->get_many(t, keys, N_CHUNKS, out), KVS_OK);
    int n = 0;
    for (int i = 0; i < N_CHUNKS; i++) {
        if (!out[i]) continue;
        int same = !memcmp(out[i]->kv, c[i]->kv, c[i]->kv_bytes) && out[i]->pos0 == c[i]->pos0;
        CHECK_MSG(same, "chunk %d served with other bytes", i);
        n += same;
        kvs_chunk_unref(out[i]);
    }
    return n;
}

static int count_visit(void *user, kvs_chunk *c) {
    (*(int *)user)++;
    kvs_chunk_unref(c);
    return 0;
}

/* Keys per master, by DBSIZE. */
static int masters_holding_keys(rt_redis *s) {
    int n = 0;
    for (int i = 0; i < RT_CLUSTER_N; i++) {
        if (s[i].pid <= 0 || !rt_is_master(s[i].port)) continue;
        redisReply *x = rt_cmd(s[i].port, "DBSIZE");
        n += x && x->type == REDIS_REPLY_INTEGER && x->integer > 0;
        if (x) freeReplyObject(x);
    }
    return n;
}

/* A cluster started in s (NULL if it could not be: then stopped, the
 * test failed) and a tier on its first n_seeds nodes as seeds (fp from
 * seed, a 100 ms timeout, breaker_ms (0: the default), the params in *p,
 * their seed list in seeds[512]). */
static kvs_tier *cluster_and_tier(rt_redis *s, int n_seeds, uint64_t seed, int breaker_ms, kvs_key *fp, char *seeds,
                                  kvs_redis_tier_params *p) {
    if (rt_cluster_start(s)) {
        CHECK(0);
        rt_cluster_stop(s);
        return NULL;
    }
    rt_fill_key(fp, seed);
    rt_seed_list(s, n_seeds, seeds, 512);
    kvs_redis_tier_default_params(p);
    p->cluster = seeds;
    p->timeout_ms = 100;
    if (breaker_ms) p->breaker_open_ms = breaker_ms;
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_redis_tier_open(p, fp, &SHAPE, &t), KVS_OK);
    return t;
}

TEST(cluster_roundtrip_moved_failover_clear) {
    rt_redis s[RT_CLUSTER_N];
    kvs_key fp;
    char seeds[512];
    kvs_redis_tier_params p;
    kvs_tier *t = cluster_and_tier(s, 1, 1, 300, &fp, seeds, &p); /* one seed: the rest is discovered */
    if (!t) return;
    CHECK(!strcmp(t->ops->name, "redis-cluster"));
    kvs_chunk *c[N_CHUNKS];
    make_chunks(&fp, c, 40);
    for (int i = 0; i < N_CHUNKS; i++) CHECK_EQ_INT(t->ops->put(t, c[i]), KVS_OK);
    CHECK(kvs_redis_tier_flush(t, 10000));
    CHECK_EQ_INT(served(t, c), N_CHUNKS);
    CHECK_EQ_INT(masters_holding_keys(s), 3);
    /* a seed that maps no slot (a node not in the cluster) first: the next
     * seed's map is taken (the empty one had been, and the tier was off) */
    {
        rt_redis lone;
        if (rt_redis_start(&lone, 1)) CHECK(0);
        else {
            char more[600];
            snprintf(more, sizeof more, "127.0.0.1:%d,%s", lone.port, seeds);
            kvs_redis_tier_params q = p;
            q.cluster = more;
            kvs_tier *t2 = NULL;
            CHECK_EQ_INT(kvs_redis_tier_open(&q, &fp, &SHAPE, &t2), KVS_OK);
            CHECK_EQ_INT(served(t2, c), N_CHUNKS);
            kvs_tier_close(t2);
            rt_redis_stop(&lone);
        }
    }
    /* partial-chunk markers across the slots: the key of every shorter
     * length of chunk 5 leads to chunk 5 (the marker and its chunk on
     * different masters, mostly) */
    {
        kvs_key part[31];
        kvs_chunk *out[31];
        kvs_key_prefix_lengths(&c[5]->parent_key, c[5]->tokens, 1, 31, part);
        CHECK_EQ_INT(t->ops->get_many(t, part, 31, out), KVS_OK);
        int led = 0;
        for (int i = 0; i < 31; i++) {
            led += out[i] && kvs_key_equal(&out[i]->prefix_key, &c[5]->prefix_key) &&
                   !memcmp(out[i]->kv, c[5]->kv, c[5]->kv_bytes);
            kvs_chunk_unref(out[i]);
        }
        CHECK_MSG(led == 31, "%d of 31 partial keys led to chunk 5", led);
    }
    int listed = 0;
    CHECK_EQ_INT(t->ops->scan(t, count_visit, &listed), KVS_OK);
    CHECK_EQ_INT(listed, N_CHUNKS);

    /* ASK: chunk 0's slot is being migrated and its key has moved already:
     * the old owner answers ASK, the tier follows with ASKING. Then the
     * migration completes (the new owner answers; the old one MOVED). */
    {
        char key[96];
        kvs_redis_tier_key(t, &c[0]->prefix_key, key);
        int slot = kvs_redis_key_slot(key, strlen(key)), src = -1, dst = -1;
        for (int i = 0; i < RT_CLUSTER_N; i++) {
            if (!rt_is_master(s[i].port)) continue;
            redisReply *k = rt_cmd(s[i].port, "CLUSTER COUNTKEYSINSLOT %d", slot);
            if (k && k->type == REDIS_REPLY_INTEGER && k->integer > 0) src = i;
            else if (dst < 0) dst = i;
            if (k) freeReplyObject(k);
        }
        CHECK(src >= 0 && dst >= 0);
        if (src >= 0 && dst >= 0) {
            char src_id[64] = "", dst_id[64] = "";
            redisReply *id = rt_cmd(s[src].port, "CLUSTER MYID");
            if (id && id->type == REDIS_REPLY_STRING) snprintf(src_id, sizeof src_id, "%s", id->str);
            if (id) freeReplyObject(id);
            id = rt_cmd(s[dst].port, "CLUSTER MYID");
            if (id && id->type == REDIS_REPLY_STRING) snprintf(dst_id, sizeof dst_id, "%s", id->str);
            if (id) freeReplyObject(id);
            redisReply *y[3];
            y[0] = rt_cmd(s[dst].port, "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id);
            y[1] = rt_cmd(s[src].port, "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id);
            y[2] = rt_cmd(s[src].port, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s", s[dst].port, "", key);
            for (int i = 0; i < 3; i++) {
                CHECK_MSG(y[i] && y[i]->type == REDIS_REPLY_STATUS && !strcmp(y[i]->str, "OK"), "migration step %d: %s", i,
                          y[i] && y[i]->str ? y[i]->str : "no reply");
                if (y[i]) freeReplyObject(y[i]);
            }
            kvs_chunk *got = NULL;
            CHECK_EQ_INT(t->ops->get_many(t, &c[0]->prefix_key, 1, &got), KVS_OK);
            CHECK(got && !memcmp(got->kv, c[0]->kv, c[0]->kv_bytes));
            kvs_chunk_unref(got);
            kvs_redis_tier_stats as;
            kvs_redis_tier_get_stats(t, &as);
            CHECK_MSG(as.ask >= 1, "no ASK followed (ask %llu)", (unsigned long long)as.ask);
            /* mid-migration, the importing node lists the moved key, which
             * answers only after ASKING: listed and cleared (a listing had
             * failed on its MOVED; a clear had left it, reporting success) */
            int mid = 0;
            CHECK_MSG(t->ops->scan(t, count_visit, &mid) == KVS_OK, "%s", kvs_last_error());
            CHECK_EQ_INT(mid, N_CHUNKS);
            uint64_t gone = 0;
            CHECK_MSG(t->ops->clear(t, &gone) == KVS_OK, "%s", kvs_last_error());
            CHECK_EQ_INT(gone, N_CHUNKS);
            CHECK_EQ_INT(served(t, c), 0);
            for (int i = 0; i < N_CHUNKS; i++) CHECK_EQ_INT(t->ops->put(t, c[i]), KVS_OK);
            CHECK(kvs_redis_tier_flush(t, 10000));
            CHECK_EQ_INT(served(t, c), N_CHUNKS);
            for (int i = 0; i < RT_CLUSTER_N; i++) {
                if (s[i].pid <= 0) continue;
                redisReply *z = rt_cmd(s[i].port, "CLUSTER SETSLOT %d NODE %s", slot, dst_id);
                if (z) freeReplyObject(z);
            }
            rt_sleep_ms(200);
            CHECK_EQ_INT(served(t, c), N_CHUNKS);
        }
    }

    /* Manual failover: a replica becomes master, the old master answers MOVED. */
    int replica = -1;
    for (int i = 0; i < RT_CLUSTER_N && replica < 0; i++)
        if (!rt_is_master(s[i].port)) replica = i;
    CHECK(replica >= 0);
    /* the replica must be in sync first, or the manual failover never starts */
    for (int i = 0; i < 300 && !rt_replica_in_sync(s[replica].port); i++) rt_sleep_ms(100);
    redisReply *x = NULL;
    for (int attempt = 0; attempt < 3 && !rt_is_master(s[replica].port); attempt++) {
        x = rt_cmd(s[replica].port, "CLUSTER FAILOVER");
        CHECK(x && x->type == REDIS_REPLY_STATUS);
        if (x) freeReplyObject(x);
        for (int i = 0; i < 200 && !rt_is_master(s[replica].port); i++) rt_sleep_ms(50);
    }
    CHECK(rt_is_master(s[replica].port));
    rt_sleep_ms(200);
    CHECK_EQ_INT(served(t, c), N_CHUNKS);
    kvs_redis_tier_stats rs;
    kvs_redis_tier_get_stats(t, &rs);
    CHECK_MSG(rs.moved >= 1, "no MOVED seen after a failover (moved %llu)", (unsigned long long)rs.moved);

    /* Kill a master while requests run: each request stays bounded and
     * serves only correct bytes; after the failover everything is served. */
    int victim = -1;
    /* a master whose replica is in sync (else no replica may take over) */
    for (int wait = 0; wait < 100 && victim < 0; wait++) {
        for (int i = 0; i < RT_CLUSTER_N && victim < 0; i++) {
            if (s[i].pid <= 0 || !rt_is_master(s[i].port)) continue;
            redisReply *role = rt_cmd(s[i].port, "ROLE");
            if (role && role->type == REDIS_REPLY_ARRAY && role->elements >= 3 &&
                role->element[2]->type == REDIS_REPLY_ARRAY && role->element[2]->elements >= 1) {
                const redisReply *rep = role->element[2]->element[0];
                if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING &&
                    rt_replica_in_sync(atoi(rep->element[1]->str)))
                    victim = i;
            }
            if (role) freeReplyObject(role);
        }
        if (victim < 0) rt_sleep_ms(100);
    }
    CHECK(victim >= 0);
    if (victim < 0) victim = 0;
    double t0 = now_ms(), worst = 0;
    int killed = 0, all_back = 0, min_served = N_CHUNKS;
    while (now_ms() - t0 < 45000 && !all_back) { /* failover: ~2-3 s idle, much more on a loaded machine */
        if (!killed && now_ms() - t0 > 300) {
            rt_redis_kill(&s[victim]);
            killed = 1;
        }
        double r0 = now_ms();
        int n = served(t, c);
        double ms = now_ms() - r0;
        if (ms > worst) worst = ms;
        if (n < min_served) min_served = n;
        all_back = killed && n == N_CHUNKS && now_ms() - t0 > 1500;
        rt_sleep_ms(20);
    }
    CHECK_MSG(min_served < N_CHUNKS, "the kill did not show (served %d at worst)", min_served);
    CHECK_MSG(all_back, "not all chunks served after the failover");
    CHECK_MSG(worst < 1000, "a request took %.0f ms during the failover", worst);
    kvs_redis_tier_get_stats(t, &rs);
    CHECK(rs.refreshes >= 2);

    /* clear: this model's keys on every master, nothing else */
    int other_master = -1;
    for (int i = 0; i < RT_CLUSTER_N && other_master < 0; i++)
        if (s[i].pid > 0 && rt_is_master(s[i].port)) other_master = i;
    x = rt_cmd(s[other_master].port, "SET {kvs}:not-ours keep");
    int set_ok = x && x->type == REDIS_REPLY_STATUS; /* may be MOVED: then it lives elsewhere; skip */
    if (x) freeReplyObject(x);
    uint64_t removed = 0;
    CHECK_EQ_INT(t->ops->clear(t, &removed), KVS_OK);
    CHECK_EQ_INT(removed, N_CHUNKS);
    CHECK_EQ_INT(served(t, c), 0);
    if (set_ok) {
        x = rt_cmd(s[other_master].port, "GET {kvs}:not-ours");
        CHECK(x && x->type == REDIS_REPLY_STRING);
        if (x) freeReplyObject(x);
    }
    for (int i = 0; i < N_CHUNKS; i++) kvs_chunk_unref(c[i]);
    kvs_tier_close(t);
    rt_cluster_stop(s);
}

/* Every node stalled (SIGSTOP: connects succeed, nothing answers): a
 * request costs a few timeouts, not one per node and seed at each of its
 * map refreshes (2 s a request at the default 50 ms with 4 seeds, 21 s at
 * 1 s); once the nodes go on, everything is served again. */
TEST(stalled_cluster_costs_a_few_timeouts) {
    rt_redis s[RT_CLUSTER_N];
    kvs_key fp;
    char seeds[512];
    kvs_redis_tier_params p;
    kvs_tier *t = cluster_and_tier(s, RT_CLUSTER_N, 7, 0, &fp, seeds, &p); /* every node a seed */
    if (!t) return;
    kvs_chunk *c[N_CHUNKS];
    make_chunks(&fp, c, 70);
    for (int i = 0; i < N_CHUNKS; i++) CHECK_EQ_INT(t->ops->put(t, c[i]), KVS_OK);
    CHECK(kvs_redis_tier_flush(t, 10000));
    CHECK_EQ_INT(served(t, c), N_CHUNKS);
    for (int i = 0; i < RT_CLUSTER_N; i++) kill(s[i].pid, SIGSTOP);
    double worst = 0, total = 0;
    for (int round = 0; round < 6; round++) {
        double t0 = now_ms();
        CHECK_EQ_INT(served(t, c), 0);
        double ms = now_ms() - t0;
        total += ms;
        if (ms > worst) worst = ms;
    }
    for (int i = 0; i < RT_CLUSTER_N; i++) kill(s[i].pid, SIGCONT);
    CHECK_MSG(worst < 1200, "a request took %.0f ms with every node stalled (timeout 100 ms)", worst);
    CHECK_MSG(total < 3000, "6 requests took %.0f ms with every node stalled", total);
    int back = 0;
    for (double t0 = now_ms(); now_ms() - t0 < 20000 && back < N_CHUNKS; rt_sleep_ms(100)) back = served(t, c);
    CHECK_EQ_INT(back, N_CHUNKS);
    for (int i = 0; i < N_CHUNKS; i++) kvs_chunk_unref(c[i]);
    kvs_tier_close(t);
    rt_cluster_stop(s);
}

/* A cluster tier whose one seed is 127.0.0.1:port, fingerprint fp from seed. */
static kvs_tier *open_one_seed(int port, uint64_t seed, kvs_key *fp) {
    rt_fill_key(fp, seed);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", port);
    kvs_redis_tier_params p;
    kvs_redis_tier_default_params(&p);
    p.cluster = seeds;
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_redis_tier_open(&p, fp, &SHAPE, &t), KVS_OK);
    return t;
}

TEST(cluster_unreachable_at_start) {
    kvs_key fp;
    kvs_tier *t = open_one_seed(rt_free_port(1), 2, &fp);
    kvs_chunk *c[N_CHUNKS];
    make_chunks(&fp, c, 1);
    double t0 = now_ms();
    CHECK_EQ_INT(served(t, c), 0);
    CHECK_MSG(now_ms() - t0 < 300, "%.0f ms for a get with no cluster", now_ms() - t0);
    CHECK_EQ_INT(t->ops->put(t, c[0]), KVS_OK);
    kvs_tier_stats st;
    t->ops->stats(t, &st);
    CHECK_EQ_INT(st.errors, N_CHUNKS);
    for (int i = 0; i < N_CHUNKS; i++) kvs_chunk_unref(c[i]);
    kvs_tier_close(t);
}

/* A plain Redis as the only seed (its clients paused for pause_ms first,
 * if > 0): nothing is served, and why holds `says`. */
static void plain_seed_says(int pause_ms, uint64_t seed, const char *says) {
    rt_redis plain;
    if (rt_redis_start(&plain, 0)) {
        CHECK(0);
        return;
    }
    if (pause_ms > 0) {
        redisReply *r = rt_cmd(plain.port, "CLIENT PAUSE %d ALL", pause_ms);
        CHECK(r && r->type == REDIS_REPLY_STATUS);
        if (r) freeReplyObject(r);
    }
    kvs_key fp;
    kvs_tier *t = open_one_seed(plain.port, seed, &fp);
    kvs_chunk *c[N_CHUNKS];
    make_chunks(&fp, c, seed + 4);
    CHECK_EQ_INT(served(t, c), 0);
    char why[512];
    kvs_redis_tier_why_down(t, why, sizeof why);
    CHECK_MSG(strstr(why, says), "why: '%s'", why);
    for (int i = 0; i < N_CHUNKS; i++) kvs_chunk_unref(c[i]);
    kvs_tier_close(t);
    rt_redis_stop(&plain);
}

/* --redis-cluster at a Redis without cluster support: nothing is served,
 * and why says what the server said (it had been "no reachable node" and
 * writes failing with no reason). */
TEST(cluster_seed_without_cluster_support_says_so) {
    plain_seed_says(0, 3, "CLUSTER SLOTS: ERR This instance has cluster support disabled");
}

/* A seed that does not answer CLUSTER SLOTS in time (a real Redis with its
 * clients paused): why names the timeout (it had been "CLUSTER SLOTS
 * failed", no reason). */
TEST(cluster_seed_that_does_not_answer_says_why) {
    plain_seed_says(2000, 5, "CLUSTER SLOTS: no answer in time");
}

/* A fake cluster node: CLUSTER SLOTS maps every slot to itself, ASKING is
 * +OK, and every other command is answered "-ASK <slot> <itself>" and
 * counted (the data commands a batch sends it). */
typedef struct self_asker {
    int fd, port, commands;
    atomic_int stop; /* set by the test's thread, read by the fake's */
    pthread_t th;
} self_asker;

/* The next whole RESP command in buf[*at..n): its first word in name;
 * 0 if the command is not complete yet. */
static int resp_command(const char *buf, size_t n, size_t *at, char *name, size_t cap) {
    size_t p = *at;
    if (p >= n || buf[p] != '*') return 0;
    long argc = strtol(buf + p + 1, NULL, 10);
    const char *nl = memchr(buf + p, '\n', n - p);
    if (!nl) return 0;
    p = (size_t)(nl - buf) + 1;
    for (long a = 0; a < argc; a++) {
        if (p >= n || buf[p] != '$') return 0;
        long len = strtol(buf + p + 1, NULL, 10);
        nl = memchr(buf + p, '\n', n - p);
        if (!nl || (size_t)(nl - buf) + 1 + (size_t)len + 2 > n) return 0;
        p = (size_t)(nl - buf) + 1;
        if (a == 0) snprintf(name, cap, "%.*s", (int)len, buf + p);
        p += (size_t)len + 2;
    }
    *at = p;
    return 1;
}

static void *self_asker_main(void *arg) {
    self_asker *f = arg;
    static char buf[1 << 20];
    while (!f->stop) {
        int c = accept(f->fd, NULL, NULL);
        if (c < 0) continue;
        struct timeval tv = {0, 200000};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        size_t n = 0, at = 0;
        ssize_t got;
        while (!f->stop && (got = read(c, buf + n, sizeof buf - n)) > 0) {
            n += (size_t)got;
            char name[32], reply[128];
            while (resp_command(buf, n, &at, name, sizeof name)) {
                if (!strcasecmp(name, "CLUSTER"))
                    snprintf(reply, sizeof reply, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
                             f->port);
                else if (!strcasecmp(name, "ASKING"))
                    snprintf(reply, sizeof reply, "+OK\r\n");
                else {
                    f->commands++;
                    snprintf(reply, sizeof reply, "-ASK 100 127.0.0.1:%d\r\n", f->port);
                }
                if (send(c, reply, strlen(reply), MSG_NOSIGNAL) < 0) break;
            }
            memmove(buf, buf + at, n - at);
            n -= at;
            at = 0;
        }
        close(c);
    }
    return NULL;
}

/* A node that redirects every key to itself: each key is asked once, then
 * given up (no hops: a redirection to the node that sent it is no cluster's
 * answer). Each key had taken two more round trips, each with a fresh
 * budget: keys x hops x the node's delay, 2.7x the prefill it was to save. */
TEST(redirect_to_the_same_node_is_not_followed) {
    self_asker f = {0};
    f.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(f.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    CHECK(bind(f.fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f.fd, 16) == 0);
    socklen_t al = sizeof a;
    getsockname(f.fd, (struct sockaddr *)&a, &al);
    f.port = ntohs(a.sin_port);
    struct timeval tv = {0, 100000};
    setsockopt(f.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    CHECK(pthread_create(&f.th, NULL, self_asker_main, &f) == 0);
    kvs_key fp;
    kvs_tier *t = open_one_seed(f.port, 6, &fp);
    kvs_chunk *c[N_CHUNKS];
    make_chunks(&fp, c, 11);
    CHECK_EQ_INT(served(t, c), 0);
    kvs_tier_close(t);
    f.stop = 1;
    pthread_join(f.th, NULL);
    close(f.fd);
    CHECK_MSG(f.commands > 0 && f.commands <= N_CHUNKS, "%d data commands for %d keys", f.commands, N_CHUNKS);
    for (int i = 0; i < N_CHUNKS; i++) kvs_chunk_unref(c[i]);
}

/* More node addresses than a byte could index (the slot map's entries had
 * been bytes, the table 64 nodes: a cluster of 80 masters lost 16 nodes'
 * slots without a word): a MOVED to node 300 routes there; past the table's
 * room the node is refused and the reason names it. */
TEST(many_nodes_are_routed_and_the_table_bound_is_named) {
    kvs_redis_policy pol;
    kvs_redis_policy_defaults(&pol);
    pol.timeout_ms = 50;
    kvs_redis_nodes *m = calloc(1, sizeof *m);
    CHECK_EQ_INT(kvs_redis_nodes_init_cluster(m, "127.0.0.1:1", &pol), KVS_OK); /* nothing there: an empty map */
    char host[64];
    for (int i = m->n_nodes; i < 300; i++) {
        snprintf(host, sizeof host, "10.1.%d.%d", i / 250, i % 250);
        CHECK(kvs_redis_node_index(m, host, 7000) == i);
    }
    char key[32];
    int slot = -1;
    for (int k = 0; slot != 1234; k++) {
        snprintf(key, sizeof key, "k%d", k);
        slot = kvs_redis_key_slot(key, strlen(key));
    }
    char moved[64];
    snprintf(moved, sizeof moved, "MOVED 1234 10.9.9.9:7001");
    redisReply r = {.type = REDIS_REPLY_ERROR, .str = moved, .len = strlen(moved)};
    int ask = -1, idx = kvs_redis_redirect(m, &r, &ask);
    CHECK_EQ_INT(idx, 300);
    CHECK_EQ_INT(ask, 0);
    CHECK_EQ_INT(kvs_redis_route(m, key, strlen(key)), 300);
    for (int i = m->n_nodes; i < KVS_REDIS_MAX_NODES; i++) {
        snprintf(host, sizeof host, "10.2.%d.%d", i / 250, i % 250);
        CHECK(kvs_redis_node_index(m, host, 7000) == i);
    }
    CHECK_EQ_INT(kvs_redis_node_index(m, "10.3.0.1", 7002), -1);
    CHECK_MSG(strstr(m->nodes_full, "10.3.0.1:7002") && strstr(m->nodes_full, "node addresses"), "nodes_full: '%s'", m->nodes_full);
    kvs_redis_nodes_destroy(m);
    free(m);
}

/* The candidates a forced refresh of a fresh map on seeds had, read from
 * its "k of N nodes asked" with every node of s stalled (and with
 * open_breakers, every known node's breaker open, as after failed
 * requests); -1 if it did not say. */
static int refresh_candidates_when_stalled(rt_redis *s, const char *seeds, int open_breakers) {
    kvs_redis_policy pol;
    kvs_redis_policy_defaults(&pol);
    pol.timeout_ms = 100;
    kvs_redis_nodes *m = calloc(1, sizeof *m);
    int n = -1;
    if (m && kvs_redis_nodes_init_cluster(m, seeds, &pol) == KVS_OK) {
        CHECK_MSG(m->n_nodes > 0, "no node known from '%s': %s", seeds, m->slots_why);
        for (int i = 0; open_breakers && i < m->n_nodes; i++) atomic_store(&m->node[i]->rd.breaker_open, 1);
        for (int i = 0; i < RT_CLUSTER_N; i++) kill(s[i].pid, SIGSTOP);
        kvs_redis_refresh(m, 1);
        for (int i = 0; i < RT_CLUSTER_N; i++) kill(s[i].pid, SIGCONT);
        const char *at = strstr(m->slots_why, " of ");
        if (!at || sscanf(at, " of %d nodes asked", &n) != 1) n = -1;
        CHECK_MSG(n > 0, "the refresh said '%s'", m->slots_why);
        kvs_redis_nodes_destroy(m);
    }
    free(m);
    return n;
}

/* Seeds named by host name are the nodes CLUSTER SLOTS names by IP: a
 * refresh has as many candidates as with the same seeds by IP. It had asked
 * each such seed beside its node, a stalled one twice per refresh. */
TEST(seeds_by_host_name_are_their_nodes) {
    rt_redis s[RT_CLUSTER_N];
    if (rt_cluster_start(s)) {
        CHECK(0);
        rt_cluster_stop(s);
        return;
    }
    char by_ip[512], by_name[512];
    size_t o = 0;
    rt_seed_list(s, RT_CLUSTER_N, by_ip, sizeof by_ip);
    for (int i = 0; i < RT_CLUSTER_N; i++)
        o += (size_t)snprintf(by_name + o, sizeof by_name - o, "%slocalhost:%d", i ? "," : "", s[i].port);
    const int n_ip = refresh_candidates_when_stalled(s, by_ip, 0);
    const int n_name = refresh_candidates_when_stalled(s, by_name, 0);
    CHECK_MSG(n_ip == RT_CLUSTER_N, "%d candidates from %d seeds by IP", n_ip, RT_CLUSTER_N);
    CHECK_MSG(n_name == n_ip, "%d candidates from the seeds by host name, %d by IP", n_name, n_ip);
    /* every known node's breaker open: a seed by name is asked by its name,
     * which may now resolve elsewhere (pods back on new IPs had left no
     * candidate); a seed by IP that is such a node is not */
    const int n_ip_open = refresh_candidates_when_stalled(s, by_ip, 1);
    const int n_name_open = refresh_candidates_when_stalled(s, by_name, 1);
    CHECK_MSG(n_name_open == RT_CLUSTER_N, "%d candidates from %d seeds by host name, every node's breaker open",
              n_name_open, RT_CLUSTER_N);
    CHECK_MSG(n_ip_open < RT_CLUSTER_N, "%d candidates from %d seeds by IP, every node's breaker open", n_ip_open,
              RT_CLUSTER_N);
    rt_cluster_stop(s);
}

int main(void) {
    RUN(hash_slots_match_redis);
    RUN(many_nodes_are_routed_and_the_table_bound_is_named);
    RUN(cluster_unreachable_at_start);
    RUN(cluster_seed_without_cluster_support_says_so);
    RUN(cluster_seed_that_does_not_answer_says_why);
    RUN(redirect_to_the_same_node_is_not_followed);
    RUN(cluster_roundtrip_moved_failover_clear);
    RUN(stalled_cluster_costs_a_few_timeouts);
    RUN(seeds_by_host_name_are_their_nodes);
    return kt_summary();
}
