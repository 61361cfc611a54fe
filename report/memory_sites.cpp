#include "report/memory_sites.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

#include "report/format.h"
#include "report/report.h"

namespace mlprof::report::detail {

using profile::FrameKind;
using profile::kNone;
using profile::Profile;

bool has_memory(const Profile& p) { return !p.memory.empty() || p.metric("alloc-bytes") != kNone; }

uint32_t site_frame(const Profile& p, uint32_t stack) {
  if (stack >= p.stacks.size()) return kNone;
  const auto& frames = p.stacks[stack].frames;
  auto valid = [&](uint32_t f) { return f < p.frames.size(); };
  for (uint32_t f : frames)
    if (valid(f) && p.frames[f].kind == FrameKind::kPython) return f;
  auto starts = [](std::string_view s, std::initializer_list<std::string_view> prefixes) {
    for (auto pre : prefixes)
      if (s.substr(0, pre.size()) == pre) return true;
    return false;
  };
  // The C runtime, libstdc++ and other installed libraries; their debug info names relative
  // source paths (nptl/pthread_create.c) or system headers.
  auto system_module = [&](uint32_t f) {
    return starts(p.str(p.frames[f].module), {"/usr/lib/", "/lib/", "/usr/lib64/", "/lib64/", "[vdso]"});
  };
  auto system_file = [&](uint32_t f) {
    std::string_view file = p.str(p.frames[f].file);
    return file.empty() || file[0] != '/' || starts(file, {"/usr/include/", "/usr/lib/", "/usr/src/"});
  };
  auto has_line = [&](uint32_t f) { return p.frames[f].line > 0 && !p.str(p.frames[f].file).empty(); };
  uint32_t program = kNone, any_line = kNone;
  for (uint32_t f : frames) {
    if (!valid(f)) continue;
    const bool own = !system_module(f);
    if (own && has_line(f) && !system_file(f)) return f;
    if (own && program == kNone && p.frames[f].function != 0) program = f;
    if (any_line == kNone && has_line(f)) any_line = f;
  }
  if (program != kNone) return program;
  if (any_line != kNone) return any_line;
  for (uint32_t f : frames)
    if (valid(f)) return f;
  return kNone;
}

std::string site_label(const Profile& p, uint32_t stack) {
  uint32_t f = site_frame(p, stack);
  return f == kNone ? std::string("[unknown]") : frame_name(p, f);
}

std::vector<SiteRow> sites_by(const Profile& p, uint32_t metric) {
  if (metric >= p.metrics.size()) return {};
  std::vector<uint32_t> site(p.stacks.size(), kNone);
  std::vector<bool> done(p.stacks.size(), false);
  // Keyed by the strings' text, so equal sites in different processes or modules merge.
  std::map<std::tuple<std::string_view, std::string_view, uint32_t>, size_t> index;
  std::vector<SiteRow> rows;
  for (const auto& sv : p.stack_values) {
    if (sv.stack >= p.stacks.size()) continue;
    if (!done[sv.stack]) done[sv.stack] = true, site[sv.stack] = site_frame(p, sv.stack);
    const uint32_t f = site[sv.stack];
    if (f == kNone) continue;
    const auto& fr = p.frames[f];
    // Frames without a source line keep their own identity (their name carries the address).
    auto key = fr.line > 0 ? std::make_tuple(std::string_view(p.str(fr.function)), std::string_view(p.str(fr.file)), fr.line)
                           : std::make_tuple(std::string_view(), std::string_view(), f);
    auto [it, fresh] = index.try_emplace(key, rows.size());
    if (fresh) rows.push_back({f, std::vector<int64_t>(p.metrics.size(), 0)});
    auto& v = rows[it->second].values;
    for (size_t m = 0; m < v.size() && m < sv.values.size(); ++m) v[m] += sv.values[m];
  }
  std::erase_if(rows, [&](const SiteRow& r) { return r.values[metric] == 0; });
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const SiteRow& a, const SiteRow& b) { return a.values[metric] > b.values[metric]; });
  return rows;
}

const char* leak_kind_name(profile::LeakKind k) {
  switch (k) {
    case profile::LeakKind::kUnfreedAtExit: return "unfreed-at-exit";
    case profile::LeakKind::kGrowth: return "growth";
  }
  return "unknown";
}

const char* frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::kNative: return "native";
    case FrameKind::kPython: return "python";
    case FrameKind::kKernel: return "kernel";
    case FrameKind::kUnknown: return "unknown";
  }
  return "unknown";
}

const profile::ProcessMemory* process_memory(const Profile& p, uint32_t process) {
  for (const auto& m : p.memory)
    if (m.process == process) return &m;
  return nullptr;
}

}  // namespace mlprof::report::detail
