#include "profile/modules.h"

namespace mlprof::profile {

std::string_view module_basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool is_c_runtime_module(std::string_view path) {
  const std::string_view base = module_basename(path);
  for (std::string_view p : {"libc.so", "libc-", "libm.so", "libm-", "libpthread.so", "libpthread-", "ld-linux", "libdl.so",
                             "libdl-", "librt.so", "librt-", "[vdso]", "libmlprof_preload"})
    if (base.substr(0, p.size()) == p) return true;
  return false;
}

bool is_interpreter_module(std::string_view path) {
  const std::string_view base = module_basename(path);
  return base.substr(0, 6) == "python" || base.substr(0, 9) == "libpython";
}

bool is_pool_runtime_only_module(std::string_view path) {
  const std::string_view base = module_basename(path);
  for (std::string_view p : {"libgomp", "libomp", "libiomp", "libpthreadpool", "libtbb"})
    if (base.substr(0, p.size()) == p) return true;
  return false;
}

bool is_thread_pool_module(std::string_view path) {
  const std::string_view base = module_basename(path);
  auto starts = [&](std::string_view p) { return base.substr(0, p.size()) == p; };
  for (std::string_view p : {"libgomp", "libomp", "libiomp", "libc10.so", "libpthreadpool", "libtbb",
                             "libmkl_gnu_thread", "libmkl_intel_thread", "libmkl_tbb_thread"})
    if (starts(p)) return true;
  return base.find("openblas") != std::string_view::npos;  // libopenblas.so.0, libscipy_openblas64_-*.so
}

}  // namespace mlprof::profile
