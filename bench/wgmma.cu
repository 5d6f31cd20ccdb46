// The block products of a 32-row CTA, S^T = K Q^T and dP^T = V dO^T over
// one top-k block of 64 keys (K: 64 x 576, V = its first 512 columns),
// on mma.sync as the library lowers them at H = 16 against wgmma from shared
// memory as the 32-row kernels do (docs/wgmma-kernels.md).
//
//   nvcc -arch=sm_90a -O3 -o /tmp/wgmma bench/wgmma.cu && /tmp/wgmma
//
// 132 CTAs of 512 threads (one per SM, as the library's 32-row kernels)
// each repeat the products of one block `iters` times on tiles already in
// shared memory, and store them as the library does, into two f32 [32][72]
// tiles (S and dP, rows = the 32 heads). Modes:
//   mma    the library's fused scheme: 8 warps take (m tile, 16 keys)
//          items, ldmatrix.x4 for q / do and for the keys (row-major tiles
//          padded by 16 bytes), four mma.sync chains; the other 8 idle;
//   wg2    warpgroup 0 runs S^T, warpgroup 1 dP^T, each as m64n32k16 wgmma
//          (36 and 32 k steps) with both operands K-major from shared
//          memory in the canonical no-swizzle layout (8 x 8 core matrices
//          of 128 contiguous bytes); warpgroups 2-3 idle;
//   wg4    the same split over all four warpgroups by halves of K, the
//          upper halves' partial sums added through shared memory;
//   wg1    warpgroup 0 alone, both products as one m64n64k16 chain over
//          [q; do] (a 64-row tile, 32 k steps) and the rope tail as
//          m64n32k16 on the q rows (4 steps): the key tile read once;
//   wg1r   as wg1 with A (the keys) from registers: ldmatrix.x4 from the
//          library's row-major padded key tile, only [q; do] canonical.
// The check compares wg2 and wg4 with mma (same bf16 inputs, f32 sums).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "wgmma.cuh"

#define W 576     // q.k width
#define DV 512    // do.v width
#define BLK 64    // keys per block
#define ROWS 32   // heads of the CTA
#define PAD 8     // bf16 row pad of the row-major tiles
#define SROW 72   // f32 result row stride (64 + 8, as the library)


// k steps [FIRST, FIRST + STEPS) of D[64 keys x 32 rows] = K B^T: step s
// reads core-matrix columns 2s, 2s + 1 of both tiles (K-adjacent core
// matrices lbo apart, M/N-adjacent ones sbo apart).
template <int STEPS, int FIRST>
__device__ __forceinline__ void chain(float* d, const __nv_bfloat16* kt,
                                      const __nv_bfloat16* bt, int swap) {
  uint32_t lboA = BLK * 16, sboA = 128, lboB = ROWS * 16, sboB = 128;
  if (swap) { uint32_t t = lboA; lboA = sboA; sboA = t; t = lboB; lboB = sboB; sboB = t; }
  uint32_t ka = smem(kt), kb = smem(bt);
#pragma unroll
  for (int i = 0; i < 16; ++i) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int s = FIRST; s < FIRST + STEPS; ++s)
    wgmma32(d, desc(ka + 2 * s * BLK * 16, lboA, sboA),
            desc(kb + 2 * s * ROWS * 16, lboB, sboB), s > FIRST);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

// An m64n64 accumulator over [q; do] into the S and dP tiles:
// d[4i + {0,1,2,3}] = keys j0 (+8), rows 8 (i % 4) + kq (+1); i < 4 S, else dP.
__device__ __forceinline__ void storeD64(const float* d, float* S, float* P, int j0, int kq) {
  for (int i = 0; i < 8; ++i) {
    float* T = i < 4 ? S : P;
    int h = 8 * (i % 4) + kq;
    T[h * SROW + j0] = d[4 * i];
    T[(h + 1) * SROW + j0] = d[4 * i + 1];
    T[h * SROW + j0 + 8] = d[4 * i + 2];
    T[(h + 1) * SROW + j0 + 8] = d[4 * i + 3];
  }
}

struct Inputs { const __nv_bfloat16 *k, *q, *dout; };

