// mingru_step: one minimal-GRU step after its GEMM (a layer of MinGRU.step in
// appliance/train/cores/mingru.py).
//
// kv = x W^T ([B, 2H], k then v); z = sigmoid(k), h' = (1 - z) h + z g(v) with g(v) = v + 0.5
// (v >= 0) or sigmoid(v). A done row starts from h = 0, the core's initial state.
#pragma once
#include "common.cuh"

namespace pb {

PB_HD float mingru_g(float v) { return v >= 0.0f ? v + 0.5f : sigmoidf(v); }

template <typename T>
PB_HD void mingru_cell(const T* kv, const float* h, bool done, int hidden, i64 b, int j,
                       float* h_out) {
  const float k = load(kv, b * 2 * hidden + j), v = load(kv, b * 2 * hidden + hidden + j);
  const float z = sigmoidf(k);
  const float h_prev = done ? 0.0f : h[b * hidden + j];
  h_out[b * hidden + j] = (1.0f - z) * h_prev + z * mingru_g(v);
}

}  // namespace pb
