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
 *
 * SIMD (issue 24): quantize and dequantize have three entries, ql_quantize_{base,avx2,avx512} (same for
 * dequantize), built from the same macros: baseline C for any CPU, target("avx2,fma") and
 * target("avx512f,avx512bw,avx512dq,avx512vl") with explicit intrinsics for the 8/16-bit runs. They use the
 * same IEEE operations in the same order (vdivps, vrndscaleps/vroundps in the current rounding mode = rintf,
 * +z, vmaxps(v, lo) = v > lo ? v : lo so NaN -> lo, vminps, then an exact conversion of the integral value and
 * a truncating narrow), so every entry gives the bits of the baseline. The exported functions pick the entry
 * chosen once from __builtin_cpu_supports; ql_simd_set lowers it (QLINEAR_SIMD, tests).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(QL_X86_CLONES) && defined(__GNUC__) && defined(__x86_64__)
#define QL_X86 1
#include <immintrin.h>
#else
#define QL_X86 0
#endif
#define QL_INLINE static inline __attribute__((always_inline))
#define QL_EXPORT __attribute__((visibility("default")))
#define QL_TGT_base
#define QL_TGT_avx2 __attribute__((target("avx2,fma")))
#define QL_TGT_avx512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")))
#define QL_A2 static inline __attribute__((always_inline)) QL_TGT_avx2
#define QL_A512 static inline __attribute__((always_inline)) QL_TGT_avx512

typedef struct {
    int64_t row_len, D, B, so, sd, kb;
    int64_t kind;
} ql_layout;

QL_INLINE int64_t ql_off(const ql_layout* L, int64_t r) {
    return (r / L->D) * L->so + ((r % L->D) / L->B) * L->sd;
}

/* ------------------------------------------------------------------------------------------ */
/* Runtime dispatch: 0 = baseline x86-64 / portable C, 1 = AVX2+FMA, 2 = AVX-512 F/BW/DQ/VL.    */
/* The CPU is asked once (__builtin_cpu_supports also checks that the OS saves the registers);  */
/* ql_simd_set may lower the level (QLINEAR_SIMD, tests), never raise it above the CPU's.       */
/* ------------------------------------------------------------------------------------------ */

static int ql_cpu = -1, ql_level = -1;

static int ql_cpu_level(void) {
    if (ql_cpu < 0) {
        int lvl = 0;
#if QL_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lvl = 1;
        if (lvl && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
            lvl = 2;
#endif
        ql_cpu = lvl;
    }
    return ql_cpu;
}

QL_EXPORT int ql_simd_supported(void) { return ql_cpu_level(); }

QL_EXPORT int ql_simd_get(void) {
    if (ql_level < 0) ql_level = ql_cpu_level();
    return ql_level;
}

QL_EXPORT int ql_simd_set(int level) {
    if (level < 0 || level > ql_cpu_level()) return -1;
    ql_level = level;
    return level;
}

/* quantize outputs are written with non-temporal stores when one call's range has at least this many bytes */
static int64_t ql_q_stream_min = (int64_t)1 << 22;

QL_EXPORT int64_t ql_set_quantize_stream_min(int64_t nbytes) {
    int64_t old = ql_q_stream_min;
    ql_q_stream_min = nbytes;
    return old;
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

/* 8-bit store modes: the int32 code is truncated to the byte (u8, i8), or masked to 4 / 2 bits */
enum { QL_M_U8 = 0, QL_M_I8 = 1, QL_M_C4 = 2, QL_M_C2 = 3, QL_M_U16 = 4, QL_M_I16 = 5 };

QL_INLINE int32_t ql_code(int32_t q, int mode) { return mode == QL_M_C4 ? (q & 0xF) : mode == QL_M_C2 ? (q & 0x3) : q; }

#define QL_STORE_PLAIN(T, q) ((T)(q))
#define QL_STORE_CODE4(T, q) ((T)((q) & 0xF))
#define QL_STORE_CODE2(T, q) ((T)((q) & 0x3))

/* Baseline runs (plain C; the compiler may vectorize them for the baseline ISA). Signatures shared by every
 * ISA:  S: one scale s and float zero point z for n elements;  V: one scale (and int32 zero point) per element. */
#define QL_DEF_QRUN_BASE(NAME, T, STORE)                                                                \
    QL_INLINE void NAME##_s_base(const float* restrict x, T* restrict y, int64_t n, float s, float z,    \
                                 float lo, float hi, int nt) {                                         \
        (void)nt;                                                                                      \
        for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s, z, lo, hi));           \
    }                                                                                                  \
    QL_INLINE void NAME##_v_base(const float* restrict x, T* restrict y, int64_t n, const float* restrict s, \
                                 const int32_t* restrict z, float lo, float hi, int nt) {              \
        (void)nt;                                                                                      \
        if (z)                                                                                         \
            for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s[i], (float)z[i], lo, hi)); \
        else                                                                                           \
            for (int64_t i = 0; i < n; i++) y[i] = STORE(T, (int32_t)ql_q1(x[i], s[i], 0.0f, lo, hi));  \
    }

