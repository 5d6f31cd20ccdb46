//===- SmokeKernel.cu - A tiny kernel for the GPU smoke test --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Stands in for a compiler-produced cubin: it takes every parameter type the
// manifest knows (ptr, i32, f32, i64) in an order that needs padding, and
// more than 48 KiB of dynamic shared memory, so a wrong parameter layout or a
// missing shared-memory opt-in shows up as a wrong value or a failed launch.
//
//===----------------------------------------------------------------------===//

extern "C" __global__ void smla_smoke_kernel(float *out, int n, float scale,
                                             long long bias) {
  extern __shared__ float staging[];
  // Touch the far end of the 96 KiB of dynamic shared memory.
  const int far = 96 * 1024 / sizeof(float) - blockDim.x + threadIdx.x;
  staging[far] = scale;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[blockIdx.y * n + i] = staging[far] * i + float(bias) + blockIdx.y;
}
