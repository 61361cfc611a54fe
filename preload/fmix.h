// MurmurHash3's 64-bit finalizer: every input bit reaches every output bit. Signal-safe.
// The live table's slot hash (mem_table.cpp) and the code fingerprint (python.h) both use it.
#pragma once
#include <cstdint>

namespace mlprof::preload {

inline uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace mlprof::preload