QL_DEF_QRUN_BASE(q_u8, uint8_t, QL_STORE_PLAIN)
QL_DEF_QRUN_BASE(q_i8, int8_t, QL_STORE_PLAIN)
QL_DEF_QRUN_BASE(q_u16, uint16_t, QL_STORE_PLAIN)
QL_DEF_QRUN_BASE(q_i16, int16_t, QL_STORE_PLAIN)
QL_DEF_QRUN_BASE(q_c4, uint8_t, QL_STORE_CODE4)
QL_DEF_QRUN_BASE(q_c2, uint8_t, QL_STORE_CODE2)

#if QL_X86
/* ---- AVX-512: 16 lanes, the same IEEE operations as ql_q1 in the same order -------------------------------
 * vdivps (true division), vrndscaleps in the current rounding mode (rintf), + z, vmaxps(v, lo) = v > lo ? v : lo
 * (NaN -> lo), vminps(v, hi) = v < hi ? v : hi, then vcvtps2dq, exact on the integral, in-range value. */
QL_A512 __m512i ql_q512(__m512 x, __m512 s, __m512 z, __m512 lo, __m512 hi, int mode) {
    __m512 v = _mm512_add_ps(_mm512_roundscale_ps(_mm512_div_ps(x, s), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC), z);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    __m512i q = _mm512_cvtps_epi32(v);
    if (mode == QL_M_C4) q = _mm512_and_si512(q, _mm512_set1_epi32(0xF));
    if (mode == QL_M_C2) q = _mm512_and_si512(q, _mm512_set1_epi32(0x3));
    return q;
}

/* scale / zero point of lanes i..i+15: broadcast (sv == NULL) or loaded (masked with m) */
#define QL_S512(i, m) (sv ? _mm512_maskz_loadu_ps((m), sv + (i)) : s1)
#define QL_Z512(i, m) (sv ? (zv ? _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32((m), zv + (i))) : _mm512_setzero_ps()) : z1)
#define QL_Q512(i, m) ql_q512(_mm512_maskz_loadu_ps((m), x + (i)), QL_S512(i, m), QL_Z512(i, m), vlo, vhi, mode)

/* the first k <= 16 elements from i, masked load and store */
QL_A512 void ql_q512_part(const float* x, void* y, int64_t i, int64_t k, const float* sv, const int32_t* zv,
                          __m512 s1, __m512 z1, __m512 vlo, __m512 vhi, int mode) {
    __mmask16 m = (__mmask16)((1u << k) - 1u);
    __m512i q = QL_Q512(i, m);
    if (mode >= QL_M_U16) _mm512_mask_cvtepi32_storeu_epi16((int16_t*)y + i, m, q);
    else _mm512_mask_cvtepi32_storeu_epi8((int8_t*)y + i, m, q);
}

/* n elements to 8- or 16-bit outputs; 64 bytes of output per step; nt: streaming stores on 64-byte lines */
QL_A512 void ql_q_512(const float* x, void* y, int64_t n, const float* sv, const int32_t* zv, float s, float z,
                      float lo, float hi, int mode, int nt) {
    const __m512 s1 = _mm512_set1_ps(s), z1 = _mm512_set1_ps(z), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const int wide = mode >= QL_M_U16, esz = wide ? 2 : 1, step = 64 / esz;
    const __mmask16 all = 0xFFFF;
    int64_t i = 0;
    if (nt && (uintptr_t)y % esz) nt = 0;
    if (nt) { /* masked steps up to the first 64-byte boundary of y */
        int64_t head = (int64_t)(((64 - ((uintptr_t)y & 63)) & 63) / esz);
        if (head > n) head = n;
        for (; i < head; i += 16) ql_q512_part(x, y, i, head - i < 16 ? head - i : 16, sv, zv, s1, z1, vlo, vhi, mode);
        i = head;
    }
    if (wide) {
        const __m512i perm = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
        for (; i + step <= n; i += step) {
            __m512i a = QL_Q512(i, all), b = QL_Q512(i + 16, all);
            __m512i r = mode == QL_M_I16 ? _mm512_packs_epi32(a, b) : _mm512_packus_epi32(a, b);
            r = _mm512_permutexvar_epi64(perm, r);
            if (nt) _mm512_stream_si512((__m512i*)((int16_t*)y + i), r);
            else _mm512_storeu_si512((int16_t*)y + i, r);
        }
    } else {
        const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        for (; i + step <= n; i += step) {
            __m512i a = QL_Q512(i, all), b = QL_Q512(i + 16, all), c = QL_Q512(i + 32, all), d = QL_Q512(i + 48, all);
            __m512i ab = _mm512_packs_epi32(a, b), cd = _mm512_packs_epi32(c, d);
            __m512i r = mode == QL_M_I8 ? _mm512_packs_epi16(ab, cd) : _mm512_packus_epi16(ab, cd);
            r = _mm512_permutexvar_epi32(perm, r);
            if (nt) _mm512_stream_si512((__m512i*)((int8_t*)y + i), r);
            else _mm512_storeu_si512((int8_t*)y + i, r);
        }
    }
    for (; i + 16 <= n; i += 16) { /* short runs (blocks of 16 or 32): whole vectors without masks */
        __m512i q = QL_Q512(i, all);
        if (wide) _mm256_storeu_si256((__m256i*)((int16_t*)y + i), _mm512_cvtepi32_epi16(q));
        else _mm_storeu_si128((__m128i*)((int8_t*)y + i), _mm512_cvtepi32_epi8(q));
    }
    if (i < n) ql_q512_part(x, y, i, n - i, sv, zv, s1, z1, vlo, vhi, mode);
}
#undef QL_S512
#undef QL_Z512
#undef QL_Q512

