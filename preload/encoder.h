// Builds wire records (common/wire_format.h) into the writer's output buffer. Writer thread only.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/varint.h"
#include "common/wire_format.h"

namespace mlprof::preload {

class Encoder {
 public:
  std::vector<uint8_t>& out() { return out_; }
  void clear() { out_.clear(); }

  void header() {
    const uint8_t h[wire::kHeaderSize] = {'M', 'L', 'P', 'W', wire::kMajor, wire::kMinor, 0, 0};
    append(out_, h, sizeof h);
  }
  // Starts a record; fields follow with u()/s()/str(); end() writes type and length in front.
  void begin(wire::Record type) {
    type_ = type;
    payload_len_ = 0;
  }
  void u(uint64_t v) {
    reserve_payload(varint::kMaxBytes);
    payload_len_ += varint::encode(v, payload_.data() + payload_len_);
  }
  void s(int64_t v) { u(varint::zigzag(v)); }
  void str(std::string_view v) {
    u(v.size());
    reserve_payload(v.size());
    if (!v.empty()) memcpy(payload_.data() + payload_len_, v.data(), v.size());
    payload_len_ += v.size();
  }
  void end() {
    uint8_t b[1 + varint::kMaxBytes];
    b[0] = static_cast<uint8_t>(type_);
    const size_t nb = 1 + varint::encode(payload_len_, b + 1);
    append(out_, b, nb);
    append(out_, payload_.data(), payload_len_);
  }

 private:
  // resize + memcpy rather than vector::insert from a small array, which GCC 12 misreports as an
  // out-of-bounds write (-Warray-bounds / -Wstringop-overflow false positive).
  static void append(std::vector<uint8_t>& v, const void* data, size_t n) {
    if (n == 0) return;
    size_t at = v.size();
    v.resize(at + n);
    memcpy(v.data() + at, data, n);
  }
  // The payload is a scratch buffer that only grows: fields are written in place (a record's
  // fields used to cost one vector resize each, a tenth of the writer's time on a busy stream).
  void reserve_payload(size_t n) {
    if (payload_.size() - payload_len_ < n) grow_payload(n);
  }
  __attribute__((noinline)) void grow_payload(size_t n) {
    size_t cap = payload_.size() * 2;
    if (cap < payload_len_ + n) cap = payload_len_ + n;
    if (cap < 256) cap = 256;
    payload_.resize(cap);
  }

  wire::Record type_{};
  std::vector<uint8_t> payload_;  // payload_len_ bytes used
  size_t payload_len_ = 0;
  std::vector<uint8_t> out_;
};

}  // namespace mlprof::preload
