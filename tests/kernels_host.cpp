// The kernel bodies of kernels/*.cuh compiled for the CPU: each function loops over what the GPU
// runs as threads, so tests/test_kernels.py can compare the very same code with the torch reference.
#include "advantage.cuh"
#include "ppo_loss.cuh"
#include "prio_sample.cuh"
#include "lstm_step.cuh"
#include "mingru_scan.cuh"
#include "mingru_step.cuh"
#include "sample_logits.cuh"

using namespace pb;

extern "C" {

void host_philox(u64 seed, u64 step, u32 index, u32 lane, u32* out) {
  u32x4 r = philox_draw(seed, step, index, lane);
  out[0] = r.x, out[1] = r.y, out[2] = r.z, out[3] = r.w;
}

void host_to_bf16(const float* x, unsigned short* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = to_bf16(x[i]).bits;
}

#define HOST_SAMPLE(NAME, T)                                                                   \
  void NAME(const T* out, i64 ld, int value_col, const int* nvec, int heads,                    \
            const unsigned char* mask, u64 seed, u64 step, const long long* ids, int agents,    \
            long long* action, float* logprob, float* value) {                                  \
    for (int i = 0; i < agents; ++i)                                                            \
      sample_logits_row<T>(out, ld, value_col, nvec, heads, mask, seed, step, (u32)i,           \
                           ids ? (u32)ids[i] : (u32)i, action, logprob, value);                 \
  }
HOST_SAMPLE(host_sample_logits_f32, float)
HOST_SAMPLE(host_sample_logits_bf16, bf16)

void host_advantage(const float* values, const float* rewards, const float* dones,
                    const float* ratios, float* adv, int rows, int horizon, float gamma,
                    float gamma_lambda, float rho_clip, float c_clip, int rho_on_reward) {
  for (int r = 0; r < rows; ++r) {
    const i64 o = (i64)r * horizon;
    advantage_row(values + o, rewards + o, dones + o, ratios + o, adv + o, horizon, gamma,
                  gamma_lambda, rho_clip, c_clip, rho_on_reward);
  }
}

#define HOST_LSTM(NAME, T)                                                                     \
  void NAME(const T* gx, const T* gh, const T* b_hh, const float* c, const float* done,          \
            int batch, int hidden, float* h_out, float* c_out) {                                 \
    for (i64 b = 0; b < batch; ++b)                                                             \
      for (int j = 0; j < hidden; ++j)                                                          \
        lstm_cell<T>(gx, gh, b_hh, c, done && done[b] != 0.0f, hidden, b, j, h_out, c_out);     \
  }
HOST_LSTM(host_lstm_step_f32, float)
HOST_LSTM(host_lstm_step_bf16, bf16)

#define HOST_MINGRU(NAME, T)                                                                   \
  void NAME(const T* kv, const float* h, const float* done, int batch, int hidden,              \
            float* h_out) {                                                                     \
    for (i64 b = 0; b < batch; ++b)                                                             \
      for (int j = 0; j < hidden; ++j)                                                          \
        mingru_cell<T>(kv, h, done && done[b] != 0.0f, hidden, b, j, h_out);                    \
  }
HOST_MINGRU(host_mingru_step_f32, float)
HOST_MINGRU(host_mingru_step_bf16, bf16)

#define HOST_SCAN(SUFFIX, S)                                                                   \
  void host_mingru_scan_fwd_##SUFFIX(const S* kv, const S* h0, S* h, int batch, int steps,      \
                                     int hidden) {                                              \
    for (i64 b = 0; b < batch; ++b)                                                             \
      for (int j = 0; j < hidden; ++j) mingru_scan_fwd<S>(kv, h0, h, steps, hidden, b, j);      \
  }                                                                                             \
  void host_mingru_scan_bwd_##SUFFIX(const S* kv, const S* h0, const S* h, const S* grad_h,     \
                                     S* grad_kv, S* grad_h0, int batch, int steps, int hidden) { \
    for (i64 b = 0; b < batch; ++b)                                                             \
      for (int j = 0; j < hidden; ++j)                                                          \
        mingru_scan_bwd<S>(kv, h0, h, grad_h, grad_kv, grad_h0, steps, hidden, b, j);           \
  }
HOST_SCAN(f32, float)
HOST_SCAN(f64, double)

#define HOST_PPO(NAME, T)                                                                      \
  void NAME(const T* logits, i64 ld, const int* nvec, int heads, const long long* actions,       \
            const float* old_logprob, const float* adv, const float* returns, const float* value, \
            const float* old_value, const float* mask, float clip, float vf_clip, float vf_coef, \
            float ent_coef, float grad_scale, int rows, float* terms, float* ratio,             \
            float* grad_logits, float* grad_value, float* stats) {                              \
    int width = 0;                                                                              \
    for (int h = 0; h < heads; ++h) width += nvec[h];                                           \
    double sums[PPO_TERMS] = {0};                                                               \
    for (int i = 0; i < rows; ++i) {                                                            \
      ppo_loss_row<T>(logits, ld, nvec, heads, actions, old_logprob, adv, returns, value,       \
                      old_value, mask, clip, vf_clip, vf_coef, ent_coef, grad_scale, i, terms,  \
                      ratio, grad_logits, grad_value);                                          \
      for (int k = 0; k < PPO_TERMS; ++k) sums[k] += terms[(i64)i * PPO_TERMS + k];             \
    }                                                                                           \
    const float s = ppo_loss_finish(sums, vf_coef, ent_coef, stats);                            \
    for (i64 k = 0; k < (i64)rows * width; ++k) grad_logits[k] *= s;                            \
    for (int i = 0; i < rows; ++i) grad_value[i] *= s;                                          \
  }
HOST_PPO(host_ppo_loss_f32, float)
HOST_PPO(host_ppo_loss_bf16, bf16)

void host_prio_keys(const float* adv, int segments, int horizon, double alpha, double floor,
                    u64 seed, u64 step, double* prio, double* key) {
  for (int s = 0; s < segments; ++s) prio_key(adv, horizon, alpha, floor, seed, step, (u32)s, prio, key);
}
}
