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

}  // namespace mlprof::profile
