/*
 * qlinear compiled kernels: fused single-pass QuantizeLinear / DequantizeLinear and calibration
 * reductions. Plain C11, no NumPy headers; loaded through ctypes (qlinear/core/native.py), which
 * releases the GIL so Python threads can run disjoint element ranges in parallel.
 *
 * Semantics (spec: onnx-quantizelinear-25.txt; notes/onnx-ort.md section 3.3):
 *   Q : y = saturate(rint(x / s) + zp)   float32 true division (never a reciprocal), round half to
 *                                        even (rintf under the default rounding mode), +zp, clamp
 *                                        to [lo, hi]; NaN -> lo (the type minimum, as ONNX Runtime).
 *   DQ: y = (float)(x - zp) * s          exact integer difference, one float32 multiply.
 * Compile with -ffp-contract=off and without -ffast-math: every operation is IEEE binary32.
 *
 * Layout (see granularity.py): the input is a sequence of rows of `row_len` elements; row r uses the
 * scale block at offset  off(r) = (r / D) * so + ((r % D) / B) * sd  and, inside the row,
 *   kind 0: one scale for the whole row           s[off]
 *   kind 1: one scale per element                 s[off + i]
 *   kind 2: one scale per run of kb elements      s[off + i / kb]
 * Callers pass an element range [e0, e1) so that threads can split any granularity.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(QL_X86_CLONES) && defined(__GNUC__) && !defined(__clang__)
#define QL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QL_CLONES
#endif
#define QL_INLINE static inline __attribute__((always_inline))
#define QL_EXPORT __attribute__((visibility("default")))

typedef struct {
    int64_t row_len, D, B, so, sd, kb;
    int64_t kind;
} ql_layout;

QL_INLINE int64_t ql_off(const ql_layout* L, int64_t r) {
    return (r / L->D) * L->so + ((r % L->D) / L->B) * L->sd;
}

/* ------------------------------------------------------------------------------------------ */
/* Quantize                                                                                   */
/* ------------------------------------------------------------------------------------------ */

QL_INLINE float ql_q1(float x, float s, float z, float lo, float hi) {
    float v = __builtin_rintf(x / s) + z; /* |rint| >= 2^24 saturates either way */
    v = v > lo ? v : lo;                  /* NaN -> lo */
    v = v < hi ? v : hi;
    return v;
}

#define QL_STORE_PLAIN(T, q) ((T)(q))
#define QL_STORE_CODE4(T, q) ((T)((q) & 0xF))
#define QL_STORE_CODE2(T, q) ((T)((q) & 0x3))

#define QL_DEF_QRUN(NAME, T, STORE)                                                                     \
    QL_INLINE void NAME##_s(const float* restrict x, T* restrict y, int64_t n, float s, float z,       \
                            float lo, float hi) {                                                      \
        for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s, z, lo, hi));           \
    }                                                                                                  \
    QL_INLINE void NAME##_v(const float* restrict x, T* restrict y, int64_t n, const float* restrict s, \
                            const int32_t* restrict z, float lo, float hi) {                           \
        if (z)                                                                                         \
            for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s[i], (float)z[i], lo, hi)); \
        else                                                                                           \
            for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s[i], 0.0f, lo, hi));  \
    }                                                                                                  \
    QL_INLINE void NAME##_drive(const float* x, T* y, int64_t ybias, const float* s, const int32_t* z,  \
                                int64_t e0, int64_t e1, const ql_layout* L, float lo, float hi) {      \
        int64_t e = e0;                                                                                \
        while (e < e1) {                                                                               \
            int64_t r = e / L->row_len, i0 = e - r * L->row_len, i1 = L->row_len;                      \
            if (i1 - i0 > e1 - e) i1 = i0 + (e1 - e);                                                  \
            int64_t off = ql_off(L, r);                                                                \
            if (L->kind == 0) {                                                                        \
                NAME##_s(x + e, y + (e - ybias), i1 - i0, s[off], z ? (float)z[off] : 0.0f, lo, hi);   \
            } else if (L->kind == 1) {                                                                 \
                NAME##_v(x + e, y + (e - ybias), i1 - i0, s + off + i0, z ? z + off + i0 : NULL, lo, hi); \
            } else {                                                                                   \
                int64_t i = i0;                                                                        \
                while (i < i1) {                                                                       \
                    int64_t b = i / L->kb, j1 = (b + 1) * L->kb;                                       \
                    if (j1 > i1) j1 = i1;                                                              \
                    int64_t p = e + (i - i0);                                                          \
                    NAME##_s(x + p, y + (p - ybias), j1 - i, s[off + b], z ? (float)z[off + b] : 0.0f, lo, hi); \
                    i = j1;                                                                            \
                }                                                                                      \
            }                                                                                          \
            e += i1 - i0;                                                                              \
        }                                                                                              \
    }

