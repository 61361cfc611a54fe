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
    payload_.clear();
  }
  void u(uint64_t v) {
    uint8_t b[varint::kMaxBytes];
    append(payload_, b, varint::encode(v, b));
  }
  void s(int64_t v) { u(varint::zigzag(v)); }
  void str(std::string_view v) {
    u(v.size());
    append(payload_, v.data(), v.size());
  }
  void end() {
    out_.push_back(static_cast<uint8_t>(type_));
    uint8_t b[varint::kMaxBytes];
    append(out_, b, varint::encode(payload_.size(), b));
    append(out_, payload_.data(), payload_.size());
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

  wire::Record type_{};
  std::vector<uint8_t> payload_;
  std::vector<uint8_t> out_;
};

}  // namespace mlprof::preload
