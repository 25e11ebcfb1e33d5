// The kernels' bodies (kernels/*.cuh) compiled for the CPU: the extension appliance._hostkernels.
//
// Each pb_host_* function runs over a range of rows what a CUDA kernel runs as one thread per row
// (or per row and channel), split over `threads` OpenMP threads by rows, on float32 CPU tensors that
// appliance/gpu/host.py passes as raw pointers through ctypes (which releases the GIL for the call).
// The bodies are the very text the GPU compiles, so the CPU trainer and the GPU one share their math;
// appliance.gpu.kernels dispatches here for CPU tensors (PUFFER_KERNELS=reference: torch instead).
#include <Python.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PB_X86 1
#endif

#include "advantage.cuh"
#include "mingru_scan.cuh"
#include "mingru_step.cuh"
#include "optim_step.cuh"
#include "prio_sample.cuh"
#include "sample_logits.cuh"

using namespace pb;

namespace {

// Rows [0, rows) in `threads` contiguous parts, run by OpenMP's team on the calling thread: the
// one torch's own ops use (torch loads libgomp first and this library shares it), so no thread is
// started and none of torch's workers is left spinning beside ours. Below `min_rows` rows a part,
// fewer threads.
template <typename F>
void split_rows(i64 rows, int threads, i64 min_rows, F body) {
  i64 parts = threads < 1 ? 1 : threads;
  if (min_rows > 0 && rows / min_rows < parts) parts = rows / min_rows > 0 ? rows / min_rows : 1;
  if (parts <= 1) {
    body((i64)0, rows);
    return;
  }
  const i64 step = (rows + parts - 1) / parts;
#pragma omp parallel for num_threads((int)parts) schedule(static, 1)
  for (i64 p = 0; p < parts; ++p) {
    const i64 lo = p * step, hi = lo + step < rows ? lo + step : rows;
    if (lo < hi) body(lo, hi);
  }
}

}  // namespace

