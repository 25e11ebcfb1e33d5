// Thin wrappers over mingru_scan.cuh: one thread per (row, hidden channel), looping over time.
#include "mingru_scan.cuh"

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
