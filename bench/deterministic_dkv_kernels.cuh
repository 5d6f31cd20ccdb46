// Kernels of bench/deterministic_dkv.cu (see its header): the rows a bwd CTA
// reduces, made on the fly, and each dKV design's launches before and after.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include "deterministic_dkv_indices.h"

namespace ddkv {

inline const char* g_where = "setup";  // the config and design running, for error messages
#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "CUDA error %s at %s:%d (%s): %s\n", cudaGetErrorString(e_), __FILE__,   \
              __LINE__, ddkv::g_where, #x);                                                     \
      printf("FAILED in %s: %s\n", ddkv::g_where, cudaGetErrorString(e_));                     \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

constexpr int W = 576, THREADS = 512, SEGB = 768;

// ---- contributions -------------------------------------------------------
__device__ __forceinline__ uint32_t dmix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
__device__ __forceinline__ uint32_t rowHash(int src, int key, uint32_t seed) {
  return dmix((uint32_t)src * 0x9E3779B1u ^ dmix((uint32_t)key + seed * 0x632BE5ABu));
}
// 2^-(0..12) / 2^31: a row's magnitude (P and dS spread over orders).
__device__ __forceinline__ float rowScale(uint32_t h) {
  return __int_as_float((127 - 31 - (int)((h >> 24) % 13)) << 23);
}
__device__ __forceinline__ float elem(uint32_t h, int col, float scale) {
  uint32_t v = (h ^ ((uint32_t)col * 0x9E3779B9u)) * 0x85EBCA6Bu;
  v ^= v >> 13;
  v *= 0xC2B2AE35u;
  v ^= v >> 16;
  return (float)(int)v * scale;
}
__device__ __forceinline__ float4 gen4(uint32_t h, int c, float s) {
  return make_float4(elem(h, c, s), elem(h, c + 1, s), elem(h, c + 2, s), elem(h, c + 3, s));
}
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }

// Fixed-point and grid helpers: ex = ceil(log2 rows) + slack per key.
__device__ __forceinline__ unsigned long long toU64(float x, int ex) {
  return (unsigned long long)__float2ll_rn(x * pow2f(62 - ex));
}
__device__ __forceinline__ int toI32(float x, int ex) { return __float2int_rn(x * pow2f(30 - ex)); }
// hi on a grid of 2^(ex+1-24) (partial sums of <= 2^24 steps: exact), lo on
// one of 2^(ex+1-24 + lc+1-24), lc = ceil(log2 rows): exact sums as well.
__device__ __forceinline__ void split(float x, int ex, int lc, float& hi, float& lo) {
  int gh = ex + 1 - 24, gl = gh + lc + 1 - 24;
  hi = rintf(x * pow2f(-gh)) * pow2f(gh);
  lo = rintf((x - hi) * pow2f(-gl)) * pow2f(gl);
}

// ---- primitives ----------------------------------------------------------
__device__ __forceinline__ void redV4(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void redU64(unsigned long long* p, unsigned long long v) {
  asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
template <int BT>
__device__ __forceinline__ void bulkReduce(void* dst, unsigned src) {
  if (BT == 2)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;" ::"l"(dst),
                 "r"(src), "n"(SEGB)
                 : "memory");
  else if (BT == 1)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [%0], [%1], %2;" ::"l"(dst),
                 "r"(src), "n"(SEGB)
                 : "memory");
  else
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
                 "r"(src), "n"(SEGB)
                 : "memory");
}

// ---- the bwd kernel's part: one launch over blocks of 64 rows -------------
struct Args {
  const int* keys;      // [nBlocks*64]
  const int* blockSrc;  // [nBlocks]
  const int* srcBlock;  // [nSrc+1]
  int b0, nb, nSrc, rev, slack;
  uint32_t seed;
  float* f;
  float* f2;
  void* u;  // u64 or s32 fixed-point sums
  const unsigned char* ex;
  void* ws;          // sorted workspace (fp32 or bf16 rows)
  const int* pos;    // entry -> workspace row in its chunk
  float* planes;
  size_t planeElems;
  int P;
};

enum { M_F32RED, M_U64RED, M_F32X2RED, M_STORE32, M_STORE16, M_PLANE, M_U64REDC };

