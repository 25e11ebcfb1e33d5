// Thin wrapper over mingru_step.cuh: one thread per (row, hidden channel).
#include "mingru_step.cuh"

#define PB_MINGRU_STEP(NAME, T)                                                                 \
  extern "C" __global__ void NAME(const T* kv, const float* h, const float* done, int batch,    \
                                  int hidden, float* h_out) {                                   \
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;                             \
    if (i >= (long long)batch * hidden) return;                                                 \
    long long b = i / hidden;                                                                   \
    int j = (int)(i - b * hidden);                                                              \
    pb::mingru_cell<T>(kv, h, done && done[b] != 0.0f, hidden, b, j, h_out);                    \
  }

PB_MINGRU_STEP(mingru_step_f32, float)
PB_MINGRU_STEP(mingru_step_bf16, pb::bf16)
