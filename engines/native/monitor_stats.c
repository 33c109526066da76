/* probe-tui: the training monitor's metrics of one contiguous float array in one read (docs/MONITOR.md "Cost",
 * docs/decisions/0028-fused-statistics.md).
 *
 * pt_monitor_stats(data, n, dtype, eps, nthreads, out) writes
 *   out[0] max, out[1] min, out[2] sum, out[3] L2 norm, out[4] zeros (the count of |x| < eps),
 *   out[5] NaN count, out[6] inf count (+inf and -inf).
 * dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16. eps is compared in the array's type: the caller passes it
 * already rounded to that type (as torch compares a tensor with a Python number). Sum and sum of squares are
 * accumulated in float64 and returned unrounded (norm = sqrt of the float64 sum of squares). Max and min are
 * values of the array (NaN when it holds a NaN, as torch's aminmax). The NaN and inf counts take a second read,
 * only when the float64 sum or sum of squares is not finite (otherwise there is nothing to count).
 *
 * Deterministic, as stats.c: fixed blocks of BLOCK elements; inside a block LANES independent accumulators take
 * elements i, i+LANES, ... and are added in lane order; block partials are added in block order; threads only
 * share out blocks, so the result does not depend on nthreads. Compiled without -ffast-math and with
 * -ffp-contract=off (engines/native/build.py FLAGS). No framework headers. Returns 0, or -1 for bad arguments.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pt_common.h"

#define MON_LANES 16
#define MON_BLOCK 65536
#define MON_MIN_BLOCKS_PER_THREAD 8
#define MON_STAGE 1024

typedef struct {
    double sum, sq, lo, hi;
    uint64_t zeros;
} mon_part_t;

/* One element into lane J's accumulators. |v| < e is written -e < v < e (false for NaN, as torch's test). */
#define MON_STEP(M, VALUE, J)                                                                           \
    do {                                                                                                \
        M v = (VALUE);                                                                                  \
        double d = (double)v;                                                                           \
        s[J] += d;                                                                                      \
        q[J] += d * d;                                                                                  \
        lo[J] = v < lo[J] ? v : lo[J];                                                                  \
        hi[J] = v > hi[J] ? v : hi[J];                                                                  \
        z[J] += (uint32_t)((v < e) & (v > -e));                                                         \
    } while (0)

/* One block (at most MON_BLOCK elements: a lane's zero count fits 32 bits). M: the type compared in. */
#define MON_DEFINE_BLOCK(NAME, T, M, LOAD)                                                              \
    PT_CLONES static void NAME(const T *x, size_t n, M e, mon_part_t *out) {                          \
        double s[MON_LANES], q[MON_LANES];                                                              \
        M lo[MON_LANES], hi[MON_LANES];                                                                 \
        uint32_t z[MON_LANES];                                                                          \
        for (int j = 0; j < MON_LANES; j++) {                                                           \
            s[j] = 0.0;                                                                                 \
            q[j] = 0.0;                                                                                 \
            lo[j] = (M)INFINITY;                                                                        \
            hi[j] = (M)-INFINITY;                                                                       \
            z[j] = 0;                                                                                   \
        }                                                                                               \
        size_t i = 0;                                                                                   \
        for (; i + MON_LANES <= n; i += MON_LANES) {                                                    \
            for (int j = 0; j < MON_LANES; j++) {                                                       \
                MON_STEP(M, LOAD(x[i + j]), j);                                                         \
            }                                                                                           \
        }                                                                                               \
        for (int j = 0; i + j < n; j++) {                                                               \
            MON_STEP(M, LOAD(x[i + j]), j);                                                             \
        }                                                                                               \
        double ss = 0.0, qq = 0.0;                                                                      \
        M l = lo[0], h = hi[0];                                                                         \
        uint64_t zz = 0;                                                                                \
        for (int j = 0; j < MON_LANES; j++) {                                                           \
            ss += s[j];                                                                                 \
            qq += q[j];                                                                                 \
            l = lo[j] < l ? lo[j] : l;                                                                  \
            h = hi[j] > h ? hi[j] : h;                                                                  \
            zz += z[j];                                                                                 \
        }                                                                                               \
        out->sum = ss;                                                                                  \
        out->sq = qq;                                                                                   \
        out->lo = (double)l;                                                                            \
        out->hi = (double)h;                                                                            \
        out->zeros = zz;                                                                                \
    }

#define MON_SAME(v) (v)

