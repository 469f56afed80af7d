// TensorPlay CUDA prelude: the scalar semantics of the op table's `ScalarOp`s, one overload per
// register type, shared by every generated kernel. Compiled by NVRTC for the device, and by the
// host C++ compiler (with TP_EMULATION defined, after the emulation header) for verification.
//
// Register types: f16/bf16/f32 values are `float` (16-bit floats round only when stored or cast),
// f64 `double`, i32 `int`, i64 `long long`, bool `bool`. Integer arithmetic wraps (done on
// unsigned values: signed overflow is undefined in C++). f32 transcendentals are evaluated in
// f64 and rounded once, which keeps them within an ulp of the exact result.
#ifndef TP_PRELUDE
#define TP_PRELUDE

#ifdef TP_EMULATION
#define TP_FN static inline
#else
#define TP_FN static __device__ __forceinline__
#endif

// ---- memory types ------------------------------------------------------------------------------

struct tp_half { unsigned short bits; };
struct tp_bhalf { unsigned short bits; };
struct tp_bool8 { unsigned char v; };

template <class T, int N> struct alignas(sizeof(T) * N) tp_vec { T v[N]; };

// ---- bit casts ---------------------------------------------------------------------------------

TP_FN float tp_f32(unsigned b) {
#ifdef TP_EMULATION
  float f; memcpy(&f, &b, 4); return f;
#else
  return __int_as_float((int)b);
#endif
}
TP_FN unsigned tp_f32_bits(float f) {
#ifdef TP_EMULATION
  unsigned b; memcpy(&b, &f, 4); return b;
#else
  return (unsigned)__float_as_int(f);
#endif
}
TP_FN double tp_f64(unsigned long long b) {
#ifdef TP_EMULATION
  double f; memcpy(&f, &b, 8); return f;
#else
  return __longlong_as_double((long long)b);
#endif
}
TP_FN bool tp_isnan(float x) { return x != x; }
TP_FN bool tp_isnan(double x) { return x != x; }
TP_FN bool tp_isfinite(double x) { return x - x == 0.0; }

// ---- 16-bit floats (round to nearest even; NaN stays a quiet NaN) -------------------------------

TP_FN unsigned short tp_f32_to_f16_bits(float x) {
  unsigned b = tp_f32_bits(x);
  unsigned short sign = (unsigned short)((b >> 16) & 0x8000u);
  unsigned a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below the smallest normal f16: a multiple of 2^-24, rounded to even.
    return (unsigned short)(sign | (unsigned short)rint((double)tp_f32(a) * 16777216.0));
  }
  unsigned e = (a >> 23) - 112u;
  unsigned m = a & 0x7fffffu;
  unsigned h = (e << 10) | (m >> 13);
  unsigned rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
  return (unsigned short)(sign | h);
}
TP_FN float tp_f16_bits_to_f32(unsigned short h) {
  unsigned sign = ((unsigned)h & 0x8000u) << 16;
  unsigned e = ((unsigned)h >> 10) & 0x1fu;
  unsigned m = (unsigned)h & 0x3ffu;
  float mag;
  if (e == 0) mag = (float)m * (1.0f / 16777216.0f);
  else if (e == 31) mag = tp_f32(0x7f800000u | (m << 13));
  else mag = tp_f32(((e + 112u) << 23) | (m << 13));
  return tp_f32(tp_f32_bits(mag) | sign);
}
TP_FN unsigned short tp_f32_to_bf16_bits(float x) {
  unsigned b = tp_f32_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((b >> 16) | 0x40u);
  return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
TP_FN float tp_bf16_bits_to_f32(unsigned short h) { return tp_f32((unsigned)h << 16); }
TP_FN float tp_round_f16(float x) { return tp_f16_bits_to_f32(tp_f32_to_f16_bits(x)); }
TP_FN float tp_round_bf16(float x) { return tp_bf16_bits_to_f32(tp_f32_to_bf16_bits(x)); }

// ---- loads and stores (memory type -> register type) -------------------------------------------

TP_FN float tp_ld(float v) { return v; }
TP_FN double tp_ld(double v) { return v; }
TP_FN int tp_ld(int v) { return v; }
TP_FN long long tp_ld(long long v) { return v; }
TP_FN float tp_ld(tp_half v) { return tp_f16_bits_to_f32(v.bits); }
TP_FN float tp_ld(tp_bhalf v) { return tp_bf16_bits_to_f32(v.bits); }
TP_FN bool tp_ld(tp_bool8 v) { return v.v != 0; }

TP_FN void tp_st(float* p, float v) { *p = v; }
TP_FN void tp_st(double* p, double v) { *p = v; }
TP_FN void tp_st(int* p, int v) { *p = v; }
TP_FN void tp_st(long long* p, long long v) { *p = v; }
TP_FN void tp_st(tp_half* p, float v) { p->bits = tp_f32_to_f16_bits(v); }
TP_FN void tp_st(tp_bhalf* p, float v) { p->bits = tp_f32_to_bf16_bits(v); }
TP_FN void tp_st(tp_bool8* p, bool v) { p->v = v ? 1 : 0; }

TP_FN bool tp_aligned(const void* p, unsigned long long bytes) {
  return ((unsigned long long)p & (bytes - 1)) == 0;
}

// ---- casts with the runtime's rules (float to int truncates and saturates, NaN gives 0) --------

TP_FN int tp_f2i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return 2147483647;
  if (x <= -2147483648.0) return (int)(-2147483647 - 1);
  return (int)x;
}
TP_FN long long tp_f2i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return 9223372036854775807LL;
  if (x <= -9223372036854775808.0) return (-9223372036854775807LL - 1);
  return (long long)x;
}

