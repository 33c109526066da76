/* probe-tui: the statistics of one contiguous float array in one read (docs/decisions/0028-fused-statistics.md).
 *
 * pt_stats(data, n, dtype, out_dtype, nthreads, out) writes
 *   out[0] max, out[1] min, out[2] sum, out[3] L2 norm, out[4] NaN count, out[5] +inf count, out[6] -inf count.
 * dtype / out_dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16. Sum and sum of squares are accumulated in
 * float64; sum and norm are then rounded once (to nearest even) to out_dtype, so they overflow to inf where a
 * value of that type would. Max and min are values of the array (NaN when it holds a NaN, as torch's amax).
 *
 * Deterministic: the array is cut into fixed blocks of BLOCK elements; inside a block LANES independent
 * accumulators take elements i, i+LANES, ... and are added in lane order; block partials are added in block
 * order. Threads only share out blocks, so the result does not depend on nthreads. Compile without -ffast-math
 * and with -ffp-contract=off (no fused multiply-add: the same bits on every CPU and in every clone).
 * No framework headers: the caller passes a raw pointer. Returns 0, or -1 for an unknown dtype.
 *
 * pt_stats_strided(data, ndim, shape, strides, dtype, out_dtype, nthreads, scratch, out): the same figures of a strided
 * view (strides in elements, none negative; a transposed or sliced view, an expanded one), read in place without
 * a copy of the whole view: each block of BLOCK elements in the view's logical (row-major) order is gathered
 * into `scratch` (BLOCK * 8 bytes, the caller's) and summarised by the same block code, folded in the same
 * order. So the result has the same bits as pt_stats on the view's contiguous copy, for any thread count (threads
 * take whole blocks, each with its own walk and scratch, as pt_stats's do).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pt_common.h"

#define LANES 16
#define BLOCK 65536
#define MIN_BLOCKS_PER_THREAD 8

typedef struct {
    double sum, sq, lo, hi;
} part_t;

/* One element into lane J's accumulators (the main loop and the tail take the same step). */
#define LANE_STEP(M, VALUE, J)                                                                          \
    do {                                                                                                \
        M v = (VALUE);                                                                                  \
        double d = (double)v;                                                                           \
        s[J] += d;                                                                                      \
        q[J] += d * d;                                                                                  \
        lo[J] = v < lo[J] ? v : lo[J];                                                                  \
        hi[J] = v > hi[J] ? v : hi[J];                                                                  \
    } while (0)

/* One block of elements: lane accumulators, reduced in lane order. M is the type min/max are kept in. */
#define DEFINE_BLOCK(NAME, T, M, LOAD)                                                                  \
    PT_CLONES static void NAME(const T *x, size_t n, part_t *out) {                                   \
        double s[LANES], q[LANES];                                                                      \
        M lo[LANES], hi[LANES];                                                                         \
        for (int j = 0; j < LANES; j++) {                                                               \
            s[j] = 0.0;                                                                                 \
            q[j] = 0.0;                                                                                 \
            lo[j] = (M)INFINITY;                                                                        \
            hi[j] = (M)-INFINITY;                                                                       \
        }                                                                                               \
        size_t i = 0;                                                                                   \
        for (; i + LANES <= n; i += LANES) {                                                            \
            for (int j = 0; j < LANES; j++) {                                                           \
                LANE_STEP(M, LOAD(x[i + j]), j);                                                        \
            }                                                                                           \
        }                                                                                               \
        for (int j = 0; i + j < n; j++) {                                                               \
            LANE_STEP(M, LOAD(x[i + j]), j);                                                            \
        }                                                                                               \
        double ss = 0.0, qq = 0.0;                                                                      \
        M l = lo[0], h = hi[0];                                                                         \
        for (int j = 0; j < LANES; j++) {                                                               \
            ss += s[j];                                                                                 \
            qq += q[j];                                                                                 \
            l = lo[j] < l ? lo[j] : l;                                                                  \
            h = hi[j] > h ? hi[j] : h;                                                                  \
        }                                                                                               \
        out->sum = ss;                                                                                  \
        out->sq = qq;                                                                                   \
        out->lo = (double)l;                                                                            \
        out->hi = (double)h;                                                                            \
    }