MON_DEFINE_BLOCK(mon_block_f32, float, float, MON_SAME)
MON_DEFINE_BLOCK(mon_block_f64, double, double, MON_SAME)
MON_DEFINE_BLOCK(mon_block_f32_bits, uint32_t, float, pt_bits_f32)

static void mon_fold(mon_part_t *acc, const mon_part_t *p) {
    acc->sum += p->sum;
    acc->sq += p->sq;
    acc->lo = p->lo < acc->lo ? p->lo : acc->lo;
    acc->hi = p->hi > acc->hi ? p->hi : acc->hi;
    acc->zeros += p->zeros;
}

/* Half types: MON_STAGE elements at a time widened to float32 bits (exact), summarised as float32, folded in
 * order (so a block's value is the fold of its stages: the same for any thread count). */
#define MON_HALF_BITS(v) pt_half_bits(v)
#define MON_BF16_BITS(v) ((uint32_t)(v) << 16)

#define MON_DEFINE_STAGED(NAME, BITS)                                                                   \
    PT_CLONES static void NAME(const uint16_t *x, size_t n, float e, mon_part_t *out) {              \
        uint32_t buf[MON_STAGE];                                                                        \
        mon_part_t acc = {0.0, 0.0, INFINITY, -INFINITY, 0};                                            \
        for (size_t i = 0; i < n; i += MON_STAGE) {                                                     \
            size_t m = n - i < MON_STAGE ? n - i : MON_STAGE;                                           \
            const uint16_t *y = x + i;                                                                  \
            for (size_t k = 0; k < m; k++) buf[k] = BITS(y[k]);                                         \
            mon_part_t p;                                                                               \
            mon_block_f32_bits(buf, m, e, &p);                                                          \
            mon_fold(&acc, &p);                                                                         \
        }                                                                                               \
        *out = acc;                                                                                     \
    }

MON_DEFINE_STAGED(mon_block_f16, MON_HALF_BITS)
MON_DEFINE_STAGED(mon_block_bf16, MON_BF16_BITS)

/* Adam's bias-corrected update u = (m / c1) / (sqrt(v / c2) + eps), element by element the arithmetic of torch's
 * foreach calls on the same type (each operation rounded to T: IEEE division and square root, no contraction),
 * summarised as it is made: the update is never stored. */
#define MON_ADAM_VALUE(SQRT, i) ((mo[i] / c1) / (SQRT(ve[i] / c2) + aeps))
#define MON_DEFINE_ADAM_BLOCK(NAME, T, SQRT)                                                            \
    PT_CLONES static void NAME(const T *mo, const T *ve, size_t n, T c1, T c2, T aeps, T e, mon_part_t *out) { \
        double s[MON_LANES], q[MON_LANES];                                                              \
        T lo[MON_LANES], hi[MON_LANES];                                                                 \
        uint32_t z[MON_LANES];                                                                          \
        for (int j = 0; j < MON_LANES; j++) {                                                           \
            s[j] = 0.0;                                                                                 \
            q[j] = 0.0;                                                                                 \
            lo[j] = (T)INFINITY;                                                                        \
            hi[j] = (T)-INFINITY;                                                                       \
            z[j] = 0;                                                                                   \
        }                                                                                               \
        size_t i = 0;                                                                                   \
        for (; i + MON_LANES <= n; i += MON_LANES) {                                                    \
            for (int j = 0; j < MON_LANES; j++) {                                                       \
                MON_STEP(T, MON_ADAM_VALUE(SQRT, i + j), j);                                                  \
            }                                                                                           \
        }                                                                                               \
        for (int j = 0; i + j < n; j++) {                                                               \
            MON_STEP(T, MON_ADAM_VALUE(SQRT, i + j), j);                                                      \
        }                                                                                               \
        double ss = 0.0, qq = 0.0;                                                                      \
        T l = lo[0], h = hi[0];                                                                         \
        uint64_t zz = 0;                                                                                \
        for (int j = 0; j < MON_LANES; j++) {                                                           \
            ss += s[j];                                                                                 \
            qq += q[j];                                                                                 \
            l = lo[j] < l ? lo[j] : l;                                                                  \
            h = hi[j] > h ? hi[j] : h;                                                                  \
            zz += z[j];                                                                                 \
        }                                                                                               \
        out->sum = ss;                                                                                  \
        out->sq = qq;                                                                                   \
        out->lo = (double)l;                                                                            \
        out->hi = (double)h;                                                                            \
        out->zeros = zz;                                                                                \
    }

