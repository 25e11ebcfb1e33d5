// Shared by every kernel: host/device markers, float32/bfloat16 storage, Philox4x32-10.
//
// The per-thread bodies in kernels/*.cuh are plain C++ under PB_HD: NVRTC compiles them as
// __host__ __device__ functions, g++ compiles the very same text for the CPU tests
// (tests/kernels_host.cpp). So nothing here may need a CUDA header, and nothing may need the C++
// standard library on the device side: only builtins both compilers know (expf, logf, ...).
#pragma once

#if defined(__CUDACC__)
#define PB_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define PB_HD inline
#endif

namespace pb {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// bfloat16 storage: the raw 16 bits, converted with round-to-nearest-even as torch does, so the
// kernels need no cuda_bf16.h (not in the NVRTC wheel) and the host build sees the same bits.
struct bf16 {
  unsigned short bits;
};

PB_HD float bits_to_float(u32 u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

PB_HD u32 float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  u32 u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

PB_HD float load(const float* p, i64 i) { return p[i]; }
PB_HD float load(const bf16* p, i64 i) { return bits_to_float((u32)p[i].bits << 16); }
PB_HD float load(const unsigned char* p, i64 i) { return (float)p[i]; }

PB_HD bf16 to_bf16(float f) {
  u32 u = float_to_bits(f);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    r.bits = (unsigned short)((u >> 16) | 0x40u);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = (unsigned short)(u >> 16);
  return r;
}

PB_HD void store(float* p, i64 i, float v) { p[i] = v; }
PB_HD void store(bf16* p, i64 i, float v) { p[i] = to_bf16(v); }

PB_HD float neg_inf() { return bits_to_float(0xff800000u); }

// min(x, bound) for a bound that is never NaN, as fminf(x, bound) gives it (a NaN x yields the bound),
// in one compare: a portable x86-64 build calls the C library's fminf, once per element.
PB_HD float min_bound(float x, float bound) { return x < bound ? x : bound; }

PB_HD float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Philox4x32-10 (Salmon et al. 2011, the Random123 constants): a counter-based generator, so a
// draw depends only on (key, counter), never on launch order, and the CPU reference reproduces it.
struct u32x4 {
  u32 x, y, z, w;
};

PB_HD u32x4 philox(u32x4 c, u32 k0, u32 k1) {
  for (int round = 0; round < 10; ++round) {
    u64 p0 = (u64)0xD2511F53u * c.x;
    u64 p1 = (u64)0xCD9E8D57u * c.z;
    u32x4 n;
    n.x = (u32)(p1 >> 32) ^ c.y ^ k0;
    n.y = (u32)p1;
    n.z = (u32)(p0 >> 32) ^ c.w ^ k1;
    n.w = (u32)p0;
    c = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The draw for (seed, step, index, lane): counter (index, lane, step lo, step hi), key (seed lo, hi).
PB_HD u32x4 philox_draw(u64 seed, u64 step, u32 index, u32 lane) {
  u32x4 c;
  c.x = index;
  c.y = lane;
  c.z = (u32)step;
  c.w = (u32)(step >> 32);
  return philox(c, (u32)seed, (u32)(seed >> 32));
}

// Uniform float in [0, 1) with 24 random bits: exact, so host and device agree bit for bit.
PB_HD float uniform24(u32 x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

// Uniform double in [0, 1) with 53 random bits from two words.
PB_HD double uniform53(u32 a, u32 b) {
  return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * (1.0 / 9007199254740992.0);
}

}  // namespace pb
