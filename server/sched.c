/* The scheduler loop (sched.h). */
#include "sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slot.h"

#define ADMIT_WINDOW 8     /* queued requests considered for cache-aware admission */
#define MAX_PASSED_OVER 4
#define MAX_WAIT_MS 2000.0

typedef struct queued {
    srv_job *job;
    int uncached;     /* prompt tokens not served by the cache (peeked once); -1 = not yet */
    int passed_over;
} queued;

struct srv_sched {
    srv_sched_params p;
    srv_env env;
    int32_t *pos;
    srv_slot *slots;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    queued *queue;    /* (max_queue) FIFO */
    int n_queued;
    int draining, cancel_all, quit;
    atomic_int stop_all; /* cancel_all for the slots' stop polls (read during a step, without the mutex) */
    int n_active;
    int rr;           /* round-robin cursor over prefilling slots */
    /* Batched decode scratch. */
    kvs_context **b_ctx;
    int32_t *b_tok, *b_pos;
    int *b_slot;
    int *b_status;    /* (n_slots) each row's (kvs_decode_batch_rows) */
    float *b_logits;  /* (n_slots, n_vocab) */
};

/* 1 if the queue's head goes next whatever the cache holds: passed over
 * MAX_PASSED_OVER times, or waiting past MAX_WAIT_MS (under mu). */
static int head_forced(const srv_sched *s) {
    const queued *head = &s->queue[0];
    return s->n_queued && (head->passed_over >= MAX_PASSED_OVER || srv_now_ms() - head->job->t_submit > MAX_WAIT_MS);
}

/* The uncached tokens of the queued requests admission looks at, peeked
 * once each, outside mu: a peek may ask the Redis tier (a few operations,
 * each within its allowance), and request threads submitting or reading
 * the load (/health) would wait on mu that long. Only this thread takes
 * jobs off the queue, and the refs keep them alive: each result goes to
 * its job's entry. None where there is no choice to make: one request
 * queued, the head forced (pick), everything cancelled; nor for cancelled
 * requests. */
static void peek_queued(srv_sched *s) {
    srv_job *todo[ADMIT_WINDOW];
    int uncached[ADMIT_WINDOW], n = 0;
    pthread_mutex_lock(&s->mu);
    const int skip = s->n_queued < 2 || s->cancel_all || head_forced(s);
    for (int i = 0; !skip && i < s->n_queued && i < ADMIT_WINDOW; i++)
        if (s->queue[i].uncached < 0 && !atomic_load(&s->queue[i].job->cancelled)) {
            todo[n++] = s->queue[i].job;
            atomic_fetch_add(&s->queue[i].job->refs, 1);
        }
    pthread_mutex_unlock(&s->mu);
    if (!n) return;
    for (int k = 0; k < n; k++) {
        int hit = 0;
        /* Documents: their reuse is decided in the prefill; count all. */
        if (!todo[k]->segments) kvs_cache_peek_prefix(s->env.cache, todo[k]->prompt, todo[k]->n_prompt - 1, &hit);
        uncached[k] = todo[k]->n_prompt - hit;
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_queued; i++)
        for (int k = 0; k < n; k++)
            if (s->queue[i].job == todo[k]) s->queue[i].uncached = uncached[k];
    pthread_mutex_unlock(&s->mu);
    for (int k = 0; k < n; k++) srv_job_unref(todo[k]);
}

/* Picks the queue index to admit next (under mu): the fewest uncached
 * tokens among those peeked (peek_queued; one not peeked yet, which the
 * window reached after a pick, counts as all uncached). */
static int pick(srv_sched *s) {
    int n = s->n_queued < ADMIT_WINDOW ? s->n_queued : ADMIT_WINDOW;
    if (head_forced(s)) return 0;
    int best = 0;
    for (int i = 0; i < n; i++) {
        const queued *q = &s->queue[i], *b = &s->queue[best];
        const int u = q->uncached < 0 ? q->job->n_prompt : q->uncached;
        if (u < (b->uncached < 0 ? b->job->n_prompt : b->uncached)) best = i;
    }
    for (int i = 0; i < best; i++) s->queue[i].passed_over++;
    return best;
}

static void admit(srv_sched *s) {
    for (int i = 0; i < s->p.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->state != SRV_SLOT_FREE) continue;
        srv_job *j = NULL;
        peek_queued(s);
        pthread_mutex_lock(&s->mu);
        while (s->n_queued > 0 && !j) {
            int k = pick(s);
            j = s->queue[k].job;
            memmove(&s->queue[k], &s->queue[k + 1], (size_t)(s->n_queued - k - 1) * sizeof *s->queue);
            s->n_queued--;
            if (atomic_load(&j->cancelled) || s->cancel_all) {
                srv_metrics_job_unstarted(s->env.metrics, SRV_FINISH_CANCELLED);
                srv_job_finish(j, SRV_FINISH_CANCELLED);
                srv_job_unref(j);
                j = NULL;
            }
        }
        /* Active from the moment it leaves the queue (the loop recounts
         * later): a drain that saw it in neither had cancelled the last
         * queued request of a SIGTERM while its slot started. */
        if (j) s->n_active++;
        pthread_mutex_unlock(&s->mu);
        if (!j) return;
        srv_slot_start(sl, &s->env, j);
    }
}

