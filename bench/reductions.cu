// Scattered fp32 row reductions on one H200, alone and next to compute
// (docs/performance.md).
//
//   nvcc -arch=sm_90a -O3 -o /tmp/reductions bench/reductions.cu
//   /tmp/reductions 4096    # rows drawn from a band of 4096 (in L2)
//   /tmp/reductions 32000   # from almost all of S = 32768
//   /tmp/reductions 4096 0  # the compute chain reads no shared memory
//
// 132 CTAs of 512 threads each run 400 steps; a step runs `work`
// iterations of a dependent FMA chain that reads shared memory, then
// reduces 64 rows of 576 f32 (the dKV rows of one top-k block) into a
// [32768, 576] f32 buffer. Modes per line: compute only; red.global.add.v4
// from registers in the bwd kernel's layout (8 rows x 64 B per warp
// instruction); cp.reduce.async.bulk of each 2304 B row from a shared
// stage (wait_group.read before the stage is rewritten); "spec": warps 0-7
// compute and warps 8-15 issue all the reductions (compute-8: warps 0-7
// compute, nobody reduces); red.v2: the red.v4 bytes as twice as many
// red.global.add.v2.f32. The check compares red and
// bulk results.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <cuda_runtime.h>
#define W 576
#define BLOCK 64
#define STRIDE (W + 4)
__device__ __forceinline__ void red4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ float sink;
// The bwd kernel's layout: warp w of `warps` owns m tile (w % 4) * 16 of the
// block's rows and every (warps / 4)-th group of 16 columns; lane (gr, kq)
// adds 16 B to rows gr and gr + 8 of the tile.
__device__ void reduceBlock(float* dkv, const int* rows, int w, int warps,
                            int lane, float v) {
  int gr = lane >> 2, kq = lane & 3;
  int j0 = (w % 4) * 16 + gr, j1 = j0 + 8;
  int r0 = rows[j0], r1 = rows[j1];
  for (int cg = w / 4; cg < W / 16; cg += warps / 4) {
    int col = cg * 16 + kq * 4;
    red4(dkv + (size_t)r0 * W + col, v, v, v, v);
    red4(dkv + (size_t)r1 * W + col, v, v, v, v);
  }
}
// The same bytes as red.global.add.v2.f32 in the layout of an mma / wgmma
// C fragment without the even/odd split: lane (gr, q) adds columns c0 +
// 2q + {0, 1} and c0 + 8 + 2q + {0, 1} of rows gr and gr + 8 (twice the
// instructions of reduceBlock).
__device__ void reduceBlockV2(float* dkv, const int* rows, int w, int warps,
                              int lane, float v) {
  int gr = lane >> 2, q = lane & 3;
  int j0 = (w % 4) * 16 + gr, j1 = j0 + 8;
  int r0 = rows[j0], r1 = rows[j1];
  for (int cg = w / 4; cg < W / 16; cg += warps / 4)
    for (int half = 0; half < 2; ++half) {
      int col = cg * 16 + 8 * half + 2 * q;
      asm volatile("red.global.add.v2.f32 [%0], {%1,%2};" :: "l"(dkv + (size_t)r0 * W + col), "f"(v), "f"(v) : "memory");
      asm volatile("red.global.add.v2.f32 [%0], {%1,%2};" :: "l"(dkv + (size_t)r1 * W + col), "f"(v), "f"(v) : "memory");
    }
}
template <int MODE>  // 0 compute only, 1 red, 2 bulk, 3 specialised (warps >= 8 reduce), 4 compute on 8 warps only, 5 red.v2
__global__ void __launch_bounds__(512, 1) k(float* dkv, const int* idx, int steps, int work, int smem) {
  extern __shared__ __align__(128) float stage[];
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float acc = tid * 1e-3f;
  for (int i = tid; i < 8192; i += blockDim.x) stage[i] = 0.999f;
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    // "compute"
    if (MODE < 3 || warp < 8)
      for (int i = 0; i < work; ++i)
        acc = fmaf(acc, smem ? stage[(tid * 7 + i * 33) & 8191] : 0.999f, 1e-3f);
    const int* rows = idx + ((size_t)blockIdx.x * steps + s) * BLOCK;
    if (MODE == 3 && warp >= 8)
      reduceBlock(dkv, rows, warp - 8, 8, lane, acc);
    if (MODE == 5) reduceBlockV2(dkv, rows, warp, 16, lane, acc);
    if (MODE == 1) {
      reduceBlock(dkv, rows, warp, 16, lane, acc);
    } else if (MODE == 2) {
      if (tid < BLOCK) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      __syncthreads();
      int gr = lane >> 2, kq = lane & 3;
      int j0 = (warp % 4) * 16 + gr, j1 = j0 + 8;
      for (int cg = warp / 4; cg < W / 16; cg += 4) {
        int col = cg * 16 + kq * 4;
        *(float4*)&stage[j0 * STRIDE + col] = make_float4(acc, acc, acc, acc);
        *(float4*)&stage[j1 * STRIDE + col] = make_float4(acc, acc, acc, acc);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (tid < BLOCK) {
        int r = rows[tid];
        unsigned sa = (unsigned)__cvta_generic_to_shared(&stage[tid * STRIDE]);
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                     :: "l"(dkv + (size_t)r * W), "r"(sa), "r"(W * 4) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
    __syncthreads();
  }
  if (MODE == 2 && tid < BLOCK) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (acc == 12345.f) sink = acc;
}
int main(int argc, char** argv) {
  int S = 32768, ctas = 132, steps = 400;
  int band = argc > 1 ? atoi(argv[1]) : 4096;  // rows each step draws from (per-CTA band drifts)
  int smem = argc > 2 ? atoi(argv[2]) : 1;     // 0: the compute chain reads no shared memory
  float* dkv; int* idx;
  cudaMalloc(&dkv, (size_t)S * W * 4);
  size_t n = (size_t)ctas * steps * BLOCK;
  std::vector<int> h(n);
  srand(1);
  for (int c = 0; c < ctas; ++c)
    for (int s = 0; s < steps; ++s) {
      int base = (int)(((long)s * S / steps + c * 7) % (S - band));
      for (int j = 0; j < BLOCK; ++j) h[((size_t)c * steps + s) * BLOCK + j] = base + rand() % band;
    }
  cudaMalloc(&idx, n * 4);
  cudaMemcpy(idx, h.data(), n * 4, cudaMemcpyHostToDevice);
  int bytes_smem = BLOCK * STRIDE * 4;
  cudaFuncSetAttribute(k<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaFuncSetAttribute(k<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaFuncSetAttribute(k<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaFuncSetAttribute(k<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaFuncSetAttribute(k<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaFuncSetAttribute(k<5>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes_smem);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  double bytes = (double)n * W * 4;
  for (int work : {0, 1000, 2000, 4000}) {
    float t[6];
    for (int mode = 0; mode < 6; ++mode) {
      float best = 1e9;
      for (int rep = 0; rep < 5; ++rep) {
        cudaMemset(dkv, 0, (size_t)S * W * 4);
        cudaEventRecord(a);
        if (mode == 0) k<0><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        if (mode == 1) k<1><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        if (mode == 2) k<2><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        if (mode == 3) k<3><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        if (mode == 4) k<4><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        if (mode == 5) k<5><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, work, smem);
        cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms;
      }
      t[mode] = best;
    }
    printf("band %d smem %d work %d: compute %.3f ms | red.v4 %.3f ms (%.2f TB/s of reductions) | bulk %.3f ms | spec %.3f (compute-8 %.3f) | red.v2 %.3f ms\n", band, smem, work, t[0], t[1], bytes / (t[1] * 1e-3) / 1e12, t[2], t[3], t[4], t[5]);
  }
  {
    size_t m = (size_t)S * W; std::vector<float> r1(m), r2(m);
    cudaMemset(dkv, 0, m * 4); k<1><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, 100, smem);
    cudaMemcpy(r1.data(), dkv, m * 4, cudaMemcpyDeviceToHost);
    cudaMemset(dkv, 0, m * 4); k<2><<<ctas, 512, bytes_smem>>>(dkv, idx, steps, 100, smem);
    cudaMemcpy(r2.data(), dkv, m * 4, cudaMemcpyDeviceToHost);
    double md = 0, tot = 0; for (size_t i = 0; i < m; ++i) { md = fmax(md, fabs(r1[i] - r2[i]) / (fabs(r1[i]) + 1e-6)); tot += r1[i]; }
    printf("check: max rel diff red vs bulk %.3g (sum %.6g)\n", md, tot);
  }
  cudaError_t e = cudaDeviceSynchronize();
  // check: sum of dkv vs expected for work=4000 bulk (last run)
  printf("status %s\n", cudaGetErrorString(e));
  return 0;
}
