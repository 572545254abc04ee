/*
 * Tokenizer speed: tokenizes every MuSiQue dev passage (50 items x 10 ctxs
 * texts, ~1.2 MB, ../shared/data/musique_dev.json) with the SmolLM2
 * tokenizer through the public API, 5 times, and prints the median time
 * and throughput. A timing print, not an assertion.
 *
 *   bench_tokenizer [MODEL.gguf] [musique_dev.json]
 * defaults: $KVSTITCH_MODEL and $KVSTITCH_SHARED/data/musique_dev.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvstitch.h"

#define RUNS 5

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *len = (size_t)n; }
    return buf;
}

static void put_utf8(char **w, unsigned cp) {
    char *o = *w;
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12)); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18)); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    }
    *w = o;
}

/* Unescapes the JSON string starting after its opening quote at *p, in
 * place into out; returns its length and moves *p past the closing quote. */
static size_t json_string(char **p, char *out) {
    char *s = *p, *w = out;
    while (*s && *s != '"') {
        if (*s != '\\') { *w++ = *s++; continue; }
        s++;
        char c = *s++;
        switch (c) {
        case 'n': *w++ = '\n'; break;
        case 't': *w++ = '\t'; break;
        case 'r': *w++ = '\r'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(&w, cp);
            break;
        }
        default: *w++ = c; break;
        }
    }
    *p = *s ? s + 1 : s;
    return (size_t)(w - out);
}

int main(int argc, char **argv) {
    const char *model_path = argc > 1 ? argv[1] : getenv("KVSTITCH_MODEL");
    char data_path[1024];
    const char *shared = getenv("KVSTITCH_SHARED");
    snprintf(data_path, sizeof data_path, "%s", argc > 2 ? argv[2] : "");
    if (argc <= 2) snprintf(data_path, sizeof data_path, "%s/data/musique_dev.json", shared && *shared ? shared : "../shared");
    if (!model_path) { fprintf(stderr, "bench_tokenizer: set KVSTITCH_MODEL or pass the model path\n"); return 1; }

    size_t json_len;
    char *json = read_file(data_path, &json_len);
    if (!json) { fprintf(stderr, "bench_tokenizer: cannot read %s\n", data_path); return 1; }
    /* Passages: every "text" value (only ctxs entries have that key). */
    char **texts = NULL;
    size_t *lens = NULL, n_texts = 0, cap_texts = 0, total = 0;
    for (char *p = json; (p = strstr(p, "\"text\"")) != NULL;) {
        p += 6;
        while (*p == ' ' || *p == ':' || *p == '\n') p++;
        if (*p != '"') continue;
        p++;
        if (n_texts == cap_texts) {
            cap_texts = cap_texts ? 2 * cap_texts : 64;
            texts = realloc(texts, cap_texts * sizeof *texts);
            lens = realloc(lens, cap_texts * sizeof *lens);
        }
        texts[n_texts] = p;
        lens[n_texts] = json_string(&p, texts[n_texts]);
        total += lens[n_texts++];
    }

    kvs_model_params mp = kvs_model_default_params();
    mp.vocab_only = 1;
    kvs_model *model = NULL;
    double t0 = now_ms();
    if (kvs_model_load(model_path, mp, &model) != KVS_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", kvs_last_error());
        return 1;
    }
    double load_ms = now_ms() - t0;

    int cap = 1 << 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    double times[RUNS];
    long n_tokens = 0;
    for (int r = 0; r < RUNS; r++) {
        n_tokens = 0;
        t0 = now_ms();
        for (size_t i = 0; i < n_texts; i++) {
            int n = 0;
            if (kvs_tokenize(model, texts[i], lens[i], 0, ids, cap, &n) != KVS_OK) {
                fprintf(stderr, "bench_tokenizer: passage %zu: %s\n", i, kvs_last_error());
                return 1;
            }
            n_tokens += n;
        }
        times[r] = now_ms() - t0;
    }
    for (int i = 1; i < RUNS; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double x = times[j]; times[j] = times[j - 1]; times[j - 1] = x;
        }
    double med = times[RUNS / 2];
    printf("tokenizer: %zu MuSiQue passages, %.2f MB, %ld tokens (SmolLM2 vocab load %.1f ms)\n", n_texts,
           total / 1e6, n_tokens, load_ms);
    printf("tokenizer: median of %d runs %.1f ms (min %.1f, max %.1f), %.2f MB/s, %.2f Mtok/s\n", RUNS, med,
           times[0], times[RUNS - 1], total / 1e6 / (med / 1e3), n_tokens / 1e6 / (med / 1e3));
    free(ids);
    free(texts);
    free(lens);
    free(json);
    kvs_model_free(model);
    return 0;
}
