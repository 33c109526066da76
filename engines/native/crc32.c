/* probe-tui: CRC-32 of a byte buffer, the value zlib's crc32(crc, buf, len) returns (the reflected polynomial
 * 0xEDB88320, the register complemented before and after), so that a dump's "md5" column (msprobe's CRC32 of a
 * tensor's raw bytes) is the same number whichever code computed it.
 *
 *   pt_crc32(crc, buf, len)               the CRC of buf continued from crc (0 to start), best method of this CPU
 *   pt_crc32_with(crc, buf, len, method)  the same by one method: 0 tables, 1 PCLMULQDQ, 2 VPCLMULQDQ on 256-bit
 *                                          vectors (AVX2), 3 VPCLMULQDQ on 512-bit vectors (AVX-512); a method
 *                                          this CPU lacks falls back to the best one it has
 *   pt_crc32_method()                     the method pt_crc32 uses here
 *   pt_crc32_threads(crc, buf, len, n)    the same value, the buffer cut into n pieces hashed on n threads and
 *                                          the pieces' CRCs combined (pt_crc32_combine)
 *   pt_crc32_combine(crc1, crc2, len2)    the CRC of A then B from the CRC of A, the CRC of B and B's length
 *
 * How (the arithmetic is in docs/decisions/0028-fused-statistics.md, "CRC32"): a CRC is the message, read as a
 * polynomial over GF(2), times x^32 modulo P. 16 bytes loaded into a 128-bit register are a polynomial of degree
 * < 128 (bit i of the register is the coefficient of x^(127-i): the reflected order). To skip such a block R
 * forward over D bits of later data, R * x^D mod P is formed from R's two 64-bit halves and two constants,
 * x^(D+63) mod P and x^(D-1) mod P (the -1: a carry-less product of two reflected 64-bit values comes out one
 * place shifted), by two carry-less multiplications; the result (degree < 97) is XORed into the block D bits on.
 * Several blocks are carried side by side (4 x 16, 4 x 32 or 4 x 64 bytes by vector width), folded into one at the
 * end; the last 128 bits and the tail of fewer than 16 bytes go through the byte tables (slicing by 8), which
 * also serve short buffers and CPUs without a carry-less multiply. The constants are computed at first use from
 * P alone (crc_init), nothing is copied from a table. No framework headers; the caller passes a raw pointer.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pt_common.h"

#ifndef POLY /* (the tests build one with a wrong polynomial, to see the self-check refuse it) */
#define POLY 0xEDB88320u /* P = x^32 + x^26 + ... + 1, reflected (bit 31 - i is the coefficient of x^i) */
#endif

static uint32_t crc_table[8][256];
static uint32_t x2n[64]; /* x^(2^k) mod P, reflected */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* a * b mod P, both reflected (bit 31 is the coefficient of x^0). */
static uint32_t mulmod(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i)) r ^= b;
        b = (b & 1u) ? (b >> 1) ^ POLY : b >> 1; /* b *= x */
    }
    return r;
}

/* x^n mod P, reflected. */
static uint32_t xpow(uint64_t n) {
    uint32_t r = 0x80000000u; /* 1 */
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1u) r = mulmod(r, x2n[k & 63]);
    return r;
}

/* The constant that folds a 64-bit half over n bits: x^n mod P reflected into the top of a 64-bit word (bit
 * 63 - j is the coefficient of x^j), the form in which the carry-less product lines up. */
static uint64_t fold_constant(uint64_t n) {
    return (uint64_t)xpow(n) << 32;
}

/* Fold distances in bits: 128 (one 16-byte block), 256 (a 32-byte vector), 512 (4 blocks or a 64-byte vector),
 * 1024 (4 32-byte vectors), 2048 (4 64-byte vectors). */
static uint64_t k128[2], k256[2], k512[2], k1024[2], k2048[2];

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++) c = (c & 1u) ? (c >> 1) ^ POLY : c >> 1;
        crc_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xffu];
    x2n[0] = 0x40000000u; /* x */
    for (int k = 1; k < 64; k++) x2n[k] = mulmod(x2n[k - 1], x2n[k - 1]);
    /* [0] multiplies the low half of a block (the higher powers of x), [1] the high half */
    k128[0] = fold_constant(128 + 63), k128[1] = fold_constant(128 - 1);
    k256[0] = fold_constant(256 + 63), k256[1] = fold_constant(256 - 1);
    k512[0] = fold_constant(512 + 63), k512[1] = fold_constant(512 - 1);
    k1024[0] = fold_constant(1024 + 63), k1024[1] = fold_constant(1024 - 1);
    k2048[0] = fold_constant(2048 + 63), k2048[1] = fold_constant(2048 - 1);
}

/* The raw register update (no complements) by tables, eight bytes a step. */
static uint32_t crc_tables(uint32_t reg, const unsigned char *p, size_t len) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= reg;
        reg = crc_table[7][w & 0xffu] ^ crc_table[6][(w >> 8) & 0xffu] ^ crc_table[5][(w >> 16) & 0xffu] ^
              crc_table[4][(w >> 24) & 0xffu] ^ crc_table[3][(w >> 32) & 0xffu] ^ crc_table[2][(w >> 40) & 0xffu] ^
              crc_table[1][(w >> 48) & 0xffu] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