extern "C" {

// advantage.cuh over [rows, horizon] row-major tensors.
void pb_host_advantage(const float* values, const float* rewards, const float* dones,
                       const float* ratios, float* adv, int rows, int horizon, float gamma,
                       float gamma_lambda, float rho_clip, float c_clip, int rho_on_reward,
                       int threads) {
  split_rows(rows, threads, 1024, [=](i64 lo, i64 hi) {
    for (i64 r = lo; r < hi; ++r) {
      const i64 o = r * horizon;
      advantage_row(values + o, rewards + o, dones + o, ratios + o, adv + o, horizon, gamma,
                    gamma_lambda, rho_clip, c_clip, rho_on_reward);
    }
  });
}

// prio_sample.cuh's priorities, keyed by the caller's uniforms u in [0, 1) (the CPU trainer draws
// them from its torch generator): key = log(1 - u) / prio, -inf where prio is 0.
void pb_host_prio_keys_uniform(const float* adv, const double* uniform, int segments, int horizon,
                               double alpha, double floor, double* prio, double* key, int threads) {
  split_rows(segments, threads, 1024, [=](i64 lo, i64 hi) {
    for (i64 s = lo; s < hi; ++s) {
      const double p = prio_row(adv + s * horizon, horizon, alpha, floor);
      prio[s] = p;
      key[s] = p > 0.0 ? log1p(-uniform[s]) / p : (double)neg_inf();
    }
  });
}

// sample_logits.cuh over n agents: out [n, ld] (each head's logits, then the value at column
// `width`), mask [n, width] (nonzero = allowed) or null, ids (the agents' Philox keys) or null.
void pb_host_sample_logits(const float* out, long long ld, int width, const int* nvec, int heads,
                           const unsigned char* mask, unsigned long long seed,
                           unsigned long long step, const long long* ids, int n, long long* action,
                           float* logprob, float* value, int threads) {
  split_rows(n, threads, 4096, [=](i64 lo, i64 hi) {
    for (i64 i = lo; i < hi; ++i)
      sample_logits_row<float>(out, ld, width, nvec, heads, mask, seed, step, (u32)i,
                               ids ? (u32)ids[i] : (u32)i, action, logprob, value);
  });
}

// mingru_step.cuh: kv [batch, 2H], h [batch, H] -> h_out [batch, H]; done may be null.
void pb_host_mingru_step(const float* kv, const float* h, const float* done, int batch, int hidden,
                         float* h_out, int threads) {
  split_rows(batch, threads, 256, [=](i64 lo, i64 hi) {
    for (i64 b = lo; b < hi; ++b)
      for (int j = 0; j < hidden; ++j)
        mingru_cell<float>(kv, h, done && done[b] != 0.0f, hidden, b, j, h_out);
  });
}

// mingru_scan.cuh, forward: kv [batch, steps, 2H], h0 [batch, H] -> h [batch, steps, H].
void pb_host_mingru_scan_fwd(const float* kv, const float* h0, float* h, int batch, int steps,
                             int hidden, int threads) {
  split_rows(batch, threads, 16, [=](i64 lo, i64 hi) {
    for (i64 b = lo; b < hi; ++b)
      for (int j = 0; j < hidden; ++j) mingru_scan_fwd<float>(kv, h0, h, steps, hidden, b, j);
  });
}

// mingru_scan.cuh, backward: dL/dh -> dL/dkv, dL/dh0.
void pb_host_mingru_scan_bwd(const float* kv, const float* h0, const float* h, const float* grad_h,
                             float* grad_kv, float* grad_h0, int batch, int steps, int hidden,
                             int threads) {
  split_rows(batch, threads, 16, [=](i64 lo, i64 hi) {
    for (i64 b = lo; b < hi; ++b)
      for (int j = 0; j < hidden; ++j)
        mingru_scan_bwd<float>(kv, h0, h, grad_h, grad_kv, grad_h0, steps, hidden, b, j);
  });
}

// optim_step.cuh over the flat parameter buffer's n elements (scal = {step_size, bc2_sqrt}). Its
// fmaf calls are a library call in a portable x86-64 build (no -mfma), so
// where the CPU has FMA units the loop runs from a copy compiled for them: the same rounding.
#if defined(__x86_64__) && defined(__GNUC__)
#define PB_FMA_CLONE __attribute__((target("fma")))
static bool cpu_has_fma() { return __builtin_cpu_supports("fma"); }
#else
#define PB_FMA_CLONE
static bool cpu_has_fma() { return false; }
#endif

static void adam_range(float* p, const float* g, float* m, float* v, i64 lo, i64 hi,
                       float step_size, float bc2_sqrt, float w1, float beta2, float w2, float eps,
                       float weight_decay) {
  for (i64 i = lo; i < hi; ++i)
    adam_elem(p, g, m, v, i, step_size, bc2_sqrt, w1, beta2, w2, eps, weight_decay);
}

PB_FMA_CLONE static void adam_range_fma(float* p, const float* g, float* m, float* v, i64 lo, i64 hi,
                                        float step_size, float bc2_sqrt, float w1, float beta2,
                                        float w2, float eps, float weight_decay) {
  for (i64 i = lo; i < hi; ++i)
    adam_elem(p, g, m, v, i, step_size, bc2_sqrt, w1, beta2, w2, eps, weight_decay);
}

PB_FMA_CLONE static void muon_momentum_range_fma(const float* g, float* buf, float* u, i64 lo,
                                                 i64 hi, float beta) {
  for (i64 i = lo; i < hi; ++i) muon_momentum_elem(g, buf, u, i, beta);
}

void pb_host_adam_step(float* p, const float* g, float* m, float* v, long long n, const float* scal,
                       float w1, float beta2, float w2, float eps, float weight_decay,
                       int threads) {
  const float step_size = scal[0], bc2_sqrt = scal[1];
  const bool fma = cpu_has_fma();
  split_rows(n, threads, 1 << 16, [=](i64 lo, i64 hi) {
    if (fma)
      adam_range_fma(p, g, m, v, lo, hi, step_size, bc2_sqrt, w1, beta2, w2, eps, weight_decay);
    else
      adam_range(p, g, m, v, lo, hi, step_size, bc2_sqrt, w1, beta2, w2, eps, weight_decay);
  });
}

void pb_host_muon_momentum(const float* g, float* buf, float* u, long long n, float beta,
                           int threads) {
  const bool fma = cpu_has_fma();
  split_rows(n, threads, 1 << 16, [=](i64 lo, i64 hi) {
    if (fma)
      muon_momentum_range_fma(g, buf, u, lo, hi, beta);
    else
      for (i64 i = lo; i < hi; ++i) muon_momentum_elem(g, buf, u, i, beta);
  });
}

void pb_host_muon_apply(float* p, const float* u, long long n, const float* lr, int threads) {
  const float rate = lr[0];
  split_rows(n, threads, 1 << 16, [=](i64 lo, i64 hi) {
    for (i64 i = lo; i < hi; ++i) muon_apply_elem(p, u, i, rate);
  });
}

}  // extern "C"

