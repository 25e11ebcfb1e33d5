// sample_logits: decoder output (logits for every head, then the value column) -> action,
// log-probability and value for one agent. Discrete is MultiDiscrete with one head.
//
// Per head: u = uniform24(Philox(seed, step, key, head)), key the agent's id (its row unless the
// caller passes ids), so a draw does not depend on which batch or buffer the agent was stepped in;
// the action is the first index whose
// running sum of exp(logit - max) exceeds u * sum, over the actions the mask allows (a head whose
// actions are all masked samples as if unmasked, so no NaN reaches the trainer). The log-prob is
// the masked log-softmax at that action, summed over heads.
#pragma once
#include "common.cuh"

namespace pb {

template <typename T>
PB_HD void sample_logits_row(const T* out, i64 ld, int value_col, const int* nvec, int heads,
                             const unsigned char* mask, u64 seed, u64 step, u32 agent, u32 key,
                             long long* action, float* logprob, float* value) {
  const i64 row = (i64)agent * ld;
  const unsigned char* m = mask ? mask + (i64)agent * value_col : 0;
  float total_logp = 0.0f;
  int offset = 0;
  for (int h = 0; h < heads; ++h) {
    const int n = nvec[h];
    bool any = false;
    if (m)
      for (int j = 0; j < n; ++j) any = any || m[offset + j];
    const bool use_mask = m && any;
    float mx = neg_inf();
    for (int j = 0; j < n; ++j)
      if (!use_mask || m[offset + j]) mx = fmaxf(mx, load(out, row + offset + j));
    float sum = 0.0f;
    for (int j = 0; j < n; ++j)
      if (!use_mask || m[offset + j]) sum += expf(load(out, row + offset + j) - mx);
    const float u = uniform24(philox_draw(seed, step, key, (u32)h).x);
    const float target = u * sum;
    float acc = 0.0f;
    int a = -1;
    for (int j = 0; j < n; ++j) {
      if (use_mask && !m[offset + j]) continue;
      a = j;  // the last allowed action, should rounding leave acc <= target at the end
      acc += expf(load(out, row + offset + j) - mx);
      if (acc > target) break;
    }
    action[(i64)agent * heads + h] = a;
    total_logp += (load(out, row + offset + a) - mx) - logf(sum);
    offset += n;
  }
  logprob[agent] = total_logp;
  value[agent] = load(out, row + value_col);
}

}  // namespace pb