#define LOAD_SAME(v) (v)

DEFINE_BLOCK(block_f32, float, float, LOAD_SAME)
DEFINE_BLOCK(block_f64, double, double, LOAD_SAME)

static void fold(part_t *acc, const part_t *p) {
    acc->sum += p->sum;
    acc->sq += p->sq;
    acc->lo = p->lo < acc->lo ? p->lo : acc->lo;
    acc->hi = p->hi > acc->hi ? p->hi : acc->hi;
}

/* Half types: STAGE elements at a time widened to float32 (exact) as bits in a buffer, then summarised as
 * float32 and folded in order. Converting apart keeps both loops vectorised. float16: by integer operations
 * (pt_half_bits, vectorised on any x86-64), or by the F16C instructions where the CPU has them (the compiler's own
 * _Float16 conversion; 2.3x faster there, a library call per element elsewhere); both exact, the same bits. */
#define STAGE 1024
#define HALF_BITS(v) pt_half_bits(v)
#define BF16_BITS(v) ((uint32_t)(v) << 16)
#define F16C_BITS(v) pt_f32_bits((float)(v))

DEFINE_BLOCK(block_f32_bits, uint32_t, float, pt_bits_f32)

#define DEFINE_STAGED(ATTR, NAME, T, BITS)                                                              \
    ATTR static void NAME(const T *x, size_t n, part_t *out) {                                          \
        uint32_t buf[STAGE];                                                                            \
        part_t acc = {0.0, 0.0, INFINITY, -INFINITY};                                                   \
        for (size_t i = 0; i < n; i += STAGE) {                                                         \
            size_t m = n - i < STAGE ? n - i : STAGE;                                                   \
            const T *y = x + i;                                                                         \
            for (size_t k = 0; k < m; k++) buf[k] = BITS(y[k]);                                         \
            part_t p;                                                                                   \
            block_f32_bits(buf, m, &p);                                                                 \
            fold(&acc, &p);                                                                             \
        }                                                                                               \
        *out = acc;                                                                                     \
    }

DEFINE_STAGED(PT_CLONES, block_f16_int, uint16_t, HALF_BITS)
DEFINE_STAGED(PT_CLONES, block_bf16, uint16_t, BF16_BITS)

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(PT_NO_CLONES) && \
    defined(__FLT16_MAX__)
#define PT_F16C 1
DEFINE_STAGED(__attribute__((target("arch=x86-64-v3"))), block_f16_f16c, _Float16, F16C_BITS)
#endif

