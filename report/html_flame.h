// Flame graph data for the HTML report: the profile's stacks as prefix trees (root = all stacks,
// children = callees), one tree for the whole run, one per process (when there are several) and
// one per heaviest thread. Columnar JSON so a 100,000-node tree stays a few MB (docs/report.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "profile/model.h"

namespace mlprof::report {

struct FlameOptions {
  size_t max_nodes = 40000;      // nodes kept in the "all" tree (the rest are summarized)
  size_t max_nodes_each = 6000;  // nodes kept in each per-process / per-thread tree
  size_t top_threads = 8;        // per-thread trees for the heaviest threads
  size_t max_process_trees = 8;  // per-process trees (only when there are >= 2 processes)
};

// {"frames": {"name": [..], "file": [..], "line": [..], "kind": [..]},   // kind: 0 native, 1 python, 2
// kernel, 3 unknown
//  "trees": [{"id", "label", "scope": "all"|"process"|"thread", "pid", "tid",
//             "parent": [..], "frame": [..], "values": [[per node] per metric],
//             "rare": [[node, stacks], ..],          // synthetic nodes standing for trimmed children
//             "trimmed": {"nodes", "stacks", "values": [per metric]}}]}
// Node 0 of each tree is the root (parent -1, frame -1). A node's values are inclusive (its whole
// subtree). Frames are identified by (kind, function, file, module), plus the line for Python
// frames (a Python call site is worth telling apart; a native function is one box). When a tree
// has more nodes than its budget, the smallest nodes (by their largest share of any metric) are
// replaced, per parent, by one synthetic "rare" child whose values are the sum of what it stands
// for: nothing is dropped silently.
nlohmann::json flame_data(const profile::Profile&, const FlameOptions& = {});

}  // namespace mlprof::report