QL_DEF_QRUN(q_u8, uint8_t, QL_STORE_PLAIN)
QL_DEF_QRUN(q_i8, int8_t, QL_STORE_PLAIN)
QL_DEF_QRUN(q_u16, uint16_t, QL_STORE_PLAIN)
QL_DEF_QRUN(q_i16, int16_t, QL_STORE_PLAIN)
QL_DEF_QRUN(q_c4, uint8_t, QL_STORE_CODE4)
QL_DEF_QRUN(q_c2, uint8_t, QL_STORE_CODE2)

/* Pack bit codes tmp[0 .. c1-c0) (element indices c0..c1) into y: `bits` per element, first element in
 * the low bits. Bytes shared with a neighbouring range are read-modify-written; callers split threads
 * on byte boundaries so no byte is shared between threads. */
QL_INLINE void ql_pack(uint8_t* restrict y, const uint8_t* restrict t, int64_t c0, int64_t c1, int bits) {
    const int64_t epb = 8 / bits;
    const uint8_t mask = (uint8_t)((1u << bits) - 1u);
    int64_t g = c0;
    while (g < c1 && (g % epb)) {
        int sh = (int)(g % epb) * bits;
        y[g / epb] = (uint8_t)((y[g / epb] & ~(mask << sh)) | (t[g - c0] << sh));
        g++;
    }
    int64_t full = (c1 - g) / epb;
    uint8_t* yb = y + g / epb;
    const uint8_t* tb = t + (g - c0);
    if (bits == 4) {
        for (int64_t k = 0; k < full; k++) yb[k] = (uint8_t)(tb[2 * k] | (tb[2 * k + 1] << 4));
    } else {
        for (int64_t k = 0; k < full; k++)
            yb[k] = (uint8_t)(tb[4 * k] | (tb[4 * k + 1] << 2) | (tb[4 * k + 2] << 4) | (tb[4 * k + 3] << 6));
    }
    g += full * epb;
    while (g < c1) {
        int sh = (int)(g % epb) * bits;
        y[g / epb] = (uint8_t)((y[g / epb] & ~(mask << sh)) | (t[g - c0] << sh));
        g++;
    }
}

#define QL_CHUNK 4096

