// The L2 traffic floor of a query-major sparse-MLA backward on one H200:
// per 64-key block, a CTA gathers 64 kv rows (576 bf16, 72 KB) into shared
// memory and reduces 64 dKV rows (576 f32, 144 KB) into global memory. No
// arithmetic: the time is what the memory system needs for that traffic,
// which no schedule of the products can beat.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/l2floor bench/l2_floor.cu
//   /tmp/l2floor 8192 4096   # B1: S_kv 8192, T 4096 (dKV 18.9 MB in L2)
//   /tmp/l2floor 16384 4096  # H16 random: S_kv 16384
//   /tmp/l2floor 32768 8192  # B2r: S_kv 32768, T 8192
//
// 132 CTAs of 512 threads (one per SM) walk blocks of 64 random rows; each
// of the T x K / 64 blocks of the shape is done once. Modes: gather only
// (cp.async 16 B, zero wait between blocks but the last), reduce only
// (red.global.add.v4.f32 in the kernels' layout), both with warps 0-7
// gathering and warps 8-15 reducing at the same time. The line gives the
// whole shape's time in ms: the floor for that shape's traffic.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int W = 576, BLOCK = 64, ROWB = W * 2;

__device__ __forceinline__ void cpAsync16(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void redV4(float *p, float v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1,%1,%1,%1};" ::"l"(p), "f"(v) : "memory");
}

template <int MODE> // 0 gather, 1 reduce, 2 both (split warps)
__global__ void __launch_bounds__(512, 1)
    walk(const __nv_bfloat16 *kv, float *dkv, const int *idx, int blocks) {
  extern __shared__ __align__(128) unsigned char tile[];
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int gatherThreads = MODE == 2 ? 256 : 512;
  for (int b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int *rows = idx + (size_t)b * BLOCK;
    bool gathers = MODE == 0 || (MODE == 2 && warp < 8);
    bool reduces = MODE == 1 || (MODE == 2 && warp >= 8);
    if (gathers) {
      for (int c = tid; c < BLOCK * ROWB / 16; c += gatherThreads) {
        int r = c / (ROWB / 16), k = c % (ROWB / 16);
        cpAsync16(tile + r * (ROWB + 16) + k * 16,
                  (const char *)kv + (size_t)rows[r] * ROWB + k * 16);
      }
      asm volatile("cp.async.commit_group; cp.async.wait_group 0;" ::: "memory");
    }
    if (reduces) {
      int w = MODE == 2 ? warp - 8 : warp, warps = MODE == 2 ? 8 : 16;
      int gr = lane >> 2, kq = lane & 3;
      int j0 = (w % 4) * 16 + gr, j1 = j0 + 8;
      int r0 = rows[j0], r1 = rows[j1];
      float v = 1e-3f;
      for (int cg = w / 4; cg < W / 16; cg += warps / 4) {
        int col = cg * 16 + kq * 4;
        redV4(dkv + (size_t)r0 * W + col, v);
        redV4(dkv + (size_t)r1 * W + col, v);
      }
    }
  }
}

int main(int argc, char **argv) {
  int S = argc > 1 ? atoi(argv[1]) : 8192;
  int T = argc > 2 ? atoi(argv[2]) : 4096;
  const int K = 2048, ctas = 132;
  int blocks = T * K / BLOCK;
  __nv_bfloat16 *kv;
  float *dkv;
  int *idx;
  cudaMalloc(&kv, (size_t)S * ROWB);
  cudaMalloc(&dkv, (size_t)S * W * 4);
  cudaMemset(kv, 0, (size_t)S * ROWB);
  std::vector<int> h((size_t)blocks * BLOCK);
  srand(1);
  for (auto &x : h) x = rand() % S;
  cudaMalloc(&idx, h.size() * 4);
  cudaMemcpy(idx, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  int smem = BLOCK * (ROWB + 16);
  cudaFuncSetAttribute(walk<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(walk<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(walk<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const char *names[3] = {"gather", "reduce", "both"};
  double gatherBytes = (double)blocks * BLOCK * ROWB, redBytes = (double)blocks * BLOCK * W * 4;
  for (int mode = 0; mode < 3; ++mode) {
    float best = 1e9f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaMemset(dkv, 0, (size_t)S * W * 4);
      cudaEventRecord(a);
      if (mode == 0) walk<0><<<ctas, 512, smem>>>(kv, dkv, idx, blocks);
      if (mode == 1) walk<1><<<ctas, 512, smem>>>(kv, dkv, idx, blocks);
      if (mode == 2) walk<2><<<ctas, 512, smem>>>(kv, dkv, idx, blocks);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      if (ms < best) best = ms;
    }
    double bytes = (mode != 1 ? gatherBytes : 0) + (mode != 0 ? redBytes : 0);
    printf("S_kv %d T %d %-6s %.3f ms  %.2f TB/s\n", S, T, names[mode], best,
           bytes / (best * 1e-3) / 1e12);
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf("status %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
