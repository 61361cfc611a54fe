// The GPU part of the JSON export (`gpu` key, docs/json-format.md) and of the HTML page's data:
// per process with GPU activity, its totals, kernel table, devices (utilization and device-memory
// timelines, peak and the stacks holding it). A template so both the export's ordered_json and the
// page's json use it. Strings are the program's: the HTML side escapes them when it renders.
#pragma once
#include <string>

#include "profile/model.h"

namespace mlprof::report {

// The first frame of a stack that has a source line (the launching line), else the leaf.
inline uint32_t gpu_launch_frame(const profile::Profile& p, uint32_t stack) {
  if (stack >= p.stacks.size() || p.stacks[stack].frames.empty()) return profile::kNone;
  for (uint32_t f : p.stacks[stack].frames)
    if (f < p.frames.size() && p.frames[f].line != 0) return f;
  return p.stacks[stack].frames.front();
}

inline const char* gpu_copy_kind_name(uint8_t k) {
  switch (k) {
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "DtoD";
    case 4: return "HtoH";
    case 5: return "PtoP";
    default: return "other";
  }
}

template <class Json>
Json gpu_stack_json(const profile::Profile& p, uint32_t stack) {
  if (stack == profile::kNone || stack >= p.stacks.size()) return Json(nullptr);
  Json frames = Json::array();
  for (uint32_t f : p.stacks[stack].frames) {
    if (f >= p.frames.size()) continue;
    const auto& fr = p.frames[f];
    frames.push_back({{"function", p.str(fr.function)}, {"file", p.str(fr.file)}, {"line", fr.line}});
  }
  Json launch = Json(nullptr);
  if (uint32_t f = gpu_launch_frame(p, stack); f != profile::kNone) {
    const auto& fr = p.frames[f];
    launch = {{"function", p.str(fr.function)}, {"file", p.str(fr.file)}, {"line", fr.line}};
  }
  return {{"stack", stack}, {"launch", launch}, {"frames", frames}};
}

// null when no process had GPU activity.
template <class Json>
Json gpu_json(const profile::Profile& p) {
  if (p.gpu.empty()) return Json(nullptr);
  Json out = Json::array();
  for (const profile::ProcessGpu& g : p.gpu) {
    Json kernels = Json::array();
    for (const auto& k : g.kernels)
      kernels.push_back({{"name", p.str(k.demangled)},
                         {"mangled", p.str(k.name)},
                         {"calls", k.calls},
                         {"total_ns", k.total_ns},
                         {"mean_ns", k.calls ? k.total_ns / static_cast<int64_t>(k.calls) : 0},
                         {"max_ns", k.max_ns},
                         {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                         {"block", {k.block[0], k.block[1], k.block[2]}},
                         {"launched_from", gpu_stack_json<Json>(p, k.stack)}});
    Json devices = Json::array();
    for (const auto& d : g.devices) {
      Json util = Json::array(), mem = Json::array(), holders = Json::array();
      for (const auto& pt : d.utilization) util.push_back({pt.t_ns, pt.value});
      for (const auto& pt : d.memory) mem.push_back({pt.t_ns, pt.value});
      for (const auto& h : d.peak_holders)
        holders.push_back({{"bytes", h.bytes}, {"allocated_from", gpu_stack_json<Json>(p, h.stack)}});
      devices.push_back({{"device", d.device},
                         {"bucket_ns", d.bucket_ns},
                         {"utilization_permille", util},
                         {"memory_bytes", mem},
                         {"peak_memory_bytes", d.peak_bytes},
                         {"peak_memory_t_ns", d.peak_t_ns},
                         {"peak_holders", holders}});
    }
    const uint32_t pid = g.process < p.processes.size() ? p.processes[g.process].pid : 0;
    out.push_back({{"process", g.process},
                   {"pid", pid},
                   {"cupti_version", g.cupti_version},
                   {"clock", g.clock},
                   {"totals", g.totals},
                   {"kernels", kernels},
                   {"devices", devices},
                   {"operations", g.ops.size()},
                   {"operations_truncated", g.ops_truncated},
                   {"memory_note", "device memory is counted at cudaMalloc level: caching allocators (PyTorch's) "
                                   "show their pool growth, not tensors"}});
  }
  return out;
}

}  // namespace mlprof::report
