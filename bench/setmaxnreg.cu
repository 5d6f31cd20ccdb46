// setmaxnreg in a 512-thread kernel (docs/performance.md, "Open levers"):
// warpgroups 0-2 raise their registers to 152 and keep
// 144 floats live, warpgroup 3 lowers its own to 56. The same math without
// setmaxnreg spills (ptxas -v: 280 bytes at the 128 registers that 512
// threads allow). Prints both times, the outputs that differ and the
// registers the kernel is launched with.
//
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -Xptxas -v \
//        -o /tmp/setmaxnreg bench/setmaxnreg.cu && /tmp/setmaxnreg
#include <cstdio>
#include <vector>
#define N 144
template <bool SET>
__global__ void __launch_bounds__(512, 1) k(float* out, const float* in, int steps) {
  int wg = threadIdx.x / 128;
  if (wg < 3) {
    if (SET) asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n");
    float acc[N];
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = in[threadIdx.x + i * 512];
    for (int s = 0; s < steps; ++s) {
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] = fmaf(acc[i], 0.999f, acc[(i + 1) % N] * 1e-3f);
    }
    float sum = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) sum += acc[i];
    out[blockIdx.x * 512 + threadIdx.x] = sum;
  } else {
    if (SET) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    out[blockIdx.x * 512 + threadIdx.x] = in[threadIdx.x] * 2.f;
  }
}
int main() {
  int n = 512 * N, ctas = 132, steps = 200;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = (i % 97) * 0.01f;
  float *in, *o1, *o2;
  cudaMalloc(&in, n * 4); cudaMalloc(&o1, ctas * 512 * 4); cudaMalloc(&o2, ctas * 512 * 4);
  cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  float t[2];
  for (int v = 0; v < 2; ++v) {
    for (int rep = 0; rep < 2; ++rep) {
      cudaEventRecord(a);
      if (v == 0) k<true><<<ctas, 512>>>(o1, in, steps); else k<false><<<ctas, 512>>>(o2, in, steps);
      cudaEventRecord(b); cudaEventSynchronize(b);
      cudaEventElapsedTime(&t[v], a, b);
    }
  }
  cudaError_t e = cudaDeviceSynchronize();
  std::vector<float> r1(ctas * 512), r2(ctas * 512);
  cudaMemcpy(r1.data(), o1, r1.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(r2.data(), o2, r2.size() * 4, cudaMemcpyDeviceToHost);
  int diff = 0; for (size_t i = 0; i < r1.size(); ++i) diff += r1[i] != r2[i];
  cudaFuncAttributes fa; cudaFuncGetAttributes(&fa, k<true>);
  printf("status %s; setmaxnreg %.3f ms, spilling %.3f ms; differing outputs %d of %zu; regs %d\n",
         cudaGetErrorString(e), t[0], t[1], diff, r1.size(), fa.numRegs);
}
