// Memory views shared by the summary, the JSON export and the HTML data: where an allocation
// stack "is" (its site), the memory metrics per site, and names for leak kinds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profile/model.h"

namespace mlprof::report::detail {

// The profile has memory data (a memory section or the alloc-bytes metric).
bool has_memory(const profile::Profile&);

// The frame that names an allocation stack's site, leaf first: the innermost Python frame when
// the stack has one; else the innermost frame of the program's own code (a module outside /lib,
// /usr/lib) with a source line outside system headers (/usr/include, /usr/lib, relative paths
// from system libraries' debug info); else the innermost named frame of the program's own code;
// else the innermost frame with a source line; else the leaf. kNone for an empty or invalid stack.
uint32_t site_frame(const profile::Profile&, uint32_t stack);
// frame_name() of the site frame; "[unknown]" for an empty stack.
std::string site_label(const profile::Profile&, uint32_t stack);

// Metric values summed per site frame (function, file, line), over every stack whose site it is.
struct SiteRow {
  uint32_t frame = profile::kNone;  // a representative frame id (Profile::frames)
  std::vector<int64_t> values;      // one per metric
};
// Sites ordered by the metric, largest first; rows where it is 0 are left out.
std::vector<SiteRow> sites_by(const profile::Profile&, uint32_t metric);

const char* leak_kind_name(profile::LeakKind);  // "unfreed-at-exit", "growth"
const char* frame_kind_name(profile::FrameKind);  // "native", "python", "kernel", "unknown"

// The ProcessMemory row of a process, or nullptr.
const profile::ProcessMemory* process_memory(const profile::Profile&, uint32_t process);

}  // namespace mlprof::report::detail
