// Thin wrappers over sample_logits.cuh: one thread per agent. ids (optional): the agents' Philox keys;
// step_ptr (optional, device): added to step, so a captured CUDA graph draws anew at every replay.
#include "sample_logits.cuh"

#define PB_SAMPLE_LOGITS(NAME, T)                                                              \
  extern "C" __global__ void NAME(const T* out, long long ld, int value_col, const int* nvec,   \
                                  int heads, const unsigned char* mask, unsigned long long seed, \
                                  unsigned long long step, const long long* step_ptr,           \
                                  const long long* ids, int agents, long long* action,          \
                                  float* logprob, float* value) {                               \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                              \
    if (i < agents) {                                                                           \
      const unsigned long long s = step + (step_ptr ? (unsigned long long)*step_ptr : 0ull);    \
      const pb::u32 key = ids ? (pb::u32)ids[i] : (pb::u32)i;                                   \
      pb::sample_logits_row<T>(out, ld, value_col, nvec, heads, mask, seed, s, (pb::u32)i, key, \
                               action, logprob, value);                                         \
    }                                                                                           \
  }

PB_SAMPLE_LOGITS(sample_logits_f32, float)
PB_SAMPLE_LOGITS(sample_logits_bf16, pb::bf16)