// Shared memory: row-major tiles (mma) or canonical ones (wgmma), then the
// S and dP tiles, then (wg4) two partial tiles.
constexpr int kRowMajorBytes = (BLK * (W + PAD) + ROWS * (W + PAD) + ROWS * (DV + PAD)) * 2;
constexpr int kCanonBytes = (BLK * W + ROWS * W + ROWS * DV) * 2;
constexpr int kResultBytes = 2 * ROWS * SROW * 4;
constexpr int kMode4Bytes = (BLK * (W + PAD) + 2 * ROWS * W) * 2;

template <int MODE>  // 0 mma, 1 wg2, 2 wg4, 3 wg1, 4 wg1r
__global__ void __launch_bounds__(512, 1) products(Inputs in, int iters, float* out, int swap) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __nv_bfloat16* kt = (__nv_bfloat16*)sm;
  __nv_bfloat16* qt = kt + (MODE == 0 || MODE == 4 ? BLK * (W + PAD) : BLK * W);
  __nv_bfloat16* dt = qt + (MODE == 0 ? ROWS * (W + PAD) : ROWS * W);
  float* S = (float*)(sm + (MODE == 0 ? kRowMajorBytes : MODE == 4 ? kMode4Bytes : kCanonBytes));
  float* P = S + ROWS * SROW;
  float* part = P + ROWS * SROW;  // wg4: 2 x [ROWS][SROW]
  // Fill the tiles once.
  for (int i = tid; i < BLK * W; i += blockDim.x) {
    int r = i / W, c = i % W;
    if (MODE == 0 || MODE == 4) kt[r * (W + PAD) + c] = in.k[i];
    else *(__nv_bfloat16*)((char*)kt + canon(r, c, BLK)) = in.k[i];
  }
  if (MODE == 3 || MODE == 4) {  // [q; do] as one 64-row tile, do zero past DV
    for (int i = tid; i < 2 * ROWS * W; i += blockDim.x) {
      int r = i / W, c = i % W;
      __nv_bfloat16 v = r < ROWS ? in.q[r * W + c]
                        : c < DV ? in.dout[(r - ROWS) * DV + c] : __float2bfloat16(0.f);
      *(__nv_bfloat16*)((char*)qt + canon(r, c, 2 * ROWS)) = v;
    }
  } else {
    for (int i = tid; i < ROWS * W; i += blockDim.x) {
      int r = i / W, c = i % W;
      if (MODE == 0) qt[r * (W + PAD) + c] = in.q[i];
      else *(__nv_bfloat16*)((char*)qt + canon(r, c, ROWS)) = in.q[i];
    }
    for (int i = tid; i < ROWS * DV; i += blockDim.x) {
      int r = i / DV, c = i % DV;
      if (MODE == 0) dt[r * (DV + PAD) + c] = in.dout[i];
      else *(__nv_bfloat16*)((char*)dt + canon(r, c, ROWS)) = in.dout[i];
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float sink = 0.f;
  for (int it = 0; it < iters; ++it) {
    if (MODE == 0) {
      if (warp < 8) {
        int mt = warp / 4, n0 = (warp % 4) * 16;
        int gr = lane / 4, kq = 2 * (lane % 4);
        uint32_t aq = smem(qt + (mt * 16 + lane % 16) * (W + PAD) + 8 * (lane / 16));
        uint32_t ad = smem(dt + (mt * 16 + lane % 16) * (DV + PAD) + 8 * (lane / 16));
        uint32_t bk = smem(kt + (n0 + lane % 8 + 8 * (lane / 16)) * (W + PAD) + 8 * ((lane / 8) % 2));
        float acc[16] = {0};
        for (int k = 0; k < W; k += 16) {
          uint32_t b[4], a[4];
          ldsm4(bk + 2 * k, b);
          ldsm4(aq + 2 * k, a);
          mma16816(acc + 0, a, b[0], b[1]);
          mma16816(acc + 4, a, b[2], b[3]);
          if (k < DV) {
            ldsm4(ad + 2 * k, a);
            mma16816(acc + 8, a, b[0], b[1]);
            mma16816(acc + 12, a, b[2], b[3]);
          }
        }
        for (int p = 0; p < 2; ++p)
          for (int h = 0; h < 2; ++h) {
            float* T = p ? P : S;
            const float* c = acc + 8 * p + 4 * h;
            int row = mt * 16 + gr, col = n0 + 8 * h + kq;
            *(float2*)&T[row * SROW + col] = make_float2(c[0], c[1]);
            *(float2*)&T[(row + 8) * SROW + col] = make_float2(c[2], c[3]);
          }
      }
    } else if (MODE == 4) {
      int wg = warp / 4, w4 = warp % 4, gr = lane / 4, kq = 2 * (lane % 4);
      if (wg == 0) {
        float d[32];
        // A: this warp's 16 keys by ldmatrix.x4 from the row-major tile.
        uint32_t aRow = smem(kt + (16 * w4 + lane % 16) * (W + PAD) + 8 * (lane / 16));
        uint32_t kb = smem(qt);
#pragma unroll
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        // Groups of 4 k steps, A double-buffered in registers: group g's
        // fragments are loaded while group g - 1's wgmma run; wait_group 1
        // before a buffer is reused.
        uint32_t a[2][4][4];
#pragma unroll
        for (int g = 0; g < W / 64; ++g) {
#pragma unroll
          for (int i = 0; i < 4; ++i) ldsm4(aRow + 32 * (4 * g + i), a[g % 2][i]);
          asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            int s = 4 * g + i;
            uint64_t b = desc(kb + 2 * s * 2 * ROWS * 16, 2 * ROWS * 16, 128);
            if (s < DV / 16) wgmma64r(d, a[g % 2][i], b, s > 0);
            else wgmma32r(d, a[g % 2][i], b, 1);
          }
          asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
          asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        storeD64(d, S, P, 16 * w4 + gr, kq);
      }
    } else if (MODE == 3) {
      int wg = warp / 4, w4 = warp % 4, gr = lane / 4, kq = 2 * (lane % 4);
      if (wg == 0) {
        float d[32];
        uint32_t ka = smem(kt), kb = smem(qt);
#pragma unroll
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int s = 0; s < DV / 16; ++s)
          wgmma64(d, desc(ka + 2 * s * BLK * 16, BLK * 16, 128),
                  desc(kb + 2 * s * 2 * ROWS * 16, 2 * ROWS * 16, 128), s > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int s = DV / 16; s < W / 16; ++s)  // the rope tail: q rows only
          wgmma32(d, desc(ka + 2 * s * BLK * 16, BLK * 16, 128),
                  desc(kb + 2 * s * 2 * ROWS * 16, 2 * ROWS * 16, 128), 1);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        storeD64(d, S, P, 16 * w4 + gr, kq);
      }
    } else {
      int wg = warp / 4, w4 = warp % 4, gr = lane / 4, kq = 2 * (lane % 4);
      float d[16];
      // Warpgroup wg runs product wg % 2 (S^T from q, dP^T from do) over
      // its k steps: all of them (wg2) or one half (wg4, wg >= 2 the upper).
      bool active = MODE == 2 || wg < 2;
      if (wg == 0) chain<W / 16 / (MODE == 2 ? 2 : 1), 0>(d, kt, qt, swap);
      else if (wg == 1) chain<DV / 16 / (MODE == 2 ? 2 : 1), 0>(d, kt, dt, swap);
      else if (MODE == 2 && wg == 2) chain<W / 32, W / 32>(d, kt, qt, swap);
      else if (MODE == 2 && wg == 3) chain<DV / 32, DV / 32>(d, kt, dt, swap);
      if (active) {
        int prod = wg % 2;
        // d[4i + {0,1,2,3}]: keys 16 w4 + gr (+8), rows 8 i + kq (+1).
        float* T = (MODE == 2 && wg >= 2) ? part + prod * ROWS * SROW : (prod ? P : S);
        int j0 = 16 * w4 + gr;
        for (int i = 0; i < 4; ++i) {
          int h = 8 * i + kq;
          T[h * SROW + j0] = d[4 * i];
          T[(h + 1) * SROW + j0] = d[4 * i + 1];
          T[h * SROW + j0 + 8] = d[4 * i + 2];
          T[(h + 1) * SROW + j0 + 8] = d[4 * i + 3];
        }
      }
      if (MODE == 2) {
        __syncthreads();
        for (int i = tid; i < 2 * ROWS * BLK; i += blockDim.x) {
          int p = i / (ROWS * BLK), h = (i / BLK) % ROWS, j = i % BLK;
          (p ? P : S)[h * SROW + j] += part[p * ROWS * SROW + h * SROW + j];
        }
      }
    }
    __syncthreads();
    sink += S[(tid % ROWS) * SROW + (tid / ROWS) % BLK];
    __syncthreads();
  }
  if (blockIdx.x == 0)
    for (int i = tid; i < 2 * ROWS * BLK; i += blockDim.x) {
      int p = i / (ROWS * BLK), h = (i / BLK) % ROWS, j = i % BLK;
      out[i] = (p ? P : S)[h * SROW + j];
    }
  if (sink == 12345.f) out[0] = sink;
}

