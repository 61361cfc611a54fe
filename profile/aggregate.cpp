// compute_aggregates(): see aggregate.h for the rules. Work is proportional to the number of
// distinct frames and stacks referenced plus (rows x distinct functions per stack x metrics).
#include "profile/aggregate.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mlprof::profile {
namespace {

struct FuncKey {
  uint32_t function, module, file;
  bool operator==(const FuncKey&) const = default;
};
struct LineKey {
  uint32_t file, line;
  bool operator==(const LineKey&) const = default;
};
struct KeyHash {
  size_t operator()(const FuncKey& k) const {
    return (uint64_t{k.function} * 0x9e3779b97f4a7c15ull) ^ (uint64_t{k.module} * 0xc2b2ae3d27d4eb4full) ^
           (uint64_t{k.file} * 0x165667b19e3779f9ull);
  }
  size_t operator()(const LineKey& k) const { return (uint64_t{k.file} << 32 | k.line) * 0x9e3779b97f4a7c15ull; }
};

// What one stack contributes: leaf function/line and the distinct functions/lines on it.
struct StackAgg {
  bool done = false;
  uint32_t leaf_func = kNone, leaf_line = kNone;
  uint32_t py_func = kNone, py_line = kNone;  // the innermost Python frame's, when not the leaf
  std::vector<uint32_t> funcs, lines;
};

}  // namespace

void compute_aggregates(Profile& p) {
  const size_t nm = p.metrics.size();
  p.functions.clear();
  p.lines.clear();

  // Canonical string index: the first index holding the same text (0 for out-of-range indexes).
  std::vector<uint32_t> canon(p.strings.size());
  {
    std::unordered_map<std::string_view, uint32_t> first;
    first.reserve(p.strings.size());
    for (uint32_t i = 0; i < p.strings.size(); ++i) canon[i] = first.try_emplace(p.strings[i], i).first->second;
  }
  auto str = [&](uint32_t i) { return i < canon.size() ? canon[i] : 0u; };

  std::unordered_map<FuncKey, uint32_t, KeyHash> func_ids;
  std::unordered_map<LineKey, uint32_t, KeyHash> line_ids;
  std::vector<uint32_t> frame_func(p.frames.size(), kNone), frame_line(p.frames.size(), kNone);
  std::vector<bool> frame_done(p.frames.size(), false);

  // Maps a frame to its function and line entries (creating them on first sight).
  auto visit_frame = [&](uint32_t f) {
    if (frame_done[f]) return;
    frame_done[f] = true;
    const Frame& fr = p.frames[f];
    const FuncKey fk{str(fr.function), str(fr.module), str(fr.file)};
    auto [it, fresh] = func_ids.try_emplace(fk, static_cast<uint32_t>(p.functions.size()));
    if (fresh) p.functions.push_back({fk.function, fk.module, fk.file, 0, std::vector<int64_t>(nm), std::vector<int64_t>(nm)});
    frame_func[f] = it->second;
    if (fr.line > 0) {
      uint32_t& first_line = p.functions[it->second].first_line;
      if (first_line == 0 || fr.line < first_line) first_line = fr.line;
    }
    if (fk.file != 0 && !p.strings[fk.file].empty() && fr.line > 0) {
      const LineKey lk{fk.file, fr.line};
      auto [lit, lfresh] = line_ids.try_emplace(lk, static_cast<uint32_t>(p.lines.size()));
      if (lfresh) p.lines.push_back({lk.file, lk.line, fk.function, std::vector<int64_t>(nm), std::vector<int64_t>(nm)});
      frame_line[f] = lit->second;
    }
  };

  std::vector<StackAgg> stacks(p.stacks.size());
  std::vector<uint32_t> func_stamp, line_stamp;  // last stack index + 1 that counted an entry
  auto stack_agg = [&](uint32_t s) -> const StackAgg& {
    StackAgg& a = stacks[s];
    if (a.done) return a;
    a.done = true;
    bool leaf = true;
    for (uint32_t f : p.stacks[s].frames) {
      if (f >= p.frames.size()) continue;  // damaged profile: ignore the frame
      visit_frame(f);
      const uint32_t fn = frame_func[f], ln = frame_line[f];
      if (leaf) {
        a.leaf_func = fn, a.leaf_line = ln, leaf = false;
        if (p.frames[f].kind == FrameKind::kPython) a.py_func = fn, a.py_line = ln;  // it is the innermost
      } else if (a.py_func == kNone && p.frames[f].kind == FrameKind::kPython) {
        // A Python frame's self time is the time it is the innermost Python frame: the native
        // frames above it (the interpreter, an extension) run on its behalf.
        a.py_func = fn, a.py_line = ln;
      }
      if (func_stamp.size() <= fn) func_stamp.resize(p.functions.size(), 0);
      if (func_stamp[fn] != s + 1) func_stamp[fn] = s + 1, a.funcs.push_back(fn);
      if (ln != kNone) {
        if (line_stamp.size() <= ln) line_stamp.resize(p.lines.size(), 0);
        if (line_stamp[ln] != s + 1) line_stamp[ln] = s + 1, a.lines.push_back(ln);
      }
    }
    return a;
  };

  // Accumulate in flat arrays (entry * nm + metric): far fewer cache misses than adding into
  // each entry's own vectors; copied into the entries at the end.
  std::vector<int64_t> fself, ftotal, lself, ltotal;
  for (const StackValues& row : p.stack_values) {
    if (row.stack >= p.stacks.size()) continue;
    const StackAgg& a = stack_agg(row.stack);
    for (auto* v : {&fself, &ftotal}) v->resize(p.functions.size() * nm);
    for (auto* v : {&lself, &ltotal}) v->resize(p.lines.size() * nm);
    const size_t n = std::min(nm, row.values.size());
    for (size_t k = 0; k < n; ++k) {
      const int64_t v = row.values[k];
      if (v == 0) continue;
      if (a.leaf_func != kNone) fself[a.leaf_func * nm + k] += v;
      if (a.leaf_line != kNone) lself[a.leaf_line * nm + k] += v;
      if (a.py_func != kNone && a.py_func != a.leaf_func) fself[a.py_func * nm + k] += v;
      if (a.py_line != kNone && a.py_line != a.leaf_line) lself[a.py_line * nm + k] += v;
      for (uint32_t fn : a.funcs) ftotal[fn * nm + k] += v;
      for (uint32_t ln : a.lines) ltotal[ln * nm + k] += v;
    }
  }
  for (size_t i = 0; i < p.functions.size(); ++i) {
    std::copy_n(fself.begin() + i * nm, nm, p.functions[i].self.begin());
    std::copy_n(ftotal.begin() + i * nm, nm, p.functions[i].total.begin());
  }
  for (size_t i = 0; i < p.lines.size(); ++i) {
    std::copy_n(lself.begin() + i * nm, nm, p.lines[i].self.begin());
    std::copy_n(ltotal.begin() + i * nm, nm, p.lines[i].total.begin());
  }
}

}  // namespace mlprof::profile
