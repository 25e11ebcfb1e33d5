// lstm_step: the gate math of one LSTM step after the GEMMs (nn.LSTMCell in Policy.step).
//
// gates = gx + gh with gx = x W_ih^T + b_ih and gh = h W_hh^T + b_hh ([B, 4H], torch's i, f, g, o
// order); c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'). Reset on done is exact
// without zeroing h before the GEMM: a done row uses b_hh for gh (what h = 0 gives) and c = 0.
#pragma once
#include "common.cuh"

namespace pb {

template <typename T>
PB_HD void lstm_cell(const T* gx, const T* gh, const T* b_hh, const float* c, bool done, int hidden,
                     i64 b, int j, float* h_out, float* c_out) {
  const i64 g = b * 4 * hidden;
  float pre[4];
  for (int q = 0; q < 4; ++q) {
    const int k = q * hidden + j;
    pre[q] = load(gx, g + k) + (done ? load(b_hh, k) : load(gh, g + k));
  }
  const float i = sigmoidf(pre[0]), f = sigmoidf(pre[1]), gg = tanhf(pre[2]), o = sigmoidf(pre[3]);
  const float c_prev = done ? 0.0f : c[b * hidden + j];
  const float c_new = f * c_prev + i * gg;
  c_out[b * hidden + j] = c_new;
  h_out[b * hidden + j] = o * tanhf(c_new);
}

}  // namespace pb
