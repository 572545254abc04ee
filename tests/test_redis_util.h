/*
 * Helpers of the Redis tier tests: synthetic chunks, and redis-server
 * processes that each test starts on free loopback ports and stops (also
 * when the test fails or crashes: every server is registered, killed at
 * exit and by a fatal-signal handler, and dies with the test process via
 * PR_SET_PDEATHSIG). Nothing here uses a Redis that was already running.
 */
#ifndef KVS_TEST_REDIS_UTIL_H
#define KVS_TEST_REDIS_UTIL_H

#include "kv/checksum.h"
#include "kv/chunk.h"
#include "kv/keys.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline int rt_quick(void) {
    const char *q = getenv("KVSTITCH_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

static inline uint32_t rt_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

static inline void rt_fill_key(kvs_key *k, uint64_t seed) {
    for (int i = 0; i < 32; i++) k->b[i] = (uint8_t)(rt_rand(&seed) >> 24);
}

/* A resident chunk of n_tok random tokens after parent (NULL: at position 0,
 * rooted in fp), with a payload that is a function of seed. */
static inline kvs_chunk *rt_make_chunk(const kvs_kv_shape *shape, const kvs_key *fp, const kvs_key *parent, int pos0,
                                       int n_tok, uint64_t seed) {
    kvs_chunk *c = NULL;
    if (kvs_chunk_new(shape, n_tok, 1, &c)) return NULL;
    for (int i = 0; i < n_tok; i++) c->tokens[i] = (int32_t)(rt_rand(&seed) % 49152);
    c->pos0 = pos0;
    c->parent_key = parent ? *parent : *fp;
    kvs_key_prefix(&c->parent_key, c->tokens, n_tok, &c->prefix_key);
    kvs_key_content(fp, c->tokens, n_tok, &c->content_key);
    uint8_t *p = c->kv;
    for (size_t i = 0; i < c->kv_bytes; i++) p[i] = (uint8_t)(rt_rand(&seed) >> 24);
    return c;
}

/* Makes the wrapper of value w (entry header ending at hb) agree with its
 * payload again: length and encoded checksum (redis_value.h layout). */
static inline void rt_rewrap(uint8_t *w, size_t len, size_t hb) {
    uint64_t enc = len - hb, sum = kvs_checksum64(w + hb, enc, 0);
    for (int i = 0; i < 8; i++) {
        w[16 + i] = (uint8_t)(enc >> (8 * i));
        w[24 + i] = (uint8_t)(sum >> (8 * i));
    }
}

/* --- redis-server processes ------------------------------------------------ */

typedef struct rt_redis {
    pid_t pid;
    int port;
    char dir[64];
} rt_redis;

#define RT_MAX_SERVERS 16
static pid_t rt_pids[RT_MAX_SERVERS];

static inline void rt_kill_all(void) {
    for (int i = 0; i < RT_MAX_SERVERS; i++)
        if (rt_pids[i] > 0) {
            kill(rt_pids[i], SIGKILL);
            waitpid(rt_pids[i], NULL, 0);
            rt_pids[i] = 0;
        }
}

static inline void rt_on_fatal(int sig) {
    for (int i = 0; i < RT_MAX_SERVERS; i++)
        if (rt_pids[i] > 0) kill(rt_pids[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void rt_register(pid_t pid, int add) {
    static int installed;
    if (!installed) {
        installed = 1;
        atexit(rt_kill_all);
        int sigs[] = {SIGINT, SIGTERM, SIGABRT, SIGSEGV, SIGBUS, SIGFPE};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], rt_on_fatal);
    }
    for (int i = 0; i < RT_MAX_SERVERS; i++)
        if (add ? rt_pids[i] == 0 : rt_pids[i] == pid) {
            rt_pids[i] = add ? pid : 0;
            return;
        }
}

static inline int rt_port_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A free loopback port p (and p + 10000, the cluster bus, when bus is set). */
static inline int rt_free_port(int bus) {
    static uint64_t seed;
    if (!seed) seed = (uint64_t)getpid() * 7919 + (uint64_t)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        int p = 20000 + (int)(rt_rand(&seed) % 25000);
        if (rt_port_free(p) && (!bus || rt_port_free(p + 10000))) return p;
    }
    return -1;
}

static inline redisContext *rt_connect(int port) {
    struct timeval tv = {5, 0}; /* generous: the machine may be loaded; outages are the tier's tests */
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c) redisSetTimeout(c, tv);
    return c;
}

/* Runs a command on the server at port; returns the reply (caller frees) or NULL. */
static inline redisReply *rt_cmd(int port, const char *fmt, ...) {
    redisContext *c = rt_connect(port);
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

static inline int rt_ping(int port) {
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return 0;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "PING");
    redisFree(c);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
}

static inline void rt_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts redis-server on a free port (cluster: cluster mode, 1 s node
 * timeout). maxmemory + allkeys-lru: Redis does the eviction (README).
 * Returns 0 when it answers PING (within 5 s). */