MON_DEFINE_ADAM_BLOCK(mon_adam_f32, float, sqrtf)
MON_DEFINE_ADAM_BLOCK(mon_adam_f64, double, sqrt)

static const size_t MON_ITEMSIZE[4] = {4, 8, 2, 2};

/* What a block reads: one array (stats), or Adam's two moments (update). */
typedef struct {
    const void *data, *data2;
    int dtype;
    double eps;             /* |x| < eps, in the array's type */
    double c1, c2, aeps;    /* Adam: bias corrections and epsilon */
    int adam;
} mon_src_t;

static void mon_block_at(const mon_src_t *src, size_t start, size_t n, mon_part_t *out) {
    size_t off = start * MON_ITEMSIZE[src->dtype];
    const char *p = (const char *)src->data + off;
    if (src->adam) {
        const char *p2 = (const char *)src->data2 + off;
        if (src->dtype == 0)
            mon_adam_f32((const float *)p, (const float *)p2, n, (float)src->c1, (float)src->c2, (float)src->aeps,
                         (float)src->eps, out);
        else
            mon_adam_f64((const double *)p, (const double *)p2, n, src->c1, src->c2, src->aeps, src->eps, out);
        return;
    }
    switch (src->dtype) {
    case 0: mon_block_f32((const float *)p, n, (float)src->eps, out); break;
    case 1: mon_block_f64((const double *)p, n, src->eps, out); break;
    case 2: mon_block_f16((const uint16_t *)p, n, (float)src->eps, out); break;
    default: mon_block_bf16((const uint16_t *)p, n, (float)src->eps, out); break;
    }
}

typedef struct {
    const mon_src_t *src;
    size_t n, first, last; /* blocks [first, last) */
    mon_part_t *parts;
} mon_job_t;

static void *mon_run_job(void *arg) {
    mon_job_t *j = (mon_job_t *)arg;
    for (size_t b = j->first; b < j->last; b++) {
        size_t start = b * (size_t)MON_BLOCK;
        size_t len = j->n - start < (size_t)MON_BLOCK ? j->n - start : (size_t)MON_BLOCK;
        mon_block_at(j->src, start, len, &j->parts[b]);
    }
    return NULL;
}

/* The fold, in block order, of every block of n elements; blocks shared out over up to nthreads threads. */
static mon_part_t mon_run(const mon_src_t *src, size_t n, int nthreads) {
    size_t nblocks = (n + MON_BLOCK - 1) / MON_BLOCK;
    mon_part_t acc = {0.0, 0.0, INFINITY, -INFINITY, 0};
    size_t threads = nthreads > 1 ? (size_t)nthreads : 1;
    if (threads > nblocks / MON_MIN_BLOCKS_PER_THREAD) threads = nblocks / MON_MIN_BLOCKS_PER_THREAD;
    mon_part_t *parts = NULL;
    if (threads > 1) parts = (mon_part_t *)malloc(nblocks * sizeof(mon_part_t));
    if (parts == NULL) {
        for (size_t b = 0; b < nblocks; b++) {
            mon_part_t p;
            size_t start = b * (size_t)MON_BLOCK;
            mon_block_at(src, start, n - start < (size_t)MON_BLOCK ? n - start : (size_t)MON_BLOCK, &p);
            mon_fold(&acc, &p);
        }
        return acc;
    }
    mon_job_t jobs[PT_MAX_THREADS];
    if (threads > PT_MAX_THREADS) threads = PT_MAX_THREADS;
    for (size_t t = 0; t < threads; t++) {
        jobs[t].src = src;
        jobs[t].n = n;
        jobs[t].first = nblocks * t / threads;
        jobs[t].last = nblocks * (t + 1) / threads;
        jobs[t].parts = parts;
    }
    pt_run_jobs(mon_run_job, jobs, sizeof jobs[0], threads);
    for (size_t b = 0; b < nblocks; b++) mon_fold(&acc, &parts[b]);
    free(parts);
    return acc;
}

static inline double mon_value(const void *data, int dtype, size_t i) {
    switch (dtype) {
    case 0: return ((const float *)data)[i];
    case 1: return ((const double *)data)[i];
    case 2: return pt_bits_f32(pt_half_bits(((const uint16_t *)data)[i]));
    default: return pt_bits_f32((uint32_t)((const uint16_t *)data)[i] << 16);
    }
}

