// The kernels' bodies (kernels/*.cuh) compiled for the CPU: the extension appliance._hostkernels.
//
// Each pb_host_* function runs over a range of rows what a CUDA kernel runs as one thread per row
// (or per row and channel), split over `threads` std::threads by rows, on float32 CPU tensors that
// appliance/gpu/host.py passes as raw pointers through ctypes (which releases the GIL for the call).
// The bodies are the very text the GPU compiles, so the CPU trainer and the GPU one share their math;
// appliance.gpu.kernels dispatches here for CPU tensors (PUFFER_KERNELS=reference: torch instead).
#include <Python.h>

#include <thread>
#include <vector>

#include "advantage.cuh"
#include "mingru_scan.cuh"
#include "mingru_step.cuh"
#include "optim_step.cuh"
#include "prio_sample.cuh"
#include "sample_logits.cuh"

using namespace pb;

namespace {

// Rows [0, rows) in `threads` contiguous parts, the last on the calling thread. Below `min_rows`
// rows a part, fewer threads: a thread's start costs tens of microseconds.
template <typename F>
void split_rows(i64 rows, int threads, i64 min_rows, F body) {
  i64 parts = threads < 1 ? 1 : threads;
  if (min_rows > 0 && rows / min_rows < parts) parts = rows / min_rows > 0 ? rows / min_rows : 1;
  if (parts <= 1) {
    body((i64)0, rows);
    return;
  }
  std::vector<std::thread> pool;
  const i64 step = (rows + parts - 1) / parts;
  for (i64 p = 0; p + 1 < parts; ++p) {
    const i64 lo = p * step, hi = lo + step < rows ? lo + step : rows;
    if (lo >= hi) continue;
    try {
      pool.emplace_back(body, lo, hi);
    } catch (...) {  // no thread to be had (a process limit): this part on the calling thread
      body(lo, hi);
    }
  }
  const i64 lo = (parts - 1) * step;
  if (lo < rows) body(lo, rows);
  for (auto& t : pool) t.join();
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

// An importable module with no methods: appliance/gpu/host.py finds the library through it and
// calls the functions above with ctypes.
static struct PyModuleDef hostkernels = {PyModuleDef_HEAD_INIT, "_hostkernels",
                                         "The kernels' bodies compiled for the CPU (kernels/host.cpp).",
                                         -1, nullptr};

PyMODINIT_FUNC PyInit__hostkernels(void) { return PyModule_Create(&hostkernels); }
