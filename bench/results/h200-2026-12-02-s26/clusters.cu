// Resident clusters of 2 CTAs (512 threads, B1's dynamic shared memory) on this GPU.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void __cluster_dims__(2, 1, 1) k(float *p) { if (p) p[threadIdx.x] = 0; }
__global__ void k1(float *p) { if (p) p[threadIdx.x] = 0; }
int main() {
  int smem = 227328;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int cs : {2}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(8192); cfg.blockDim = dim3(512); cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute a; a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = cs; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
    cfg.attrs = &a; cfg.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, (void *)k, &cfg);
    printf("cluster %d, smem %d, 512 threads: %d resident clusters (%s)\n", cs, smem, n, cudaGetErrorString(e));
  }
  int nb = -1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k1, 512, smem);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("no cluster: %d CTAs per SM, %d SMs\n", nb, sms);
}