static inline double mon_adam_value(const mon_src_t *src, size_t i) {
    if (src->dtype == 0) {
        const float *mo = (const float *)src->data, *ve = (const float *)src->data2;
        float c1 = (float)src->c1, c2 = (float)src->c2, aeps = (float)src->aeps;
        return MON_ADAM_VALUE(sqrtf, i);
    }
    const double *mo = (const double *)src->data, *ve = (const double *)src->data2;
    double c1 = src->c1, c2 = src->c2, aeps = src->aeps;
    return MON_ADAM_VALUE(sqrt, i);
}

/* out[0..6] from the fold; the NaN and inf counts by a second read, only when a float64 sum is not finite. */
static void mon_finish(const mon_src_t *src, size_t n, const mon_part_t *acc, double *out) {
    out[0] = acc->hi;
    out[1] = acc->lo;
    out[2] = acc->sum;
    out[3] = sqrt(acc->sq);
    out[4] = (double)acc->zeros;
    out[5] = out[6] = 0.0;
    if (!isfinite(acc->sum) || !isfinite(acc->sq)) { /* something to count */
        size_t nan = 0, inf = 0;
        for (size_t i = 0; i < n; i++) {
            double v = src->adam ? mon_adam_value(src, i) : mon_value(src->data, src->dtype, i);
            if (v != v) nan++;
            else if (v == INFINITY || v == -INFINITY) inf++;
        }
        out[5] = (double)nan;
        out[6] = (double)inf;
        if (nan > 0) out[0] = out[1] = NAN;
    }
}

int pt_monitor_stats(const void *data, int64_t count, int dtype, double eps, int nthreads, double *out) {
    if (dtype < 0 || dtype > 3 || count < 0 || !(eps == eps)) return -1;
    mon_src_t src = {data, NULL, dtype, eps, 0.0, 0.0, 0.0, 0};
    mon_part_t acc = mon_run(&src, (size_t)count, nthreads);
    mon_finish(&src, (size_t)count, &acc, out);
    return 0;
}

/* The seven figures of Adam's update (m / c1) / (sqrt(v / c2) + adam_eps) of float32 (dtype 0) or float64 (1)
 * moments m and v of count elements each, in T's arithmetic (c1, c2 and adam_eps rounded to T, as torch does with
 * a Python number), without storing it; eps as in pt_monitor_stats. */
int pt_monitor_adam_update(const void *m, const void *v, int64_t count, int dtype, double c1, double c2,
                           double adam_eps, double eps, int nthreads, double *out) {
    if (dtype < 0 || dtype > 1 || count < 0 || !(eps == eps)) return -1;
    mon_src_t src = {m, v, dtype, eps, c1, c2, adam_eps, 1};
    mon_part_t acc = mon_run(&src, (size_t)count, nthreads);
    mon_finish(&src, (size_t)count, &acc, out);
    return 0;
}

/* The sum of sign(g) * sign(m) over count elements of two float32 (dtype 0) or float64 (1) arrays, exactly (an
 * integer): out[0]; out[1] the number of elements where either is NaN (their sign is 0 here: comparisons with NaN
 * are false). */
#define MON_DEFINE_SIGNS(NAME, T)                                                                       \
    PT_CLONES static void NAME(const T *g, const T *m, size_t n, int64_t *agree, int64_t *nan) {      \
        int64_t a = 0, d = 0, k = 0;                                                                    \
        for (size_t i = 0; i < n; i++) {                                                                \
            T x = g[i], y = m[i];                                                                       \
            a += ((x > 0) & (y > 0)) | ((x < 0) & (y < 0));                                             \
            d += ((x > 0) & (y < 0)) | ((x < 0) & (y > 0));                                             \
            k += (x != x) | (y != y);                                                                   \
        }                                                                                               \
        *agree = a - d;                                                                                 \
        *nan = k;                                                                                       \
    }

MON_DEFINE_SIGNS(mon_signs_f32, float)
MON_DEFINE_SIGNS(mon_signs_f64, double)

int pt_monitor_sign_agreement(const void *g, const void *m, int64_t count, int dtype, double *out) {
    if (dtype < 0 || dtype > 1 || count < 0) return -1;
    int64_t agree, nan;
    if (dtype == 0) mon_signs_f32((const float *)g, (const float *)m, (size_t)count, &agree, &nan);
    else mon_signs_f64((const double *)g, (const double *)m, (size_t)count, &agree, &nan);
    out[0] = (double)agree;
    out[1] = (double)nan;
    return 0;
}
