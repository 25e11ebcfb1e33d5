// Thin wrappers over optim_step.cuh: one thread per element of the flat parameter buffer, a
// grid-stride loop (launch.py caps the grid). The step's scalars are read from device memory so a
// captured CUDA graph sees each replay's learning rate and bias corrections.
#include "optim_step.cuh"

// scal = {step_size, bc2_sqrt}: appliance.train.optim.FusedAdam fills it on the device each step.
extern "C" __global__ void adam_step_f32(float* p, const float* g, float* m, float* v, long long n,
                                         const float* scal, float w1, float beta2, float w2,
                                         float eps, float weight_decay) {
  const float step_size = scal[0], bc2_sqrt = scal[1];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    pb::adam_elem(p, g, m, v, i, step_size, bc2_sqrt, w1, beta2, w2, eps, weight_decay);
}

extern "C" __global__ void muon_momentum_f32(const float* g, float* buf, float* u, long long n,
                                             float beta) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    pb::muon_momentum_elem(g, buf, u, i, beta);
}

// lr: the optimizer's 0-dim device tensor (appliance.train.optim.set_lr fills it in place).
extern "C" __global__ void muon_apply_f32(float* p, const float* u, long long n, const float* lr) {
  const float rate = lr[0];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    pb::muon_apply_elem(p, u, i, rate);
}