/* ---- AVX2: 8 lanes, same operations (vroundps in the current mode) ---------------------------------------- */
QL_A2 __m256i ql_q256(__m256 x, __m256 s, __m256 z, __m256 lo, __m256 hi, int mode) {
    __m256 v = _mm256_add_ps(_mm256_round_ps(_mm256_div_ps(x, s), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC), z);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    __m256i q = _mm256_cvtps_epi32(v);
    if (mode == QL_M_C4) q = _mm256_and_si256(q, _mm256_set1_epi32(0xF));
    if (mode == QL_M_C2) q = _mm256_and_si256(q, _mm256_set1_epi32(0x3));
    return q;
}

#define QL_S256(i) (sv ? _mm256_loadu_ps(sv + (i)) : s1)
#define QL_Z256(i) (sv ? (zv ? _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i*)(zv + (i)))) : _mm256_setzero_ps()) : z1)
#define QL_Q256(i) ql_q256(_mm256_loadu_ps(x + (i)), QL_S256(i), QL_Z256(i), vlo, vhi, mode)

QL_A2 void ql_q1_store(const float* x, void* y, int64_t i, const float* sv, const int32_t* zv, float s, float z,
                       float lo, float hi, int mode) {
    int32_t q = sv ? (int32_t)ql_q1(x[i], sv[i], zv ? (float)zv[i] : 0.0f, lo, hi) : (int32_t)ql_q1(x[i], s, z, lo, hi);
    if (mode >= QL_M_U16) ((uint16_t*)y)[i] = (uint16_t)q;
    else ((uint8_t*)y)[i] = (uint8_t)ql_code(q, mode);
}

/* n elements to 8- or 16-bit outputs; 32 bytes of output per step, then 8 lanes, then single elements */
QL_A2 void ql_q_256(const float* x, void* y, int64_t n, const float* sv, const int32_t* zv, float s, float z,
                    float lo, float hi, int mode, int nt) {
    const __m256 s1 = _mm256_set1_ps(s), z1 = _mm256_set1_ps(z), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    const int wide = mode >= QL_M_U16, esz = wide ? 2 : 1, step = 32 / esz;
    int64_t i = 0;
    if (nt && (uintptr_t)y % esz) nt = 0;
    if (nt) {
        for (; i < n && ((uintptr_t)((char*)y + i * esz) & 31); i++) ql_q1_store(x, y, i, sv, zv, s, z, lo, hi, mode);
    }
    if (wide) {
        for (; i + step <= n; i += step) {
            __m256i a = QL_Q256(i), b = QL_Q256(i + 8);
            __m256i r = mode == QL_M_I16 ? _mm256_packs_epi32(a, b) : _mm256_packus_epi32(a, b);
            r = _mm256_permute4x64_epi64(r, 0xD8);
            if (nt) _mm256_stream_si256((__m256i*)((int16_t*)y + i), r);
            else _mm256_storeu_si256((__m256i*)((int16_t*)y + i), r);
        }
        for (; i + 8 <= n; i += 8) {
            __m256i a = QL_Q256(i);
            __m256i r = mode == QL_M_I16 ? _mm256_packs_epi32(a, a) : _mm256_packus_epi32(a, a);
            r = _mm256_permute4x64_epi64(r, 0xD8);
            _mm_storeu_si128((__m128i*)((int16_t*)y + i), _mm256_castsi256_si128(r));
        }
    } else {
        const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (; i + step <= n; i += step) {
            __m256i a = QL_Q256(i), b = QL_Q256(i + 8), c = QL_Q256(i + 16), d = QL_Q256(i + 24);
            __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
            __m256i r = mode == QL_M_I8 ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);
            r = _mm256_permutevar8x32_epi32(r, perm);
            if (nt) _mm256_stream_si256((__m256i*)((int8_t*)y + i), r);
            else _mm256_storeu_si256((__m256i*)((int8_t*)y + i), r);
        }
        for (; i + 8 <= n; i += 8) {
            __m256i a = QL_Q256(i);
            __m256i p = _mm256_packs_epi32(a, a);
            __m256i r = mode == QL_M_I8 ? _mm256_packs_epi16(p, p) : _mm256_packus_epi16(p, p);
            r = _mm256_permutevar8x32_epi32(r, perm);
            _mm_storel_epi64((__m128i*)((int8_t*)y + i), _mm256_castsi256_si128(r));
        }
    }
    for (; i < n; i++) ql_q1_store(x, y, i, sv, zv, s, z, lo, hi, mode);
}
#undef QL_S256
#undef QL_Z256
#undef QL_Q256

