// How the rate of scattered fp32 row reductions depends on how many bytes
// of one dKV row a warp instruction covers (sixteenth session).
//
// 132 CTAs x 512 threads, 400 steps; a step reduces 64 rows x 576 f32 (a
// block of the bwd kernel) with red.global.add.v4.f32, rows drawn from a
// band of `band` rows (L2-resident at 4096). A warp instruction covers
// 32 / L rows x L x 16 contiguous bytes: L = 4 is the layout of the
// kernel's wgmma / mma.sync C fragments after the shfl pairing (8 rows x
// 64 B), L = 8 / 16 need the sums transposed through shared memory first.
//
//   nvcc -O3 -arch=sm_90a bench/red_layout.cu -o red_layout && ./red_layout [band]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define W 576
#define F4 (W / 4)  // float4 per row
#define BLOCK 64

template <int L>
__global__ void __launch_bounds__(512, 1)
    k(float* dkv, const int* idx, int steps) {
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int rowsPer = 32 / L, colGroups = F4 / L;
  constexpr int units = BLOCK * F4 / 32;
  float v = 1.0f / 1024;
  for (int s = 0; s < steps; ++s) {
    const int* rows = idx + ((size_t)blockIdx.x * steps + s) * BLOCK;
    for (int u = warp; u < units; u += 16) {
      int rg = u / colGroups, cg = u % colGroups;
      int r = rows[rg * rowsPer + lane / L];
      int c4 = cg * L + lane % L;
      float* p = dkv + (size_t)r * W + c4 * 4;
      asm volatile("red.global.add.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(p),
                   "f"(v), "f"(v), "f"(v), "f"(v)
                   : "memory");
    }
  }
}

template <int L>
float run(float* dkv, const int* idx, int steps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  k<L><<<132, 512>>>(dkv, idx, steps);  // warm-up
  cudaEventRecord(a);
  k<L><<<132, 512>>>(dkv, idx, steps);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

int main(int argc, char** argv) {
  int S = 32768, ctas = 132, steps = 400;
  int band = argc > 1 ? atoi(argv[1]) : 4096;
  float* dkv;
  int* idx;
  cudaMalloc(&dkv, (size_t)S * W * 4);
  cudaMemset(dkv, 0, (size_t)S * W * 4);
  std::vector<int> h((size_t)ctas * steps * BLOCK);
  srand(1);
  // Distinct rows within a step (a block's slots are distinct keys), each
  // CTA's band drifting through the rows as the sorted walk does.
  for (int c = 0; c < ctas; ++c)
    for (int s = 0; s < steps; ++s) {
      int base = (c * 97 + s * 13) % (S - band);
      for (int j = 0; j < BLOCK; ++j)
        h[((size_t)c * steps + s) * BLOCK + j] = base + (j * (band / BLOCK) + rand() % (band / BLOCK));
    }
  cudaMalloc(&idx, h.size() * 4);
  cudaMemcpy(idx, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  double bytes = (double)ctas * steps * BLOCK * W * 4;
  float t4 = run<4>(dkv, idx, steps), t8 = run<8>(dkv, idx, steps),
        t16 = run<16>(dkv, idx, steps);
  printf("band %d, %.2f GB of reductions\n", band, bytes / 1e9);
  printf("  8 rows x  64 B per instruction (L=4):  %.3f ms, %.2f TB/s\n", t4, bytes / t4 / 1e9);
  printf("  4 rows x 128 B per instruction (L=8):  %.3f ms, %.2f TB/s\n", t8, bytes / t8 / 1e9);
  printf("  2 rows x 256 B per instruction (L=16): %.3f ms, %.2f TB/s\n", t16, bytes / t16 / 1e9);
  // Every element received 2 warm-up + 2 timed runs' worth of 1/1024 per
  // time its row was drawn: check the total.
  std::vector<float> out((size_t)S * W);
  cudaMemcpy(out.data(), dkv, out.size() * 4, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (float x : out) sum += x;
  printf("check: sum %.6g expected %.6g\n", sum, 6.0 * ctas * steps * BLOCK * W / 1024);
  return cudaGetLastError() != cudaSuccess;
}
