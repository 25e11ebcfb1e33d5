// prio_sample: prio_keys (one thread per segment: its priority and sampling key; the top-k of the
// keys is taken on the device by torch), gather_rows_* (one thread per word of the sampled rows).
// step_ptr (optional, device) is added to step so a captured CUDA graph draws anew at each replay.
#include "prio_sample.cuh"

extern "C" __global__ void prio_keys(const float* adv, int segments, int horizon, double alpha,
                                     double floor, unsigned long long seed, unsigned long long step,
                                     const long long* step_ptr, double* prio, double* key) {
  int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < segments)
    pb::prio_key(adv, horizon, alpha, floor, seed,
                 step + (step_ptr ? (unsigned long long)*step_ptr : 0ull), (pb::u32)s, prio, key);
}

#define PB_GATHER(NAME, W)                                                                      \
  extern "C" __global__ void NAME(const W* src, const long long* idx, W* dst, int samples,      \
                                  long long row_words) {                                        \
    const long long total = (long long)samples * row_words;                                     \
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;             \
         k += (long long)gridDim.x * blockDim.x) {                                              \
      const long long s = k / row_words, w = k - s * row_words;                                 \
      dst[k] = src[idx[s] * row_words + w];                                                     \
    }                                                                                           \
  }

PB_GATHER(gather_rows_u32, unsigned int)
PB_GATHER(gather_rows_u16, unsigned short)
PB_GATHER(gather_rows_u8, unsigned char)
