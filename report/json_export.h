// The JSON export (`mlprof export FILE --format json`): one JSON document with the run, the
// processes (with their memory summary and timeline), the metrics, the top functions, lines and
// allocation sites per metric, and the leak candidates. The schema is documented field by field
// in docs/json-format.md; keep the two in step (bump kJsonVersion when a field changes meaning).
#pragma once
#include <cstddef>
#include <string>

#include "profile/model.h"

namespace mlprof::report {

inline constexpr int kJsonVersion = 1;

struct JsonOptions {
  size_t top = 50;  // rows per metric in the top functions / lines / sites lists
};

// Never fails: invalid UTF-8 from the profiled program becomes U+FFFD. Ends with '\n'.
std::string export_json(const profile::Profile&, const JsonOptions& = {});

}  // namespace mlprof::report