// ---- wrapping integer arithmetic ---------------------------------------------------------------

TP_FN int tp_wrap(unsigned v) { return (int)v; }
TP_FN long long tp_wrap(unsigned long long v) { return (long long)v; }

// ---- elementwise ops: float / double ----------------------------------------------------------

#define TP_FLOAT_OPS(T)                                                                          \
  TP_FN T tp_neg(T x) { return -x; }                                                             \
  TP_FN T tp_abs(T x) { return fabs(x); }                                                       \
  TP_FN T tp_sqrt(T x) { return sqrt(x); }                                                       \
  TP_FN T tp_rsqrt(T x) { return (T)1 / sqrt(x); }                                               \
  TP_FN T tp_reciprocal(T x) { return (T)1 / x; }                                                \
  TP_FN T tp_square(T x) { return x * x; }                                                       \
  TP_FN T tp_add(T a, T b) { return a + b; }                                                     \
  TP_FN T tp_sub(T a, T b) { return a - b; }                                                     \
  TP_FN T tp_mul(T a, T b) { return a * b; }                                                     \
  TP_FN T tp_div(T a, T b) { return a / b; }                                                     \
  TP_FN T tp_relu(T x) { return x < (T)0 ? (T)0 : x; }                                           \
  TP_FN T tp_sign(T x) {                                                                         \
    T s = x > (T)0 ? (T)1 : x + (T)0;                                                            \
    return x < (T)0 ? (T)-1 : s;                                                                 \
  }                                                                                              \
  TP_FN T tp_floor(T x) { return floor(x); }                                                     \
  TP_FN T tp_ceil(T x) { return ceil(x); }                                                       \
  TP_FN T tp_round(T x) { return rint(x); }                                                      \
  TP_FN T tp_maximum(T a, T b) { return (a > b || a != a) ? a : b; }                             \
  TP_FN T tp_minimum(T a, T b) { return (a < b || a != a) ? a : b; }                             \
  TP_FN T tp_clamp_lo(T x, T lo) { return x < lo ? lo : x; }                                     \
  TP_FN T tp_clamp_hi(T x, T hi) { return x > hi ? hi : x; }                                     \
  TP_FN bool tp_eq(T a, T b) { return a == b; }                                                  \
  TP_FN bool tp_ne(T a, T b) { return a != b; }                                                  \
  TP_FN bool tp_lt(T a, T b) { return a < b; }                                                   \
  TP_FN bool tp_le(T a, T b) { return a <= b; }                                                  \
  TP_FN bool tp_gt(T a, T b) { return a > b; }                                                   \
  TP_FN bool tp_ge(T a, T b) { return a >= b; }                                                  \
  TP_FN T tp_where(bool c, T a, T b) { return c ? a : b; }                                       \
  TP_FN T tp_nan_to_num(T x, T nan, T pos, T neg) {                                              \
    if (x != x) return nan;                                                                      \
    if (x - x != x - x) return x > (T)0 ? pos : neg;                                             \
    return x;                                                                                    \
  }

TP_FLOAT_OPS(float)
TP_FLOAT_OPS(double)

