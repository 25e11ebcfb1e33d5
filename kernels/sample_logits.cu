// Thin wrappers over sample_logits.cuh: one thread per agent.
#include "sample_logits.cuh"

#define PB_SAMPLE_LOGITS(NAME, T)                                                              \
  extern "C" __global__ void NAME(const T* out, long long ld, int value_col, const int* nvec,   \
                                  int heads, const unsigned char* mask, unsigned long long seed, \
                                  unsigned long long step, int agents, long long* action,       \
                                  float* logprob, float* value) {                               \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                              \
    if (i < agents)                                                                             \
      pb::sample_logits_row<T>(out, ld, value_col, nvec, heads, mask, seed, step, (pb::u32)i,   \
                               action, logprob, value);                                         \
  }

PB_SAMPLE_LOGITS(sample_logits_f32, float)
PB_SAMPLE_LOGITS(sample_logits_bf16, pb::bf16)