/* Queued jobs whose clients left (or a drain's cancel_all): out of the
 * queue now, so that their places go to others (they had stayed until a
 * slot freed: a full queue of clients that had left answered 429). */
static void drop_cancelled_queued(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    int kept = 0;
    for (int i = 0; i < s->n_queued; i++) {
        srv_job *j = s->queue[i].job;
        if (atomic_load(&j->cancelled) || s->cancel_all) {
            srv_metrics_job_unstarted(s->env.metrics, SRV_FINISH_CANCELLED);
            srv_job_finish(j, SRV_FINISH_CANCELLED);
            srv_job_unref(j);
        } else {
            s->queue[kept++] = s->queue[i];
        }
    }
    s->n_queued = kept;
    pthread_mutex_unlock(&s->mu);
}

/* Outside the mutex: the drain's cancel_all is read as stop_all (a plain
 * read of cancel_all here raced with srv_sched_drain's write: TSan). */
static void cancel_gone(srv_sched *s) {
    drop_cancelled_queued(s);
    for (int i = 0; i < s->p.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->state != SRV_SLOT_FREE && (atomic_load(&sl->job->cancelled) || atomic_load(&s->stop_all)))
            srv_slot_finish(sl, &s->env, SRV_FINISH_CANCELLED);
    }
}

/* Prompts with one token left run as rows of the batched decode step. */
static int prefill_in_batch(const srv_slot *sl) {
    return sl->state == SRV_SLOT_PREFILL && !sl->job->segments && srv_slot_prefill_left(sl) == 1;
}

/* 1 if slot i waits for another prompt's chunks (srv_slot_waits_for; the
 * first in slot order leads among equals). The one furthest ahead never
 * waits, so some prefill always runs. */
static int waits(srv_sched *s, int i) {
    for (int k = 0; k < s->p.n_slots; k++)
        if (srv_slot_waits_for(&s->slots[i], &s->slots[k], k < i, &s->env)) return 1;
    return 0;
}

/* One prefill step for the next prompt in turn that does not wait. Prompts
 * that arrive together with a shared prefix (a system prompt) compute it
 * once: the others wait, then load it from the cache. */
static void prefill_one(srv_sched *s) {
    for (int k = 0; k < s->p.n_slots; k++) {
        int i = (s->rr + k) % s->p.n_slots;
        srv_slot *sl = &s->slots[i];
        if (sl->state != SRV_SLOT_PREFILL || waits(s, i)) continue;
        srv_slot_catch_up(sl, &s->env);
        if (sl->state == SRV_SLOT_PREFILL && !prefill_in_batch(sl)) {
            srv_slot_prefill_step(sl, &s->env);
            s->rr = i + 1;
            return;
        }
    }
}

static void decode_all(srv_sched *s) {
    int m = 0;
    for (int i = 0; i < s->p.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->state != SRV_SLOT_DECODE && !prefill_in_batch(sl)) continue;
        /* Decoding: the last sampled token; prefilling: the last prompt token
         * (hist starts with the prompt). Either way slot n_kv's token. */
        s->b_ctx[m] = sl->ctx;
        s->b_tok[m] = sl->hist[sl->n_kv];
        s->b_pos[m] = sl->n_kv;
        s->b_slot[m++] = i;
    }
    if (m == 0) return;
    /* A row that fails (an overflow) ends its own stream only. The message
     * is kept now: the rows handled before it may set another (a store's
     * disk error that fails nothing). */
    char why[512] = "";
    if (kvs_decode_batch_rows(s->b_ctx, s->b_tok, s->b_pos, m, s->b_logits, s->b_status))
        snprintf(why, sizeof why, "%s", kvs_last_error());
    for (int r = 0; r < m; r++) {
        srv_slot *sl = &s->slots[s->b_slot[r]];
        if (s->b_status[r]) {
            srv_error_set(&sl->job->err, 500, "server_error", "", "", "decode: %s", why);
            srv_slot_finish(sl, &s->env, SRV_FINISH_ERROR);
        } else if (sl->state == SRV_SLOT_PREFILL) {
            srv_slot_prefill_done(sl, &s->env, s->b_logits + (size_t)r * s->env.n_vocab);
        } else {
            srv_slot_take_logits(sl, &s->env, s->b_logits + (size_t)r * s->env.n_vocab);
        }
    }
}

static int count_active(srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->p.n_slots; i++) n += s->slots[i].state != SRV_SLOT_FREE;
    return n;
}