// A warp covers 4 rows x 128 B per instruction; thread (warp, lane) owns row
// 4*warp + lane/8 of the block and 16 B of each of its 128-B lines.
template <int MODE>
__device__ __forceinline__ void rowWork(const Args& a, int b, int row, int sub, float* plane) {
  int e = b * kBlock + row, key = a.keys[e];
  if (key < 0) return;
  uint32_t h = rowHash(a.blockSrc[b], key, a.seed);
  float sc = rowScale(h);
  if constexpr (MODE == M_STORE16) {
    uint4* dst = (uint4*)((__nv_bfloat16*)a.ws + (size_t)a.pos[e] * W);
#pragma unroll
    for (int i = 0; i < W / 64; ++i) {
      int c = (i * 8 + sub) * 8;
      float4 x = gen4(h, c, sc), y = gen4(h, c + 4, sc);
      __nv_bfloat162 p0 = __floats2bfloat162_rn(x.x, x.y), p1 = __floats2bfloat162_rn(x.z, x.w),
                     p2 = __floats2bfloat162_rn(y.x, y.y), p3 = __floats2bfloat162_rn(y.z, y.w);
      dst[c / 8] = make_uint4(*(uint32_t*)&p0, *(uint32_t*)&p1, *(uint32_t*)&p2, *(uint32_t*)&p3);
    }
    return;
  }
  if constexpr (MODE == M_PLANE) {
    float4 acc[W / 32];
    float* rowp = plane + (size_t)key * W;
#pragma unroll
    for (int i = 0; i < W / 32; ++i) acc[i] = __ldcg((const float4*)(rowp + (i * 8 + sub) * 4));
#pragma unroll
    for (int i = 0; i < W / 32; ++i) {
      int c = (i * 8 + sub) * 4;
      float4 v = gen4(h, c, sc);
      acc[i].x += v.x, acc[i].y += v.y, acc[i].z += v.z, acc[i].w += v.w;
      __stcg((float4*)(rowp + c), acc[i]);
    }
    return;
  }
  if constexpr (MODE == M_U64REDC) {
    // Each instruction's 8 lanes of a row cover 64 contiguous bytes: columns
    // 8k + sub of each 32-column line (a kernel would exchange its fragment
    // within the 8 lanes first; not modelled).
    int ex = a.ex[key];
    unsigned long long* p = (unsigned long long*)a.u + (size_t)key * W + sub;
#pragma unroll 6
    for (int i = 0; i < W / 32; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) redU64(p + i * 32 + k * 8, toU64(elem(h, i * 32 + k * 8 + sub, sc), ex));
    return;
  }
  int ex = MODE == M_U64RED || MODE == M_F32X2RED ? a.ex[key] : 0;
  float* wrow = MODE == M_STORE32 ? (float*)a.ws + (size_t)a.pos[e] * W : nullptr;
#pragma unroll 6
  for (int i = 0; i < W / 32; ++i) {
    int c = (i * 8 + sub) * 4;
    float4 v = gen4(h, c, sc);
    size_t o = (size_t)key * W + c;
    if (MODE == M_F32RED) redV4(a.f + o, v);
    if (MODE == M_STORE32) *(float4*)(wrow + c) = v;
    if (MODE == M_U64RED) {
      unsigned long long* p = (unsigned long long*)a.u + o;
      redU64(p, toU64(v.x, ex));
      redU64(p + 1, toU64(v.y, ex));
      redU64(p + 2, toU64(v.z, ex));
      redU64(p + 3, toU64(v.w, ex));
    }
    if (MODE == M_F32X2RED) {
      float4 hi, lo;
      int lc = ex - a.slack;
      split(v.x, ex, lc, hi.x, lo.x);
      split(v.y, ex, lc, hi.y, lo.y);
      split(v.z, ex, lc, hi.z, lo.z);
      split(v.w, ex, lc, hi.w, lo.w);
      redV4(a.f + o, hi);
      redV4(a.f2 + o, lo);
    }
  }
}

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1) rowsKernel(Args a) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int row = warp * 4 + (lane >> 3), sub = lane & 7;
  if constexpr (MODE == M_PLANE) {
    // CTA -> plane p; the plane's sources in a fixed order: p, p+P, ...
    int p = a.rev ? a.P - 1 - (int)blockIdx.x : (int)blockIdx.x;
    float* plane = a.planes + (size_t)p * a.planeElems;
    for (int s = p; s < a.nSrc; s += a.P)
      for (int b = a.srcBlock[s]; b < a.srcBlock[s + 1]; ++b) {
        __syncthreads();  // the previous block's stores before this block's loads
        rowWork<MODE>(a, b, row, sub, plane);
      }
  } else {
    for (int w = blockIdx.x; w < a.nb; w += gridDim.x)
      rowWork<MODE>(a, a.b0 + (a.rev ? a.nb - 1 - w : w), row, sub, nullptr);
  }
}

