// Warnings the collector writes into a profile as text, which the report reads back.
#pragma once
#include <string_view>

namespace mlprof::profile {

// "no debug info for PATH: functions only (HINT)", one per module without DWARF
// (collector/symbolizer.cpp); the report orders and groups them (report/format.cpp, summary.cpp).
inline constexpr std::string_view kNoDebugInfoPrefix = "no debug info for ";
inline bool is_no_debug_info_warning(std::string_view w) {
  return w.substr(0, kNoDebugInfoPrefix.size()) == kNoDebugInfoPrefix;
}

}  // namespace mlprof::profile
