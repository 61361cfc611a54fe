// Builds wire records (common/wire_format.h) into the writer's output buffer. Writer thread only.
#pragma once
#include <cstdint>
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
    out_.insert(out_.end(), h, h + sizeof h);
  }
  // Starts a record; fields follow with u()/s()/str(); end() writes type and length in front.
  void begin(wire::Record type) {
    type_ = type;
    payload_.clear();
  }
  void u(uint64_t v) {
    uint8_t b[varint::kMaxBytes];
    payload_.insert(payload_.end(), b, b + varint::encode(v, b));
  }
  void s(int64_t v) { u(varint::zigzag(v)); }
  void str(std::string_view v) {
    u(v.size());
    payload_.insert(payload_.end(), v.begin(), v.end());
  }
  void end() {
    out_.push_back(static_cast<uint8_t>(type_));
    uint8_t b[varint::kMaxBytes];
    out_.insert(out_.end(), b, b + varint::encode(payload_.size(), b));
    out_.insert(out_.end(), payload_.begin(), payload_.end());
  }

 private:
  wire::Record type_{};
  std::vector<uint8_t> payload_;
  std::vector<uint8_t> out_;
};

}  // namespace mlprof::preload