#define QL_DEF_QRUN_SIMD(NAME, T, MODE, SFX, KERNEL)                                                     \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_s_##SFX(                     \
        const float* x, T* y, int64_t n, float s, float z, float lo, float hi, int nt) {               \
        KERNEL(x, y, n, NULL, NULL, s, z, lo, hi, MODE, nt);                                            \
    }                                                                                                  \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_v_##SFX(                     \
        const float* x, T* y, int64_t n, const float* s, const int32_t* z, float lo, float hi, int nt) { \
        KERNEL(x, y, n, s, z, 0.0f, 0.0f, lo, hi, MODE, nt);                                            \
    }
#define QL_DEF_QRUNS_SIMD(SFX, KERNEL)                       \
    QL_DEF_QRUN_SIMD(q_u8, uint8_t, QL_M_U8, SFX, KERNEL)    \
    QL_DEF_QRUN_SIMD(q_i8, int8_t, QL_M_I8, SFX, KERNEL)     \
    QL_DEF_QRUN_SIMD(q_u16, uint16_t, QL_M_U16, SFX, KERNEL) \
    QL_DEF_QRUN_SIMD(q_i16, int16_t, QL_M_I16, SFX, KERNEL)  \
    QL_DEF_QRUN_SIMD(q_c4, uint8_t, QL_M_C4, SFX, KERNEL)    \
    QL_DEF_QRUN_SIMD(q_c2, uint8_t, QL_M_C2, SFX, KERNEL)
QL_DEF_QRUNS_SIMD(avx2, ql_q_256)
QL_DEF_QRUNS_SIMD(avx512, ql_q_512)
#endif /* QL_X86 */

/* Drive: walk the rows of [e0, e1) and call the ISA's runs. Kind 2 (blocks along the row) counts blocks
 * without a division per block and never streams (runs of kb elements are too short for whole lines). */
#define QL_DEF_QDRIVE(NAME, T, SFX)                                                                     \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_drive_##SFX(                 \
        const float* x, T* y, int64_t ybias, const float* s, const int32_t* z, int64_t e0, int64_t e1, \
        const ql_layout* L, float lo, float hi, int nt) {                                              \
        int64_t e = e0;                                                                                \
        while (e < e1) {                                                                               \
            int64_t r = e / L->row_len, i0 = e - r * L->row_len, i1 = L->row_len;                      \
            if (i1 - i0 > e1 - e) i1 = i0 + (e1 - e);                                                  \
            int64_t off = ql_off(L, r);                                                                \
            if (L->kind == 0) {                                                                        \
                NAME##_s_##SFX(x + e, y + (e - ybias), i1 - i0, s[off], z ? (float)z[off] : 0.0f, lo, hi, nt); \
            } else if (L->kind == 1) {                                                                 \
                NAME##_v_##SFX(x + e, y + (e - ybias), i1 - i0, s + off + i0, z ? z + off + i0 : NULL, lo, hi, nt); \
            } else {                                                                                   \
                int64_t b = i0 / L->kb, i = i0;                                                        \
                while (i < i1) {                                                                       \
                    int64_t j1 = (b + 1) * L->kb;                                                      \
                    if (j1 > i1) j1 = i1;                                                              \
                    int64_t p = e + (i - i0);                                                          \
                    NAME##_s_##SFX(x + p, y + (p - ybias), j1 - i, s[off + b], z ? (float)z[off + b] : 0.0f, lo, hi, 0); \
                    i = j1;                                                                            \
                    b++;                                                                               \
                }                                                                                      \
            }                                                                                          \
            e += i1 - i0;                                                                              \
        }                                                                                              \
    }

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

