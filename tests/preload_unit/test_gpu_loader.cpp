// Finding libcuda and libcupti (preload/gpu_loader.cpp, docs/gpu.md) with the test-built stub
// libcupti and fake libcuda: the override path (file, directory, missing), reuse of a loaded copy,
// and libcuda detection.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "preload/gpu.h"

namespace {

using namespace mlprof::preload;

std::string dir() { return std::string(MLPROF_FIXTURE_DIR) + "/gpu"; }

bool have_fixtures() {
  struct stat st;
  return stat((dir() + "/libcupti.so").c_str(), &st) == 0;
}

#define REQUIRE_GPU_FIXTURES() \
  if (!have_fixtures()) GTEST_SKIP() << "built without the CUPTI headers: no stub libcupti (set MLPROF_CUDA_ROOT)"

TEST(GpuLoader, MissingOverrideSaysWhatToDo) {
  char why[1536];
  EXPECT_EQ(gpu::open_cupti("/nonexistent/dir/libcupti.so", why, sizeof why), nullptr);
  const std::string w = why;
  EXPECT_NE(w.find("MLPROF_CUPTI_PATH=/nonexistent/dir/libcupti.so"), std::string::npos) << w;
  EXPECT_NE(w.find("GPU profiling off"), std::string::npos) << w;
  EXPECT_NE(w.find("CPU and memory profiling go on"), std::string::npos) << w;
}

TEST(GpuLoader, OverrideDirectoryThenReuseOfTheLoadedCopy) {
  REQUIRE_GPU_FIXTURES();
  char why[1536];
  void* h = gpu::open_cupti(dir().c_str(), why, sizeof why);
  ASSERT_NE(h, nullptr) << why;
  EXPECT_NE(dlsym(h, "stub_cupti_now"), nullptr) << "the stub, from the directory";
  // Loaded now: any later search reuses it, even with another override.
  void* again = gpu::open_cupti("/nonexistent/libcupti.so", why, sizeof why);
  EXPECT_EQ(again, h);
  uint64_t lo = 0, hi = 0;
  gpu::module_text_range(dlsym(h, "cuptiSubscribe"), &lo, &hi);
  EXPECT_LT(lo, hi);
  EXPECT_GE(reinterpret_cast<uint64_t>(dlsym(h, "cuptiSubscribe")), lo);
  EXPECT_LT(reinterpret_cast<uint64_t>(dlsym(h, "cuptiSubscribe")), hi);
}

TEST(GpuLoader, LibcudaDetectedOnlyOnceLoaded) {
  REQUIRE_GPU_FIXTURES();
  ASSERT_FALSE(gpu::libcuda_loaded()) << "this test process does not use CUDA";
  uint64_t lo = 0, hi = 0;
  gpu::named_text_range("libcuda.so", &lo, &hi);
  EXPECT_EQ(hi, 0u);
  void* h = dlopen((dir() + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_TRUE(gpu::libcuda_loaded());
  gpu::named_text_range("libcuda.so", &lo, &hi);
  const auto launch = reinterpret_cast<uint64_t>(dlsym(h, "fake_launch"));
  EXPECT_GE(launch, lo);
  EXPECT_LT(launch, hi);
}

}  // namespace
