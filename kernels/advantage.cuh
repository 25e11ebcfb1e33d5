// advantage: the V-trace-clipped GAE of appliance/train/advantage.py for one [horizon] row.
//
//   delta_t = min(rho_t, rho_clip) * (r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t)
//   A_t     = delta_t + gamma * lambda * min(rho_t, c_clip) * (1 - d_{t+1}) * A_{t+1},  A_{T-1} = 0
//
// or, with rho_on_reward (train.vtrace_rho_on reward), the clipped ratio weighting the reward alone:
//   delta_t = min(rho_t, rho_clip) * r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t
//
// The operations run in the reference's order (gamma_lambda is the product rounded to float once,
// as torch does with a Python scalar) so the two agree to float32 rounding.
#pragma once
#include "common.cuh"

namespace pb {

PB_HD void advantage_row(const float* values, const float* rewards, const float* dones,
                         const float* ratios, float* adv, int horizon, float gamma,
                         float gamma_lambda, float rho_clip, float c_clip, int rho_on_reward) {
  float last = 0.0f;
  adv[horizon - 1] = 0.0f;
  for (int t = horizon - 2; t >= 0; --t) {
    const float not_done = 1.0f - dones[t + 1];
    const float rho = min_bound(ratios[t], rho_clip);
    const float c = min_bound(ratios[t], c_clip);
    const float delta =
        rho_on_reward ? rho * rewards[t + 1] + gamma * values[t + 1] * not_done - values[t]
                      : rho * (rewards[t + 1] + gamma * values[t + 1] * not_done - values[t]);
    last = delta + gamma_lambda * c * not_done * last;
    adv[t] = last;
  }
}

}  // namespace pb
