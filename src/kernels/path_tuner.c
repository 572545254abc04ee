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
 * paired runs of session 47), while the 4-bit types mostly kept AMX ahead.
 * The bits are the same either way, so the choice is only about time, and
 * determinism does not depend on it.
 *
 * Policy per shape (type, k, n, the call's rows as a power of two, and its
 * threads: a call's time per multiply-add depends on all of them): each
 * path runs TUNE_WARM times in turn; then the path of the lower cost runs,
 * and every TUNE_EXPLORE-th call the other one (every TUNE_EXPLORE_FAR-th
 * where it costs over TUNE_FAR times as much), so a change of the host is
 * seen within a few prefills (a SmolLM2 prefill makes 30 calls of each of
 * its 4 shapes). Shapes past the table's TUNE_SLOTS run path 0.
 *
 * A path's cost is the lowest of its last KVS_TUNE_WINDOW calls' milliseconds
 * per multiply-add. Why the lowest, not an average: a path's first calls
 * pay for first touches (its scratch, output pages, cold caches, the tile
 * state): on the AMX Xeon, SmolLM2 Q8_0's first two tile calls of the
 * fused q / k / v shape took 1.3x a warm one, above the AVX-512 calls, and
 * as an average (each new call weighing 1 / 4) they kept the faster tiles
 * off for ~300 calls, ten prefills, since the path behind is looked at
 * only every 64th call. A lowest forgets such calls as soon as one warm
 * call is in the window, and a one-off slow call (an interrupt, another
 * tenant's burst) never moves the choice; a path that slows for good is
 * seen after KVS_TUNE_WINDOW of its calls. A path with fewer calls than
 * that is never taken as far behind: at 2 threads all three of the fused
 * shape's tile calls in the warm-up were cold (1.5x a warm one).
 */
#include <pthread.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define TUNE_SLOTS 128
#define TUNE_WARM 3
#define TUNE_EXPLORE 16
#define TUNE_EXPLORE_FAR 64
/* Quiet, SmolLM2 Q8_0's AVX-512 calls cost 1.1-1.2x the tiles' (AMX
 * Xeon): the more of such calls, the fewer looks at them cost */
#define TUNE_FAR 1.12
_Static_assert(TUNE_WARM <= KVS_TUNE_WINDOW, "the warm-up's calls all count");

int kvs_tune_choose(const kvs_tune_stats *s) {
    if (s->samples[0] < TUNE_WARM || s->samples[1] < TUNE_WARM)
        return s->samples[1] < s->samples[0]; /* in turn, path 0 first */
    const int best = s->cost[1] < s->cost[0];
    /* a path far behind is looked at less often: what the look costs */
    const int far = s->samples[!best] >= KVS_TUNE_WINDOW && s->cost[!best] > TUNE_FAR * s->cost[best];
    const unsigned every = far ? TUNE_EXPLORE_FAR : TUNE_EXPLORE;
    return s->calls % every == every - 1 ? !best : best;
}

void kvs_tune_update(kvs_tune_stats *s, int path, double cost) {
    if (!(cost >= 0.0)) return; /* a clock that went wrong: ignored */
    s->recent[path][s->samples[path] % KVS_TUNE_WINDOW] = cost;
    s->samples[path]++;
    s->calls++;
    const int n = s->samples[path] < KVS_TUNE_WINDOW ? s->samples[path] : KVS_TUNE_WINDOW;
    double low = s->recent[path][0];
    for (int i = 1; i < n; i++) low = s->recent[path][i] < low ? s->recent[path][i] : low;
    s->cost[path] = low;
}

typedef struct tune_key {
    int type, k, n, mb, nth;
} tune_key;

typedef struct tune_slot {
    int used;
    tune_key key;
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

static tune_key key_of(int type, int k, int n, int m, int nth) {
    return (tune_key){.type = type, .k = k, .n = n, .mb = rows_bucket(m), .nth = nth};
}

static tune_slot g_slots[TUNE_SLOTS]; /* taken in order, never given back */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Under g_lock: the slot of key, else (add) the first free one, taken for
 * it; -1 if none. */
static int find_slot(tune_key key, int add) {
    for (int i = 0; i < TUNE_SLOTS; i++) {
        tune_slot *t = &g_slots[i];
        if (!t->used) {
            if (!add) return -1;
            *t = (tune_slot){.used = 1, .key = key};
            return i;
        }
        if (!memcmp(&t->key, &key, sizeof key)) return i;
    }
    return -1;
}

int kvs_path_tune_pick(int type, int k, int n, int m, int nth, int *slot) {
    pthread_mutex_lock(&g_lock);
    *slot = find_slot(key_of(type, k, n, m, nth), 1);
    const int path = *slot >= 0 ? kvs_tune_choose(&g_slots[*slot].stats) : 0;
    pthread_mutex_unlock(&g_lock);
    return path;
}

void kvs_path_tune_record(int slot, int path, double ms, double madds) {
    if (slot < 0 || slot >= TUNE_SLOTS || !(madds > 0)) return;
    pthread_mutex_lock(&g_lock);
    kvs_tune_update(&g_slots[slot].stats, path, ms / madds);
    pthread_mutex_unlock(&g_lock);
}

int kvs_path_tune_stats_of(int type, int k, int n, int m, int nth, kvs_tune_stats *out) {
    pthread_mutex_lock(&g_lock);
    const int i = find_slot(key_of(type, k, n, m, nth), 0);
    if (i >= 0) *out = g_slots[i].stats;
    pthread_mutex_unlock(&g_lock);
    return i >= 0 ? 0 : -1;
}
