// Invariants of the model (profile/model.h) that the file reader enforces and the writer checks:
// validate_profile(), declared in profile/profile_io.h. Everything else about the model is
// header-only; the file format is in profile_io.cpp, aggregation in aggregate.cpp.
#include <fmt/format.h>

#include "profile/model.h"
#include "profile/profile_io.h"

namespace mlprof::profile {
namespace {

// index < limit, or an error message "<section> section: <row kind> <row>: <field> refers to ...".
std::string check(const char* sec, const char* row_kind, size_t row, const char* field, uint64_t index,
                  size_t limit, const char* target) {
  if (index < limit) return {};
  return fmt::format("{} section: {} {}: {} refers to {} {}, but the profile has {} {}s", sec, row_kind,
                     row, field, target, index, limit, target);
}
std::string check_n(const char* sec, const char* row_kind, size_t row, const char* field, size_t n,
                    size_t metrics) {
  if (n == metrics) return {};
  return fmt::format("{} section: {} {}: {} has {} values, but the profile has {} metrics", sec, row_kind,
                     row, field, n, metrics);
}

}  // namespace

Status validate_profile(const Profile& p) {
#define MLPROF_CHECK(expr) \
  if (std::string e_ = (expr); !e_.empty()) return Status{std::move(e_)}
  const size_t ns = p.strings.size(), nm = p.metrics.size();
  if (p.strings.empty() || !p.strings[0].empty()) return Status{"strings section: string 0 is not the empty string"};
  for (size_t i = 0; i < p.frames.size(); ++i) {
    const Frame& f = p.frames[i];
    MLPROF_CHECK(check("frames", "frame", i, "function", f.function, ns, "string"));
    MLPROF_CHECK(check("frames", "frame", i, "file", f.file, ns, "string"));
    MLPROF_CHECK(check("frames", "frame", i, "module", f.module, ns, "string"));
  }
  for (size_t i = 0; i < p.stacks.size(); ++i)
    for (uint32_t f : p.stacks[i].frames) MLPROF_CHECK(check("stacks", "stack", i, "a frame", f, p.frames.size(), "frame"));
  for (size_t i = 0; i < p.processes.size(); ++i) {
    const Process& x = p.processes[i];
    if (x.parent != kNone) MLPROF_CHECK(check("processes", "process", i, "parent", x.parent, p.processes.size(), "process"));
    if (x.exec_prev != kNone)
      MLPROF_CHECK(check("processes", "process", i, "exec_prev", x.exec_prev, p.processes.size(), "process"));
  }
  for (size_t i = 0; i < p.threads.size(); ++i)
    MLPROF_CHECK(check("threads", "thread", i, "process", p.threads[i].process, p.processes.size(), "process"));
  for (size_t i = 0; i < p.stack_values.size(); ++i) {
    const StackValues& v = p.stack_values[i];
    MLPROF_CHECK(check("stack values", "row", i, "thread", v.thread, p.threads.size(), "thread"));
    MLPROF_CHECK(check("stack values", "row", i, "stack", v.stack, p.stacks.size(), "stack"));
    MLPROF_CHECK(check_n("stack values", "row", i, "values", v.values.size(), nm));
  }
  for (size_t i = 0; i < p.samples.size(); ++i) {
    MLPROF_CHECK(check("samples", "sample", i, "thread", p.samples[i].thread, p.threads.size(), "thread"));
    MLPROF_CHECK(check("samples", "sample", i, "stack", p.samples[i].stack, p.stacks.size(), "stack"));
  }
  for (size_t i = 0; i < p.functions.size(); ++i) {
    const FunctionStat& f = p.functions[i];
    MLPROF_CHECK(check("functions", "function", i, "function", f.function, ns, "string"));
    MLPROF_CHECK(check("functions", "function", i, "module", f.module, ns, "string"));
    MLPROF_CHECK(check("functions", "function", i, "file", f.file, ns, "string"));
    MLPROF_CHECK(check_n("functions", "function", i, "self", f.self.size(), nm));
    MLPROF_CHECK(check_n("functions", "function", i, "total", f.total.size(), nm));
  }
  for (size_t i = 0; i < p.lines.size(); ++i) {
    const LineStat& l = p.lines[i];
    MLPROF_CHECK(check("lines", "line", i, "file", l.file, ns, "string"));
    MLPROF_CHECK(check("lines", "line", i, "function", l.function, ns, "string"));
    MLPROF_CHECK(check_n("lines", "line", i, "self", l.self.size(), nm));
    MLPROF_CHECK(check_n("lines", "line", i, "total", l.total.size(), nm));
  }
  for (size_t i = 0; i < p.memory.size(); ++i)
    MLPROF_CHECK(check("memory", "row", i, "process", p.memory[i].process, p.processes.size(), "process"));
  for (size_t i = 0; i < p.leaks.size(); ++i) {
    const LeakCandidate& l = p.leaks[i];
    MLPROF_CHECK(check("leaks", "candidate", i, "process", l.process, p.processes.size(), "process"));
    MLPROF_CHECK(check("leaks", "candidate", i, "stack", l.stack, p.stacks.size(), "stack"));
    if (l.confidence_permille > 1000)
      return Status{fmt::format("leaks section: candidate {}: confidence {} is above 1000 (per mille)", i,
                                l.confidence_permille)};
  }
  for (size_t i = 0; i < p.modules.size(); ++i)
    MLPROF_CHECK(check("modules", "module", i, "path", p.modules[i].path, ns, "string"));
  for (size_t i = 0; i < p.serving.lines.size(); ++i) {
    const ServingLine& l = p.serving.lines[i];
    MLPROF_CHECK(check("serving", "line", i, "file", l.file, ns, "string"));
    MLPROF_CHECK(check("serving", "line", i, "function", l.function, ns, "string"));
  }
  for (size_t i = 0; i < p.serving.sites.size(); ++i)
    MLPROF_CHECK(check("serving", "site", i, "stack", p.serving.sites[i].stack, p.stacks.size(), "stack"));
  for (size_t i = 0; i < p.gpu.size(); ++i) {
    const ProcessGpu& g = p.gpu[i];
    MLPROF_CHECK(check("gpu", "row", i, "process", g.process, p.processes.size(), "process"));
    for (const GpuKernel& k : g.kernels) {
      MLPROF_CHECK(check("gpu", "kernel of row", i, "name", k.name, ns, "string"));
      MLPROF_CHECK(check("gpu", "kernel of row", i, "demangled name", k.demangled, ns, "string"));
      if (k.stack != kNone) MLPROF_CHECK(check("gpu", "kernel of row", i, "stack", k.stack, p.stacks.size(), "stack"));
    }
    for (const GpuDevice& d : g.devices)
      for (const GpuHolder& h : d.peak_holders)
        if (h.stack != kNone) MLPROF_CHECK(check("gpu", "peak holder of row", i, "stack", h.stack, p.stacks.size(), "stack"));
    for (const GpuOp& o : g.ops) {
      MLPROF_CHECK(check("gpu", "operation of row", i, "name", o.name, ns, "string"));
      if (o.thread != kNone) MLPROF_CHECK(check("gpu", "operation of row", i, "thread", o.thread, p.threads.size(), "thread"));
    }
  }
#undef MLPROF_CHECK
  return Status::Ok();
}

}  // namespace mlprof::profile
