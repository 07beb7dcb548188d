/* Integer-simulation kernels for qlinear.kernels (loaded through ctypes; no Python or NumPy C API).
 *
 *  ql_requant   int32/int64 accumulators -> int8/uint8/int16/uint16 outputs, per-channel multipliers, in one pass,
 *               in every requantization mode of qlinear.kernels.requant (same formulas, same bits);
 *  ql_dwconv    depthwise convolution, NCHW, exact int64 accumulation of (x - zx)(w - zw) + bias, zero-point
 *               padding = skipped taps.
 *
 * Build flags (setup.py): -O3 -fno-math-errno -fno-trapping-math -ffp-contract=off. Float modes depend on the
 * default rounding mode (round to nearest even), as the runtimes they reproduce do.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define I32_MIN (-2147483647 - 1)
#define I32_MAX 2147483647

/* gemmlowp SaturatingRoundingDoublingHighMul: ties toward +inf, C division truncating toward zero. */
static inline int32_t srdhm(int32_t a, int32_t b) {
    if (a == I32_MIN && b == I32_MIN) return I32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? (1LL << 30) : (1 - (1LL << 30));
    return (int32_t)((ab + nudge) / (1LL << 31));
}

/* gemmlowp RoundingDivideByPOT: ties away from zero. */
static inline int32_t rdbpot(int32_t x, int e) {
    int32_t mask = (int32_t)((1LL << e) - 1);
    int32_t rem = x & mask;
    int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > thr ? 1 : 0);
}

static inline int32_t wrap32(int64_t x) { return (int32_t)(uint32_t)(uint64_t)x; }

enum { FIXED_DOUBLE = 0, FIXED_SINGLE = 1, RUY_X86 = 2, F64_ROUND_AWAY = 3, F32_RNE = 4, ONEDNN = 5, INT64_REDUCED = 6 };

/* Row-wise requantization. Stage 1 turns a row of accumulators (int32, int64, float32 or float64 holding
 * integers) plus the channel's int64 bias into int64 and checks the accumulator range; stage 2 applies one mode to
 * the whole row (a loop the compiler vectorizes); stage 3 clamps and stores. */
#if defined(QL_X86_CLONES) && defined(__GNUC__) && !defined(__clang__)
#define QL_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define QL_CLONES
#endif

enum { ACC_I32 = 0, ACC_I64 = 1, ACC_F32 = 2, ACC_F64 = 3 };

static inline int load_row(const void *acc, int kind, int64_t base, int64_t n, int64_t bias, int64_t lim, int64_t *t) {
    int bad = 0;
    switch (kind) {
    case ACC_I32: { const int32_t *a = (const int32_t *)acc + base; for (int64_t i = 0; i < n; i++) t[i] = (int64_t)a[i] + bias; break; }
    case ACC_I64: { const int64_t *a = (const int64_t *)acc + base; for (int64_t i = 0; i < n; i++) t[i] = a[i] + bias; break; }
    case ACC_F32: { const float *a = (const float *)acc + base; for (int64_t i = 0; i < n; i++) t[i] = (int64_t)a[i] + bias; break; }
    default: { const double *a = (const double *)acc + base; for (int64_t i = 0; i < n; i++) t[i] = (int64_t)a[i] + bias; break; }
    }
    for (int64_t i = 0; i < n; i++) bad |= (t[i] > lim) | (t[i] < -lim - 1);
    return bad;
}

static inline void mode_row(int64_t *t, int64_t n, int mode, int32_t q, int32_t shift, double m64, float m32,
                               int32_t zp) {
    int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    switch (mode) {
    case FIXED_DOUBLE:
        for (int64_t i = 0; i < n; i++) t[i] = (int64_t)rdbpot(srdhm(wrap32(t[i] << left), q), right) + zp;
        break;
    case FIXED_SINGLE: {
        int total = 31 - shift;
        int64_t rnd = 1LL << (total - 1);
        for (int64_t i = 0; i < n; i++) t[i] = ((t[i] * (int64_t)q + rnd) >> total) + zp;
        break;
    }
    case RUY_X86:
        for (int64_t i = 0; i < n; i++) {
            int64_t h = srdhm(wrap32(t[i] << left), q);
            if (right > 0) h = (h + (1LL << (right - 1))) >> right;
            t[i] = h + zp;
        }
        break;
    case F64_ROUND_AWAY:
        for (int64_t i = 0; i < n; i++) {
            double r = (double)t[i] * m64;
            t[i] = (int64_t)copysign(floor(fabs(r) + 0.5), r) + zp;
        }
        break;
    case F32_RNE:
        for (int64_t i = 0; i < n; i++) t[i] = (int64_t)nearbyintf((float)t[i] * m32) + zp;
        break;
    case ONEDNN:
        for (int64_t i = 0; i < n; i++) t[i] = (int64_t)nearbyintf((float)t[i] * m32 + (float)zp);
        break;
    default: { /* INT64_REDUCED */
        int64_t reduced = q < 0x7FFF0000 ? (int64_t)((q + (1 << 15)) >> 16) : 0x7FFF;
        int total = 15 - shift;
        int64_t rnd = 1LL << (total - 1);
        for (int64_t i = 0; i < n; i++) t[i] = ((t[i] * reduced + rnd) >> total) + zp;
        break;
    }
    }
}

