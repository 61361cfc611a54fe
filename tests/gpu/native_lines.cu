// Native CUDA program for the real-GPU check of mlprof (tests/gpu/native_lines.py, docs/gpu.md):
// kernels of known device durations launched from marked lines of C++ (no Python, no framework).
// Each kernel spins on the GPU's global timer for the given nanoseconds, so its duration is known
// by construction; the copies move a known number of bytes.
//   nvcc -g -O2 -o native_lines native_lines.cu && ./native_lines ITERATIONS
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

__global__ void spin_long(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

__global__ void spin_short(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  size_t bytes = 64u << 20;
  void *host, *dev;
  check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  for (int i = 0; i < iters; i++) {
    spin_long<<<1, 32>>>(2000000ull);  // LINE: long (2 ms)
    spin_short<<<1, 32>>>(1000000ull);  // LINE: short (1 ms)
    check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");  // LINE: copy
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  printf("{\"iterations\": %d, \"copy_bytes\": %zu}\n", iters, bytes);
  return 0;
}
