// prio_sample: prio_cdf (one block: priorities and their inclusive prefix sum), prio_pick (one
// thread per sample), gather_rows_* (one thread per word of the sampled rows).
#include "prio_sample.cuh"

#define PB_CDF_THREADS 1024

// Launch with exactly one block of PB_CDF_THREADS threads.
extern "C" __global__ void prio_cdf(const float* adv, int segments, int horizon, double alpha,
                                    double* prio, double* cdf) {
  __shared__ double totals[PB_CDF_THREADS];
  const int tid = threadIdx.x;
  const int chunk = (segments + PB_CDF_THREADS - 1) / PB_CDF_THREADS;
  const int begin = tid * chunk;
  const int end = begin + chunk < segments ? begin + chunk : segments;
  double run = 0.0;
  for (int s = begin; s < end; ++s) {
    const double p = pb::prio_row(adv + (long long)s * horizon, horizon, alpha);
    prio[s] = p;
    run += p;
    cdf[s] = run;
  }
  totals[tid] = run;
  __syncthreads();
  for (int offset = 1; offset < PB_CDF_THREADS; offset <<= 1) {  // inclusive scan of the chunk totals
    const double add = tid >= offset ? totals[tid - offset] : 0.0;
    __syncthreads();
    totals[tid] += add;
    __syncthreads();
  }
  const double base = tid > 0 ? totals[tid - 1] : 0.0;
  for (int s = begin; s < end; ++s) cdf[s] += base;
}

extern "C" __global__ void prio_pick(const double* prio, const double* cdf, int segments,
                                     unsigned long long seed, unsigned long long step,
                                     int samples, double beta, long long* idx, float* weight) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < samples) pb::prio_pick(prio, cdf, segments, seed, step, (pb::u32)i, beta, idx, weight);
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
