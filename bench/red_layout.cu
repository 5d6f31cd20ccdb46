// How the rate of scattered fp32 row reductions depends on how many bytes
// of one dKV row a warp instruction covers (docs/performance.md, "Floors").
//
// 132 CTAs x 512 threads, 400 steps; a step reduces 64 rows x 576 f32 (a
// block of the bwd kernel) with red.global.add.v4.f32, rows drawn from a
// band of `band` rows (L2-resident at 4096). A warp instruction covers
// 32 / L rows x L x 16 contiguous bytes: L = 4 is the layout of the
// kernel's wgmma / mma.sync C fragments after the shfl pairing (8 rows x
// 64 B), L = 8 / 16 need the sums transposed through shared memory first.
//
// The bulk modes reduce the same rows from shared
// memory with the TMA engine instead: cp.reduce.async.bulk .add.f32 of
// one row segment of OP bytes per instruction, issued by 64 threads (one
// row each), the segments of a row in turn; `wait` waits for the reads of
// one segment's 64 instructions before the next (a single shared buffer,
// as a kernel would reuse it), `nowait` only at the end of the step.
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

template <int OP, bool WAIT>
__global__ void __launch_bounds__(512, 1)
    kb(float* dkv, const int* idx, int steps) {
  extern __shared__ __align__(128) float src[];
  int tid = threadIdx.x;
  for (int i = tid; i < BLOCK * OP / 4; i += 512) src[i] = 1.0f / 1024;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (tid >= BLOCK) return;
  unsigned s0 = (unsigned)__cvta_generic_to_shared(src + tid * OP / 4);
  for (int s = 0; s < steps; ++s) {
    int r = idx[((size_t)blockIdx.x * steps + s) * BLOCK + tid];
    for (int c = 0; c < W * 4 / OP; ++c) {
      float* p = dkv + (size_t)r * W + c * OP / 4;
      asm volatile(
          "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], "
          "[%1], %2;" ::"l"(p), "r"(s0), "n"(OP)
          : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (WAIT) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
    if (!WAIT) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

static int launches = 0;

// Two launches (warm-up, timed); returns the timed one's milliseconds.
template <typename F>
float timed(F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();  // warm-up
  cudaEventRecord(a);
  launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  launches += 2;
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

template <int L>
float run(float* dkv, const int* idx, int steps) {
  return timed([&] { k<L><<<132, 512>>>(dkv, idx, steps); });
}

template <int OP, bool WAIT>
float runb(float* dkv, const int* idx, int steps) {
  cudaFuncSetAttribute(kb<OP, WAIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, BLOCK * OP);
  return timed([&] { kb<OP, WAIT><<<132, 512, BLOCK * OP>>>(dkv, idx, steps); });
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
  float b768w = runb<768, true>(dkv, idx, steps), b768 = runb<768, false>(dkv, idx, steps),
        b192w = runb<192, true>(dkv, idx, steps), b2304 = runb<2304, false>(dkv, idx, steps);
  printf("  bulk  768 B, wait per segment:         %.3f ms, %.2f TB/s\n", b768w, bytes / b768w / 1e9);
  printf("  bulk  768 B, wait per step:            %.3f ms, %.2f TB/s\n", b768, bytes / b768 / 1e9);
  printf("  bulk  192 B, wait per segment:         %.3f ms, %.2f TB/s\n", b192w, bytes / b192w / 1e9);
  printf("  bulk 2304 B (whole rows):              %.3f ms, %.2f TB/s\n", b2304, bytes / b2304 / 1e9);
  // Every element received 2 warm-up + 2 timed runs' worth of 1/1024 per
  // time its row was drawn: check the total.
  std::vector<float> out((size_t)S * W);
  cudaMemcpy(out.data(), dkv, out.size() * 4, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (float x : out) sum += x;
  printf("check: sum %.6g expected %.6g\n", sum, (double)launches * ctas * steps * BLOCK * W / 1024);
  return cudaGetLastError() != cudaSuccess;
}
