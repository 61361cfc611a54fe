// Reports and exports over an in-memory profile (profile/model.h): the collapsed-stack export, the
// terminal summary and the self-contained HTML page. Read-only over the Profile; no I/O here.
// The summary and HTML read Profile::functions / Profile::lines, so callers fill them first
// (profile/aggregate.h). See docs/report.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "profile/model.h"
#include "profile/result.h"

namespace mlprof::report {

// Display name of a frame, the collapsed-stack convention (py-spy's):
//   "function (path:line)"       when function, file and line are known;
//   "function (module_basename)" when the function is known but not file:line
//                                (just "function" when the module is unknown too);
//   "module_basename+0xoffset"   otherwise ("[unknown]+0x..." without a module).
// An out-of-range id gives "[invalid frame N]". The name is returned as stored (not sanitized).
std::string frame_name(const profile::Profile&, uint32_t frame_id);

struct CollapsedOptions {
  std::string metric = "cpu";
  bool by_process = false;  // first frame "process NAME (pid N)"
  bool by_thread = false;   // then a frame "thread NAME (tid N)"
};

// One line per distinct stack: frames root first joined by ';', a space, the integer value of the
// metric (us for time metrics, bytes for memory). Zero lines are omitted, lines are sorted, every
// line ends with '\n'. A truncated stack gets a "[truncated]" root frame; an empty stack is
// "[unknown]". ';' in names becomes ':', CR/LF become ' '.
// Error: the metric is not in the profile (the message lists the metrics present).
Result<std::string> export_collapsed(const profile::Profile&, const CollapsedOptions&);

struct SummaryOptions {
  size_t top = 15;
  bool color = false;       // ANSI colors
  std::string metric = "";  // empty: "cpu" if present, else the first metric
};
// The terminal summary: run header, warnings, top functions and lines by self, processes, threads.
std::string text_summary(const profile::Profile&, const SummaryOptions&);

// One self-contained HTML page (inline CSS/JS and data, no network references).
std::string html_report(const profile::Profile&);

}  // namespace mlprof::report