// Bulk reductions: the block's rows go to shared memory in 768-B segments
// (two stages), 64 threads each reduce one row's segment with the TMA engine.
// BT: 0 f32, 1 s32 fixed point, 2 u64 fixed point, 3 f32 hi/lo pair.
template <int BT>
__global__ void __launch_bounds__(THREADS, 1) bulkKernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int EB = BT == 2 ? 8 : 4, NARR = BT == 3 ? 2 : 1;
  constexpr int COLS = SEGB / EB, SEGS = W / COLS, CH = SEGB / 16;
  int tid = threadIdx.x, g = 0;
  unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  for (int w = blockIdx.x; w < a.nb; w += gridDim.x) {
    int b = a.b0 + (a.rev ? a.nb - 1 - w : w), src = a.blockSrc[b];
    int myKey = tid < kBlock ? a.keys[b * kBlock + tid] : -1;
    for (int seg = 0; seg < SEGS; ++seg, ++g) {
      int par = g & 1;
      if (tid < kBlock) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      __syncthreads();  // this stage's previous reductions have read it
      for (int q = tid; q < kBlock * CH; q += THREADS) {
        int r = q / CH, cc = q % CH, key = a.keys[b * kBlock + r];
        if (key < 0) continue;
        uint32_t h = rowHash(src, key, a.seed);
        float sc = rowScale(h);
        uint4* d0 = (uint4*)(smem + ((par * NARR) * kBlock + r) * SEGB) + cc;
        if (BT == 2) {
          int c = seg * COLS + cc * 2, ex = a.ex[key];
          unsigned long long x = toU64(elem(h, c, sc), ex), y = toU64(elem(h, c + 1, sc), ex);
          *d0 = make_uint4((uint32_t)x, (uint32_t)(x >> 32), (uint32_t)y, (uint32_t)(y >> 32));
        } else {
          int c = seg * COLS + cc * 4;
          float4 v = gen4(h, c, sc);
          if (BT == 0) *(float4*)d0 = v;
          if (BT == 1) {
            int ex = a.ex[key];
            *(int4*)d0 = make_int4(toI32(v.x, ex), toI32(v.y, ex), toI32(v.z, ex), toI32(v.w, ex));
          }
          if (BT == 3) {
            int ex = a.ex[key], lc = ex - a.slack;
            float4 hi, lo;
            split(v.x, ex, lc, hi.x, lo.x);
            split(v.y, ex, lc, hi.y, lo.y);
            split(v.z, ex, lc, hi.z, lo.z);
            split(v.w, ex, lc, hi.w, lo.w);
            *(float4*)d0 = hi;
            *(float4*)((unsigned char*)d0 + kBlock * SEGB) = lo;
          }
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (tid < kBlock) {
        if (myKey >= 0) {
          unsigned s0 = sbase + ((par * NARR) * kBlock + tid) * SEGB;
          size_t off = (size_t)myKey * W * EB + (size_t)seg * SEGB;
          void* dst = (unsigned char*)(BT == 1 || BT == 2 ? a.u : (void*)a.f) + off;
          bulkReduce<BT == 3 ? 0 : BT>(dst, s0);
          if (BT == 3) bulkReduce<0>((unsigned char*)a.f2 + off, s0 + kBlock * SEGB);
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
  }
  if (tid < kBlock) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- passes before and after ---------------------------------------------
__global__ void countKernel(const int* keys, long n, int* cnt) {
  for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x)
    if (int k = keys[e]; k >= 0) atomicAdd(cnt + k, 1);
}
__global__ void exKernel(const int* cnt, int S, int slack, unsigned char* ex) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < S) ex[k] = (cnt[k] > 1 ? 32 - __clz(cnt[k] - 1) : 0) + slack;
}
// BT 1: s32, 2: u64 fixed point -> fp32; 3: hi + lo.
template <int BT>
__global__ void convertKernel(float* out, const float* lo, const void* u, const unsigned char* ex, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    if (BT == 3) out[i] = out[i] + lo[i];
    if (BT == 2) out[i] = __ll2float_rn(((const long long*)u)[i]) * pow2f(ex[i / W] - 62);
    if (BT == 1) out[i] = __int2float_rn(((const int*)u)[i]) * pow2f(ex[i / W] - 30);
  }
}
// Sort keys: (chunk, key), padding last; values: entry ids (the sort is
// stable, so each key's rows stay in source order).
__global__ void sortKeysKernel(const int* keys, const int* chunkOfBlock, int S, int nChunks, long n,
                               int* kIn, int* vIn) {
  for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
    int k = keys[e];
    kIn[e] = k < 0 ? nChunks * S : chunkOfBlock[e / kBlock] * S + k;
    vIn[e] = (int)e;
  }
}
__global__ void boundsKernel(const int* kOut, const int* vOut, long n, int limit, int S,
                             const int* validBefore, int* pos, int* beg, int* end) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    int k = kOut[i];
    if (k >= limit) continue;
    int local = (int)(i - validBefore[k / S]);
    pos[vOut[i]] = local;
    if (i == 0 || kOut[i - 1] != k) beg[k] = local;
    if (i == n - 1 || kOut[i + 1] != k) end[k] = local + 1;
  }
}
// One ordered sum per key: R rows side by side, each lane summing its rows in
// order in fp64, lanes folded in order; dkv = (first ? 0 : dkv) + sum.
template <int EB>
__global__ void __launch_bounds__(288) foldKernel(const void* ws, const int* beg, const int* end, float* dkv,
                                                  int S, int first, int rev) {
  constexpr int CPR = W * EB / 16, R = 288 / CPR, EPC = 16 / EB;
  __shared__ double part[R][EPC][CPR];
  int key = rev ? S - 1 - (int)blockIdx.x : (int)blockIdx.x;
  int b = beg[key], e = end[key];
  if (b == e && !first) return;
  int l = threadIdx.x / CPR, ch = threadIdx.x % CPR;
  double acc[EPC] = {};
  const uint4* base = (const uint4*)ws + ch;
  auto add = [&](uint4 x) {
    if (EB == 4) {
      const float* f = (const float*)&x;
#pragma unroll
      for (int k = 0; k < EPC; ++k) acc[k] += f[k];
    } else {
      const __nv_bfloat16* f = (const __nv_bfloat16*)&x;
#pragma unroll
      for (int k = 0; k < EPC; ++k) acc[k] += __bfloat162float(f[k]);
    }
  };
  int i = b + l;
  for (; i + 3 * R < e; i += 4 * R) {
    uint4 x0 = __ldcs(base + (size_t)i * CPR), x1 = __ldcs(base + (size_t)(i + R) * CPR),
          x2 = __ldcs(base + (size_t)(i + 2 * R) * CPR), x3 = __ldcs(base + (size_t)(i + 3 * R) * CPR);
    add(x0), add(x1), add(x2), add(x3);
  }
  for (; i < e; i += R) add(__ldcs(base + (size_t)i * CPR));
#pragma unroll
  for (int k = 0; k < EPC; ++k) part[l][k][ch] = acc[k];
  __syncthreads();
  if (l) return;
  float* out = dkv + (size_t)key * W + ch * EPC;
#pragma unroll
  for (int k = 0; k < EPC; ++k) {
    double s = part[0][k][ch];
    for (int j = 1; j < R; ++j) s += part[j][k][ch];
    out[k] = first ? (float)s : (float)((double)out[k] + s);
  }
}
__global__ void foldPlanesKernel(const float* planes, size_t planeElems, int P, float* dkv, long n4, int rev) {
  for (long q = blockIdx.x * (long)blockDim.x + threadIdx.x; q < n4; q += (long)gridDim.x * blockDim.x) {
    long i = rev ? n4 - 1 - q : q;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma unroll 8
    for (int p = 0; p < P; ++p) {
      float4 v = __ldcs((const float4*)(planes + p * planeElems) + i);
      s0 += v.x, s1 += v.y, s2 += v.z, s3 += v.w;
    }
    ((float4*)dkv)[i] = make_float4((float)s0, (float)s1, (float)s2, (float)s3);
  }
}
// float64 reference: each key's rows in source order.
__global__ void refKernel(const int* off, const int* src, uint32_t seed, double* ref) {
  int r = blockIdx.x, c = threadIdx.x * 4;
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (int i = off[r]; i < off[r + 1]; ++i) {
    uint32_t h = rowHash(src[i], r, seed);
    float4 v = gen4(h, c, rowScale(h));
    a0 += v.x, a1 += v.y, a2 += v.z, a3 += v.w;
  }
  double* o = ref + (size_t)r * W + c;
  o[0] = a0, o[1] = a1, o[2] = a2, o[3] = a3;
}


}  // namespace ddkv
