/*
 * Minimal test harness. A test file defines TEST(name) functions and a main()
 * that calls RUN(name) for each, then returns kt_summary(). Each test prints
 * "ok NAME" or "FAIL NAME"; scripts/run-tests.sh counts these lines.
 */
#ifndef KVS_TEST_HARNESS_H
#define KVS_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kt_test_failed;  /* checks failed in the current test */
static int kt_n_pass, kt_n_fail;

/* Skips are visible: a test that cannot run here (missing ISA, tool, data it
 * was not asked for) calls SKIP("reason", ...) and returns; RUN prints
 * "skip NAME: reason" instead of "ok NAME" and run-tests.sh counts it as
 * skipped, never as passed. A test asked to run (KVSTITCH_MODEL set) whose
 * input does not load fails instead. */
static const char *kt_current = "";
static int kt_test_skipped, kt_n_skip;
#define SKIP(...)                                                                \
    do {                                                                         \
        printf("skip %s: ", kt_current);                                         \
        printf(__VA_ARGS__);                                                     \
        putchar('\n');                                                          \
        kt_test_skipped = 1;                                                     \
        return;                                                                  \
    } while (0)

/* KVSTITCH_TEST_ONLY: a comma-separated list of test names; when set, RUN
 * runs only those (scripts/mutate.sh runs the tests that guard a mutation). */
static inline int kt_selected(const char *name) {
    const char *only = getenv("KVSTITCH_TEST_ONLY");
    if (!only || !*only) return 1;
    size_t n = strlen(name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

#define TEST(name) static void name(void)

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            kt_test_failed++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            kt_test_failed++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                       \
    do {                                                                         \
        long long kt_a = (long long)(a), kt_b = (long long)(b);                  \
        if (kt_a != kt_b) {                                                      \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, \
                    __LINE__, #a, #b, kt_a, kt_b);                               \
            kt_test_failed++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double kt_a = (double)(a), kt_b = (double)(b);                           \
        if (!(fabs(kt_a - kt_b) <= (tol))) {                                     \
            fprintf(stderr, "  %s:%d: |%s - %s| <= %g failed: %g vs %g\n", __FILE__, \
                    __LINE__, #a, #b, (double)(tol), kt_a, kt_b);                \
            kt_test_failed++;                                                    \
        }                                                                        \
    } while (0)

#define RUN(name)                                                                \
    do {                                                                         \
        if (!kt_selected(#name)) break;                                          \
        kt_test_failed = 0;                                                      \
        kt_test_skipped = 0;                                                     \
        kt_current = #name;                                                      \
        name();                                                                  \
        if (kt_test_failed) { printf("FAIL %s\n", #name); kt_n_fail++; }         \
        else if (kt_test_skipped) kt_n_skip++;                                   \
        else { printf("ok %s\n", #name); kt_n_pass++; }                          \
        fflush(stdout);                                                          \
    } while (0)

static inline int kt_summary(void) {
    return kt_n_fail ? 1 : 0;
}

/* A test file's setup failed: says why (e.g. kvs_last_error()) and returns
 * main's exit code: if (setup()) return kt_setup_failed(kvs_last_error()); */
static inline int kt_setup_failed(const char *why) {
    fprintf(stderr, "  setup failed: %s\n", why ? why : "?");
    printf("FAIL setup\n");
    return 1;
}

/* Path of the real model (set by scripts/run-tests.sh from fetch-model.sh). */
static inline const char *kt_model_path(void) {
    const char *p = getenv("KVSTITCH_MODEL");
    if (!p || !*p) {
        fprintf(stderr, "  KVSTITCH_MODEL is not set (run via make test)\n");
        kt_test_failed++;
        return NULL;
    }
    return p;
}

/* Directory of ../shared (set by run-tests.sh; defaults to ../shared). */
static inline const char *kt_shared_dir(void) {
    const char *p = getenv("KVSTITCH_SHARED");
    return (p && *p) ? p : "../shared";
}

/* Reads a whole file; returns malloc'd buffer (NUL-terminated) or NULL. */
static inline char *kt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
    return buf;
}

#endif
