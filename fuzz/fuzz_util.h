/* What the libFuzzer targets share: an invariant that traps (libFuzzer
 * reports it as a crash, with the input), and a read of every byte of a
 * buffer the code under test handed out (so ASan sees a pointer outside
 * it). */
#ifndef KVS_FUZZ_UTIL_H
#define KVS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FUZZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "invariant failed: %s\n", #c); __builtin_trap(); } } while (0)

/* Folds bytes into a value the compiler must compute (reads every byte). */
static volatile uint64_t fuzz_sink;
static inline void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + b[i];
    fuzz_sink += h;
}

#endif
