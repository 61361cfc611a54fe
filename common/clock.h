// Clock readings in nanoseconds, shared by the preload (async-signal-safe: clock_gettime is) and
// the tools. CLOCK_MONOTONIC is the profile's clock (docs/profile-format.md).
#pragma once
#include <time.h>

#include <cstdint>

namespace mlprof {

inline int64_t clock_ns(clockid_t c = CLOCK_MONOTONIC) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace mlprof
