// Thin wrappers over recurrent.cuh: one thread per (row, hidden channel).
#include "recurrent.cuh"

#define PB_LSTM_STEP(NAME, T)                                                                   \
  extern "C" __global__ void NAME(const T* gx, const T* gh, const T* b_hh, const float* c,      \
                                  const float* done, int batch, int hidden, float* h_out,       \
                                  float* c_out) {                                               \
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;                             \
    if (i >= (long long)batch * hidden) return;                                                 \
    long long b = i / hidden;                                                                   \
    int j = (int)(i - b * hidden);                                                              \
    pb::lstm_cell<T>(gx, gh, b_hh, c, done && done[b] != 0.0f, hidden, b, j, h_out, c_out);     \
  }

#define PB_MINGRU_STEP(NAME, T)                                                                 \
  extern "C" __global__ void NAME(const T* kv, const float* h, const float* done, int batch,    \
                                  int hidden, float* h_out) {                                   \
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;                             \
    if (i >= (long long)batch * hidden) return;                                                 \
    long long b = i / hidden;                                                                   \
    int j = (int)(i - b * hidden);                                                              \
    pb::mingru_cell<T>(kv, h, done && done[b] != 0.0f, hidden, b, j, h_out);                    \
  }

PB_LSTM_STEP(lstm_step_f32, float)
PB_LSTM_STEP(lstm_step_bf16, pb::bf16)
PB_MINGRU_STEP(mingru_step_f32, float)
PB_MINGRU_STEP(mingru_step_bf16, pb::bf16)

extern "C" __global__ void mingru_scan_fwd_f32(const float* kv, const float* h0, float* h,
                                               int batch, int steps, int hidden) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)batch * hidden) return;
  long long b = i / hidden;
  pb::mingru_scan_fwd<float>(kv, h0, h, steps, hidden, b, (int)(i - b * hidden));
}

extern "C" __global__ void mingru_scan_bwd_f32(const float* kv, const float* h0, const float* h,
                                               const float* grad_h, float* grad_kv,
                                               float* grad_h0, int batch, int steps, int hidden) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)batch * hidden) return;
  long long b = i / hidden;
  pb::mingru_scan_bwd<float>(kv, h0, h, grad_h, grad_kv, grad_h0, steps, hidden, b,
                             (int)(i - b * hidden));
}
