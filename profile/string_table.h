// StringTable: an interning builder over a string vector (normally Profile::strings), so that every
// distinct string is stored once and referred to by its index. Index 0 is always "".
//
// The table keeps a reference to the vector: the vector (and the Profile holding it) must outlive
// the table and must not be moved while the table is in use. Append to the vector only through
// intern(); strings added behind the table's back are not found by later intern() calls (they
// would be duplicated, which is harmless but wasteful).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "profile/model.h"

namespace mlprof::profile {

class StringTable {
 public:
  // Indexes the strings already in `strings` (the first occurrence of a duplicate wins) and makes
  // sure strings[0] == "" (inserting "" at the front would shift indexes, so an empty vector gets
  // "" appended and a non-empty one must already start with "").
  explicit StringTable(std::vector<std::string>& strings)
      : strings_(strings), index_(16, Hash{&strings}, Equal{&strings}) {
    if (strings_.empty()) strings_.emplace_back();
    index_.reserve(strings_.size());
    for (uint32_t i = 0; i < strings_.size(); ++i) index_.insert(i);
  }
  StringTable(const StringTable&) = delete;
  StringTable& operator=(const StringTable&) = delete;

  // The index of `s`, appending it when new.
  uint32_t intern(std::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return *it;
    uint32_t i = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    index_.insert(i);
    return i;
  }
  // The index of `s`, or kNone when it is not in the table.
  uint32_t find(std::string_view s) const {
    auto it = index_.find(s);
    return it == index_.end() ? kNone : *it;
  }
  const std::string& operator[](uint32_t i) const { return strings_.at(i); }
  size_t size() const { return strings_.size(); }

 private:
  // The set stores indexes; hashing and comparison look through the vector, so the strings are
  // not duplicated and vector reallocation does not invalidate anything. Transparent, so lookups
  // by string_view do not allocate.
  struct Hash {
    const std::vector<std::string>* v;
    using is_transparent = void;
    size_t operator()(uint32_t i) const { return std::hash<std::string_view>{}((*v)[i]); }
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Equal {
    const std::vector<std::string>* v;
    using is_transparent = void;
    bool operator()(uint32_t a, uint32_t b) const { return a == b || (*v)[a] == (*v)[b]; }
    bool operator()(std::string_view s, uint32_t b) const { return s == (*v)[b]; }
    bool operator()(uint32_t a, std::string_view s) const { return (*v)[a] == s; }
  };
  std::vector<std::string>& strings_;
  std::unordered_set<uint32_t, Hash, Equal> index_;
};

}  // namespace mlprof::profile