/* One entry per ISA. otype: 0 u8, 1 i8, 2 u16, 3 i16, 4 4-bit code, 5 2-bit code, 6 packed 4-bit, 7 packed 2-bit */
#define QL_DEF_QTOP(SFX)                                                                                      \
    QL_DEF_QDRIVE(q_u8, uint8_t, SFX)                                                                         \
    QL_DEF_QDRIVE(q_i8, int8_t, SFX)                                                                          \
    QL_DEF_QDRIVE(q_u16, uint16_t, SFX)                                                                       \
    QL_DEF_QDRIVE(q_i16, int16_t, SFX)                                                                        \
    QL_DEF_QDRIVE(q_c4, uint8_t, SFX)                                                                         \
    QL_DEF_QDRIVE(q_c2, uint8_t, SFX)                                                                         \
    static QL_TGT_##SFX int ql_quantize_##SFX(const float* x, void* y, int otype, const float* s,               \
                                              const int32_t* z, int64_t e0, int64_t e1, const ql_layout* L,  \
                                              float lo, float hi, int nt) {                                  \
        switch (otype) {                                                                                      \
            case 0: q_u8_drive_##SFX(x, (uint8_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;              \
            case 1: q_i8_drive_##SFX(x, (int8_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;               \
            case 2: q_u16_drive_##SFX(x, (uint16_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;            \
            case 3: q_i16_drive_##SFX(x, (int16_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;             \
            case 4: q_c4_drive_##SFX(x, (uint8_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;              \
            case 5: q_c2_drive_##SFX(x, (uint8_t*)y, 0, s, z, e0, e1, L, lo, hi, nt); return 0;              \
            case 6:                                                                                           \
            case 7: {                                                                                         \
                uint8_t tmp[QL_CHUNK];                                                                        \
                for (int64_t c0 = e0; c0 < e1; c0 += QL_CHUNK) {                                              \
                    int64_t c1 = c0 + QL_CHUNK < e1 ? c0 + QL_CHUNK : e1;                                     \
                    if (otype == 6) {                                                                         \
                        q_c4_drive_##SFX(x, tmp, c0, s, z, c0, c1, L, lo, hi, 0);                            \
                        ql_pack((uint8_t*)y, tmp, c0, c1, 4);                                                 \
                    } else {                                                                                  \
                        q_c2_drive_##SFX(x, tmp, c0, s, z, c0, c1, L, lo, hi, 0);                            \
                        ql_pack((uint8_t*)y, tmp, c0, c1, 2);                                                 \
                    }                                                                                         \
                }                                                                                             \
                return 0;                                                                                     \
            }                                                                                                 \
            default: return -1;                                                                               \
        }                                                                                                     \
    }

QL_DEF_QTOP(base)
#if QL_X86
QL_DEF_QTOP(avx2)
QL_DEF_QTOP(avx512)
#endif

QL_EXPORT int ql_quantize_f32(const float* x, void* y, int otype, const float* s, const int32_t* z, int64_t e0,
                              int64_t e1, int64_t row_len, int64_t D, int64_t B, int64_t so, int64_t sd,
                              int64_t kind, int64_t kb, float lo, float hi) {
    ql_layout L = {row_len, D, B, so, sd, kb, kind};
#if QL_X86
    int level = ql_simd_get();
    int64_t esz = otype == 2 || otype == 3 ? 2 : 1;
    int nt = level > 0 && otype <= 5 && (e1 - e0) * esz >= ql_q_stream_min;
    int rc = level == 2   ? ql_quantize_avx512(x, y, otype, s, z, e0, e1, &L, lo, hi, nt)
             : level == 1 ? ql_quantize_avx2(x, y, otype, s, z, e0, e1, &L, lo, hi, nt)
                          : ql_quantize_base(x, y, otype, s, z, e0, e1, &L, lo, hi, 0);
    if (nt) _mm_sfence(); /* make the streamed stores globally visible before returning */
    return rc;
#else
    return ql_quantize_base(x, y, otype, s, z, e0, e1, &L, lo, hi, 0);
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Dequantize                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define QL_DEC_PLAIN(v) ((int32_t)(v))
#define QL_DEC_U4(v) ((int32_t)((v)&0xF))
#define QL_DEC_I4(v) ((int32_t)((int8_t)((uint8_t)(v) << 4) >> 4))
#define QL_DEC_U2(v) ((int32_t)((v)&0x3))
#define QL_DEC_I2(v) ((int32_t)((int8_t)((uint8_t)(v) << 6) >> 6))

/* Baseline runs: y = (float)(x - z) * s (exact int32 difference, exact conversion below 2^24, one multiply).
 * Runs of every ISA share the signatures  S: (x, y, n, s, z, nt)  and  V: (x, y, n, s[], z[] or NULL, nt). */
#define QL_DEF_DQRUN_BASE(NAME, T, DEC)                                                                       \
    QL_INLINE void NAME##_s_base(const T* restrict x, float* restrict y, int64_t n, float s, int32_t z, int nt) { \
        (void)nt;                                                                                            \
        for (int64_t i = 0; i < n; i++) y[i] = (float)(DEC(x[i]) - z) * s;                                   \
    }                                                                                                        \
    QL_INLINE void NAME##_v_base(const T* restrict x, float* restrict y, int64_t n, const float* restrict s,  \
                                 const int32_t* restrict z, int nt) {                                        \
        (void)nt;                                                                                            \
        if (z)                                                                                               \
            for (int64_t i = 0; i < n; i++) y[i] = (float)(DEC(x[i]) - z[i]) * s[i];                         \
        else                                                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = (float)DEC(x[i]) * s[i];                                  \
    }

QL_DEF_DQRUN_BASE(dq_u8, uint8_t, QL_DEC_PLAIN)
QL_DEF_DQRUN_BASE(dq_i8, int8_t, QL_DEC_PLAIN)
QL_DEF_DQRUN_BASE(dq_u16, uint16_t, QL_DEC_PLAIN)
QL_DEF_DQRUN_BASE(dq_i16, int16_t, QL_DEC_PLAIN)
QL_DEF_DQRUN_BASE(dq_u4, uint8_t, QL_DEC_U4)
QL_DEF_DQRUN_BASE(dq_i4, uint8_t, QL_DEC_I4)
QL_DEF_DQRUN_BASE(dq_u2, uint8_t, QL_DEC_U2)
QL_DEF_DQRUN_BASE(dq_i2, uint8_t, QL_DEC_I2)

