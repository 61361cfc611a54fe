#include "profile/modules.h"

namespace mlprof::profile {

bool is_c_runtime_module(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view p : {"libc.so", "libc-", "libm.so", "libm-", "libpthread", "ld-linux", "libdl", "librt",
                             "[vdso]", "libmlprof_preload"})
    if (base.substr(0, p.size()) == p) return true;
  return false;
}

bool is_thread_pool_module(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  auto starts = [&](std::string_view p) { return base.substr(0, p.size()) == p; };
  for (std::string_view p : {"libgomp", "libomp", "libiomp", "libc10.so", "libtbb", "libmkl_gnu_thread",
                             "libmkl_intel_thread", "libmkl_tbb_thread"})
    if (starts(p)) return true;
  return base.find("openblas") != std::string_view::npos;  // libopenblas.so.0, libscipy_openblas64_-*.so
}

}  // namespace mlprof::profile