/* rows [r0, r1) of an [outer*C, inner] accumulator array; channel of row r = r % C. bias: int64 per channel or NULL.
 * acc_bits: 32 or 64 (the range checked). out_kind: 0 int8, 1 uint8, 2 int16, 3 uint16. Returns 1 if some
 * accumulator left the acc_bits range (nothing meaningful is written then). */
QL_CLONES int ql_requant(const void *acc, int acc_kind, int acc_bits, int64_t r0, int64_t r1, int64_t C, int64_t inner,
               const int64_t *bias, const int32_t *q, const int32_t *shift, const double *m64, const float *m32,
               int64_t per_channel, int mode, int32_t zp, int32_t lo, int32_t hi, void *out, int out_kind,
               int64_t *tmp) {
    int64_t lim = acc_bits >= 64 ? (int64_t)0x7FFFFFFFFFFFFFFFLL : (((int64_t)1 << (acc_bits - 1)) - 1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r % C, ci = per_channel ? c : 0, base = r * inner;
        if (load_row(acc, acc_kind, base, inner, bias ? bias[c] : 0, lim, tmp)) return 1;
        mode_row(tmp, inner, mode, q[ci], shift[ci], m64[ci], m32[ci], zp);
        for (int64_t i = 0; i < inner; i++) tmp[i] = tmp[i] < lo ? lo : (tmp[i] > hi ? hi : tmp[i]);
        switch (out_kind) {
        case 0: { int8_t *o = (int8_t *)out + base; for (int64_t i = 0; i < inner; i++) o[i] = (int8_t)tmp[i]; break; }
        case 1: { uint8_t *o = (uint8_t *)out + base; for (int64_t i = 0; i < inner; i++) o[i] = (uint8_t)tmp[i]; break; }
        case 2: { int16_t *o = (int16_t *)out + base; for (int64_t i = 0; i < inner; i++) o[i] = (int16_t)tmp[i]; break; }
        default: { uint16_t *o = (uint16_t *)out + base; for (int64_t i = 0; i < inner; i++) o[i] = (uint16_t)tmp[i]; break; }
        }
    }
    return 0;
}

/* Depthwise convolution: x [N, C, H, W] int32 values, w [C*m, kh, kw] int32 values (already minus zw), bias [C*m]
 * int64 (or NULL); out [N, C*m, OH, OW] int64. Taps outside the image are skipped (zero-point padding). Tap-major
 * loops over the valid output range of each tap, accumulating a plane in int32 (|x - zx| <= 65535 and |w| <= 255:
 * a product is below 2^24, a 127-tap sum below 2^31) then widened with the bias. rows [r0, r1) of the N*C*m
 * (image, output channel) pairs; plane: int32 scratch of OH*OW. */
QL_CLONES void ql_dwconv(const int32_t *x, int64_t N, int64_t C, int64_t H, int64_t W, int32_t zx, const int32_t *w,
                         int64_t mult, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl,
                         int64_t dh, int64_t dw, const int64_t *bias, int64_t *out, int64_t OH, int64_t OW, int64_t r0,
                         int64_t r1, int32_t *plane) {
    int64_t O = C * mult;
    (void)N;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / O, oc = r % O, ic = oc / mult;
        const int32_t *xc = x + (n * C + ic) * H * W;
        const int32_t *wc = w + oc * kh * kw;
        memset(plane, 0, sizeof(int32_t) * OH * OW);
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t oy0 = 0, oy1 = OH; /* valid oy: 0 <= oy*sh - pt + ky*dh < H */
            while (oy0 < OH && oy0 * sh - pt + ky * dh < 0) oy0++;
            while (oy1 > oy0 && (oy1 - 1) * sh - pt + ky * dh >= H) oy1--;
            for (int64_t kx = 0; kx < kw; kx++) {
                int32_t wv = wc[ky * kw + kx];
                if (wv == 0) continue;
                int64_t ox0 = 0, ox1 = OW;
                while (ox0 < OW && ox0 * sw - pl + kx * dw < 0) ox0++;
                while (ox1 > ox0 && (ox1 - 1) * sw - pl + kx * dw >= W) ox1--;
                for (int64_t oy = oy0; oy < oy1; oy++) {
                    const int32_t *row = xc + (oy * sh - pt + ky * dh) * W - pl + kx * dw;
                    int32_t *pr = plane + oy * OW;
                    if (sw == 1) {
                        for (int64_t ox = ox0; ox < ox1; ox++) pr[ox] += (row[ox] - zx) * wv;
                    } else {
                        for (int64_t ox = ox0; ox < ox1; ox++) pr[ox] += (row[ox * sw] - zx) * wv;
                    }
                }
            }
        }
        int64_t b = bias ? bias[oc] : 0;
        int64_t *oo = out + (n * O + oc) * OH * OW;
        for (int64_t i = 0; i < OH * OW; i++) oo[i] = (int64_t)plane[i] + b;
    }
}
