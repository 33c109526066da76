/* probe-tui: free_benchmark's comparison of one output pair in one read (docs/FREE_BENCHMARK.md, "The
 * comparison"; engines/adapters/torch/free_benchmark_compare.py is the framework path it equals bit for bit).
 *
 * pt_fb_compare(a, a_dtype, b, b_dtype, n, tol, limit, nthreads, out): a is the original output, b the perturbed
 * re-run's, both dense arrays of n elements; each element is widened to float32 (exact) and, in float32:
 *   z = a * b                                     (the sign-flip test)
 *   r = max(|a|, tol) / max(|b|, tol)             (NaN stays NaN: torch's clamp)
 *   r = NaN -> 1, +inf -> FLT_MAX                 (torch's nan_to_num; r is never negative)
 * out[0] = min z (NaN when any z is NaN, as torch's amin), out[1] = min r, out[2] = max r,
 * out[3] = the ratio: inf when out[0] < limit (a sign flip), else max(max r, 1 / min r) in float32.
 * dtype codes as stats.c: 0 float32, 2 float16, 3 bfloat16 (float64 is not taken: -1).
 *
 * Every figure is an elementwise IEEE operation followed by a minimum or maximum, so the result does not depend on
 * the order the elements are read in (lanes, blocks, threads): the same bits as the framework's passes. Compile
 * without -ffast-math and with -ffp-contract=off (build.py's flags). No framework headers: raw pointers.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pt_common.h"

#define CMP_LANES 16
#define CMP_MIN_PER_THREAD (1u << 18)

#define LOAD_F32(p, i) (((const float *)(p))[i])
#define LOAD_F16(p, i) pt_half_f32(((const uint16_t *)(p))[i])
#define LOAD_BF16(p, i) pt_bf16_f32(((const uint16_t *)(p))[i])

typedef struct {
    float zmin, lo, hi;
    int znan;
} cmp_part_t;

/* One element into lane J (the main loop and the tail take the same step). */
#define CMP_STEP(X, Y, J)                                                                               \
    do {                                                                                                \
        float x = (X), y = (Y);                                                                         \
        float z = x * y;                                                                                \
        nan[J] |= z != z;                                                                               \
        zmin[J] = z < zmin[J] ? z : zmin[J];                                                            \
        float ax = fabsf(x), ay = fabsf(y);                                                             \
        ax = ax < tol ? tol : ax;                                                                       \
        ay = ay < tol ? tol : ay;                                                                       \
        float r = ax / ay;                                                                              \
        r = r != r ? 1.0f : (r > FLT_MAX ? FLT_MAX : r);                                                \
        lo[J] = r < lo[J] ? r : lo[J];                                                                  \
        hi[J] = r > hi[J] ? r : hi[J];                                                                  \
    } while (0)

#define DEFINE_CMP(NAME, LOADA, LOADB)                                                                  \
    PT_CLONES static void NAME(const void *a, const void *b, size_t first, size_t last, float tol,    \
                                cmp_part_t *out) {                                                      \
        float zmin[CMP_LANES], lo[CMP_LANES], hi[CMP_LANES];                                            \
        int nan[CMP_LANES];                                                                             \
        for (int j = 0; j < CMP_LANES; j++) {                                                           \
            zmin[j] = INFINITY;                                                                         \
            lo[j] = INFINITY;                                                                           \
            hi[j] = -INFINITY;                                                                          \
            nan[j] = 0;                                                                                 \
        }                                                                                               \
        size_t i = first;                                                                               \
        for (; i + CMP_LANES <= last; i += CMP_LANES) {                                                 \
            for (int j = 0; j < CMP_LANES; j++) {                                                       \
                CMP_STEP(LOADA(a, i + j), LOADB(b, i + j), j);                                          \
            }                                                                                           \
        }                                                                                               \
        for (int j = 0; i + j < last; j++) {                                                            \
            CMP_STEP(LOADA(a, i + j), LOADB(b, i + j), j);                                              \
        }                                                                                               \
        cmp_part_t p = {zmin[0], lo[0], hi[0], nan[0]};                                                 \
        for (int j = 1; j < CMP_LANES; j++) {                                                           \
            p.zmin = zmin[j] < p.zmin ? zmin[j] : p.zmin;                                               \
            p.lo = lo[j] < p.lo ? lo[j] : p.lo;                                                         \
            p.hi = hi[j] > p.hi ? hi[j] : p.hi;                                                         \
            p.znan |= nan[j];                                                                           \
        }                                                                                               \
        *out = p;                                                                                       \
    }