// ---- transcendentals (f64, the same forms as eager's kernels) -----------------------------------

// 64 ln 2 in two parts (the high part a multiple of 2^-43) and 2^-64: `exp(y + t) * 2^64` for y in
// [-1024, -512], so results that end up subnormal round once, at the caller's final multiply.
#define TP_LN2_X64_HI 44.361419555836505
#define TP_LN2_X64_LO (-5.62123739673937e-15)
#define TP_TWO_M64 5.421010862427522e-20
TP_FN double tp_exp_scaled(double y, double t) {
  double e = exp(y + TP_LN2_X64_HI);
  return fma(e, t + TP_LN2_X64_LO, e);
}

TP_FN double tp_sigmoid_f64(double x) {
  double e = exp(-(x < 0.0 ? -x : x));
  double r = 1.0 / (1.0 + e);
  return x >= 0.0 ? r : e * r;
}
TP_FN double tp_silu_f64(double x) {
  double d = 1.0 + exp(-x);
  if (tp_isfinite(d)) return x / d;
  if (x >= -1024.0) return x * tp_exp_scaled(x, 0.0) * TP_TWO_M64;
  return x * exp(x);
}
#define TP_FRAC_1_SQRT_2 0.7071067811865476
#define TP_FRAC_1_SQRT_2_LO (-4.833646656726457e-17)
#define TP_FRAC_2_SQRT_PI 1.1283791670955126
#define TP_FRAC_1_SQRT_2PI 0.3989422804014327
TP_FN double tp_gelu_erf_far_tail(double x) {
  double h = x * x;
  double l = fma(x, x, -h);
  double w = 1.0 / h;
  double s = 1.0;
  for (int k = 7; k >= 1; --k) s = 1.0 - (double)(2 * k - 1) * w * s;
  return -(tp_exp_scaled(-0.5 * h, -0.5 * l) * s * TP_FRAC_1_SQRT_2PI) * TP_TWO_M64;
}
TP_FN double tp_gelu_erf_f64(double x) {
  // Below -40 the result is -0.0 (NaN for -inf), as eager: squaring x would give NaN.
  if (x < -40.0) return tp_isfinite(x) ? -0.0 : x * 0.0;
  if (x < -36.0) return tp_gelu_erf_far_tail(x);
  double z = -x * TP_FRAC_1_SQRT_2;
  double e = erfc(z);
  if (z > 1.0) {
    // erfc is steep here: add the first-order term of the part of -x / sqrt 2 that z lost.
    double zl = fma(-x, TP_FRAC_1_SQRT_2, -z) + (-x) * TP_FRAC_1_SQRT_2_LO;
    e -= TP_FRAC_2_SQRT_PI * exp(-z * z) * zl;
  }
  return 0.5 * x * e;
}
#define TP_GELU_K 0.7978845608028654
#define TP_GELU_K_LO (-4.98465440455546e-17)
#define TP_GELU_C 0.044715
#define TP_GELU_C_LO 2.1960211427085595e-18
// 2u = 2 sqrt(2/pi) (x + 0.044715 x^3) as hi (returned) + *lo: exp amplifies
// the relative error of u about 2|u| times, so u is carried to about 2^-100 as eager does.
TP_FN double tp_gelu_tanh_2u(double x, double* lo) {
  double x2 = x * x;
  double x3 = x2 * x;
  double c3 = TP_GELU_C * x3;
  double s = x + c3;
  double u = TP_GELU_K * s;
  if (fabs(x) >= 1e100 || x != x) {
    *lo = 0.0;
    return 2.0 * u;
  }
  double x2l = fma(x, x, -x2);
  double x3l = fma(x2, x, -x3) + x2l * x;
  double c3l = fma(TP_GELU_C, x3, -c3) + TP_GELU_C * x3l + TP_GELU_C_LO * x3;
  double b = s - x;
  double sl = (x - (s - b)) + (c3 - b) + c3l;
  double ul = fma(TP_GELU_K, s, -u) + TP_GELU_K * sl + TP_GELU_K_LO * s;
  *lo = 2.0 * ul;
  return 2.0 * u;
}
TP_FN double tp_gelu_tanh_f64(double x) {
  double yl;
  double y = tp_gelu_tanh_2u(x, &yl);
  double e = exp(-y);
  double d = 1.0 + fma(e, -yl, e);
  if (tp_isfinite(d)) return x / d;
  if (y >= -1024.0) return x * tp_exp_scaled(y, yl) * TP_TWO_M64;
  return x * exp(y);
}

