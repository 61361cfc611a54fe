// LEB128-style little-endian varints and zigzag signed values, shared by the wire format
// (preload -> collector) and the profile file format.
//
// signal-safe: the encoders only write into caller-provided buffers; no allocation, no errno.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlprof::varint {

inline constexpr size_t kMaxBytes = 10;  // a 64-bit value needs at most 10 bytes

inline uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t unzigzag(uint64_t u) { return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1); }

// Writes v at out; returns bytes written (1..10). out must have kMaxBytes of room.  // signal-safe
inline size_t encode(uint64_t v, uint8_t* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

inline size_t encoded_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) { v >>= 7; ++n; }
  return n;
}

// Reads a varint from [p, end). Returns bytes consumed, or 0 if the input is truncated or the
// value does not fit in 64 bits (both are errors for the caller to report).
inline size_t decode(const uint8_t* p, const uint8_t* end, uint64_t* v) {
  uint64_t result = 0;
  unsigned shift = 0;
  for (size_t i = 0; p + i < end && i < kMaxBytes; ++i) {
    uint8_t b = p[i];
    if (i == kMaxBytes - 1 && (b & 0x7e)) return 0;  // more than 64 bits
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = result;
      return i + 1;
    }
    shift += 7;
  }
  return 0;
}

// A bounded writer over a caller-owned buffer. Sets overflow instead of writing past the end.
// signal-safe
struct Writer {
  uint8_t* begin;
  uint8_t* pos;
  uint8_t* end;
  bool overflow = false;

  Writer(uint8_t* buf, size_t cap) : begin(buf), pos(buf), end(buf + cap) {}
  size_t size() const { return static_cast<size_t>(pos - begin); }
  void u8(uint8_t b) {
    if (pos < end) *pos++ = b; else overflow = true;
  }
  void u(uint64_t v) {
    if (static_cast<size_t>(end - pos) >= kMaxBytes || static_cast<size_t>(end - pos) >= encoded_size(v))
      pos += encode(v, pos);
    else
      overflow = true;
  }
  void s(int64_t v) { u(zigzag(v)); }
  void bytes(const void* data, size_t n) {
    if (static_cast<size_t>(end - pos) >= n) { memcpy(pos, data, n); pos += n; } else overflow = true;
  }
  // A string or blob: varint length, then the bytes.
  void str(const char* data, size_t n) { u(n); bytes(data, n); }
};

// A bounds-checked reader. Any read past the end sets `bad` and returns 0; check once at the end.
struct Reader {
  const uint8_t* pos;
  const uint8_t* end;
  bool bad = false;

  Reader(const uint8_t* p, size_t n) : pos(p), end(p + n) {}
  size_t left() const { return static_cast<size_t>(end - pos); }
  uint8_t u8() {
    if (pos < end) return *pos++;
    bad = true;
    return 0;
  }
  uint64_t u() {
    uint64_t v = 0;
    size_t n = decode(pos, end, &v);
    if (n == 0) { bad = true; pos = end; return 0; }
    pos += n;
    return v;
  }
  int64_t s() { return unzigzag(u()); }
  // Returns a view of n bytes, or nullptr (and sets bad) if fewer remain.
  const uint8_t* bytes(size_t n) {
    if (left() < n) { bad = true; pos = end; return nullptr; }
    const uint8_t* p = pos;
    pos += n;
    return p;
  }
};

}  // namespace mlprof::varint
