#include "profile/pool_stacks.h"

#include <string_view>

#include "profile/modules.h"

namespace mlprof::profile {

bool is_nobodys_module(std::string_view path) {
  const std::string_view base = module_basename(path);
  return is_c_runtime_module(path) || base.substr(0, 9) == "libstdc++" || base == "[unknown]";
}

bool is_pool_runtime_frame(const Profile& p, uint32_t frame) {
  const Frame& f = p.frames.at(frame);
  if (f.kind != FrameKind::kNative) return false;
  return f.module == 0 || f.module >= p.strings.size() || is_nobodys_module(p.str(f.module));
}

namespace {
bool pool_frame(const Profile& p, uint32_t frame) {
  const Frame& f = p.frames.at(frame);
  return f.kind == FrameKind::kNative && f.module != 0 && f.module < p.strings.size() &&
         is_thread_pool_module(p.str(f.module));
}
}  // namespace

bool is_pool_thread_stack(const Profile& p, const Stack& s) {
  const auto& frames = s.frames;
  for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
    if (is_pool_runtime_frame(p, *f)) continue;
    if (f != frames.rbegin() && pool_frame(p, *f)) return true;
    break;
  }
  for (uint32_t f : frames)
    if (p.frames.at(f).function != 0 && p.str(p.frames.at(f).function) == kPoolWorkersFrameName) return true;
  return false;
}

bool is_pool_wait_stack(const Profile& p, const Stack& s) {
  const auto& frames = s.frames;
  if (s.truncated || frames.size() < 2 || !is_pool_runtime_frame(p, frames.back())) return false;
  int pool = 0;
  bool mixed = false;  // a frame of a pool that also holds work (OpenBLAS's kernels, MKL's)
  for (uint32_t f : frames) {
    if (is_pool_runtime_frame(p, f)) continue;
    if (!pool_frame(p, f)) return false;
    ++pool;
    mixed = mixed || !is_pool_runtime_only_module(p.str(p.frames.at(f).module));
  }
  // In such a pool only its thread routine calling the C runtime (OpenBLAS's sched_yield loop)
  // is waiting; more of its frames are its work.
  return pool > 0 && (!mixed || pool == 1);
}

uint32_t pool_routine_module(const Profile& p, const Stack& s) {
  for (auto f = s.frames.rbegin(); f != s.frames.rend(); ++f)
    if (!is_pool_runtime_frame(p, *f)) return pool_frame(p, *f) ? p.frames.at(*f).module : 0;
  return 0;
}

}  // namespace mlprof::profile