template <int MODE>
float run(Inputs in, int iters, float* out, int swap, int smemBytes) {
  CHECK(cudaFuncSetAttribute(products<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes));
  return bestOf5([&](int n) { products<MODE><<<132, 512, smemBytes>>>(in, n, out, swap); }, iters);
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  size_t nk = BLK * W, nq = ROWS * W, nd = ROWS * DV;
  std::vector<__nv_bfloat16> hk(nk), hq(nq), hd(nd);
  srand(7);
  auto rnd = [] { return __float2bfloat16((rand() % 2001 - 1000) / 1000.f); };
  for (auto& x : hk) x = rnd();
  for (auto& x : hq) x = rnd();
  for (auto& x : hd) x = rnd();
  __nv_bfloat16 *dk, *dq, *dd; float* out[6];
  CHECK(cudaMalloc(&dk, nk * 2)); CHECK(cudaMalloc(&dq, nq * 2)); CHECK(cudaMalloc(&dd, nd * 2));
  CHECK(cudaMemcpy(dk, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dq, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dd, hd.data(), nd * 2, cudaMemcpyHostToDevice));
  for (auto& o : out) CHECK(cudaMalloc(&o, 2 * ROWS * BLK * 4));
  Inputs in{dk, dq, dd};
  int rm = kRowMajorBytes + kResultBytes, cn = kCanonBytes + kResultBytes;
  float t0 = run<0>(in, iters, out[0], 0, rm);
  float t1 = run<1>(in, iters, out[1], 0, cn);
  float t1s = run<1>(in, 1, out[3], 1, cn);  // the other LBO / SBO reading
  float t2 = run<2>(in, iters, out[2], 0, cn + kResultBytes);
  float t3 = run<3>(in, iters, out[4], 0, (BLK * W + 2 * ROWS * W) * 2 + kResultBytes);
  float t4 = run<4>(in, iters, out[5], 0, kMode4Bytes + kResultBytes);
  (void)t1s;
  std::vector<float> h[6];
  for (int i = 0; i < 6; ++i) {
    h[i].resize(2 * ROWS * BLK);
    CHECK(cudaMemcpy(h[i].data(), out[i], h[i].size() * 4, cudaMemcpyDeviceToHost));
  }
  // Host reference for one element set, and max |diff| of each mode to it.
  std::vector<float> ref(2 * ROWS * BLK);
  for (int p = 0; p < 2; ++p)
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < BLK; ++j) {
        double s = 0;
        int n = p ? DV : W;
        for (int c = 0; c < n; ++c)
          s += (double)__bfloat162float((p ? hd[r * DV + c] : hq[r * W + c])) *
               __bfloat162float(hk[j * W + c]);
        ref[p * ROWS * BLK + r * BLK + j] = (float)s;
      }
  const char* names[6] = {"mma", "wg2", "wg4", "wg2 (LBO/SBO swapped)", "wg1", "wg1r"};
  for (int i = 0; i < 6; ++i) {
    double md = 0;
    for (size_t e = 0; e < ref.size(); ++e) md = fmax(md, fabs(h[i][e] - ref[e]));
    printf("check %-22s max |diff| to the host sums %.3g\n", names[i], md);
  }
  double flops = 2.0 * 132 * iters * ROWS * BLK * (W + DV);
  printf("per block (132 CTAs x %d blocks): mma %.3f us (%.0f TFLOP/s), wg2 %.3f us (%.0f), "
         "wg4 %.3f us (%.0f), wg1 %.3f us (%.0f), wg1r %.3f us (%.0f)\n",
         iters, t0 * 1e3 / iters, flops / t0 / 1e9, t1 * 1e3 / iters, flops / t1 / 1e9,
         t2 * 1e3 / iters, flops / t2 / 1e9, t3 * 1e3 / iters, flops / t3 / 1e9,
         t4 * 1e3 / iters, flops / t4 / 1e9);
  printf("status %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