/* the baseline run, compiled for (inlined into) an ISA's entry: the compiler vectorizes it for that ISA */
#define QL_DEF_DQRUN_ALIAS(NAME, T, SFX)                                                                      \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_s_##SFX(                           \
        const T* x, float* y, int64_t n, float s, int32_t z, int nt) { NAME##_s_base(x, y, n, s, z, nt); }   \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_v_##SFX(                           \
        const T* x, float* y, int64_t n, const float* s, const int32_t* z, int nt) { NAME##_v_base(x, y, n, s, z, nt); }

#if QL_X86
/* ---- AVX-512 / AVX2 runs for 8- and 16-bit inputs: widen, subtract, convert, multiply; nt: streaming stores */
#define QL_DEF_DQ512(NAME, T, LOADV, LOADM)                                                                   \
    QL_A512 void NAME##_part512(const T* x, float* y, int64_t i, int64_t k, const float* sv, const int32_t* zv, \
                                __m512 s1, __m512i z1) {                                                     \
        __mmask16 m = (__mmask16)((1u << k) - 1u);                                                           \
        __m512i d = LOADM(m, x + i);                                                                         \
        d = _mm512_sub_epi32(d, sv ? (zv ? _mm512_maskz_loadu_epi32(m, zv + i) : _mm512_setzero_si512()) : z1); \
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(d), sv ? _mm512_maskz_loadu_ps(m, sv + i) : s1);          \
        _mm512_mask_storeu_ps(y + i, m, f);                                                                  \
    }                                                                                                        \
    QL_A512 void NAME##_k512(const T* x, float* y, int64_t n, const float* sv, const int32_t* zv, float s,      \
                             int32_t z, int nt) {                                                            \
        const __m512 s1 = _mm512_set1_ps(s);                                                                 \
        const __m512i z1 = _mm512_set1_epi32(z);                                                             \
        int64_t i = 0;                                                                                       \
        if (nt && ((uintptr_t)y & 3)) nt = 0;                                                                \
        if (nt) {                                                                                            \
            int64_t head = (int64_t)(((64 - ((uintptr_t)y & 63)) & 63) / 4);                                 \
            i = head < n ? head : n;                                                                         \
            if (i) NAME##_part512(x, y, 0, i, sv, zv, s1, z1);                                               \
        }                                                                                                    \
        for (; i + 16 <= n; i += 16) {                                                                       \
            __m512i d = LOADV(x + i);                                                                        \
            d = _mm512_sub_epi32(d, sv ? (zv ? _mm512_loadu_si512(zv + i) : _mm512_setzero_si512()) : z1);  \
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(d), sv ? _mm512_loadu_ps(sv + i) : s1);              \
            if (nt) _mm512_stream_ps(y + i, f);                                                              \
            else _mm512_storeu_ps(y + i, f);                                                                 \
        }                                                                                                    \
        if (i < n) NAME##_part512(x, y, i, n - i, sv, zv, s1, z1);                                           \
    }                                                                                                        \
    static inline __attribute__((always_inline)) QL_TGT_avx512 void NAME##_s_avx512(                         \
        const T* x, float* y, int64_t n, float s, int32_t z, int nt) { NAME##_k512(x, y, n, NULL, NULL, s, z, nt); } \
    static inline __attribute__((always_inline)) QL_TGT_avx512 void NAME##_v_avx512(                         \
        const T* x, float* y, int64_t n, const float* s, const int32_t* z, int nt) {                         \
        NAME##_k512(x, y, n, s, z, 0.0f, 0, nt);                                                             \
    }

#define QL_DEF_DQ256(NAME, T, LOADV)                                                                          \
    QL_A2 void NAME##_k256(const T* x, float* y, int64_t n, const float* sv, const int32_t* zv, float s,       \
                           int32_t z, int nt) {                                                              \
        const __m256 s1 = _mm256_set1_ps(s);                                                                 \
        const __m256i z1 = _mm256_set1_epi32(z);                                                             \
        int64_t i = 0;                                                                                       \
        if (nt && ((uintptr_t)y & 3)) nt = 0;                                                                \
        if (nt)                                                                                              \
            for (; i < n && ((uintptr_t)(y + i) & 31); i++)                                                  \
                y[i] = sv ? (float)((int32_t)x[i] - (zv ? zv[i] : 0)) * sv[i] : (float)((int32_t)x[i] - z) * s; \
        for (; i + 8 <= n; i += 8) {                                                                         \
            __m256i d = LOADV(x + i);                                                                        \
            d = _mm256_sub_epi32(d, sv ? (zv ? _mm256_loadu_si256((const __m256i*)(zv + i)) : _mm256_setzero_si256()) : z1); \
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(d), sv ? _mm256_loadu_ps(sv + i) : s1);              \
            if (nt) _mm256_stream_ps(y + i, f);                                                              \
            else _mm256_storeu_ps(y + i, f);                                                                 \
        }                                                                                                    \
        for (; i < n; i++)                                                                                   \
            y[i] = sv ? (float)((int32_t)x[i] - (zv ? zv[i] : 0)) * sv[i] : (float)((int32_t)x[i] - z) * s;   \
    }                                                                                                        \
    static inline __attribute__((always_inline)) QL_TGT_avx2 void NAME##_s_avx2(                             \
        const T* x, float* y, int64_t n, float s, int32_t z, int nt) { NAME##_k256(x, y, n, NULL, NULL, s, z, nt); } \
    static inline __attribute__((always_inline)) QL_TGT_avx2 void NAME##_v_avx2(                             \
        const T* x, float* y, int64_t n, const float* s, const int32_t* z, int nt) {                         \
        NAME##_k256(x, y, n, s, z, 0.0f, 0, nt);                                                             \
    }

