// prio_sample: prio_keys (one thread per segment: its priority and sampling key; the top-k of the
// keys is taken on the device by torch).
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
