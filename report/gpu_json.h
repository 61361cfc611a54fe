// The GPU part of the JSON export (`gpu` key, docs/json-format.md) and of the HTML page's data:
// per process with GPU activity, its totals, kernel table, devices (utilization and device-memory
// timelines, peak and the stacks holding it). A template so both the export's ordered_json and the
// page's json use it. Strings are the program's: the HTML side escapes them when it renders.
#pragma once
#include <string>

#include "profile/model.h"

namespace mlprof::report {

// Code nvcc and the CUDA headers put between a `kernel<<<...>>>` line and the runtime: the
// toolkit's headers (crt/device_functions.h's __cudaLaunchKernel_helper, cuda_runtime.h's
// templates) and nvcc's generated stub file (tmpxft_*.cudafe1.stub.c, __device_stub__*).
inline bool gpu_device_stub(const profile::Profile& p, const profile::Frame& fr) {
  return p.str(fr.function).rfind("__device_stub__", 0) == 0;
}
inline bool gpu_toolkit_frame(const profile::Profile& p, const profile::Frame& fr) {
  const std::string& file = p.str(fr.file);
  if (gpu_device_stub(p, fr) || file.find("/tmpxft_") != std::string::npos ||
      file.find(".cudafe1.") != std::string::npos)
    return true;
  const size_t inc = file.find("/include/");
  return inc != std::string::npos && file.find("cuda") < inc;
}

// The frame a GPU operation is said to be launched from. With Python frames on the stack, the
// leaf-most of them: the user's line, not the C++ or Cython line inside the library that made the
// CUDA call (CuPy's wheels carry line info for their generated driver.cpp). Otherwise the
// leaf-most frame with a source line, past the CUDA toolkit's frames and, after nvcc's
// __device_stub__, the kernel's host-side stub (which carries the kernel's declaration line, not
// the launch's). Else the leaf frame.
inline uint32_t gpu_launch_frame(const profile::Profile& p, uint32_t stack) {
  if (stack >= p.stacks.size() || p.stacks[stack].frames.empty()) return profile::kNone;
  for (uint32_t f : p.stacks[stack].frames)
    if (f < p.frames.size() && p.frames[f].kind == profile::FrameKind::kPython) return f;
  bool after_stub = false;
  for (uint32_t f : p.stacks[stack].frames) {
    if (f >= p.frames.size()) continue;
    const profile::Frame& fr = p.frames[f];
    if (gpu_toolkit_frame(p, fr)) {
      after_stub = after_stub || gpu_device_stub(p, fr);
      continue;
    }
    if (after_stub) {  // the kernel's host stub, called by the launching line
      after_stub = false;
      continue;
    }
    if (fr.line != 0) return f;
  }
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