#define QL_L512_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p)))
#define QL_M512_U8(m, p) _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((m), (p)))
#define QL_L512_I8(p) _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p)))
#define QL_M512_I8(m, p) _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8((m), (p)))
#define QL_L512_U16(p) _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(p)))
#define QL_M512_U16(m, p) _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((m), (p)))
#define QL_L512_I16(p) _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i*)(p)))
#define QL_M512_I16(m, p) _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16((m), (p)))
#define QL_L256_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(p)))
#define QL_L256_I8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(p)))
#define QL_L256_U16(p) _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(p)))
#define QL_L256_I16(p) _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i*)(p)))

QL_DEF_DQ512(dq_u8, uint8_t, QL_L512_U8, QL_M512_U8)
QL_DEF_DQ512(dq_i8, int8_t, QL_L512_I8, QL_M512_I8)
QL_DEF_DQ512(dq_u16, uint16_t, QL_L512_U16, QL_M512_U16)
QL_DEF_DQ512(dq_i16, int16_t, QL_L512_I16, QL_M512_I16)
QL_DEF_DQ256(dq_u8, uint8_t, QL_L256_U8)
QL_DEF_DQ256(dq_i8, int8_t, QL_L256_I8)
QL_DEF_DQ256(dq_u16, uint16_t, QL_L256_U16)
QL_DEF_DQ256(dq_i16, int16_t, QL_L256_I16)
#endif /* QL_X86 */

#define QL_DEF_DQRUN_ALIAS_CODES(SFX)      \
    QL_DEF_DQRUN_ALIAS(dq_u4, uint8_t, SFX)  \
    QL_DEF_DQRUN_ALIAS(dq_i4, uint8_t, SFX)  \
    QL_DEF_DQRUN_ALIAS(dq_u2, uint8_t, SFX)  \
    QL_DEF_DQRUN_ALIAS(dq_i2, uint8_t, SFX)

#define QL_DEF_DQDRIVE(NAME, T, SFX)                                                                          \
    static inline __attribute__((always_inline)) QL_TGT_##SFX void NAME##_drive_##SFX(                       \
        const T* x, int64_t xbias, float* y, const float* s, const int32_t* z, int64_t e0, int64_t e1,       \
        const ql_layout* L, int nt) {                                                                        \
        int64_t e = e0;                                                                                      \
        while (e < e1) {                                                                                     \
            int64_t r = e / L->row_len, i0 = e - r * L->row_len, i1 = L->row_len;                            \
            if (i1 - i0 > e1 - e) i1 = i0 + (e1 - e);                                                        \
            int64_t off = ql_off(L, r);                                                                      \
            if (L->kind == 0) {                                                                              \
                NAME##_s_##SFX(x + (e - xbias), y + e, i1 - i0, s[off], z ? z[off] : 0, nt);                 \
            } else if (L->kind == 1) {                                                                       \
                NAME##_v_##SFX(x + (e - xbias), y + e, i1 - i0, s + off + i0, z ? z + off + i0 : NULL, nt);  \
            } else {                                                                                         \
                int64_t b = i0 / L->kb, i = i0;                                                              \
                while (i < i1) {                                                                             \
                    int64_t j1 = (b + 1) * L->kb;                                                            \
                    if (j1 > i1) j1 = i1;                                                                    \
                    int64_t p = e + (i - i0);                                                                \
                    NAME##_s_##SFX(x + (p - xbias), y + p, j1 - i, s[off + b], z ? z[off + b] : 0, 0);       \
                    i = j1;                                                                                  \
                    b++;                                                                                     \
                }                                                                                            \
            }                                                                                                \
            e += i1 - i0;                                                                                    \
        }                                                                                                    \
    }

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

/* One entry per ISA. itype: 0 u8, 1 i8, 2 u16, 3 i16, 4 u4 code, 5 i4 code, 6 u2 code, 7 i2 code,
 *                         8 packed u4, 9 packed i4, 10 packed u2, 11 packed i2 */
