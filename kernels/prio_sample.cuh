// prio_sample: the prioritized segment sampling of Trainer.train (appliance/train/trainer.py):
//
//   prio_s = (sum_t |A_s,t|)^alpha,  P_s = prio_s / sum(prio)  (uniform when that sum is 0)
//   idx_i ~ P (with replacement),    w_i = (S P_idx_i)^-beta
//
// on the device, without torch.multinomial or a host sync: a CDF over the rows (in double, so the
// order of the sums does not move a boundary) and, per sample i, a binary search for a Philox
// uniform keyed on (seed, step, i). gather_rows then copies the sampled rows into static buffers.
#pragma once
#include "common.cuh"

namespace pb {

// Philox lane of the prioritized draws, apart from the lanes sample_logits uses (its head index).
#define PB_PRIO_LANE 0x80000000u

PB_HD double prio_row(const float* adv, int horizon, double alpha) {
  double s = 0.0;
  for (int t = 0; t < horizon; ++t) s += fabs((double)adv[t]);
  return pow(s, alpha);
}

// The first k with cdf[k] > x (cdf non-decreasing, x < cdf[n - 1]).
PB_HD int cdf_search(const double* cdf, int n, double x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (cdf[mid] > x)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

PB_HD void prio_pick(const double* prio, const double* cdf, int segments, u64 seed, u64 step,
                     u32 i, double beta, long long* idx, float* weight) {
  const u32x4 r = philox_draw(seed, step, i, PB_PRIO_LANE);
  const double u = uniform53(r.x, r.y);
  const double total = cdf[segments - 1];
  int k;
  double p;
  if (total > 0.0 && total <= 1.7976931348623157e308) {
    k = cdf_search(cdf, segments, u * total);
    p = prio[k] / total;
  } else {
    k = (int)(u * segments);
    k = k < segments ? k : segments - 1;
    p = 1.0 / segments;
  }
  idx[i] = k;
  weight[i] = (float)pow((double)segments * p, -beta);
}

}  // namespace pb
