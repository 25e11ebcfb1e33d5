// mingru_scan: the minimal-GRU recurrence over [B, T] for training (MinGRU.scan), forward and
// backward, one thread per (row, channel), in linear space; the reference runs it as a log-space
// cumulative sum, and both compute the same h. S is the math type: float on the GPU, double for the
// CPU gradcheck. The backward recomputes z and g(v) from kv and reads h_{t-1} from the saved output.
#pragma once
#include "common.cuh"

namespace pb {

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