static void *loop(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && s->n_queued == 0 && s->n_active == 0) pthread_cond_wait(&s->cv, &s->mu);
        int quit = s->quit && s->n_queued == 0 && s->n_active == 0;
        pthread_mutex_unlock(&s->mu);
        if (quit) break;
        admit(s);
        cancel_gone(s);
        prefill_one(s);
        decode_all(s); /* after prefill_one: a prompt it finished decodes its first token now */
        pthread_mutex_lock(&s->mu);
        s->n_active = count_active(s);
        pthread_cond_broadcast(&s->cv); /* drain waits on it */
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int srv_sched_start(kvs_model *model, kvs_cache *cache, srv_sched_params p, srv_metrics *m, srv_sched **out) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return KVS_ERR_NOMEM;
    s->p = p;
    s->env.model = model;
    s->env.cache = cache;
    s->env.metrics = m;
    s->env.n_vocab = kvs_vocab_size(model);
    s->env.n_ctx = p.n_ctx;
    s->env.prefill_chunk = p.prefill_chunk;
    kvs_cache_stats cs;
    kvs_cache_get_stats(cache, &cs);
    s->env.chunk_tokens = cs.chunk_tokens > 0 ? cs.chunk_tokens : 64;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->pos = malloc((size_t)p.n_ctx * sizeof *s->pos);
    s->slots = calloc((size_t)p.n_slots, sizeof *s->slots);
    s->queue = calloc((size_t)p.max_queue + 1, sizeof *s->queue);
    s->b_ctx = calloc((size_t)p.n_slots, sizeof *s->b_ctx);
    s->b_tok = calloc((size_t)p.n_slots, sizeof *s->b_tok);
    s->b_pos = calloc((size_t)p.n_slots, sizeof *s->b_pos);
    s->b_slot = calloc((size_t)p.n_slots, sizeof *s->b_slot);
    s->b_status = calloc((size_t)p.n_slots, sizeof *s->b_status);
    s->b_logits = malloc((size_t)p.n_slots * s->env.n_vocab * sizeof(float));
    const int all = s->pos && s->slots && s->queue && s->b_ctx && s->b_tok && s->b_pos && s->b_slot &&
                    s->b_status && s->b_logits;
    int st = all ? KVS_OK : KVS_ERR_NOMEM;
    for (int i = 0; st == KVS_OK && i < p.n_ctx; i++) s->pos[i] = i;
    s->env.pos = s->pos;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = p.n_ctx;
    cp.n_threads = p.n_threads;
    cp.n_batch = p.prefill_chunk > p.n_slots ? p.prefill_chunk : p.n_slots;
    cp.kv_type = p.kv_type;
    for (int i = 0; st == KVS_OK && i < p.n_slots; i++) {
        st = kvs_context_new(model, cp, &s->slots[i].ctx);
        s->slots[i].stop_all = &s->stop_all;
        if (!st) kvs_context_set_should_stop(s->slots[i].ctx, srv_slot_should_stop, &s->slots[i]);
        if (!st && !(s->slots[i].hist = malloc(((size_t)p.n_ctx + 1) * sizeof(int32_t)))) st = KVS_ERR_NOMEM;
    }
    if (!st && pthread_create(&s->thread, NULL, loop, s)) st = KVS_ERR_INTERNAL;
    if (st) {
        s->quit = 1;
        s->thread = 0;
        srv_sched_free(s);
        return st;
    }
    *out = s;
    return KVS_OK;
}

int srv_sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    int st = s->draining ? -2 : s->n_queued >= s->p.max_queue ? -1 : 0;
    if (!st) {
        atomic_fetch_add(&j->refs, 1);
        s->queue[s->n_queued++] = (queued){j, -1, 0};
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void srv_sched_drain(srv_sched *s, double timeout_ms, int (*cut_short)(void *), void *arg) {
    double until = srv_now_ms() + timeout_ms;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    while ((s->n_queued > 0 || s->n_active > 0) && srv_now_ms() < until) {
        pthread_mutex_unlock(&s->mu);
        if (cut_short && cut_short(arg)) {
            pthread_mutex_lock(&s->mu);
            break;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
    }
    s->cancel_all = 1;
    atomic_store(&s->stop_all, 1);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->thread) {
        pthread_mutex_lock(&s->mu);
        s->quit = s->cancel_all = 1;
        atomic_store(&s->stop_all, 1);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; s->slots && i < s->p.n_slots; i++) {
        kvs_context_free(s->slots[i].ctx);
        free(s->slots[i].hist);
        free(s->slots[i].gen);
        free(s->slots[i].lp);
        free(s->slots[i].biased);
    }
    for (int i = 0; s->queue && i < s->n_queued; i++) {
        srv_metrics_job_unstarted(s->env.metrics, SRV_FINISH_CANCELLED);
        srv_job_finish(s->queue[i].job, SRV_FINISH_CANCELLED);
        srv_job_unref(s->queue[i].job);
    }
    free(s->slots);
    free(s->queue);
    free(s->pos);
    free(s->b_ctx);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_slot);
    free(s->b_status);
    free(s->b_logits);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

srv_load srv_sched_load(srv_sched *s) {
    srv_load l = {0, 0, 0, 0};
    if (!s) return l;
    pthread_mutex_lock(&s->mu);
    l.queued = s->n_queued;
    l.active = s->n_active;
    l.slots = s->p.n_slots;
    pthread_mutex_unlock(&s->mu);
    l.ready = 1;
    return l;
}
