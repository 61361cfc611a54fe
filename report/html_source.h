// Source view data for the HTML report: the hottest files with per-line values for every metric,
// and the text of their hot regions only (hot lines and a few lines of context), read from disk
// when the report is made. Files that cannot be read (zip imports, exec'd code, missing sources)
// still list their lines, without text.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>

#include "profile/model.h"

namespace mlprof::report {

struct SourceOptions {
  double hot_share = 0.005;   // a line is hot when its self value is >= 0.5% of some metric's total
  size_t min_hot_lines = 10;  // ... or when it is among the 10 hottest lines (score > 0)
  size_t max_hot_lines = 300;
  size_t max_files = 20;
  size_t max_lines_per_file = 400;  // lines with values listed per file (hottest first)
  uint32_t context = 6;             // text embedded around each hot line
};

// {"files": [{"path", "readable", "score", "total": [self summed over the file, per metric],
//             "line": [n, ..], "function": [..], "hot": [0|1, ..], "self": [[per metric], ..],
//             "regions": [{"start", "text": [..]}]}],     // text of lines start.. (1-based)
//  "omitted_files": n}                                     // files with values not listed
// Files are ordered by their self value of the default metric (cpu when present), then by their
// hottest line's largest share of any metric; lines by number.
nlohmann::json source_data(const profile::Profile&, const SourceOptions& = {});

}  // namespace mlprof::report
