// optim_step: the optimizers' elementwise work over the policy's one flat parameter buffer
// (appliance/train/flat.py), one element per call, in the order of torch's own CPU kernels so the
// host build matches torch.optim.Adam and appliance.train.optim.Muon to float32 rounding.
//
// adam_elem, torch.optim.Adam's single-tensor step (no amsgrad, no maximize), with the fused
// multiply-adds where torch's CPU kernels have them (add with alpha, lerp, addcmul):
//   g  = fma(weight_decay, p, grad)                    (only when weight_decay != 0)
//   m  = lerp(m, g, w1)                                (w1 = 1 - beta1; torch's two forms around 0.5)
//   v  = fma(w2 * g, g, v * beta2)                     (w2 = 1 - beta2)
//   p  = p + (-step_size) * m / (sqrt(v) / bc2_sqrt + eps)
// with step_size = lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t), worked out once per step in
// float64 on the device (appliance.train.optim.FusedAdam) and read from `scal`, so a captured CUDA
// graph replays with the values of that step; w1 and w2 are rounded from float64 as torch does.
//
// muon_momentum_elem and muon_apply_elem, Muon's elementwise parts (the Newton-Schulz matmuls on
// each matrix's slice of `u` stay torch between the two):
//   buf = buf * beta + g;  u = fma(beta, buf, g)        then   p = p - u * lr
#pragma once
#include "common.cuh"

namespace pb {

PB_HD void adam_elem(float* p, const float* g, float* m, float* v, i64 i, float step_size,
                     float bc2_sqrt, float w1, float beta2, float w2, float eps, float weight_decay) {
  float grad = g[i];
  const float pi = p[i];
  if (weight_decay != 0.0f) grad = fmaf(weight_decay, pi, grad);
  const float mi = m[i];
  const float diff = grad - mi;
  const float m_new = w1 < 0.5f ? fmaf(w1, diff, mi) : fmaf(-diff, 1.0f - w1, grad);
  const float v_scaled = v[i] * beta2;
  const float v_new = fmaf(w2 * grad, grad, v_scaled);
  m[i] = m_new;
  v[i] = v_new;
  const float denom = sqrtf(v_new) / bc2_sqrt + eps;
  const float step = (-step_size) * m_new;
  p[i] = pi + step / denom;
}

PB_HD void muon_momentum_elem(const float* g, float* buf, float* u, i64 i, float beta) {
  const float gi = g[i];
  const float scaled = buf[i] * beta;
  const float b = scaled + gi;
  buf[i] = b;
  u[i] = fmaf(beta, b, gi);
}

PB_HD void muon_apply_elem(float* p, const float* u, i64 i, float lr) {
  const float step = u[i] * lr;
  p[i] = p[i] - step;
}

}  // namespace pb