static void block_f16(const uint16_t *x, size_t n, part_t *out) {
#ifdef PT_F16C
    static int f16c = -1; /* set once; a race writes the same value */
    if (f16c < 0) {
        __builtin_cpu_init();
        f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    if (f16c) {
        block_f16_f16c((const _Float16 *)(const void *)x, n, out);
        return;
    }
#endif
    block_f16_int(x, n, out);
}

static const size_t ITEMSIZE[4] = {4, 8, 2, 2};

static void block_any(const void *data, int dtype, size_t start, size_t n, part_t *out) {
    const char *p = (const char *)data + start * ITEMSIZE[dtype];
    switch (dtype) {
    case 0: block_f32((const float *)p, n, out); break;
    case 1: block_f64((const double *)p, n, out); break;
    case 2: block_f16((const uint16_t *)p, n, out); break;
    default: block_bf16((const uint16_t *)p, n, out); break;
    }
}

typedef struct {
    const void *data;
    int dtype;
    size_t n, first, last; /* blocks [first, last) */
    part_t *parts;
} job_t;

static void *run_job(void *arg) {
    job_t *j = (job_t *)arg;
    for (size_t b = j->first; b < j->last; b++) {
        size_t start = b * (size_t)BLOCK;
        size_t len = j->n - start < (size_t)BLOCK ? j->n - start : (size_t)BLOCK;
        block_any(j->data, j->dtype, start, len, &j->parts[b]);
    }
    return NULL;
}

/* Round v to the nearest value of out_dtype (ties to even), once: overflow gives inf. */
static double round_to(double v, int out_dtype) {
    int mant, emin;
    double maxval;
    if (!isfinite(v) || v == 0.0 || out_dtype == 1) return v;
    if (out_dtype == 0) return (double)(float)v;
    if (out_dtype == 2) {
        mant = 10; emin = -14; maxval = 65504.0;
    } else {
        mant = 7; emin = -126; maxval = 0x1.fep127;
    }
    int ex;
    frexp(v, &ex); /* |v| in [2^(ex-1), 2^ex) */
    int e = ex - 1 < emin ? emin : ex - 1;
    double r = ldexp(nearbyint(ldexp(v, mant - e)), e - mant);
    if (fabs(r) > maxval) return r > 0 ? INFINITY : -INFINITY;
    return r;
}

static void count_special(const void *data, int dtype, size_t n, double *out) {
    size_t nan = 0, pinf = 0, ninf = 0;
    for (size_t i = 0; i < n; i++) {
        double v;
        switch (dtype) {
        case 0: v = ((const float *)data)[i]; break;
        case 1: v = ((const double *)data)[i]; break;
        case 2: v = pt_half_f32(((const uint16_t *)data)[i]); break;
        default: v = pt_bf16_f32(((const uint16_t *)data)[i]); break;
        }
        if (v != v) nan++;
        else if (v == INFINITY) pinf++;
        else if (v == -INFINITY) ninf++;
    }
    out[4] = (double)nan;
    out[5] = (double)pinf;
    out[6] = (double)ninf;
}

static void finish(const part_t *acc, int out_dtype, double *out) {
    out[0] = acc->hi;
    out[1] = acc->lo;
    out[2] = round_to(acc->sum, out_dtype);
    out[3] = round_to(sqrt(acc->sq), out_dtype);
    out[4] = out[5] = out[6] = 0.0;
}

int pt_stats(const void *data, int64_t count, int dtype, int out_dtype, int nthreads, double *out) {
    if (dtype < 0 || dtype > 3 || out_dtype < 0 || out_dtype > 3 || count < 0) return -1;
    size_t n = (size_t)count;
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
    part_t acc = {0.0, 0.0, INFINITY, -INFINITY};
    size_t threads = nthreads > 1 ? (size_t)nthreads : 1;
    if (threads > nblocks / MIN_BLOCKS_PER_THREAD) threads = nblocks / MIN_BLOCKS_PER_THREAD;
    part_t *parts = NULL;
    if (threads > 1) parts = (part_t *)malloc(nblocks * sizeof(part_t));
    if (parts == NULL) {
        for (size_t b = 0; b < nblocks; b++) {
            part_t p;
            size_t start = b * (size_t)BLOCK;
            block_any(data, dtype, start, n - start < (size_t)BLOCK ? n - start : (size_t)BLOCK, &p);
            fold(&acc, &p);
        }
    } else {
        job_t jobs[PT_MAX_THREADS];
        if (threads > PT_MAX_THREADS) threads = PT_MAX_THREADS;
        for (size_t t = 0; t < threads; t++) {
            jobs[t].data = data;
            jobs[t].dtype = dtype;
            jobs[t].n = n;
            jobs[t].first = nblocks * t / threads;
            jobs[t].last = nblocks * (t + 1) / threads;
            jobs[t].parts = parts;
        }
        pt_run_jobs(run_job, jobs, sizeof jobs[0], threads);
        for (size_t b = 0; b < nblocks; b++) fold(&acc, &parts[b]);
        free(parts);
    }
    finish(&acc, out_dtype, out);
    if (!isfinite(acc.sum) || !isfinite(acc.sq)) { /* something to count: a second read, only then */
        count_special(data, dtype, n, out);
        if (out[4] > 0) out[0] = out[1] = NAN;
    }
    return 0;
}

/* A walk over a strided view in logical order: dimensions of size 1 dropped, neighbours that are one run merged
 * (only the order of the elements matters, and merging keeps it). */
#define MAXDIM 64

typedef struct {
    int nd;
    int64_t shape[MAXDIM], stride[MAXDIM], idx[MAXDIM];
    int64_t off; /* elements from data to the current one */
    const char *data;
    size_t item;
} walk_t;

/* The next len elements of the walk, in order, copied to buf. */
static void gather(walk_t *w, char *buf, size_t len) {
    int in = w->nd - 1;
    const size_t item = w->item;
    const int64_t n0 = w->shape[in], s0 = w->stride[in];
    while (len) {
        size_t take = (size_t)(n0 - w->idx[in]);
        if (take > len) take = len;
        const char *src = w->data + w->off * (int64_t)item;
        if (s0 == 1) {
            memcpy(buf, src, take * item);
        } else if (item == 4) {
            for (size_t k = 0; k < take; k++) memcpy(buf + 4 * k, src + (int64_t)k * s0 * 4, 4);
        } else if (item == 8) {
            for (size_t k = 0; k < take; k++) memcpy(buf + 8 * k, src + (int64_t)k * s0 * 8, 8);
        } else {
            for (size_t k = 0; k < take; k++) memcpy(buf + 2 * k, src + (int64_t)k * s0 * 2, 2);
        }
        buf += take * item;
        len -= take;
        w->idx[in] += (int64_t)take;
        w->off += (int64_t)take * s0;
        if (w->idx[in] == n0) { /* carry into the outer dimensions */
            w->off -= n0 * s0;
            w->idx[in] = 0;
            for (int d = in - 1; d >= 0; d--) {
                w->off += w->stride[d];
                if (++w->idx[d] < w->shape[d]) break;
                w->off -= w->shape[d] * w->stride[d];
                w->idx[d] = 0;
            }
        }
    }
}

/* The walk moved to the pos-th element of the view. */
static void walk_seek(walk_t *w, size_t pos) {
    w->off = 0;
    for (int d = w->nd - 1; d >= 0; d--) {
        w->idx[d] = (int64_t)(pos % (size_t)w->shape[d]);
        pos /= (size_t)w->shape[d];
        w->off += w->idx[d] * w->stride[d];
    }
}

typedef struct {
    walk_t w;
    int dtype;
    size_t n, first, last; /* blocks [first, last) */
    part_t *parts;
    void *scratch;
} walk_job_t;

static void *run_walk_job(void *arg) {
    walk_job_t *j = (walk_job_t *)arg;
    walk_seek(&j->w, j->first * (size_t)BLOCK);
    for (size_t b = j->first; b < j->last; b++) {
        size_t start = b * (size_t)BLOCK;
        size_t len = j->n - start < (size_t)BLOCK ? j->n - start : (size_t)BLOCK;
        gather(&j->w, (char *)j->scratch, len);
        block_any(j->scratch, j->dtype, 0, len, &j->parts[b]);
    }
    return NULL;
}

/* Blocks shared out to threads, each with its own walk and scratch; the partials folded in block order (the same
 * bits as one thread). Returns 0, or -1 where memory or threads could not be had (the caller walks alone). */
static int walk_threads(const walk_t *w, int dtype, size_t n, size_t threads, void *scratch, part_t *acc) {
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
    walk_job_t *jobs = (walk_job_t *)malloc(threads * sizeof(walk_job_t));
    part_t *parts = (part_t *)malloc(nblocks * sizeof(part_t));
    int ok = jobs != NULL && parts != NULL;
    size_t made = 0;
    for (; ok && made < threads; made++) {
        jobs[made].w = *w;
        jobs[made].dtype = dtype;
        jobs[made].n = n;
        jobs[made].first = nblocks * made / threads;
        jobs[made].last = nblocks * (made + 1) / threads;
        jobs[made].parts = parts;
        jobs[made].scratch = made == 0 ? scratch : malloc((size_t)BLOCK * ITEMSIZE[dtype]);
        if (jobs[made].scratch == NULL) ok = 0;
    }
    if (ok) {
        pt_run_jobs(run_walk_job, jobs, sizeof jobs[0], threads);
        for (size_t b = 0; b < nblocks; b++) fold(acc, &parts[b]);
    }
    if (jobs != NULL)
        for (size_t t = 1; t < made; t++) free(jobs[t].scratch);
    free(jobs);
    free(parts);
    return ok ? 0 : -1;
}

int pt_stats_strided(const void *data, int ndim, const int64_t *shape, const int64_t *strides, int dtype,
                     int out_dtype, int nthreads, void *scratch, double *out) {
    if (dtype < 0 || dtype > 3 || out_dtype < 0 || out_dtype > 3 || ndim < 0 || scratch == NULL) return -1;
    walk_t w;
    w.nd = 0;
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || strides[d] < 0) return -1;
        n *= (size_t)shape[d];
        if (shape[d] == 1) continue;
        if (w.nd > 0 && w.stride[w.nd - 1] == strides[d] * shape[d]) { /* one run with the previous */
            w.shape[w.nd - 1] *= shape[d];
            w.stride[w.nd - 1] = strides[d];
            continue;
        }
        if (w.nd == MAXDIM) return -1;
        w.shape[w.nd] = shape[d];
        w.stride[w.nd] = strides[d];
        w.nd++;
    }
    if (w.nd == 0) { /* one element (or a shape of ones) */
        w.shape[0] = 1;
        w.stride[0] = 1;
        w.nd = 1;
    }
    for (int d = 0; d < w.nd; d++) w.idx[d] = 0;
    w.off = 0;
    w.data = (const char *)data;
    w.item = ITEMSIZE[dtype];
    part_t acc = {0.0, 0.0, INFINITY, -INFINITY};
    if (n == 0) {
        finish(&acc, out_dtype, out);
        return 0;
    }
    size_t threads = nthreads > 1 ? (size_t)nthreads : 1, nblocks = (n + BLOCK - 1) / BLOCK;
    if (threads > nblocks / MIN_BLOCKS_PER_THREAD) threads = nblocks / MIN_BLOCKS_PER_THREAD;
    if (threads > PT_MAX_THREADS) threads = PT_MAX_THREADS;
    if (threads <= 1 || walk_threads(&w, dtype, n, threads, scratch, &acc) != 0) {
        acc.sum = acc.sq = 0.0;
        acc.lo = INFINITY;
        acc.hi = -INFINITY;
        for (size_t start = 0; start < n; start += BLOCK) {
            size_t len = n - start < (size_t)BLOCK ? n - start : (size_t)BLOCK;
            part_t p;
            gather(&w, (char *)scratch, len);
            block_any(scratch, dtype, 0, len, &p);
            fold(&acc, &p);
        }
    }
    finish(&acc, out_dtype, out);
    if (!isfinite(acc.sum) || !isfinite(acc.sq)) { /* a second walk, counting */
        double c[7], nan = 0, pinf = 0, ninf = 0;
        for (int d = 0; d < w.nd; d++) w.idx[d] = 0;
        w.off = 0;
        for (size_t start = 0; start < n; start += BLOCK) {
            size_t len = n - start < (size_t)BLOCK ? n - start : (size_t)BLOCK;
            gather(&w, (char *)scratch, len);
            count_special(scratch, dtype, len, c);
            nan += c[4];
            pinf += c[5];
            ninf += c[6];
        }
        out[4] = nan;
        out[5] = pinf;
        out[6] = ninf;
        if (nan > 0) out[0] = out[1] = NAN;
    }
    return 0;
}