#define TP_MATH(NAME, F64)                                                                       \
  TP_FN double NAME(double x) { return F64; }                                                    \
  TP_FN float NAME(float x) { return (float)NAME((double)x); }

#define TP_MATH2(NAME, F64)                                                                      \
  TP_FN double NAME(double a, double b) { return F64; }                                          \
  TP_FN float NAME(float a, float b) { return (float)NAME((double)a, (double)b); }

// The functions of tensorplay_math's tables (`MathFn`, `LibmFn`, `LibmFn2`), one `TP_MATH` or
// `TP_MATH2` line each, generated from the tables where this line stands (`prelude()`); libm
// functions are computed in double and rounded once, as eager's kernels do.
// @TP_MATH_TABLES@

TP_FN double tp_pow(double a, double b) { return pow(a, b); }
TP_FN float tp_pow(float a, float b) { return (float)pow((double)a, (double)b); }

// ---- elementwise ops: integers ------------------------------------------------------------------

#define TP_INT_OPS(T, U)                                                                         \
  TP_FN T tp_neg(T x) { return tp_wrap((U)0 - (U)x); }                                           \
  TP_FN T tp_abs(T x) { return x < 0 ? tp_neg(x) : x; }                                          \
  TP_FN T tp_add(T a, T b) { return tp_wrap((U)a + (U)b); }                                      \
  TP_FN T tp_sub(T a, T b) { return tp_wrap((U)a - (U)b); }                                      \
  TP_FN T tp_mul(T a, T b) { return tp_wrap((U)a * (U)b); }                                      \
  TP_FN T tp_square(T x) { return tp_mul(x, x); }                                                \
  TP_FN T tp_relu(T x) { return x > 0 ? x : 0; }                                                 \
  TP_FN T tp_sign(T x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }                                  \
  TP_FN T tp_floor(T x) { return x; }                                                            \
  TP_FN T tp_ceil(T x) { return x; }                                                             \
  TP_FN T tp_round(T x) { return x; }                                                            \
  TP_FN T tp_maximum(T a, T b) { return a > b ? a : b; }                                         \
  TP_FN T tp_minimum(T a, T b) { return a < b ? a : b; }                                         \
  TP_FN T tp_clamp_lo(T x, T lo) { return x < lo ? lo : x; }                                     \
  TP_FN T tp_clamp_hi(T x, T hi) { return x > hi ? hi : x; }                                     \
  TP_FN bool tp_eq(T a, T b) { return a == b; }                                                  \
  TP_FN bool tp_ne(T a, T b) { return a != b; }                                                  \
  TP_FN bool tp_lt(T a, T b) { return a < b; }                                                   \
  TP_FN bool tp_le(T a, T b) { return a <= b; }                                                  \
  TP_FN bool tp_gt(T a, T b) { return a > b; }                                                   \
  TP_FN bool tp_ge(T a, T b) { return a >= b; }                                                  \
  TP_FN T tp_where(bool c, T a, T b) { return c ? a : b; }

TP_INT_OPS(int, unsigned)
TP_INT_OPS(long long, unsigned long long)

// Bit operations; shifts by a negative amount or by the width or more give 0 (<<) or the sign
// fill (>>), as PyTorch's kernels do.
#define TP_BIT_OPS(T, U, W)                                                                      \
  TP_FN T tp_bit_and(T a, T b) { return a & b; }                                                 \
  TP_FN T tp_bit_or(T a, T b) { return a | b; }                                                  \
  TP_FN T tp_bit_xor(T a, T b) { return a ^ b; }                                                 \
  TP_FN T tp_bit_not(T x) { return ~x; }                                                         \
  TP_FN T tp_shl(T a, T b) { return (U)b < (U)W ? tp_wrap((U)a << (U)b) : (T)0; }                \
  TP_FN T tp_shr(T a, T b) { return a >> ((U)b < (U)W ? b : (T)(W - 1)); }

TP_BIT_OPS(int, unsigned, 32)
TP_BIT_OPS(long long, unsigned long long, 64)

// Integer powers wrap; negative exponents give 1 for base 1, +-1 for base -1, else 0.
TP_FN long long tp_pow(long long base, long long e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  unsigned long long b = (unsigned long long)base, acc = 1, k = (unsigned long long)e;
  while (k > 0) {
    if (k & 1) acc *= b;
    b *= b;
    k >>= 1;
  }
  return (long long)acc;
}
TP_FN int tp_pow(int a, int b) { return (int)tp_pow((long long)a, (long long)b); }