// The LSTM's gate math for the CPU rollout: gates [batch, 4H] (i, f, g, o pre-activations of both
// products, rows contiguous), bias [4H] (both biases' sum, added here so that the products need no
// broadcast copy of it), c [batch, H] at row stride ldc -> h_out, c_out [batch, H] (c_out may be c).
// The cell's function (lstm_step.cuh's scalar text for a row's leftover units), in SIMD registers,
// eight lanes with AVX2 and FMA (`isa` 2), eight with AVX and no FMA (1: the SSE2 build's arithmetic,
// the same results to the bit), four with SSE2 (0); `isa` is the emulated kind's where a CPU acts as a
// lesser one (appliance/gpu/host.py), in three divisions a unit instead of five: with
// e_x = exp(-x) (Cephes' polynomial less its highest term, after a one-constant range reduction:
// about 1e-7 relative, an ulp),
//   sigmoid(f) * c        = c / (1 + e_f)
//   sigmoid(i) * tanh(g)  = (1 - e_2g) / ((1 + e_i) (1 + e_2g))
//   sigmoid(o) * tanh(c') = (1 - e_2c') / ((1 + e_o) (1 + e_2c'))
// exp's argument clamped to [-44, 44], so that a product of two stays finite; near 0 tanh's
// numerator cancels to an absolute error of an ulp of 1 (tests/test_host_kernels.py bounds both
// outputs by torch's own float32 error).
namespace {

// A row's leftover units (hidden not a multiple of the lanes): the CUDA kernel's text.
inline void gates_scalar(const float* g, const float* bias, const float* cp, float* ho, float* co,
                         int hidden, int j) {
  const float i = sigmoidf(g[j] + bias[j]), f = sigmoidf(g[hidden + j] + bias[hidden + j]);
  const float gg = tanhf(g[2 * hidden + j] + bias[2 * hidden + j]);
  const float o = sigmoidf(g[3 * hidden + j] + bias[3 * hidden + j]);
  const float cn = f * cp[j] + i * gg;
  co[j] = cn;
  ho[j] = o * tanhf(cn);
}

// bfloat16 is float32's upper half: widening it is exact.
inline float bf16_float(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The same for bfloat16 pre-activations (the bf16 rollout's product, not widened first).
inline void gates_scalar(const uint16_t* g, const float* bias, const float* cp, float* ho, float* co,
                         int hidden, int j) {
  const float wide[4] = {bf16_float(g[j]), bf16_float(g[hidden + j]), bf16_float(g[2 * hidden + j]),
                         bf16_float(g[3 * hidden + j])};
  const float i = sigmoidf(wide[0] + bias[j]), f = sigmoidf(wide[1] + bias[hidden + j]);
  const float gg = tanhf(wide[2] + bias[2 * hidden + j]);
  const float o = sigmoidf(wide[3] + bias[3 * hidden + j]);
  const float cn = f * cp[j] + i * gg;
  co[j] = cn;
  ho[j] = o * tanhf(cn);
}
}  // namespace

namespace {

// The largest int16 magnitude for a depth of `depth`: depth * limit^2 sums stay inside int32.
int i16_limit(int depth) {
  const double q = std::floor(std::sqrt(2147483647.0 / (depth > 0 ? depth : 1)));
  return q > 16383 ? 16383 : (int)q;
}

// n values to int16 at a scale that maps their largest magnitude to `limit` (zero-padded to
// `depth`); *scale is the value of one step (0 for an all-zero row, NaN if any is not finite).
void i16_quantize(const float* src, int n, int depth, int limit, int16_t* dst, float* scale) {
  float m = 0.0f;
  bool finite = true;
  int j = 0;
#if PB_X86
  // four lanes at a time (SSE2, every x86-64 CPU): the magnitude's maximum, and whether any lane
  // is NaN or infinite (x - x is NaN exactly then)
  const __m128 sign = _mm_set1_ps(-0.0f);
  __m128 vmax = _mm_setzero_ps(), bad = _mm_setzero_ps();
  for (; j + 4 <= n; j += 4) {
    const __m128 v = _mm_loadu_ps(src + j);
    vmax = _mm_max_ps(vmax, _mm_andnot_ps(sign, v));
    bad = _mm_or_ps(bad, _mm_cmpunord_ps(_mm_sub_ps(v, v), _mm_sub_ps(v, v)));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, vmax);
  for (float l : lanes) m = l > m ? l : m;
  finite = _mm_movemask_ps(bad) == 0;
#endif
  for (; j < n; ++j) {
    const float a = std::fabs(src[j]);
    finite &= src[j] - src[j] == 0.0f;
    m = a > m ? a : m;
  }
  if (!finite || m == 0.0f) {
    *scale = finite ? 0.0f : NAN;
    std::memset(dst, 0, sizeof(int16_t) * depth);
    return;
  }
  const float inv = (float)limit / m;
  *scale = m / (float)limit;
  j = 0;
#if PB_X86
  // round to nearest (the default MXCSR mode) and pack eight at a time; |value| <= limit < 2^15
  const __m128 vinv = _mm_set1_ps(inv);
  for (; j + 8 <= n; j += 8) {
    const __m128i lo = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(src + j), vinv));
    const __m128i hi = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(src + j + 4), vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_packs_epi32(lo, hi));
  }
#endif
  for (; j < n; ++j) dst[j] = (int16_t)std::nearbyint(src[j] * inv);
  for (; j < depth; ++j) dst[j] = 0;
}

// Rows a block of the int16 products: each weight vector loaded is used this many times.
constexpr int kI16Rows = 4;

// One operand of the products, quantized: `rows` [n_rows, depth] (depth even, zero-padded) with a
// scale a row, and the weights packed [depth / 2, cols, 2] with a scale a column.
struct I16Part {
  const int16_t* rows;
  const float* row_scale;
  const int16_t* packed;
  const float* col_scale;
  int depth;
};

