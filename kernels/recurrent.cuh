// lstm_step, mingru_step, mingru_scan: the elementwise part of the recurrent cores in
// appliance/train/policy.py, after the GEMMs (which stay with cuBLAS).
//
// lstm_step: gates = gx + gh with gx = x W_ih^T + b_ih and gh = h W_hh^T + b_hh ([B, 4H], torch's
//   i, f, g, o order); c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'). Reset on
//   done is exact without zeroing h before the GEMM: a done row uses b_hh for gh (what h = 0 gives)
//   and c = 0.
// mingru_step: kv = x W^T + b ([B, 2H], k then v); z = sigmoid(k), h' = (1 - z) h + z g(v) with
//   g(v) = v + 0.5 (v >= 0) or sigmoid(v). A done row starts from h = 0.5 = g(0), the initial state.
// mingru_scan: the same recurrence over [B, T] in linear space, one thread per (row, channel), and
//   its backward from the saved outputs. The reference (MinGRU.scan) runs it as a log-space
//   cumulative sum; both compute the same h. S is the math type: float on the GPU, double for
//   the CPU gradcheck.
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

PB_HD float mingru_g(float v) { return v >= 0.0f ? v + 0.5f : sigmoidf(v); }

template <typename T>
PB_HD void mingru_cell(const T* kv, const float* h, bool done, int hidden, i64 b, int j,
                       float* h_out) {
  const float k = load(kv, b * 2 * hidden + j), v = load(kv, b * 2 * hidden + hidden + j);
  const float z = sigmoidf(k);
  const float h_prev = done ? 0.5f : h[b * hidden + j];
  h_out[b * hidden + j] = (1.0f - z) * h_prev + z * mingru_g(v);
}

template <typename S>
PB_HD S scan_sigmoid(S x) { return S(1) / (S(1) + exp(-x)); }

// kv [B, T, 2H], h0 [B, H] -> h [B, T, H] for row b, channel j.
template <typename S>
PB_HD void mingru_scan_fwd(const S* kv, const S* h0, S* h, int steps, int hidden, i64 b, int j) {
  S state = h0[b * hidden + j];
  for (int t = 0; t < steps; ++t) {
    const i64 base = (b * steps + t) * 2 * hidden;
    const S z = scan_sigmoid(kv[base + j]);
    const S v = kv[base + hidden + j];
    const S g = v >= S(0) ? v + S(0.5) : scan_sigmoid(v);
    state = (S(1) - z) * state + z * g;
    h[(b * steps + t) * hidden + j] = state;
  }
}

// Given dL/dh [B, T, H], writes dL/dkv [B, T, 2H] and dL/dh0 [B, H].
template <typename S>
PB_HD void mingru_scan_bwd(const S* kv, const S* h0, const S* h, const S* grad_h, S* grad_kv,
                           S* grad_h0, int steps, int hidden, i64 b, int j) {
  S carry = S(0);
  for (int t = steps - 1; t >= 0; --t) {
    const i64 base = (b * steps + t) * 2 * hidden;
    const S z = scan_sigmoid(kv[base + j]);
    const S v = kv[base + hidden + j];
    const S sv = scan_sigmoid(v);
    const S g = v >= S(0) ? v + S(0.5) : sv;
    const S dg = v >= S(0) ? S(1) : sv * (S(1) - sv);
    const S h_prev = t > 0 ? h[(b * steps + t - 1) * hidden + j] : h0[b * hidden + j];
    const S dh = grad_h[(b * steps + t) * hidden + j] + carry;
    grad_kv[base + j] = dh * (g - h_prev) * z * (S(1) - z);
    grad_kv[base + hidden + j] = dh * z * dg;
    carry = dh * (S(1) - z);
  }
  grad_h0[b * hidden + j] = carry;
}

}  // namespace pb