DEFINE_CMP(cmp_f32_f32, LOAD_F32, LOAD_F32)
DEFINE_CMP(cmp_bf16_f32, LOAD_BF16, LOAD_F32)
DEFINE_CMP(cmp_f16_f32, LOAD_F16, LOAD_F32)
DEFINE_CMP(cmp_f32_bf16, LOAD_F32, LOAD_BF16)
DEFINE_CMP(cmp_bf16_bf16, LOAD_BF16, LOAD_BF16)
DEFINE_CMP(cmp_f16_bf16, LOAD_F16, LOAD_BF16)
DEFINE_CMP(cmp_f32_f16, LOAD_F32, LOAD_F16)
DEFINE_CMP(cmp_bf16_f16, LOAD_BF16, LOAD_F16)
DEFINE_CMP(cmp_f16_f16, LOAD_F16, LOAD_F16)

typedef void (*cmp_fn_t)(const void *, const void *, size_t, size_t, float, cmp_part_t *);

/* [b's code][a's code], codes 0 float32, 2 float16, 3 bfloat16 (1, float64, absent). */
static cmp_fn_t cmp_pick(int a_dtype, int b_dtype) {
    static const cmp_fn_t table[4][4] = {
        {cmp_f32_f32, NULL, cmp_f16_f32, cmp_bf16_f32},
        {NULL, NULL, NULL, NULL},
        {cmp_f32_f16, NULL, cmp_f16_f16, cmp_bf16_f16},
        {cmp_f32_bf16, NULL, cmp_f16_bf16, cmp_bf16_bf16},
    };
    if (a_dtype < 0 || a_dtype > 3 || b_dtype < 0 || b_dtype > 3) return NULL;
    return table[b_dtype][a_dtype];
}

typedef struct {
    cmp_fn_t fn;
    const void *a, *b;
    size_t first, last;
    float tol;
    cmp_part_t part;
} cmp_job_t;

static void *cmp_run(void *arg) {
    cmp_job_t *j = (cmp_job_t *)arg;
    j->fn(j->a, j->b, j->first, j->last, j->tol, &j->part);
    return NULL;
}

int pt_fb_compare(const void *a, int a_dtype, const void *b, int b_dtype, int64_t count, float tol, float limit,
                  int nthreads, double *out) {
    cmp_fn_t fn = cmp_pick(a_dtype, b_dtype);
    if (fn == NULL || count < 0) return -1;
    size_t n = (size_t)count;
    size_t threads = nthreads > 1 ? (size_t)nthreads : 1;
    if (threads > n / CMP_MIN_PER_THREAD) threads = n / CMP_MIN_PER_THREAD;
    if (threads > PT_MAX_THREADS) threads = PT_MAX_THREADS;
    cmp_part_t acc;
    if (threads <= 1) {
        fn(a, b, 0, n, tol, &acc);
    } else {
        cmp_job_t jobs[PT_MAX_THREADS];
        for (size_t t = 0; t < threads; t++) {
            jobs[t].fn = fn;
            jobs[t].a = a;
            jobs[t].b = b;
            jobs[t].first = n * t / threads;
            jobs[t].last = n * (t + 1) / threads;
            jobs[t].tol = tol;
        }
        pt_run_jobs(cmp_run, jobs, sizeof jobs[0], threads);
        acc = jobs[0].part;
        for (size_t t = 1; t < threads; t++) {
            cmp_part_t *p = &jobs[t].part;
            acc.zmin = p->zmin < acc.zmin ? p->zmin : acc.zmin;
            acc.lo = p->lo < acc.lo ? p->lo : acc.lo;
            acc.hi = p->hi > acc.hi ? p->hi : acc.hi;
            acc.znan |= p->znan;
        }
    }
    float zmin = acc.znan ? NAN : acc.zmin;
    float recip = 1.0f / acc.lo;
    float ratio = acc.hi > recip ? acc.hi : recip;
    if (zmin < limit) ratio = INFINITY;
    out[0] = (double)zmin;
    out[1] = (double)acc.lo;
    out[2] = (double)acc.hi;
    out[3] = (double)ratio;
    return 0;
}

