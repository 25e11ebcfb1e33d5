// prio_sample: the prioritized segment sampling of Trainer.train (appliance/train/trainer.py):
//
//   prio_s = (sum_t |A_s,t| + floor)^alpha,  P_s = prio_s / sum(prio)
//   `samples` distinct segments, drawn one after another with probability P among those left
//   (without replacement, as PufferLib), and importance weights w_i = (S P_idx_i)^-beta
//
// on the device, without torch.multinomial or a host sync, by exponential keys (Efraimidis and
// Spirakis): key_s = log(u_s) / prio_s with u_s a Philox uniform in (0, 1] keyed on (seed, step, s);
// the `samples` largest keys are such a draw (a top-k on the device picks them).
#pragma once
#include "common.cuh"

namespace pb {

// Philox lane of the prioritized draws, apart from the lanes sample_logits uses (its head index).
#define PB_PRIO_LANE 0x80000000u

// Summed in double in row order, so the CPU body and the kernel give the same bits.
PB_HD double prio_row(const float* adv, int horizon, double alpha, double floor) {
  double s = floor;
  for (int t = 0; t < horizon; ++t) s += fabs((double)adv[t]);
  return pow(s, alpha);
}

// Segment s's priority and its sampling key (larger keys are drawn first; -inf never before others).
PB_HD void prio_key(const float* adv, int horizon, double alpha, double floor, u64 seed, u64 step,
                    u32 s, double* prio, double* key) {
  const double p = prio_row(adv + (i64)s * horizon, horizon, alpha, floor);
  const u32x4 r = philox_draw(seed, step, s, PB_PRIO_LANE);
  const double u = 1.0 - uniform53(r.x, r.y);  // (0, 1]: log(u) <= 0 and finite
  prio[s] = p;
  key[s] = p > 0.0 ? log(u) / p : (double)neg_inf();
}

}  // namespace pb
