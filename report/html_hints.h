// "What to look at first": plain-language pointers derived from the profile's numbers, computed
// here (unit-tested) and rendered by the page's summary.js. Each hint says what was seen and, where
// there is one, where to look (a source line or a function).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profile/model.h"

namespace mlprof::report {

struct Hint {
  std::string kind;      // "serving-line" (a serving run's steady state, per request: first),
                         // "hot-line", "hot-function", "system-time", "waiting", "alloc-site",
                         // "peak-site", "leak", "oversubscribed", "dropped-samples"
  std::string severity;  // "info", "warn"
  std::string text;      // one sentence, plain text (the page inserts it with textContent)
  std::string file;      // where to look, when there is a place: a source file and line,
  uint32_t line = 0;
  std::string function;  // or a function (flame graph search)
};

// Most useful first; at most ~10.
std::vector<Hint> hints(const profile::Profile&);
nlohmann::json hints_json(const std::vector<Hint>&);

}  // namespace mlprof::report
