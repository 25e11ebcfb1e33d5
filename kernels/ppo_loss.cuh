// ppo_loss: the loss of Trainer._minibatch (appliance/train/trainer.py) for one row (one agent
// step of a minibatch), with its analytic gradient with respect to the logits and the value:
//
//   ratio   = exp(new_logprob - old_logprob)
//   pg      = max(-A ratio, -A clamp(ratio, 1 - clip, 1 + clip))
//   v       = max((V - R)^2, (V_old + clamp(V - V_old, -vf_clip, vf_clip) - R)^2)
//   loss    = mean_m(pg) + vf_coef * 0.5 * mean_m(v) - ent_coef * mean_m(entropy)
//
// mean_m is the masked mean sum(x m) / max(sum(m), 1). A row writes its masked terms and its
// gradient times grad_scale * mask; ppo_loss_finish turns the sums into the losses and 1 / sum(m),
// by which the reduction kernel then scales the gradients. Where torch.max has a tie (ratio inside
// the clip range) its gradient goes half to each side, as torch's does.
#pragma once
#include "common.cuh"

namespace pb {

enum { PPO_PG = 0, PPO_V, PPO_ENT, PPO_KL, PPO_CLIPFRAC, PPO_MASK, PPO_TERMS };

// d max(a, b) / d a and / d b, torch's rule: ties split the gradient in half.
PB_HD float max_grad_a(float a, float b) { return a > b ? 1.0f : (a < b ? 0.0f : 0.5f); }

template <typename T>
PB_HD void ppo_loss_row(const T* logits, i64 ld, const int* nvec, int heads,
                        const long long* actions, const float* old_logprob, const float* adv,
                        const float* returns, const float* value, const float* old_value,
                        const float* mask, float clip, float vf_clip, float vf_coef, float ent_coef,
                        float grad_scale, i64 i, float* terms, float* ratio_out,
                        float* grad_logits, float* grad_value) {
  const i64 row = i * ld;
  int width = 0;
  for (int h = 0; h < heads; ++h) width += nvec[h];
  float new_logprob = 0.0f, entropy = 0.0f;
  int offset = 0;
  for (int h = 0; h < heads; ++h) {
    const int n = nvec[h];
    float mx = neg_inf();
    for (int j = 0; j < n; ++j) mx = fmaxf(mx, load(logits, row + offset + j));
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += expf(load(logits, row + offset + j) - mx);
    const float lse = mx + logf(sum);
    float ent = 0.0f;
    for (int j = 0; j < n; ++j) {
      const float lp = load(logits, row + offset + j) - lse;
      ent -= expf(lp) * lp;
    }
    entropy += ent;
    new_logprob += load(logits, row + offset + (int)actions[i * heads + h]) - lse;
    offset += n;
  }
  const float m = mask[i], a = adv[i];
  const float logratio = new_logprob - old_logprob[i];
  const float ratio = expf(logratio);
  const float lo = 1.0f - clip, hi = 1.0f + clip;
  const float pg1 = -a * ratio, pg2 = -a * fminf(fmaxf(ratio, lo), hi);
  const float pg = fmaxf(pg1, pg2);
  const float w1 = max_grad_a(pg1, pg2);
  const float inside = (ratio >= lo && ratio <= hi) ? 1.0f : 0.0f;
  const float d_ratio = -a * (w1 + (1.0f - w1) * inside);
  const float d_logprob = d_ratio * ratio;

  const float v = value[i], ov = old_value[i], r = returns[i];
  const float dv = v - ov;
  const float vc = ov + fminf(fmaxf(dv, -vf_clip), vf_clip);
  const float l1 = (v - r) * (v - r), l2 = (vc - r) * (vc - r);
  const float u1 = max_grad_a(l1, l2);
  const float inside_v = (dv >= -vf_clip && dv <= vf_clip) ? 1.0f : 0.0f;
  const float d_v = u1 * 2.0f * (v - r) + (1.0f - u1) * 2.0f * (vc - r) * inside_v;

  float* t = terms + i * PPO_TERMS;
  t[PPO_PG] = pg * m;
  t[PPO_V] = fmaxf(l1, l2) * m;
  t[PPO_ENT] = entropy * m;
  t[PPO_KL] = ((ratio - 1.0f) - logratio) * m;
  t[PPO_CLIPFRAC] = (fabsf(ratio - 1.0f) > clip ? 1.0f : 0.0f) * m;
  t[PPO_MASK] = m;
  ratio_out[i] = ratio;

  const float s = grad_scale * m;
  grad_value[i] = s * vf_coef * 0.5f * d_v;
  offset = 0;
  for (int h = 0; h < heads; ++h) {
    const int n = nvec[h];
    float mx = neg_inf();
    for (int j = 0; j < n; ++j) mx = fmaxf(mx, load(logits, row + offset + j));
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += expf(load(logits, row + offset + j) - mx);
    const float lse = mx + logf(sum);
    float ent = 0.0f;
    for (int j = 0; j < n; ++j) {
      const float lp = load(logits, row + offset + j) - lse;
      ent -= expf(lp) * lp;
    }
    const int act = (int)actions[i * heads + h];
    for (int j = 0; j < n; ++j) {
      const float lp = load(logits, row + offset + j) - lse;
      const float p = expf(lp);
      const float d_lp = (j == act ? 1.0f : 0.0f) - p;  // d log p(action) / d logit_j
      const float d_ent = -p * (lp + ent);               // d entropy / d logit_j
      grad_logits[i * width + offset + j] = s * (d_logprob * d_lp - ent_coef * d_ent);
    }
    offset += n;
  }
}

// sums[PPO_TERMS] -> stats [loss, policy_loss, value_loss, entropy, approx_kl, clipfrac];
// returns 1 / max(sum(mask), 1), the factor the gradients still need.
PB_HD float ppo_loss_finish(const double* sums, float vf_coef, float ent_coef, float* stats) {
  const double count = sums[PPO_MASK] > 1.0 ? sums[PPO_MASK] : 1.0;
  const float pg = (float)(sums[PPO_PG] / count);
  const float v = 0.5f * (float)(sums[PPO_V] / count);
  const float ent = (float)(sums[PPO_ENT] / count);
  stats[0] = pg + vf_coef * v - ent_coef * ent;
  stats[1] = pg;
  stats[2] = v;
  stats[3] = ent;
  stats[4] = (float)(sums[PPO_KL] / count);
  stats[5] = (float)(sums[PPO_CLIPFRAC] / count);
  return (float)(1.0 / count);
}

}  // namespace pb
