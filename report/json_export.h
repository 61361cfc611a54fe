// The JSON export (`mlprof export FILE --format json`): one JSON document with the run, the
// processes (with their memory summary and timeline), the metrics, the top functions, lines and
// allocation sites per metric, and the leak candidates. The schema is documented field by field
// in docs/json-format.md; keep the two in step (bump kJsonVersion when a field changes meaning).
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "profile/model.h"

namespace mlprof::report {

inline constexpr int kJsonVersion = 1;

struct JsonOptions {
  size_t top = 50;  // rows per metric in the top functions / lines / sites lists
};

// The run's facts: the JSON export's "run" object and the HTML page's run data.
template <class Json>
Json run_json(const profile::RunInfo& r) {
  return {{"command", r.command},
          {"cwd", r.cwd},
          {"hostname", r.hostname},
          {"mlprof_version", r.mlprof_version},
          {"start_realtime_ns", r.start_realtime_ns},
          {"start_ns", r.start_ns},
          {"end_ns", r.end_ns},
          {"duration_ns", r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0},
          {"rate_hz", r.rate_hz},
          {"timer", r.timer},
          {"mode", r.mode},
          {"exit_status", r.exit_status},
          {"collector_cpu_ns", r.collector_cpu_ns},
          {"extra", r.extra}};
}

// Never fails: invalid UTF-8 from the profiled program becomes U+FFFD. Ends with '\n'.
std::string export_json(const profile::Profile&, const JsonOptions& = {});

}  // namespace mlprof::report
