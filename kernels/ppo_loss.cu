// ppo_loss: one thread per row computes the loss terms and the gradient (ppo_loss.cuh); then one
// block sums the terms, writes the stats and scales the gradients by 1 / sum(mask).
#include "ppo_loss.cuh"

#define PB_PPO_LOSS_ROWS(NAME, T)                                                               \
  extern "C" __global__ void NAME(const T* logits, long long ld, const int* nvec, int heads,    \
                                  const long long* actions, const float* old_logprob,           \
                                  const float* adv, const float* returns, const float* value,   \
                                  const float* old_value, const float* mask, float clip,        \
                                  float vf_clip, float vf_coef, float ent_coef,                 \
                                  float grad_scale, int rows, float* terms, float* ratio,       \
                                  float* grad_logits, float* grad_value) {                      \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                              \
    if (i < rows)                                                                               \
      pb::ppo_loss_row<T>(logits, ld, nvec, heads, actions, old_logprob, adv, returns, value,   \
                          old_value, mask, clip, vf_clip, vf_coef, ent_coef, grad_scale, i,     \
                          terms, ratio, grad_logits, grad_value);                               \
  }

PB_PPO_LOSS_ROWS(ppo_loss_rows_f32, float)
PB_PPO_LOSS_ROWS(ppo_loss_rows_bf16, pb::bf16)

#define PB_REDUCE_THREADS 256

// Launch with exactly one block of PB_REDUCE_THREADS threads.
extern "C" __global__ void ppo_loss_reduce(const float* terms, int rows, int width,
                                           float vf_coef, float ent_coef, float* stats,
                                           float* grad_logits, float* grad_value) {
  __shared__ double part[pb::PPO_TERMS][PB_REDUCE_THREADS];
  __shared__ float inv_count;
  const int tid = threadIdx.x;
  double acc[pb::PPO_TERMS];
  for (int k = 0; k < pb::PPO_TERMS; ++k) acc[k] = 0.0;
  for (int i = tid; i < rows; i += PB_REDUCE_THREADS)
    for (int k = 0; k < pb::PPO_TERMS; ++k) acc[k] += terms[(long long)i * pb::PPO_TERMS + k];
  for (int k = 0; k < pb::PPO_TERMS; ++k) part[k][tid] = acc[k];
  __syncthreads();
  for (int stride = PB_REDUCE_THREADS / 2; stride > 0; stride >>= 1) {
    if (tid < stride)
      for (int k = 0; k < pb::PPO_TERMS; ++k) part[k][tid] += part[k][tid + stride];
    __syncthreads();
  }
  if (tid == 0) {
    double sums[pb::PPO_TERMS];
    for (int k = 0; k < pb::PPO_TERMS; ++k) sums[k] = part[k][0];
    inv_count = pb::ppo_loss_finish(sums, vf_coef, ent_coef, stats);
  }
  __syncthreads();
  const float s = inv_count;
  for (long long i = tid; i < (long long)rows * width; i += PB_REDUCE_THREADS) grad_logits[i] *= s;
  for (int i = tid; i < rows; i += PB_REDUCE_THREADS) grad_value[i] *= s;
}
