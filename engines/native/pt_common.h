/* What every kernel of this folder shares (each .c includes it; all are built into one library): the run-time
 * vector clones and the exact conversions between float bits, float16 and bfloat16.
 *
 * Run-time vector clones (GCC on x86-64 Linux): AVX-512 (x86-64-v4), AVX2 (v3), baseline; the same operations in
 * the same order in each, so the same bits. PT_CLONE_TARGETS overrides the list (the tests build v3 alone);
 * PT_NO_CLONES builds the baseline only. */
#ifndef PT_COMMON_H
#define PT_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PT_MAX_THREADS 64

#ifndef PT_CLONE_TARGETS
#define PT_CLONE_TARGETS "arch=x86-64-v4", "arch=x86-64-v3", "default"
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(PT_NO_CLONES)
#define PT_CLONES __attribute__((target_clones(PT_CLONE_TARGETS)))
#else
#define PT_CLONES
#endif

static inline float pt_bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline uint32_t pt_f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* float16 -> float32 bits, exact, written to vectorise (integer blends; subnormals through an exact integer to
 * float conversion of normal operands, so denormals-are-zero modes do not touch them). */
static inline uint32_t pt_half_bits(uint16_t h) {
    uint32_t u = h & 0x7fffu;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t sub = pt_f32_bits((float)(int32_t)u * 0x1p-24f);
    uint32_t r = u < 0x400u ? sub : (u >= 0x7c00u ? (u << 13) + 0x70000000u : (u << 13) + 0x38000000u);
    return r | sign;
}

static inline float pt_half_f32(uint16_t h) { return pt_bits_f32(pt_half_bits(h)); }

static inline float pt_bf16_f32(uint16_t h) { return pt_bits_f32((uint32_t)h << 16); }

/* Run ``fn`` on each of ``count`` (<= PT_MAX_THREADS) jobs laid out ``size`` bytes apart: the first on this thread,
 * the others each on a thread of its own (a job no thread could be had for runs here, after the first); returns
 * once every job is done. What a job computes must not depend on which thread runs it. */
static inline void pt_run_jobs(void *(*fn)(void *), void *jobs, size_t size, size_t count) {
    pthread_t tids[PT_MAX_THREADS];
    int started[PT_MAX_THREADS];
    char *at = (char *)jobs;
    for (size_t t = 1; t < count; t++) started[t] = pthread_create(&tids[t], NULL, fn, at + t * size) == 0;
    fn(at);
    for (size_t t = 1; t < count; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else fn(at + t * size);
    }
}

#endif
