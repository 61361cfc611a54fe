// The frame a GPU operation is said to be launched from (report/gpu_json.h), with the frames a
// native CUDA program's launch stack really had on an H100 (nvcc 13, `kernel<<<1, 32>>>(...)` at
// native_lines.cu:33): the kernel table said "device_functions.h:2963 __cudaLaunchKernel_helper".
#include <gtest/gtest.h>

#include "profile/string_table.h"
#include "report/gpu_json.h"

namespace {

using namespace mlprof;

struct Builder {
  profile::Profile p;
  profile::StringTable st{p.strings};
  // Frames leaf first: {function, file, line}; a file ending in ".py" is a Python frame.
  uint32_t stack(std::initializer_list<std::tuple<const char*, const char*, uint32_t>> frames) {
    profile::Stack s;
    for (auto& [fn, file, line] : frames) {
      profile::Frame f;
      f.function = st.intern(fn);
      f.file = st.intern(file);
      f.line = line;
      const std::string_view name(file);
      if (name.size() > 3 && name.substr(name.size() - 3) == ".py") f.kind = profile::FrameKind::kPython;
      s.frames.push_back(static_cast<uint32_t>(p.frames.size()));
      p.frames.push_back(f);
    }
    p.stacks.push_back(s);
    return static_cast<uint32_t>(p.stacks.size() - 1);
  }
  std::string launch(uint32_t stack) {
    const uint32_t f = report::gpu_launch_frame(p, stack);
    if (f == profile::kNone) return "none";
    return p.str(p.frames[f].function) + ":" + std::to_string(p.frames[f].line);
  }
};

TEST(GpuLaunchFrame, NvccStubsAndToolkitHeadersAreSkipped) {
  Builder b;
  const uint32_t s = b.stack({
      {"cudaLaunchKernel", "", 0},
      {"__cudaLaunchKernel_helper", "/usr/local/cuda/bin/../targets/x86_64-linux/include/crt/device_functions.h", 2963},
      {"__device_stub__Z9spin_longy(unsigned long long)", "/tmp/tmpxft_000003fe_00000000-6_native_lines.cudafe1.stub.c",
       14},
      {"spin_long(unsigned long long)", "/src/native_lines.cu", 10},
      {"main", "/src/native_lines.cu", 33},
      {"__libc_start_main", "", 0},
  });
  EXPECT_EQ(b.launch(s), "main:33");
}

TEST(GpuLaunchFrame, TheRuntimeTemplateInCudaRuntimeHIsSkipped) {
  Builder b;
  const uint32_t s = b.stack({
      {"cudaLaunchKernel", "", 0},
      {"cudaError cudaLaunchKernel<char>(char const*, dim3, dim3, void**, unsigned long, CUstream_st*)",
       "/opt/cuda-12.4/include/cuda_runtime.h", 216},
      {"launch_it", "/src/app.cpp", 57},
  });
  EXPECT_EQ(b.launch(s), "launch_it:57");
}

// CuPy on an H100: its elementwise kernels were said to be launched from the Cython-generated
// driver.cpp:8369 (the wheel has line info) instead of the Python line.
TEST(GpuLaunchFrame, ThePythonLineWinsOverLibraryLinesBelowIt) {
  Builder b;
  const uint32_t s = b.stack({
      {"cuLaunchKernel", "", 0},
      {"__pyx_f_13cupy_backends_4cuda_3api_6driver_launchKernel", "cupy_backends/cuda/api/driver.cpp", 8369},
      {"__pyx_f_4cupy_5_core_4_kernel_launch", "cupy/_core/_kernel.cpp", 1200},
      {"<module>", "/srv/cupy_lines.py", 9},
  });
  EXPECT_EQ(b.launch(s), "<module>:9");
}

TEST(GpuLaunchFrame, PythonAndPlainNativeStacksKeepTheirLeafMostLine) {
  Builder b;
  const uint32_t py = b.stack({
      {"cudaLaunchKernel", "", 0},
      {"at::native::gemm", "", 0},
      {"step", "/srv/model.py", 23},
      {"<module>", "/srv/model.py", 40},
  });
  EXPECT_EQ(b.launch(py), "step:23");
  // A user's own include directory is not the toolkit's.
  const uint32_t own = b.stack({{"run", "/home/u/proj/include/ops.h", 12}, {"main", "/home/u/proj/main.cpp", 3}});
  EXPECT_EQ(b.launch(own), "run:12");
  const uint32_t nolines = b.stack({{"cuLaunchKernel", "", 0}, {"f", "", 0}});
  EXPECT_EQ(b.launch(nolines), "cuLaunchKernel:0");
}

}  // namespace
