// ingest: one env step into the rollout buffers at position t = *step (held on the device, so a
// captured CUDA graph replays it unchanged). Buffers are [agents, horizon, ...]: observation
// element e of agent n goes to obs_buf[n, t, e], cast to the buffer's dtype; the reward, clamped to
// [-clamp, clamp], to rew_buf[n, t]; terminal or truncated, as 1.0 or 0.0, to done_buf[n, t].
#pragma once
#include "common.cuh"

namespace pb {

PB_HD void store(unsigned char* p, i64 i, float v) { p[i] = (unsigned char)v; }

template <typename S, typename D>
PB_HD void ingest_element(const S* obs, D* obs_buf, i64 obs_size, int horizon, i64 t, i64 n,
                          i64 e) {
  store(obs_buf, (n * horizon + t) * obs_size + e, load(obs, n * obs_size + e));
}

PB_HD void ingest_scalars(const float* rew, const unsigned char* term, const unsigned char* trunc,
                          float* rew_buf, float* done_buf, int horizon, i64 t, i64 n,
                          float clamp) {
  rew_buf[n * horizon + t] = fminf(fmaxf(rew[n], -clamp), clamp);
  done_buf[n * horizon + t] = (term[n] || (trunc && trunc[n])) ? 1.0f : 0.0f;
}

}  // namespace pb