/* ---- the noise perturbations (engines/adapters/torch/free_benchmark_perturb.py, the framework path) ----------
 *
 * pt_fb_noise(x, dtype, n, mode, add, thr, out, top): x and out dense arrays of n elements of dtype (0 float32,
 * 2 float16, 3 bfloat16); v = x widened to float32 (exact). Where |v| > thr:
 *   mode 0, add_noise: out = v + add in float32, rounded once to dtype (to nearest even), as torch's x + eps;
 *   mode 1, bit_noise: out = x's bits with the lowest one flipped;
 * elsewhere (NaN included) out = x, bit for bit. *top = max |v| (NaN when x holds a NaN, as torch's max).
 * thr is the threshold already in dtype (the framework compares in x's dtype), add eps in float32.
 * Returns 0, or -1 for an unknown dtype or mode. */

static inline uint16_t cmp_to_bf16(float f) { /* not NaN here: v + add is NaN only where v is */
    uint32_t u = pt_f32_bits(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline uint16_t cmp_to_half(float f) {
    uint32_t x = pt_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up (inf too) round to inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: a subnormal half (or zero) */
        uint32_t m = (uint32_t)nearbyintf(pt_bits_f32(a) * 0x1p24f); /* exact scaling, one rounding to even */
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
}

#define NOISE_STEP(T, LOADV, NOISY, J)                                                                  \
    do {                                                                                                \
        float v = LOADV;                                                                                \
        float m = fabsf(v);                                                                             \
        nan[J] |= v != v;                                                                               \
        hi[J] = m > hi[J] ? m : hi[J];                                                                  \
        T noisy = NOISY(J);                                                                             \
        out[i + (J)] = m > thr ? noisy : x[i + (J)];                                                    \
    } while (0)

#define DEFINE_NOISE(NAME, T, LOADV, NOISY)                                                             \
    PT_CLONES static void NAME(const T *x, T *out, size_t n, float add, float thr, int flip, float *top, \
                                int *has_nan) {                                                         \
        float hi[CMP_LANES];                                                                            \
        int nan[CMP_LANES];                                                                             \
        for (int j = 0; j < CMP_LANES; j++) {                                                           \
            hi[j] = -INFINITY;                                                                          \
            nan[j] = 0;                                                                                 \
        }                                                                                               \
        size_t i = 0;                                                                                   \
        for (; i + CMP_LANES <= n; i += CMP_LANES) {                                                    \
            for (int j = 0; j < CMP_LANES; j++) {                                                       \
                NOISE_STEP(T, LOADV(x[i + j]), NOISY, j);                                               \
            }                                                                                           \
        }                                                                                               \
        for (int j = 0; i + j < n; j++) {                                                               \
            NOISE_STEP(T, LOADV(x[i + j]), NOISY, j);                                                   \
        }                                                                                               \
        float h = hi[0];                                                                                \
        int any = nan[0];                                                                               \
        for (int j = 1; j < CMP_LANES; j++) {                                                           \
            h = hi[j] > h ? hi[j] : h;                                                                  \
            any |= nan[j];                                                                              \
        }                                                                                               \
        *top = h;                                                                                       \
        *has_nan = any;                                                                                 \
    }

#define V_F32(b) pt_bits_f32(b)
#define V_F16(b) pt_half_f32(b)
#define V_BF16(b) pt_bf16_f32(b)
#define NOISY_F32(J) (flip ? x[i + (J)] ^ 1u : pt_f32_bits(v + add))
#define NOISY_F16(J) (flip ? (uint16_t)(x[i + (J)] ^ 1u) : cmp_to_half(v + add))
#define NOISY_BF16(J) (flip ? (uint16_t)(x[i + (J)] ^ 1u) : cmp_to_bf16(v + add))

DEFINE_NOISE(noise_f32, uint32_t, V_F32, NOISY_F32)
DEFINE_NOISE(noise_f16, uint16_t, V_F16, NOISY_F16)
DEFINE_NOISE(noise_bf16, uint16_t, V_BF16, NOISY_BF16)

int pt_fb_noise(const void *x, int dtype, int64_t count, int mode, float add, float thr, void *out, double *top) {
    if (count < 0 || (mode != 0 && mode != 1)) return -1;
    size_t n = (size_t)count;
    float h = -INFINITY;
    int any = 0;
    switch (dtype) {
    case 0: noise_f32((const uint32_t *)x, (uint32_t *)out, n, add, thr, mode, &h, &any); break;
    case 2: noise_f16((const uint16_t *)x, (uint16_t *)out, n, add, thr, mode, &h, &any); break;
    case 3: noise_bf16((const uint16_t *)x, (uint16_t *)out, n, add, thr, mode, &h, &any); break;
    default: return -1;
    }
    *top = any ? NAN : (double)h;
    return 0;
}