// Weights w [n_out, k] (row-major) packed as [depth / 2, cols, 2]: for each pair of depths, each
// column's two values side by side; columns past n_out and depths past k are zero.
void i16_pack_weights(const float* w, int k, int depth, int n_out, int cols, int limit,
                      int16_t* packed, float* col_scale) {
  std::vector<int16_t> row(depth);
  std::memset(packed, 0, sizeof(int16_t) * (size_t)depth * cols);
  for (int c = 0; c < cols; ++c) {
    if (c >= n_out) {
      col_scale[c] = 0.0f;
      continue;
    }
    i16_quantize(w + (i64)c * k, k, depth, limit, row.data(), &col_scale[c]);
    for (int d = 0; d < depth; ++d) packed[((i64)(d / 2) * cols + c) * 2 + d % 2] = row[d];
  }
}

}  // namespace

#if PB_X86
namespace {

// exp(x) for x clamped to [-44, 44]. The bound comes first in min and max, which return their second
// operand where either is NaN: a NaN stays NaN, so NaN observations still reach the trainer's check.
// ROUND_I rounds to the nearest integer, as an int vector.
#define PB_EXP_BODY(V, SET, ADD, MUL, FMADD, FNMADD, ROUND_I, TO_F, SHL, ADDI, CAST, MINV, MAXV)       \
  x = MINV(SET(44.0f), MAXV(SET(-44.0f), x));                                                        \
  const auto k = ROUND_I(MUL(x, SET(1.44269504088896341f)));                                          \
  const V n = TO_F(k);                                                                                \
  const V r = FNMADD(n, SET(0.693147182f), x);                                                       \
  V p = SET(1.3981999507e-3f);                                                                        \
  p = FMADD(p, r, SET(8.3334519073e-3f));                                                             \
  p = FMADD(p, r, SET(4.1665795894e-2f));                                                             \
  p = FMADD(p, r, SET(1.6666665459e-1f));                                                             \
  p = FMADD(p, r, SET(5.0000001201e-1f));                                                             \
  p = FMADD(MUL(p, r), r, ADD(r, SET(1.0f)));                                                         \
  return MUL(p, CAST(SHL(ADDI(k, 127), 23)));

// Two passes over a row: c' (and 1 + e_o, parked in h_out), then h. Each pass's iterations are
// independent of one another, so the CPU overlaps them.
// GLOAD reads W pre-activations (float32, or bfloat16 widened). Row b's are at gates' row b - g0
// (0 for a whole batch's; a tile's first row for the fused int16 step).
#define PB_GATES_BODY(V, W, LOAD, GLOAD, STORE, SET, ADD, SUB, MUL, FMADD, DIV, EXP, SCALAR)      \
  for (i64 b = lo; b < hi; ++b) {                                                                     \
    const auto* g = gates + (b - g0) * 4 * hidden;                                                    \
    const float* cp = c + b * ldc;                                                                    \
    float* ho = h_out + b * hidden;                                                                   \
    float* co = c_out + b * hidden;                                                                   \
    const int vec = hidden - hidden % W;                                                              \
    for (int j = 0; j < vec; j += W) {                                                                \
      const V one = SET(1.0f), minus_one = SET(-1.0f), minus_two = SET(-2.0f);                        \
      const V ei = EXP(MUL(ADD(GLOAD(g + j), LOAD(bias + j)), minus_one));                            \
      const V ef = EXP(MUL(ADD(GLOAD(g + hidden + j), LOAD(bias + hidden + j)), minus_one));          \
      const V eg = EXP(MUL(ADD(GLOAD(g + 2 * hidden + j), LOAD(bias + 2 * hidden + j)), minus_two));  \
      const V eo = EXP(MUL(ADD(GLOAD(g + 3 * hidden + j), LOAD(bias + 3 * hidden + j)), minus_one));  \
      const V ig = DIV(SUB(one, eg), MUL(ADD(one, ei), ADD(one, eg)));                                \
      STORE(co + j, ADD(DIV(LOAD(cp + j), ADD(one, ef)), ig));                                        \
      STORE(ho + j, ADD(one, eo));                                                                    \
    }                                                                                                 \
    for (int j = 0; j < vec; j += W) {                                                                \
      const V one = SET(1.0f);                                                                        \
      const V ec = EXP(MUL(LOAD(co + j), SET(-2.0f)));                                                \
      STORE(ho + j, DIV(SUB(one, ec), MUL(LOAD(ho + j), ADD(one, ec))));                              \
    }                                                                                                 \
    for (int j = vec; j < hidden; ++j) SCALAR(g, bias, cp, ho, co, hidden, j);                       \
  }

// SSE2, every x86-64 CPU: no FMA (a multiply, then an add).
inline __m128 sse_fmadd(__m128 a, __m128 b, __m128 c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
inline __m128 sse_fnmadd(__m128 a, __m128 b, __m128 c) { return _mm_sub_ps(c, _mm_mul_ps(a, b)); }
inline __m128i sse_addi(__m128i a, int k) { return _mm_add_epi32(a, _mm_set1_epi32(k)); }
inline __m128 sse_exp(__m128 x) {
  PB_EXP_BODY(__m128, _mm_set1_ps, _mm_add_ps, _mm_mul_ps, sse_fmadd, sse_fnmadd, _mm_cvtps_epi32,
              _mm_cvtepi32_ps, _mm_slli_epi32, sse_addi, _mm_castsi128_ps, _mm_min_ps, _mm_max_ps)
}
void gates_sse2(const float* gates, const float* bias, const float* c, i64 ldc, float* h_out,
                float* c_out, int hidden, i64 lo, i64 hi, i64 g0 = 0) {
  PB_GATES_BODY(__m128, 4, _mm_loadu_ps, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, _mm_add_ps,
                _mm_sub_ps, _mm_mul_ps, sse_fmadd, _mm_div_ps, sse_exp, gates_scalar)
}

// AVX2 with FMA.
#define PB_AVX2 __attribute__((target("avx2,fma")))
PB_AVX2 inline __m256i avx_addi(__m256i a, int k) { return _mm256_add_epi32(a, _mm256_set1_epi32(k)); }
PB_AVX2 inline __m256 avx_exp(__m256 x) {
  PB_EXP_BODY(__m256, _mm256_set1_ps, _mm256_add_ps, _mm256_mul_ps, _mm256_fmadd_ps,
              _mm256_fnmadd_ps, _mm256_cvtps_epi32, _mm256_cvtepi32_ps, _mm256_slli_epi32, avx_addi,
              _mm256_castsi256_ps, _mm256_min_ps, _mm256_max_ps)
}
PB_AVX2 void gates_avx2(const float* gates, const float* bias, const float* c, i64 ldc,
                        float* h_out, float* c_out, int hidden, i64 lo, i64 hi, i64 g0 = 0) {
  PB_GATES_BODY(__m256, 8, _mm256_loadu_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
                _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_fmadd_ps, _mm256_div_ps, avx_exp,
                gates_scalar)
}
// Eight bfloat16 pre-activations widened to float32: each one's bits moved to the upper half.
PB_AVX2 inline __m256 bf16_load8(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
PB_AVX2 void gates_avx2_bf16(const uint16_t* gates, const float* bias, const float* c, i64 ldc,
                             float* h_out, float* c_out, int hidden, i64 lo, i64 hi, i64 g0 = 0) {
  PB_GATES_BODY(__m256, 8, _mm256_loadu_ps, bf16_load8, _mm256_storeu_ps, _mm256_set1_ps,
                _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_fmadd_ps, _mm256_div_ps, avx_exp,
                gates_scalar)
}

// AVX without AVX2 or FMA (Sandy Bridge, Bulldozer): eight float lanes, the integer steps of exp on
// two four-lane halves, and SSE2's multiply-then-add.
#define PB_AVX __attribute__((target("avx")))
PB_AVX inline __m256i avx1_join(__m128i lo, __m128i hi) {
  return _mm256_insertf128_si256(_mm256_castsi128_si256(lo), hi, 1);
}
PB_AVX inline __m256i avx1_addi(__m256i a, int k) {
  const __m128i kk = _mm_set1_epi32(k);
  return avx1_join(_mm_add_epi32(_mm256_castsi256_si128(a), kk),
                   _mm_add_epi32(_mm256_extractf128_si256(a, 1), kk));
}
PB_AVX inline __m256i avx1_slli(__m256i a, int n) {
  return avx1_join(_mm_slli_epi32(_mm256_castsi256_si128(a), n),
                   _mm_slli_epi32(_mm256_extractf128_si256(a, 1), n));
}
PB_AVX inline __m256 avx1_fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_add_ps(_mm256_mul_ps(a, b), c); }
PB_AVX inline __m256 avx1_fnmadd(__m256 a, __m256 b, __m256 c) { return _mm256_sub_ps(c, _mm256_mul_ps(a, b)); }
PB_AVX inline __m256 avx1_exp(__m256 x) {
  PB_EXP_BODY(__m256, _mm256_set1_ps, _mm256_add_ps, _mm256_mul_ps, avx1_fmadd, avx1_fnmadd,
              _mm256_cvtps_epi32, _mm256_cvtepi32_ps, avx1_slli, avx1_addi, _mm256_castsi256_ps,
              _mm256_min_ps, _mm256_max_ps)
}
PB_AVX void gates_avx(const float* gates, const float* bias, const float* c, i64 ldc, float* h_out,
                      float* c_out, int hidden, i64 lo, i64 hi, i64 g0 = 0) {
  PB_GATES_BODY(__m256, 8, _mm256_loadu_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
                _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, avx1_fmadd, _mm256_div_ps, avx1_exp,
                gates_scalar)
}

// The rollout's LSTM products in 16-bit integers (pb_host_lstm_products_i16, below), in blocks of
// four rows by 2W columns, W int32 lanes a vector. A block's rows are first written out as
// broadcasts (each pair of int16 values repeated across a vector, once a row block, read by all its
// column blocks); the packed weights hold, for each pair of depths, the columns' two values side by
// side, so one multiply-add (pmaddwd) sums two depths of W columns, and its row operand comes from
// memory. Each part (x, then h) has its own scales:
// out = sum_x * sx[row] * wx[col] + sum_h * sh[row] * wh[col].
// Row i goes to gates' row i, or with TILED to row i - i0 of a four-row tile, and `epi(i0, rows)`
// follows each block of rows (the fused step's gate pass over the tile while it is in L1).
#define PB_I16_KERNEL(VI, VF, W, LOADI, LOADA, MADD, ADDI, ZEROI, CVT, MULF, ADDF, LOADF,        \
                      SET1F, STOREF)                                                                  \
  const I16Part* parts[2] = {&px, &ph};                                                               \
  std::vector<int32_t> bcast((size_t)R * (px.depth + ph.depth) / 2 * W);                               \
  for (i64 i0 = lo; i0 < hi; i0 += R) {                                                               \
    const int rows = hi - i0 < R ? int(hi - i0) : R;                                                  \
    i64 row[R];                                                                                       \
    for (int r = 0; r < R; ++r) row[r] = i0 - lo + (r < rows ? r : 0);                                \
    int32_t* bc = bcast.data();                                                                       \
    for (const I16Part* q : parts)                                                                    \
      for (int p = 0; p < q->depth / 2; ++p)                                                          \
        for (int r = 0; r < R; ++r, bc += W) {                                                        \
          const int32_t pair = reinterpret_cast<const int32_t*>(q->rows + row[r] * q->depth)[p];      \
          for (int l = 0; l < W; ++l) bc[l] = pair;                                                   \
        }                                                                                             \
    for (int n = 0; n < cols; n += 2 * W) {                                                           \
      VF out[R][2];                                                                                   \
      const int32_t* b = bcast.data();                                                                \
      for (int part = 0; part < 2; ++part) {                                                          \
        const I16Part& q = *parts[part];                                                              \
        const int pairs = q.depth / 2;                                                                \
        VI acc[R][2];                                                                                 \
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = ZEROI();                                  \
        const int16_t* w = q.packed + 2 * n;                                                          \
        for (int p = 0; p < pairs; ++p, w += 2 * cols, b += R * W) {                                  \
          const VI w0 = LOADI(w), w1 = LOADI(w + 2 * W);                                              \
          for (int r = 0; r < R; ++r) {                                                               \
            acc[r][0] = ADDI(acc[r][0], MADD(LOADA(b + r * W), w0));                                  \
            acc[r][1] = ADDI(acc[r][1], MADD(LOADA(b + r * W), w1));                                  \
          }                                                                                           \
        }                                                                                             \
        const VF s0 = LOADF(q.col_scale + n), s1 = LOADF(q.col_scale + n + W);                        \
        for (int r = 0; r < R; ++r) {                                                                 \
          const VF rs = SET1F(q.row_scale[row[r]]);                                                   \
          const VF f0 = MULF(MULF(CVT(acc[r][0]), s0), rs), f1 = MULF(MULF(CVT(acc[r][1]), s1), rs);  \
          out[r][0] = part == 0 ? f0 : ADDF(out[r][0], f0);                                           \
          out[r][1] = part == 0 ? f1 : ADDF(out[r][1], f1);                                           \
        }                                                                                             \
      }                                                                                               \
      alignas(32) float tile[2 * W];                                                                  \
      for (int r = 0; r < rows; ++r) {                                                                \
        const bool whole = n + 2 * W <= n_out;                                                        \
        float* dst = gates + (TILED ? r : i0 + r) * n_out;                                            \
        float* o = whole ? dst + n : tile;                                                            \
        STOREF(o, out[r][0]);                                                                         \
        STOREF(o + W, out[r][1]);                                                                     \
        if (!whole)                                                                                   \
          for (int j = n; j < n_out; ++j) dst[j] = tile[j - n];                                       \
      }                                                                                               \
    }                                                                                                 \
    epi(i0, rows);                                                                                    \
  }

inline __m128i i16_load128(const int16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
// the broadcasts' buffer is malloc's (16-byte aligned) and read at multiples of 16 bytes
inline __m128i i16_load128a(const int32_t* p) { return _mm_load_si128(reinterpret_cast<const __m128i*>(p)); }
template <bool TILED, class Epi>
void i16_sse2(const I16Part& px, const I16Part& ph, float* gates, int n_out, int cols, i64 lo,
              i64 hi, Epi epi) {
  constexpr int W = 4, R = kI16Rows;
  PB_I16_KERNEL(__m128i, __m128, W, i16_load128, i16_load128a, _mm_madd_epi16,
                _mm_add_epi32, _mm_setzero_si128, _mm_cvtepi32_ps, _mm_mul_ps, _mm_add_ps,
                _mm_loadu_ps, _mm_set1_ps, _mm_storeu_ps)
}

PB_AVX2 inline __m256i i16_load256(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
PB_AVX2 inline __m256i i16_load256a(const int32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
template <bool TILED, class Epi>
PB_AVX2 void i16_avx2(const I16Part& px, const I16Part& ph, float* gates, int n_out, int cols,
                      i64 lo, i64 hi, Epi epi) {
  constexpr int W = 8, R = kI16Rows;
  PB_I16_KERNEL(__m256i, __m256, W, i16_load256, i16_load256a, _mm256_madd_epi16,
                _mm256_add_epi32, _mm256_setzero_si256, _mm256_cvtepi32_ps, _mm256_mul_ps,
                _mm256_add_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps)
}

}  // namespace
#endif

#if !PB_X86
namespace {
void i16_scalar(const I16Part& px, const I16Part& ph, float* gates, int n_out, int cols, i64 lo,
                i64 hi) {
  for (i64 i = lo; i < hi; ++i)
    for (int c = 0; c < n_out; ++c) {
      float total = 0.0f;
      for (const I16Part* q : {&px, &ph}) {
        const int16_t* a = q->rows + (i - lo) * q->depth;
        int32_t sum = 0;
        for (int d = 0; d < q->depth; ++d) sum += (int32_t)a[d] * q->packed[((i64)(d / 2) * cols + c) * 2 + d % 2];
        total += (float)sum * q->col_scale[c] * q->row_scale[i - lo];
      }
      gates[i * n_out + c] = total;
    }
}
}  // namespace
#endif

namespace {
// The widest build of the gate math this CPU can run: 2 (AVX2 and FMA), 1 (AVX), 0 (SSE2, or not x86).
int gates_isa() {
#if PB_X86
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  return __builtin_cpu_supports("avx") ? 1 : 0;
#else
  return 0;
#endif
}

// pb_host_lstm_gates' arithmetic over rows [lo, hi) in the `isa` build (a scalar loop off x86),
// row b's pre-activations at gates' row b - g0.
void gates_rows(int isa, const float* gates, const float* bias, const float* c, i64 ldc, float* h_out,
                float* c_out, int hidden, i64 lo, i64 hi, i64 g0) {
#if PB_X86
  if (isa >= 2)
    gates_avx2(gates, bias, c, ldc, h_out, c_out, hidden, lo, hi, g0);
  else if (isa == 1)
    gates_avx(gates, bias, c, ldc, h_out, c_out, hidden, lo, hi, g0);
  else
    gates_sse2(gates, bias, c, ldc, h_out, c_out, hidden, lo, hi, g0);
#else
  for (i64 b = lo; b < hi; ++b)
    for (int j = 0; j < hidden; ++j)
      gates_scalar(gates + (b - g0) * 4 * hidden, bias, c + b * ldc, h_out + b * hidden,
                   c_out + b * hidden, hidden, j);
#endif
}

// pb_host_lstm_products_i16 (gates given: the products alone) and pb_host_lstm_step_i16 (gates
// null: the products a tile at a time, then the gate math on bias, c into h_out, c_out).
void i16_cell(const float* x, i64 ldx, const float* h, i64 ldh, const float* w_ih, const float* w_hh,
              float* gates, const float* bias, const float* c, i64 ldc, float* h_out, float* c_out,
              int batch, int in, int hidden, int isa, int threads) {
  const int n_out = 4 * hidden;
  const int widest = gates_isa();
  if (isa > widest) isa = widest;
  const bool wide = isa >= 2;
  const int block = wide ? 16 : 8;
  const int cols = (n_out + block - 1) / block * block;
  const int dx = in + (in & 1), dh = hidden + (hidden & 1);
  const int lx = i16_limit(dx), lh = i16_limit(dh);
  std::vector<int16_t> wx((size_t)dx * cols), wh((size_t)dh * cols);
  std::vector<float> cx(cols), ch(cols);
  i16_pack_weights(w_ih, in, dx, n_out, cols, lx, wx.data(), cx.data());
  i16_pack_weights(w_hh, hidden, dh, n_out, cols, lh, wh.data(), ch.data());
  split_rows(batch, threads, 256, [&](i64 lo, i64 hi) {
    const i64 n = hi - lo;
    std::vector<int16_t> qx((size_t)n * dx), qh((size_t)n * dh);
    std::vector<float> rx(n), rh(n);
    for (i64 i = 0; i < n; ++i) {
      i16_quantize(x + (lo + i) * ldx, in, dx, lx, qx.data() + i * dx, &rx[i]);
      i16_quantize(h + (lo + i) * ldh, hidden, dh, lh, qh.data() + i * dh, &rh[i]);
    }
    const I16Part px{qx.data(), rx.data(), wx.data(), cx.data(), dx};
    const I16Part ph{qh.data(), rh.data(), wh.data(), ch.data(), dh};
#if PB_X86
    if (gates != nullptr) {
      const auto none = [](i64, int) {};
      if (wide)
        i16_avx2<false>(px, ph, gates, n_out, cols, lo, hi, none);
      else
        i16_sse2<false>(px, ph, gates, n_out, cols, lo, hi, none);
      return;
    }
    std::vector<float> tile((size_t)kI16Rows * n_out);
    float* t = tile.data();
    const auto pass = [=](i64 i0, int rows) {
      gates_rows(isa, t, bias, c, ldc, h_out, c_out, hidden, i0, i0 + rows, i0);
    };
    if (wide)
      i16_avx2<true>(px, ph, t, n_out, cols, lo, hi, pass);
    else
      i16_sse2<true>(px, ph, t, n_out, cols, lo, hi, pass);
#else
    std::vector<float> own;
    float* g = gates;
    if (g == nullptr) {
      own.resize((size_t)batch * n_out);  // rows lo..hi of it: the scalar build indexes by row
      g = own.data();
    }
    i16_scalar(px, ph, g, n_out, cols, lo, hi);
    if (gates == nullptr) gates_rows(isa, g, bias, c, ldc, h_out, c_out, hidden, lo, hi, 0);
#endif
  });
}
}  // namespace

extern "C" {

// The widest build of the gate math this CPU can run (gates_isa).
int pb_host_lstm_gates_isa() { return gates_isa(); }

void pb_host_lstm_gates(const float* gates, const float* bias, const float* c, long long ldc,
                        float* h_out, float* c_out, int batch, int hidden, int isa, int threads) {
  const int widest = pb_host_lstm_gates_isa();
  if (isa > widest) isa = widest;
  split_rows(batch, threads, 1024, [=](i64 lo, i64 hi) {
    gates_rows(isa, gates, bias, c, ldc, h_out, c_out, hidden, lo, hi, 0);
  });
}

// The same from bfloat16 pre-activations (the bf16 rollout's product as it comes), so that they
// are not widened to a float32 copy first: the AVX2 build (every CPU with bf16 units has AVX2), a
// scalar loop elsewhere. The float32 results equal pb_host_lstm_gates' on the widened gates.
void pb_host_lstm_gates_bf16(const uint16_t* gates, const float* bias, const float* c, long long ldc,
                             float* h_out, float* c_out, int batch, int hidden, int isa,
                             int threads) {
  const int widest = pb_host_lstm_gates_isa();
  if (isa > widest) isa = widest;
  split_rows(batch, threads, 1024, [=](i64 lo, i64 hi) {
#if PB_X86
    if (isa >= 2) {
      gates_avx2_bf16(gates, bias, c, ldc, h_out, c_out, hidden, lo, hi);
      return;
    }
#endif
    for (i64 b = lo; b < hi; ++b)
      for (int j = 0; j < hidden; ++j)
        gates_scalar(gates + b * 4 * hidden, bias, c + b * ldc, h_out + b * hidden,
                     c_out + b * hidden, hidden, j);
  });
}


// The CPU rollout's LSTM products in 16-bit integers: gates [batch, 4 * hidden] (float32, no
// biases) = x [batch, in] @ w_ih^T + h [batch, hidden] @ w_hh^T, the weights in torch's layout
// ([4 * hidden, in] and [4 * hidden, hidden], row-major). Each row of x and of h, and each weight
// row (a gate unit), is scaled so that its largest magnitude maps to the part's limit, rounded to
// int16 and summed in int32 (pmaddwd: two depths a multiply-add), then scaled back: about 1e-4 of
// the largest term (tests/test_host_kernels.py). A row or weight with a NaN or infinity gives NaN
// in the gates it reaches. The AVX2 build (isa 2) runs eight int32 lanes, the SSE2 build four.
void pb_host_lstm_products_i16(const float* x, long long ldx, const float* h, long long ldh,
                               const float* w_ih, const float* w_hh, float* gates, int batch,
                               int in, int hidden, int isa, int threads) {
  i16_cell(x, ldx, h, ldh, w_ih, w_hh, gates, nullptr, nullptr, 0, nullptr, nullptr, batch, in,
           hidden, isa, threads);
}

// The whole rollout step of the cell on those products: (h_out, c_out) [batch, hidden] from x, h, c
// (row stride ldc) and both biases' sum `bias` [4 * hidden], each block of four rows' products
// kept in a tile in L1 and put through pb_host_lstm_gates' arithmetic (the `isa` build) at once,
// so that the gates never go out to memory. Equal to pb_host_lstm_gates on
// pb_host_lstm_products_i16's gates (tests/test_host_kernels.py).
void pb_host_lstm_step_i16(const float* x, long long ldx, const float* h, long long ldh,
                           const float* w_ih, const float* w_hh, const float* bias, const float* c,
                           long long ldc, float* h_out, float* c_out, int batch, int in, int hidden,
                           int isa, int threads) {
  i16_cell(x, ldx, h, ldh, w_ih, w_hh, nullptr, bias, c, ldc, h_out, c_out, batch, in, hidden, isa,
           threads);
}

}  // extern "C"

// An importable module with no methods: appliance/gpu/host.py finds the library through it and
// calls the functions above with ctypes.
static struct PyModuleDef hostkernels = {PyModuleDef_HEAD_INIT, "_hostkernels",
                                         "The kernels' bodies compiled for the CPU (kernels/host.cpp).",
                                         -1, nullptr};

PyMODINIT_FUNC PyInit__hostkernels(void) { return PyModule_Create(&hostkernels); }