#endif
    while (len--) reg = (reg >> 8) ^ crc_table[0][(reg ^ *p++) & 0xffu];
    return reg;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(PT_CRC_NO_CLMUL) /* (the tests build it without) */
#include <immintrin.h>
#define PT_CRC_X86 1

/* R * x^D mod P for one 128-bit block, k = {x^(D+63), x^(D-1)} as fold_constant gives them. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold16(__m128i r, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(r, k, 0x00), _mm_clmulepi64_si128(r, k, 0x11));
}

/* The register after the 128-bit block r (itself the message so far, the complemented CRC XORed into its
 * start) and then the tail. */
static uint32_t finish_block(const void *block, const unsigned char *tail, size_t len) {
    return crc_tables(crc_tables(0, (const unsigned char *)block, 16), tail, len);
}

/* len >= 64 */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_pclmul(uint32_t reg, const unsigned char *p,
                                                                    size_t len) {
    const __m128i k4 = _mm_set_epi64x((long long)k512[1], (long long)k512[0]);
    const __m128i k1 = _mm_set_epi64x((long long)k128[1], (long long)k128[0]);
    __m128i a0 = _mm_loadu_si128((const __m128i *)p), a1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i a2 = _mm_loadu_si128((const __m128i *)(p + 32)), a3 = _mm_loadu_si128((const __m128i *)(p + 48));
    a0 = _mm_xor_si128(a0, _mm_cvtsi32_si128((int)reg));
    p += 64;
    len -= 64;
    while (len >= 64) {
        a0 = _mm_xor_si128(fold16(a0, k4), _mm_loadu_si128((const __m128i *)p));
        a1 = _mm_xor_si128(fold16(a1, k4), _mm_loadu_si128((const __m128i *)(p + 16)));
        a2 = _mm_xor_si128(fold16(a2, k4), _mm_loadu_si128((const __m128i *)(p + 32)));
        a3 = _mm_xor_si128(fold16(a3, k4), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    __m128i a = _mm_xor_si128(fold16(a0, k1), a1);
    a = _mm_xor_si128(fold16(a, k1), a2);
    a = _mm_xor_si128(fold16(a, k1), a3);
    while (len >= 16) {
        a = _mm_xor_si128(fold16(a, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    unsigned char block[16];
    _mm_storeu_si128((__m128i *)block, a);
    return finish_block(block, p, len);
}

#define PT_AVX2 "avx2,vpclmulqdq,pclmul,sse4.1"

__attribute__((target(PT_AVX2))) static inline __m256i fold32(__m256i r, __m256i k) {
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(r, k, 0x00), _mm256_clmulepi64_epi128(r, k, 0x11));
}

/* len >= 128 */
__attribute__((target(PT_AVX2))) static uint32_t crc_vpclmul256(uint32_t reg, const unsigned char *p, size_t len) {
    const __m256i k8 = _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)k1024[1], (long long)k1024[0]));
    const __m256i k2 = _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)k256[1], (long long)k256[0]));
    const __m128i k1 = _mm_set_epi64x((long long)k128[1], (long long)k128[0]);
    __m256i y0 = _mm256_loadu_si256((const __m256i *)p), y1 = _mm256_loadu_si256((const __m256i *)(p + 32));
    __m256i y2 = _mm256_loadu_si256((const __m256i *)(p + 64)), y3 = _mm256_loadu_si256((const __m256i *)(p + 96));
    y0 = _mm256_xor_si256(y0, _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, (int)reg));
    p += 128;
    len -= 128;
    while (len >= 128) {
        y0 = _mm256_xor_si256(fold32(y0, k8), _mm256_loadu_si256((const __m256i *)p));
        y1 = _mm256_xor_si256(fold32(y1, k8), _mm256_loadu_si256((const __m256i *)(p + 32)));
        y2 = _mm256_xor_si256(fold32(y2, k8), _mm256_loadu_si256((const __m256i *)(p + 64)));
        y3 = _mm256_xor_si256(fold32(y3, k8), _mm256_loadu_si256((const __m256i *)(p + 96)));
        p += 128;
        len -= 128;
    }
    __m256i y = _mm256_xor_si256(fold32(y0, k2), y1);
    y = _mm256_xor_si256(fold32(y, k2), y2);
    y = _mm256_xor_si256(fold32(y, k2), y3);
    while (len >= 32) {
        y = _mm256_xor_si256(fold32(y, k2), _mm256_loadu_si256((const __m256i *)p));
        p += 32;
        len -= 32;
    }
    __m128i a = _mm_xor_si128(fold16(_mm256_castsi256_si128(y), k1), _mm256_extracti128_si256(y, 1));
    while (len >= 16) {
        a = _mm_xor_si128(fold16(a, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    unsigned char block[16];
    _mm_storeu_si128((__m128i *)block, a);
    return finish_block(block, p, len);
}

#define PT_AVX512 "avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.1"

__attribute__((target(PT_AVX512))) static inline __m512i fold64(__m512i r, __m512i k) {
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(r, k, 0x00), _mm512_clmulepi64_epi128(r, k, 0x11));
}

/* len >= 256 */
__attribute__((target(PT_AVX512))) static uint32_t crc_vpclmul(uint32_t reg, const unsigned char *p, size_t len) {
    const __m512i k16 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k2048[1], (long long)k2048[0]));
    const __m512i k4 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k512[1], (long long)k512[0]));
    const __m128i k1 = _mm_set_epi64x((long long)k128[1], (long long)k128[0]);
    __m512i z0 = _mm512_loadu_si512((const void *)p), z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128)), z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)reg));
    p += 256;
    len -= 256;
    while (len >= 256) {
        z0 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z0, k16, 0x00),
                                       _mm512_clmulepi64_epi128(z0, k16, 0x11),
                                       _mm512_loadu_si512((const void *)p), 0x96);
        z1 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z1, k16, 0x00),
                                       _mm512_clmulepi64_epi128(z1, k16, 0x11),
                                       _mm512_loadu_si512((const void *)(p + 64)), 0x96);
        z2 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z2, k16, 0x00),
                                       _mm512_clmulepi64_epi128(z2, k16, 0x11),
                                       _mm512_loadu_si512((const void *)(p + 128)), 0x96);
        z3 = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z3, k16, 0x00),
                                       _mm512_clmulepi64_epi128(z3, k16, 0x11),
                                       _mm512_loadu_si512((const void *)(p + 192)), 0x96);
        p += 256;
        len -= 256;
    }
    __m512i z = _mm512_xor_si512(fold64(z0, k4), z1);
    z = _mm512_xor_si512(fold64(z, k4), z2);
    z = _mm512_xor_si512(fold64(z, k4), z3);
    while (len >= 64) {
        z = _mm512_xor_si512(fold64(z, k4), _mm512_loadu_si512((const void *)p));
        p += 64;
        len -= 64;
    }
    __m128i a = _mm512_extracti32x4_epi32(z, 0);
    a = _mm_xor_si128(fold16(a, k1), _mm512_extracti32x4_epi32(z, 1));
    a = _mm_xor_si128(fold16(a, k1), _mm512_extracti32x4_epi32(z, 2));
    a = _mm_xor_si128(fold16(a, k1), _mm512_extracti32x4_epi32(z, 3));
    while (len >= 16) {
        a = _mm_xor_si128(fold16(a, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    unsigned char block[16];
    _mm_storeu_si128((__m128i *)block, a);
    return finish_block(block, p, len);
}

static int best_method(void) {
    static int best = -1;
    if (best < 0) {
        __builtin_cpu_init();
        int m = 0;
        if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) m = 1;
        if (m && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq")) m = 2;
        if (m == 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512bw"))
            m = 3;
        best = m;
    }
    return best;
}
#else
static int best_method(void) { return 0; }
#endif

uint32_t pt_crc32_with(uint32_t crc, const void *buf, size_t len, int method) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t reg = ~crc;
    int best = best_method();
    if (method < 0 || method > best) method = best;
#ifdef PT_CRC_X86
    if (method == 3 && len >= 256) return ~crc_vpclmul(reg, p, len);
    if (method >= 2 && len >= 128) return ~crc_vpclmul256(reg, p, len);
    if (method >= 1 && len >= 64) return ~crc_pclmul(reg, p, len);
#endif
    return ~crc_tables(reg, p, len);
}

uint32_t pt_crc32(uint32_t crc, const void *buf, size_t len) { return pt_crc32_with(crc, buf, len, -1); }

int pt_crc32_method(void) { return best_method(); }

uint32_t pt_crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    pthread_once(&crc_once, crc_init);
    return mulmod(crc1, xpow(8 * len2)) ^ crc2;
}

typedef struct {
    const unsigned char *p;
    size_t len;
    uint32_t crc;
} crc_job_t;

static void *crc_job(void *arg) {
    crc_job_t *j = (crc_job_t *)arg;
    j->crc = pt_crc32(j->crc, j->p, j->len);
    return NULL;
}

#define CRC_MIN_PIECE (256u << 10) /* below this many bytes a piece, a thread costs more than it saves */

uint32_t pt_crc32_threads(uint32_t crc, const void *buf, size_t len, int nthreads) {
    size_t n = nthreads > 1 ? (size_t)nthreads : 1;
    if (n > PT_MAX_THREADS) n = PT_MAX_THREADS;
    if (n > len / CRC_MIN_PIECE) n = len / CRC_MIN_PIECE;
    if (n < 2) return pt_crc32(crc, buf, len);
    crc_job_t jobs[PT_MAX_THREADS];
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t t = 0; t < n; t++) {
        size_t a = len * t / n, b = len * (t + 1) / n;
        jobs[t].p = p + a;
        jobs[t].len = b - a;
        jobs[t].crc = t ? 0u : crc;
    }
    pt_run_jobs(crc_job, jobs, sizeof jobs[0], n);
    uint32_t out = jobs[0].crc;
    for (size_t t = 1; t < n; t++) out = pt_crc32_combine(out, jobs[t].crc, jobs[t].len);
    return out;
}
