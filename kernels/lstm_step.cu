// Thin wrapper over lstm_step.cuh: one thread per (row, hidden channel).
#include "lstm_step.cuh"

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

PB_LSTM_STEP(lstm_step_f32, float)
PB_LSTM_STEP(lstm_step_bf16, pb::bf16)