static inline int rt_redis_start_on(rt_redis *r, int port, int cluster) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/kvs-redis-XXXXXX");
    if (!mkdtemp(r->dir)) return -1;
    r->port = port;
    char port_s[16], log[128], conf[128];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(log, sizeof log, "%s/log", r->dir);
    snprintf(conf, sizeof conf, "%s/nodes.conf", r->dir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        const char *argv[40];
        int a = 0;
        argv[a++] = "redis-server";
        argv[a++] = "--port"; argv[a++] = port_s;
        argv[a++] = "--bind"; argv[a++] = "127.0.0.1";
        argv[a++] = "--save"; argv[a++] = "";
        argv[a++] = "--appendonly"; argv[a++] = "no";
        argv[a++] = "--dir"; argv[a++] = r->dir;
        argv[a++] = "--logfile"; argv[a++] = log;
        argv[a++] = "--daemonize"; argv[a++] = "no";
        argv[a++] = "--maxmemory"; argv[a++] = "512mb";
        argv[a++] = "--maxmemory-policy"; argv[a++] = "allkeys-lru";
        argv[a++] = "--proto-max-bulk-len"; argv[a++] = "512mb";
        argv[a++] = "--enable-debug-command"; argv[a++] = "yes"; /* DEBUG SLEEP: the slow-server test */
        if (cluster) {
            argv[a++] = "--cluster-enabled"; argv[a++] = "yes";
            argv[a++] = "--cluster-config-file"; argv[a++] = conf;
            argv[a++] = "--cluster-node-timeout"; argv[a++] = "1000";
        }
        argv[a] = NULL;
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
    rt_register(pid, 1);
    for (int i = 0; i < 100; i++) {
        if (rt_ping(port)) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            rt_register(pid, 0);
            r->pid = 0;
            return -1;
        }
        rt_sleep_ms(50);
    }
    return -1;
}

static inline int rt_redis_start(rt_redis *r, int cluster) {
    for (int tries = 0; tries < 5; tries++) {
        int port = rt_free_port(cluster);
        if (port > 0 && rt_redis_start_on(r, port, cluster) == 0) return 0;
    }
    fprintf(stderr, "  could not start redis-server\n");
    return -1;
}

static inline void rt_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* Kills the server now (SIGKILL: an outage, not a shutdown). Keeps its dir. */
static inline void rt_redis_kill(rt_redis *r) {
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        rt_register(r->pid, 0);
        r->pid = 0;
    }
}

static inline void rt_redis_stop(rt_redis *r) {
    rt_redis_kill(r);
    if (r->dir[0]) rt_rmtree(r->dir);
    r->dir[0] = 0;
}

/* Restarts a killed server on the same port (cluster: with its nodes.conf). */
static inline int rt_redis_restart(rt_redis *r, int cluster) {
    char dir[64];
    memcpy(dir, r->dir, sizeof dir);
    int port = r->port;
    rt_rmtree(dir);
    return rt_redis_start_on(r, port, cluster);
}

/* --- a 3-master + 3-replica cluster on loopback ------------------------------------- */

#define RT_CLUSTER_N 6

/* 1 when every running node reports cluster_state:ok. */
static inline int rt_cluster_ok(const rt_redis *s, int n) {
    for (int i = 0; i < n; i++) {
        if (s[i].pid <= 0) continue;
        redisReply *r = rt_cmd(s[i].port, "CLUSTER INFO");
        int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r) freeReplyObject(r);
        if (!ok) return 0;
    }
    return 1;
}

/* Starts six cluster-mode servers and joins them with redis-cli --cluster
 * create (one replica per master). 0 when the cluster is ok (within 30 s). */
static inline int rt_cluster_start(rt_redis *s) {
    memset(s, 0, sizeof(rt_redis) * RT_CLUSTER_N);
    for (int i = 0; i < RT_CLUSTER_N; i++)
        if (rt_redis_start(&s[i], 1)) return -1;
    char addr[RT_CLUSTER_N][32];
    const char *argv[RT_CLUSTER_N + 8];
    int a = 0;
    argv[a++] = "redis-cli";
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int i = 0; i < RT_CLUSTER_N; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", s[i].port);
        argv[a++] = addr[i];
    }
    argv[a++] = "--cluster-replicas";
    argv[a++] = "1";
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp("redis-cli", (char *const *)argv);
        _exit(127);
    }
    int status = -1;
    for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++) rt_sleep_ms(50);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fprintf(stderr, "  redis-cli --cluster create failed\n");
        return -1;
    }
    for (int i = 0; i < 300; i++) {
        if (rt_cluster_ok(s, RT_CLUSTER_N)) return 0;
        rt_sleep_ms(100);
    }
    fprintf(stderr, "  the cluster did not reach cluster_state:ok\n");
    return -1;
}

static inline void rt_cluster_stop(rt_redis *s) {
    for (int i = 0; i < RT_CLUSTER_N; i++) rt_redis_stop(&s[i]);
}

/* 1 if the node at port is a master (ROLE). */
static inline int rt_is_master(int port) {
    redisReply *r = rt_cmd(port, "ROLE");
    int m = r && r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->type == REDIS_REPLY_STRING &&
            !strcmp(r->element[0]->str, "master");
    if (r) freeReplyObject(r);
    return m;
}

/* 1 if the replica at port has its link to the master up and synced. */
static inline int rt_replica_in_sync(int port) {
    redisReply *r = rt_cmd(port, "INFO replication");
    int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up") &&
             strstr(r->str, "master_sync_in_progress:0");
    if (r) freeReplyObject(r);
    return up;
}

/* "127.0.0.1:p1,127.0.0.1:p2,..." of the first n servers. */
static inline void rt_seed_list(const rt_redis *s, int n, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) o += (size_t)snprintf(buf + o, cap - o, "%s127.0.0.1:%d", i ? "," : "", s[i].port);
}

#endif
