// Thin wrapper over advantage.cuh: one thread per [horizon] row of the [segments, horizon] buffer.
#include "advantage.cuh"

extern "C" __global__ void advantage_f32(const float* values, const float* rewards,
                                         const float* dones, const float* ratios, float* adv,
                                         int rows, int horizon, float gamma, float gamma_lambda,
                                         float rho_clip, float c_clip, int rho_on_reward) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const long long o = (long long)r * horizon;
  pb::advantage_row(values + o, rewards + o, dones + o, ratios + o, adv + o, horizon, gamma,
                    gamma_lambda, rho_clip, c_clip, rho_on_reward);
}
