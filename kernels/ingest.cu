// Thin wrappers over ingest.cuh: one thread per observation element (the first of each agent also
// stores its reward and done flag). S -> D: the env's dtype -> the buffer's.
#include "ingest.cuh"

#define PB_INGEST(NAME, S, D)                                                                   \
  extern "C" __global__ void NAME(const S* obs, const float* rew, const unsigned char* term,    \
                                  const unsigned char* trunc, const long long* step, int agents, \
                                  long long obs_size, int horizon, float clamp, D* obs_buf,     \
                                  float* rew_buf, float* done_buf) {                            \
    const long long t = *step;                                                                  \
    const long long total = (long long)agents * obs_size;                                       \
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;             \
         k += (long long)gridDim.x * blockDim.x) {                                              \
      const long long n = k / obs_size, e = k - n * obs_size;                                   \
      pb::ingest_element<S, D>(obs, obs_buf, obs_size, horizon, t, n, e);                       \
      if (e == 0) pb::ingest_scalars(rew, term, trunc, rew_buf, done_buf, horizon, t, n, clamp); \
    }                                                                                           \
  }

PB_INGEST(ingest_u8_u8, unsigned char, unsigned char)
PB_INGEST(ingest_u8_f32, unsigned char, float)
PB_INGEST(ingest_u8_bf16, unsigned char, pb::bf16)
PB_INGEST(ingest_f32_f32, float, float)
PB_INGEST(ingest_f32_bf16, float, pb::bf16)
