/*
 * Chooses, call by call, between two matmul paths that give the same bits
 * (a prefill's AMX tiles, path 0, and its AVX-512 VNNI kernels, path 1) by
 * the speed each has shown on this machine for the call's shape.
 *
 * Why measured rather than fixed: on the 2-core AMX Xeon VM the faster path
 * follows the host. Quiet, AMX led SmolLM2 Q8_0 prefill by 1.27x / 1.20x
 * (1 / 2 threads; bench/results/roofline-intel-r-xeon-r-processor-avx512vnni-amx.md);
 * with the host busy (the tile unit slowed up to 3.6x, TDPBSSD 1040 against
 * 3730 GMAC/s a thread, the vector units far less) AVX-512 led it by
 * 1.06-1.35x (the contended roofline reports of 2026-12-01 and -02, and
 * paired runs of session 47), while the 4-bit types mostly kept AMX ahead. The bits are the same either way, so the
 * choice is only about time, and determinism does not depend on it.
 *
 * Policy per shape (type, k, n, the call's rows as a power of two, and its
 * threads: a call's time per multiply-add depends on all of them): each path runs TUNE_WARM times in turn;
 * then the path of the lower cost (an average of the last calls' seconds
 * per multiply-add, each new call weighing 1 / 4) runs, and every
 * TUNE_EXPLORE-th call the other one (every TUNE_EXPLORE_FAR-th where it
 * costs over TUNE_FAR times as much), so a change of the host is seen
 * within a few prefills (a SmolLM2 prefill makes 30 calls of each of its
 * 4 shapes). Shapes past the table's TUNE_SLOTS run path 0.
 */
#include <pthread.h>
#include <time.h>

#include "kernels/kernels_impl.h"

#define TUNE_SLOTS 128
#define TUNE_WARM 2
#define TUNE_EXPLORE 16
#define TUNE_EXPLORE_FAR 64
#define TUNE_FAR 1.25

int kvs_tune_choose(const kvs_tune_stats *s) {
    if (s->samples[0] < TUNE_WARM || s->samples[1] < TUNE_WARM)
        return s->samples[1] < s->samples[0]; /* in turn, path 0 first */
    const int best = s->cost[1] < s->cost[0];
    /* a path far behind is looked at less often: what the look costs */
    const unsigned every = s->cost[!best] > TUNE_FAR * s->cost[best] ? TUNE_EXPLORE_FAR : TUNE_EXPLORE;
    return s->calls % every == every - 1 ? !best : best;
}

void kvs_tune_update(kvs_tune_stats *s, int path, double cost) {
    if (!(cost >= 0.0)) return; /* a clock that went wrong: ignored */
    s->cost[path] = s->samples[path] ? s->cost[path] + (cost - s->cost[path]) / 4 : cost;
    s->samples[path]++;
    s->calls++;
}

typedef struct tune_slot {
    int used, type, k, n, mb, nth;
    kvs_tune_stats stats;
} tune_slot;

/* Calls of 16-31 rows, 32-63, ...: each their own record (a call's cost per
 * multiply-add, and so the better path, changes with its rows). */
static int rows_bucket(int m) {
    int b = 0;
    while (m > 1 && b < 30) {
        m >>= 1;
        b++;
    }
    return b;
}

static tune_slot g_slots[TUNE_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

int kvs_path_tune_pick(int type, int k, int n, int m, int nth, int *slot) {
    const int mb = rows_bucket(m);
    int path = 0;
    *slot = -1;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < TUNE_SLOTS; i++) {
        tune_slot *t = &g_slots[i];
        if (t->used && (t->type != type || t->k != k || t->n != n || t->mb != mb || t->nth != nth)) continue;
        if (!t->used) *t = (tune_slot){.used = 1, .type = type, .k = k, .n = n, .mb = mb, .nth = nth};
        path = kvs_tune_choose(&t->stats);
        *slot = i;
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return path;
}

void kvs_path_tune_record(int slot, int path, double seconds, double madds) {
    if (slot < 0 || slot >= TUNE_SLOTS || !(madds > 0)) return;
    pthread_mutex_lock(&g_lock);
    kvs_tune_update(&g_slots[slot].stats, path, seconds / madds);
    pthread_mutex_unlock(&g_lock);
}

int kvs_path_tune_stats_of(int type, int k, int n, int m, int nth, kvs_tune_stats *out) {
    const int mb = rows_bucket(m);
    int found = -1;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < TUNE_SLOTS && found < 0; i++) {
        const tune_slot *t = &g_slots[i];
        if (t->used && t->type == type && t->k == k && t->n == n && t->mb == mb && t->nth == nth) {
            *out = t->stats;
            found = 0;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

double kvs_path_tune_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