#define QL_DEF_DQTOP(SFX)                                                                                     \
    QL_DEF_DQDRIVE(dq_u8, uint8_t, SFX)                                                                       \
    QL_DEF_DQDRIVE(dq_i8, int8_t, SFX)                                                                        \
    QL_DEF_DQDRIVE(dq_u16, uint16_t, SFX)                                                                     \
    QL_DEF_DQDRIVE(dq_i16, int16_t, SFX)                                                                      \
    QL_DEF_DQDRIVE(dq_u4, uint8_t, SFX)                                                                       \
    QL_DEF_DQDRIVE(dq_i4, uint8_t, SFX)                                                                       \
    QL_DEF_DQDRIVE(dq_u2, uint8_t, SFX)                                                                       \
    QL_DEF_DQDRIVE(dq_i2, uint8_t, SFX)                                                                       \
    static QL_TGT_##SFX int ql_dequantize_##SFX(const void* x, int itype, float* y, const float* s,            \
                                                const int32_t* z, int64_t e0, int64_t e1, const ql_layout* L, \
                                                int nt) {                                                    \
        switch (itype) {                                                                                      \
            case 0: dq_u8_drive_##SFX((const uint8_t*)x, 0, y, s, z, e0, e1, L, nt); return 0;               \
            case 1: dq_i8_drive_##SFX((const int8_t*)x, 0, y, s, z, e0, e1, L, nt); return 0;                \
            case 2: dq_u16_drive_##SFX((const uint16_t*)x, 0, y, s, z, e0, e1, L, nt); return 0;             \
            case 3: dq_i16_drive_##SFX((const int16_t*)x, 0, y, s, z, e0, e1, L, nt); return 0;              \
            case 4: dq_u4_drive_##SFX((const uint8_t*)x, 0, y, s, z, e0, e1, L, 0); return 0;                \
            case 5: dq_i4_drive_##SFX((const uint8_t*)x, 0, y, s, z, e0, e1, L, 0); return 0;                \
            case 6: dq_u2_drive_##SFX((const uint8_t*)x, 0, y, s, z, e0, e1, L, 0); return 0;                \
            case 7: dq_i2_drive_##SFX((const uint8_t*)x, 0, y, s, z, e0, e1, L, 0); return 0;                \
            case 8:                                                                                           \
            case 9:                                                                                           \
            case 10:                                                                                          \
            case 11: { /* unpack a chunk to decoded 8-bit values, then run the 8-bit path (streaming if asked) */ \
                uint8_t tmp[QL_CHUNK];                                                                        \
                int bits = itype <= 9 ? 4 : 2;                                                                \
                int sgn = itype == 9 || itype == 11;                                                          \
                for (int64_t c0 = e0; c0 < e1; c0 += QL_CHUNK) {                                              \
                    int64_t c1 = c0 + QL_CHUNK < e1 ? c0 + QL_CHUNK : e1;                                     \
                    ql_unpack((const uint8_t*)x, tmp, c0, c1, bits);                                          \
                    if (sgn) {                                                                                \
                        int sh = 8 - bits;                                                                    \
                        for (int64_t k = 0; k < c1 - c0; k++) tmp[k] = (uint8_t)((int8_t)(tmp[k] << sh) >> sh); \
                        dq_i8_drive_##SFX((const int8_t*)tmp, c0, y, s, z, c0, c1, L, nt);                    \
                    } else {                                                                                  \
                        dq_u8_drive_##SFX(tmp, c0, y, s, z, c0, c1, L, nt);                                   \
                    }                                                                                         \
                }                                                                                             \
                return 0;                                                                                     \
            }                                                                                                 \
            default: return -1;                                                                               \
        }                                                                                                     \
    }

QL_DEF_DQTOP(base)
#if QL_X86
QL_DEF_DQRUN_ALIAS_CODES(avx2)
QL_DEF_DQTOP(avx2)
QL_DEF_DQRUN_ALIAS_CODES(avx512)
QL_DEF_DQTOP(avx512)
#endif

/* stream: 1 = non-temporal stores for the float32 output (large outputs; AVX2 and AVX-512 entries only) */
QL_EXPORT int ql_dequantize_f32(const void* x, int itype, float* y, const float* s, const int32_t* z, int64_t e0,
                                int64_t e1, int64_t row_len, int64_t D, int64_t B, int64_t so, int64_t sd,
                                int64_t kind, int64_t kb, int stream) {
    ql_layout L = {row_len, D, B, so, sd, kb, kind};
#if QL_X86
    int level = ql_simd_get();
    int nt = stream && level > 0;
    int rc = level == 2   ? ql_dequantize_avx512(x, itype, y, s, z, e0, e1, &L, nt)
             : level == 1 ? ql_dequantize_avx2(x, itype, y, s, z, e0, e1, &L, nt)
                          : ql_dequantize_base(x, itype, y, s, z, e0, e1, &L, 0);
    if (nt) _mm_sfence(); /* make the streamed stores globally visible before returning */
    return rc;
#else
    (void)stream;
    return ql_dequantize_base(x, itype, y, s, z, e0, e1, &L, 0);
#endif
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