// ---- elementwise ops: bool ----------------------------------------------------------------------

TP_FN bool tp_add(bool a, bool b) { return a || b; }
TP_FN bool tp_mul(bool a, bool b) { return a && b; }
TP_FN bool tp_maximum(bool a, bool b) { return a || b; }
TP_FN bool tp_minimum(bool a, bool b) { return a && b; }
TP_FN bool tp_abs(bool x) { return x; }
TP_FN bool tp_sign(bool x) { return x; }
TP_FN bool tp_square(bool x) { return x; }
TP_FN bool tp_logical_not(bool x) { return !x; }
TP_FN bool tp_bit_and(bool a, bool b) { return a && b; }
TP_FN bool tp_bit_or(bool a, bool b) { return a || b; }
TP_FN bool tp_bit_xor(bool a, bool b) { return a != b; }
TP_FN bool tp_bit_not(bool x) { return !x; }
TP_FN bool tp_logical_and(bool a, bool b) { return a && b; }
TP_FN bool tp_logical_or(bool a, bool b) { return a || b; }
TP_FN bool tp_logical_xor(bool a, bool b) { return a != b; }
TP_FN bool tp_eq(bool a, bool b) { return a == b; }
TP_FN bool tp_ne(bool a, bool b) { return a != b; }
TP_FN bool tp_lt(bool a, bool b) { return !a && b; }
TP_FN bool tp_le(bool a, bool b) { return !a || b; }
TP_FN bool tp_gt(bool a, bool b) { return a && !b; }
TP_FN bool tp_ge(bool a, bool b) { return a || !b; }
TP_FN bool tp_where(bool c, bool a, bool b) { return c ? a : b; }

// ---- block-level reduction trees ----------------------------------------------------------------
// Every thread of the block calls these with uniform control flow and gets the block's result.
// Blocks are a multiple of 32 threads, at most 1024.

template <class T, class F> TP_FN T tp_warp_all(T v, F f) {
  for (int m = 16; m >= 1; m >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
template <class T, class F> TP_FN T tp_block_all(T v, T identity, T* smem, F f) {
  v = tp_warp_all(v, f);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const unsigned warps = (blockDim.x + 31u) >> 5;
  v = lane < warps ? smem[lane] : identity;
  v = tp_warp_all(v, f);
  __syncthreads();
  return v;
}

// Online softmax state of a row: running maximum `m` and the sum `s` of exp(v - m). Merging
// rescales the sum of the smaller maximum (a state whose maximum is the merged one keeps its sum
// as is, so rows of -inf stay NaN as eager's softmax gives).
template <class T> TP_FN void tp_softmax_merge(T& m, T& s, T m2, T s2) {
  T mm = tp_maximum(m, m2);
  T a = m == mm ? s : s * (T)tp_exp((double)(m - mm));
  T b = m2 == mm ? s2 : s2 * (T)tp_exp((double)(m2 - mm));
  m = mm;
  s = a + b;
}
template <class T> TP_FN void tp_softmax_push(T& m, T& s, T v) {
  if (v > m) {
    s = s * (T)tp_exp((double)(m - v)) + (T)1;
    m = v;
  } else {
    s = s + (T)tp_exp((double)(v - m));
  }
}
template <class T> TP_FN void tp_softmax_block(T& m, T& s, T* sm_m, T* sm_s) {
  for (int k = 16; k >= 1; k >>= 1) {
    T m2 = __shfl_xor_sync(0xffffffffu, m, k);
    T s2 = __shfl_xor_sync(0xffffffffu, s, k);
    tp_softmax_merge(m, s, m2, s2);
  }
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sm_m[warp] = m;
    sm_s[warp] = s;
  }
  __syncthreads();
  const unsigned warps = (blockDim.x + 31u) >> 5;
  m = lane < warps ? sm_m[lane] : sm_m[0];
  s = lane < warps ? sm_s[lane] : (T)0;
  for (int k = 16; k >= 1; k >>= 1) {
    T m2 = __shfl_xor_sync(0xffffffffu, m, k);
    T s2 = __shfl_xor_sync(0xffffffffu, s, k);
    tp_softmax_merge(m, s, m2, s2);
  }
  __syncthreads();
}

#endif  // TP_PRELUDE
