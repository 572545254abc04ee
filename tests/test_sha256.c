/* SHA-256: FIPS 180 vectors, incremental == one-shot for every split, and the
 * SHA-NI path == the portable path. */
#include "harness.h"

#include "base/sha256.h"
#include "kvstitch.h"

#include <stdint.h>
#include <time.h>

static const char *hex_of(const void *data, size_t len) {
    static char hex[65];
    kvs_sha256_hex(data, len, hex);
    return hex;
}

static void check_vectors(void) {
    CHECK(strcmp(hex_of("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    CHECK(strcmp(hex_of("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(strcmp(hex_of(m448, strlen(m448)),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    CHECK(strcmp(hex_of(m896, strlen(m896)),
                 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
    /* One million 'a', fed in uneven pieces through the incremental API. */
    char a[1000];
    memset(a, 'a', sizeof a);
    kvs_sha256 s;
    kvs_sha256_init(&s);
    size_t done = 0, step = 1;
    while (done < 1000000) {
        size_t n = step < 1000000 - done ? step : 1000000 - done;
        if (n > sizeof a) n = sizeof a;
        kvs_sha256_update(&s, a, n);
        done += n;
        step = step * 7 % 997 + 1;
    }
    uint8_t d[32];
    char hex[65];
    kvs_sha256_final(&s, d);
    kvs_sha256_to_hex(d, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

TEST(fips_vectors_default) { check_vectors(); }

TEST(fips_vectors_portable) {
    kvs_sha256_use_hw(0);
    check_vectors();
    kvs_sha256_use_hw(1);
}

/* Every length 0..300 and every split point agree with one-shot, on both paths. */
TEST(incremental_and_paths_agree) {
    uint8_t buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 131 + 7);
    int hw = kvs_sha256_use_hw(1);
    for (size_t len = 0; len <= sizeof buf; len++) {
        uint8_t ref[32], got[32];
        kvs_sha256_use_hw(0);
        kvs_sha256_digest(buf, len, ref);
        if (hw) {
            kvs_sha256_use_hw(1);
            kvs_sha256_digest(buf, len, got);
            CHECK_MSG(memcmp(ref, got, 32) == 0, "hw != portable at len %zu", len);
        }
        for (size_t cut = 0; cut <= len; cut += 13) {
            kvs_sha256 s;
            kvs_sha256_init(&s);
            kvs_sha256_update(&s, buf, cut);
            kvs_sha256_update(&s, buf + cut, len - cut);
            kvs_sha256_final(&s, got);
            CHECK_MSG(memcmp(ref, got, 32) == 0, "split %zu/%zu differs", cut, len);
        }
    }
    kvs_sha256_use_hw(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Throughput (informative; printed, loosely bounded so a broken path shows). */
TEST(throughput) {
    size_t n = 16u << 20;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    if (!buf) return;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)i;
    uint8_t d[32];
    for (int hw = 1; hw >= 0; hw--) {
        int on = kvs_sha256_use_hw(hw);
        if (hw && !on) continue;
        double t0 = now_s();
        kvs_sha256_digest(buf, n, d);
        double mbs = n / (now_s() - t0) / 1e6;
        printf("  sha256 %s: %.0f MB/s\n", on ? "SHA-NI" : "portable", mbs);
        CHECK(mbs > 2); /* low: sanitizer builds are slow */
    }
    kvs_sha256_use_hw(1);
    free(buf);
}

int main(void) {
    RUN(fips_vectors_default);
    RUN(fips_vectors_portable);
    RUN(incremental_and_paths_agree);
    RUN(throughput);
    return kt_summary();
}