/* otype: 0 u8, 1 i8, 2 u16, 3 i16, 4 4-bit code, 5 2-bit code, 6 packed 4-bit, 7 packed 2-bit */
QL_EXPORT QL_CLONES int ql_quantize_f32(const float* x, void* y, int otype, const float* s, const int32_t* z,
                                        int64_t e0, int64_t e1, int64_t row_len, int64_t D, int64_t B,
                                        int64_t so, int64_t sd, int64_t kind, int64_t kb, float lo, float hi) {
    ql_layout L = {row_len, D, B, so, sd, kb, kind};
    switch (otype) {
        case 0: q_u8_drive(x, (uint8_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 1: q_i8_drive(x, (int8_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 2: q_u16_drive(x, (uint16_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 3: q_i16_drive(x, (int16_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 4: q_c4_drive(x, (uint8_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 5: q_c2_drive(x, (uint8_t*)y, 0, s, z, e0, e1, &L, lo, hi); return 0;
        case 6:
        case 7: {
            uint8_t tmp[QL_CHUNK];
            int bits = otype == 6 ? 4 : 2;
            for (int64_t c0 = e0; c0 < e1; c0 += QL_CHUNK) {
                int64_t c1 = c0 + QL_CHUNK < e1 ? c0 + QL_CHUNK : e1;
                if (bits == 4) q_c4_drive(x, tmp, c0, s, z, c0, c1, &L, lo, hi);
                else q_c2_drive(x, tmp, c0, s, z, c0, c1, &L, lo, hi);
                ql_pack((uint8_t*)y, tmp, c0, c1, bits);
            }
            return 0;
        }
        default: return -1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Dequantize                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define QL_DEC_PLAIN(v) ((int32_t)(v))
#define QL_DEC_U4(v) ((int32_t)((v)&0xF))
#define QL_DEC_I4(v) ((int32_t)((int8_t)((uint8_t)(v) << 4) >> 4))
#define QL_DEC_U2(v) ((int32_t)((v)&0x3))
#define QL_DEC_I2(v) ((int32_t)((int8_t)((uint8_t)(v) << 6) >> 6))

/* Streaming-store (non-temporal) variants of the 8/16-bit dequantize runs for large outputs: same
 * arithmetic (exact int32 difference, cvtdq2ps is exact below 2^24, one IEEE multiply), but the float32
 * output bypasses the cache, which saves the read-for-ownership traffic (~20% at 2^26 elements). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QL_HAVE_NT 1
#define QL_LOAD8U(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(p)))
#define QL_LOAD8S(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(p)))
#define QL_LOAD16U(p) _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(p)))
#define QL_LOAD16S(p) _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i*)(p)))
#define QL_DEF_NT(NAME, T, LOAD)                                                                          \
    __attribute__((target("avx2"))) static void NAME##_nt_s(const T* x, float* y, int64_t n, float s, int32_t z) { \
        int64_t i = 0;                                                                                   \
        for (; i < n && ((uintptr_t)(y + i) & 31); i++) y[i] = (float)((int32_t)x[i] - z) * s;            \
        const __m256 vs = _mm256_set1_ps(s);                                                             \
        const __m256i vz = _mm256_set1_epi32(z);                                                         \
        for (; i + 8 <= n; i += 8)                                                                       \
            _mm256_stream_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(LOAD(x + i), vz)), vs)); \
        for (; i < n; i++) y[i] = (float)((int32_t)x[i] - z) * s;                                         \
    }                                                                                                    \
    __attribute__((target("avx2"))) static void NAME##_nt_v(const T* x, float* y, int64_t n, const float* s, \
                                                            const int32_t* z) {                          \
        int64_t i = 0;                                                                                   \
        for (; i < n && ((uintptr_t)(y + i) & 31); i++) y[i] = (float)((int32_t)x[i] - (z ? z[i] : 0)) * s[i]; \
        for (; i + 8 <= n; i += 8) {                                                                     \
            __m256i d = LOAD(x + i);                                                                     \
            if (z) d = _mm256_sub_epi32(d, _mm256_loadu_si256((const __m256i*)(z + i)));                   \
            _mm256_stream_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_loadu_ps(s + i)));         \
        }                                                                                                \
        for (; i < n; i++) y[i] = (float)((int32_t)x[i] - (z ? z[i] : 0)) * s[i];                          \
    }
QL_DEF_NT(dq_u8, uint8_t, QL_LOAD8U)
QL_DEF_NT(dq_i8, int8_t, QL_LOAD8S)
QL_DEF_NT(dq_u16, uint16_t, QL_LOAD16U)
QL_DEF_NT(dq_i16, int16_t, QL_LOAD16S)
#define QL_NT_CALL_S(NAME, ...) NAME##_nt_s(__VA_ARGS__)
#define QL_NT_CALL_V(NAME, ...) NAME##_nt_v(__VA_ARGS__)
#else
#define QL_HAVE_NT 0
#endif

#define QL_DEF_DQRUN(NAME, T, DEC, NTS_T, NTV_T)                                                                     \
    QL_INLINE void NAME##_s(const T* restrict x, float* restrict y, int64_t n, float s, int32_t z) {     \
        for (int64_t i = 0; i < n; i++) y[i] = (float)(DEC(x[i]) - z) * s;                               \
    }                                                                                                   \
    QL_INLINE void NAME##_v(const T* restrict x, float* restrict y, int64_t n, const float* restrict s,  \
                            const int32_t* restrict z) {                                                \
        if (z)                                                                                          \
            for (int64_t i = 0; i < n; i++) y[i] = (float)(DEC(x[i]) - z[i]) * s[i];                     \
        else                                                                                            \
            for (int64_t i = 0; i < n; i++) y[i] = (float)DEC(x[i]) * s[i];                              \
    }                                                                                                   \
    QL_INLINE void NAME##_drive(const T* x, int64_t xbias, float* y, const float* s, const int32_t* z,   \
                                int64_t e0, int64_t e1, const ql_layout* L, NTS_T nts, NTV_T ntv) {     \
        int64_t e = e0;                                                                                 \
        while (e < e1) {                                                                                \
            int64_t r = e / L->row_len, i0 = e - r * L->row_len, i1 = L->row_len;                       \
            if (i1 - i0 > e1 - e) i1 = i0 + (e1 - e);                                                   \
            int64_t off = ql_off(L, r);                                                                 \
            if (L->kind == 0) {                                                                         \
                if (nts) nts(x + (e - xbias), y + e, i1 - i0, s[off], z ? z[off] : 0);                  \
                else NAME##_s(x + (e - xbias), y + e, i1 - i0, s[off], z ? z[off] : 0);                 \
            } else if (L->kind == 1) {                                                                  \
                if (ntv) ntv(x + (e - xbias), y + e, i1 - i0, s + off + i0, z ? z + off + i0 : NULL);   \
                else NAME##_v(x + (e - xbias), y + e, i1 - i0, s + off + i0, z ? z + off + i0 : NULL);  \
            } else {                                                                                    \
                int64_t i = i0;                                                                         \
                while (i < i1) {                                                                        \
                    int64_t b = i / L->kb, j1 = (b + 1) * L->kb;                                        \
                    if (j1 > i1) j1 = i1;                                                               \
                    int64_t p = e + (i - i0);                                                           \
                    NAME##_s(x + (p - xbias), y + p, j1 - i, s[off + b], z ? z[off + b] : 0);           \
                    i = j1;                                                                             \
                }                                                                                       \
            }                                                                                           \
            e += i1 - i0;                                                                               \
        }                                                                                               \
    }

typedef void (*ql_nts_u8)(const uint8_t*, float*, int64_t, float, int32_t);
typedef void (*ql_ntv_u8)(const uint8_t*, float*, int64_t, const float*, const int32_t*);
typedef void (*ql_nts_i8)(const int8_t*, float*, int64_t, float, int32_t);
typedef void (*ql_ntv_i8)(const int8_t*, float*, int64_t, const float*, const int32_t*);
typedef void (*ql_nts_u16)(const uint16_t*, float*, int64_t, float, int32_t);
typedef void (*ql_ntv_u16)(const uint16_t*, float*, int64_t, const float*, const int32_t*);
typedef void (*ql_nts_i16)(const int16_t*, float*, int64_t, float, int32_t);
typedef void (*ql_ntv_i16)(const int16_t*, float*, int64_t, const float*, const int32_t*);

QL_DEF_DQRUN(dq_u8, uint8_t, QL_DEC_PLAIN, ql_nts_u8, ql_ntv_u8)
QL_DEF_DQRUN(dq_i8, int8_t, QL_DEC_PLAIN, ql_nts_i8, ql_ntv_i8)
QL_DEF_DQRUN(dq_u16, uint16_t, QL_DEC_PLAIN, ql_nts_u16, ql_ntv_u16)
QL_DEF_DQRUN(dq_i16, int16_t, QL_DEC_PLAIN, ql_nts_i16, ql_ntv_i16)
QL_DEF_DQRUN(dq_u4, uint8_t, QL_DEC_U4, ql_nts_u8, ql_ntv_u8)
QL_DEF_DQRUN(dq_i4, uint8_t, QL_DEC_I4, ql_nts_u8, ql_ntv_u8)
QL_DEF_DQRUN(dq_u2, uint8_t, QL_DEC_U2, ql_nts_u8, ql_ntv_u8)
QL_DEF_DQRUN(dq_i2, uint8_t, QL_DEC_I2, ql_nts_u8, ql_ntv_u8)

/* Unpack packed elements c0..c1 into bit codes tmp[0 .. c1-c0). `bits` is 4 or 2 (shifts, no division). */
QL_INLINE void ql_unpack(const uint8_t* restrict x, uint8_t* restrict t, int64_t c0, int64_t c1, int bits) {
    int64_t g = c0;
    if (bits == 4) {
        if (g < c1 && (g & 1)) { t[0] = (uint8_t)(x[g >> 1] >> 4); g++; }
        int64_t pairs = (c1 - g) >> 1;
        const uint8_t* xb = x + (g >> 1);
        uint8_t* tb = t + (g - c0);
        for (int64_t k = 0; k < pairs; k++) {
            tb[2 * k] = (uint8_t)(xb[k] & 0xF);
            tb[2 * k + 1] = (uint8_t)(xb[k] >> 4);
        }
        g += pairs * 2;
        if (g < c1) t[g - c0] = (uint8_t)(x[g >> 1] & 0xF);
    } else {
        for (; g < c1; g++) t[g - c0] = (uint8_t)((x[g >> 2] >> ((g & 3) * 2)) & 0x3);
    }
}

/* itype: 0 u8, 1 i8, 2 u16, 3 i16, 4 u4 code, 5 i4 code, 6 u2 code, 7 i2 code,
 *        8 packed u4, 9 packed i4, 10 packed u2, 11 packed i2
 * stream: 1 = use non-temporal stores for the float32 output when the CPU has AVX2 (large outputs). */
QL_EXPORT QL_CLONES int ql_dequantize_f32(const void* x, int itype, float* y, const float* s, const int32_t* z,
                                          int64_t e0, int64_t e1, int64_t row_len, int64_t D, int64_t B,
                                          int64_t so, int64_t sd, int64_t kind, int64_t kb, int stream) {
    ql_layout L = {row_len, D, B, so, sd, kb, kind};
    int nt = 0;
#if QL_HAVE_NT
    nt = stream && __builtin_cpu_supports("avx2");
#define QL_NT(NAME) nt ? NAME##_nt_s : NULL, nt ? NAME##_nt_v : NULL
#else
    (void)stream;
#define QL_NT(NAME) NULL, NULL
#endif
    switch (itype) {
        case 0: dq_u8_drive((const uint8_t*)x, 0, y, s, z, e0, e1, &L, QL_NT(dq_u8)); break;
        case 1: dq_i8_drive((const int8_t*)x, 0, y, s, z, e0, e1, &L, QL_NT(dq_i8)); break;
        case 2: dq_u16_drive((const uint16_t*)x, 0, y, s, z, e0, e1, &L, QL_NT(dq_u16)); break;
        case 3: dq_i16_drive((const int16_t*)x, 0, y, s, z, e0, e1, &L, QL_NT(dq_i16)); break;
        case 4: dq_u4_drive((const uint8_t*)x, 0, y, s, z, e0, e1, &L, NULL, NULL); break;
        case 5: dq_i4_drive((const uint8_t*)x, 0, y, s, z, e0, e1, &L, NULL, NULL); break;
        case 6: dq_u2_drive((const uint8_t*)x, 0, y, s, z, e0, e1, &L, NULL, NULL); break;
        case 7: dq_i2_drive((const uint8_t*)x, 0, y, s, z, e0, e1, &L, NULL, NULL); break;
        case 8:
        case 9:
        case 10:
        case 11: {
            /* unpack a chunk to decoded 8-bit values, then run the 8-bit path (streaming if asked) */
            uint8_t tmp[QL_CHUNK];
            int bits = itype <= 9 ? 4 : 2;
            int sgn = itype == 9 || itype == 11;
            for (int64_t c0 = e0; c0 < e1; c0 += QL_CHUNK) {
                int64_t c1 = c0 + QL_CHUNK < e1 ? c0 + QL_CHUNK : e1;
                ql_unpack((const uint8_t*)x, tmp, c0, c1, bits);
                if (sgn) {
                    int sh = 8 - bits;
                    for (int64_t k = 0; k < c1 - c0; k++) tmp[k] = (uint8_t)((int8_t)(tmp[k] << sh) >> sh);
                    dq_i8_drive((const int8_t*)tmp, c0, y, s, z, c0, c1, &L, QL_NT(dq_i8));
                } else {
                    dq_u8_drive(tmp, c0, y, s, z, c0, c1, &L, QL_NT(dq_u8));
                }
            }
            break;
        }
        default: return -1;
    }
#if QL_HAVE_NT
    if (nt) _mm_sfence(); /* make the streamed stores globally visible before returning */
#endif
    return 0;
#undef QL_NT
}

/* ------------------------------------------------------------------------------------------ */
/* Module stub: the library is loaded with ctypes; this only makes the file a valid extension. */
/* ------------------------------------------------------------------------------------------ */

/* ---------------------------------------------------------------------------------------------
 * Calibration histograms (qlinear.calibration.histogram): group g of x[G, n] counts floor(x * mult[g]) + half,
 * clamped to [0, 2*half), into counts[g, 2*half]; non-finite values are skipped. mult[g] is a power of two, so
 * the product is exact in double and the bin is exactly the dyadic one of the NumPy path.
 * ------------------------------------------------------------------------------------------- */
QL_EXPORT int ql_hist_groups_f32(const float* x, int64_t G, int64_t n, const double* mult, int64_t half,
                                 int64_t* counts) {
    const int64_t nb = 2 * half;
    for (int64_t g = 0; g < G; ++g) {
        const float* xg = x + g * n;
        int64_t* c = counts + g * nb;
        const double m = mult[g];
        for (int64_t i = 0; i < n; ++i) {
            const float v = xg[i];
            if (!isfinite(v)) continue;
            const double d = (double)v * m;                  /* |d| <= half: the level covers max|x| */
            int64_t t = (int64_t)d;                           /* truncation; floor without a libm call */
            t -= (double)t > d;
            int64_t idx = t + half;
            idx = idx < 0 ? 0 : (idx >= nb ? nb - 1 : idx);
            c[idx]++;
        }
    }
    return 0;
}

static struct PyModuleDef ql_module = {PyModuleDef_HEAD_INIT, "_native", "qlinear compiled kernels (use via ctypes)",
                                       -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&ql_module); }
