// flame_data: prefix trees of the profile's stacks for the HTML flame graph (html_flame.h).
#include "report/html_flame.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "report/format.h"

namespace mlprof::report {

using nlohmann::json;
using profile::FrameKind;
using profile::kNone;
using profile::Profile;

namespace {

struct FrameTable {
  std::vector<std::string> name, file;
  std::vector<uint32_t> line;
  std::vector<int> kind;
  std::vector<int32_t> of_frame;  // profile frame id -> flame frame index
  int32_t truncated = -1;         // "[truncated stack]" marker frame
};

FrameTable frame_table(const Profile& p) {
  FrameTable t;
  std::map<std::tuple<int, std::string, std::string, std::string, uint32_t>, int32_t> index;
  auto add = [&](int kind, const std::string& fn, const std::string& file, const std::string& module,
                 uint32_t line, std::string name) {
    auto key = std::make_tuple(kind, fn.empty() ? name : fn, file, module, line);
    auto [it, fresh] = index.emplace(key, static_cast<int32_t>(t.name.size()));
    if (fresh) {
      t.name.push_back(std::move(name));
      t.file.push_back(file);
      t.line.push_back(line);
      t.kind.push_back(kind);
    }
    return it->second;
  };
  t.of_frame.resize(p.frames.size());
  for (size_t i = 0; i < p.frames.size(); ++i) {
    const auto& f = p.frames[i];
    const std::string& fn = p.str(f.function);
    const std::string& module = p.str(f.module);
    const bool py = f.kind == FrameKind::kPython;
    std::string name = fn;
    if (name.empty()) {
      std::string mod = detail::basename(module);
      name = mod.empty() ? "[unknown]" : "[unknown] " + mod;
    }
    t.of_frame[i] =
        add(static_cast<int>(f.kind), fn, p.str(f.file), module, py ? f.line : 0, std::move(name));
  }
  t.truncated = add(static_cast<int>(FrameKind::kUnknown), "", "", "", 0, "[truncated stack]");
  return t;
}

// The prefix tree of every stack in the profile, built once: node 0 is the root, a node's
// children have larger indexes, leaf_of_stack maps a stack to its deepest node. The per-scope
// trees (all, a process, a thread) are projections of it: values summed along each row's path.
struct Trie {
  std::vector<int32_t> parent, frame;
  std::vector<int32_t> leaf_of_stack;  // -1: stack unused or invalid
};

// Open addressing (parent, frame) -> child: the hot loop of building the trie.
class ChildMap {
 public:
  explicit ChildMap(size_t expected) {
    size_t cap = 1024;
    while (cap < expected * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.resize(cap);
    mask_ = cap - 1;
  }
  // The child, or `fresh` inserted as it.
  uint32_t find_or_insert(uint64_t key, uint32_t fresh, bool* inserted) {
    if (used_ * 2 >= keys_.size()) grow();
    size_t i = slot(key);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) {
        *inserted = false;
        return vals_[i];
      }
      i = (i + 1) & mask_;
    }
    keys_[i] = key;
    vals_[i] = fresh;
    ++used_;
    *inserted = true;
    return fresh;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<uint32_t> vals = std::move(vals_);
    keys_.assign(keys.size() * 2, kEmpty);
    vals_.assign(keys.size() * 2, 0);
    mask_ = keys_.size() - 1;
    for (size_t k = 0; k < keys.size(); ++k) {
      if (keys[k] == kEmpty) continue;
      size_t i = slot(keys[k]);
      while (keys_[i] != kEmpty) i = (i + 1) & mask_;
      keys_[i] = keys[k];
      vals_[i] = vals[k];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  size_t mask_ = 0, used_ = 0;
};

Trie build_trie(const Profile& p, const FrameTable& ft) {
  Trie t;
  t.parent.push_back(-1);
  t.frame.push_back(-1);
  t.leaf_of_stack.assign(p.stacks.size(), -1);
  std::vector<char> used(p.stacks.size(), 0);
  size_t frames = 0;
  for (const auto& sv : p.stack_values)
    if (sv.stack < p.stacks.size() && !used[sv.stack]) {
      used[sv.stack] = 1;
      frames += p.stacks[sv.stack].frames.size() + 1;
    }
  ChildMap child(frames / 2 + 16);
  auto step = [&](uint32_t node, int32_t fr) {
    uint64_t key = (static_cast<uint64_t>(node) << 32) | static_cast<uint32_t>(fr);
    bool inserted = false;
    uint32_t c = child.find_or_insert(key, static_cast<uint32_t>(t.parent.size()), &inserted);
    if (inserted) {
      t.parent.push_back(static_cast<int32_t>(node));
      t.frame.push_back(fr);
    }
    return c;
  };
  for (size_t s = 0; s < p.stacks.size(); ++s) {
    if (!used[s]) continue;
    const auto& st = p.stacks[s];
    uint32_t node = 0;
    if (st.truncated) node = step(0, ft.truncated);
    for (auto it = st.frames.rbegin(); it != st.frames.rend(); ++it)
      if (*it < ft.of_frame.size()) node = step(node, ft.of_frame[*it]);
    t.leaf_of_stack[s] = static_cast<int32_t>(node);
  }
  return t;
}

// The projection of `rows` on the trie: values node-major (values[node * metrics + m]).
struct Tree {
  const Trie* trie = nullptr;
  size_t nm = 0;
  std::vector<int64_t> values;
  std::vector<uint32_t> rows;  // rows (stack_values) ending at each node
  int64_t v(size_t node, size_t m) const { return values[node * nm + m]; }
};

Tree build_tree(const Profile& p, const Trie& trie, const std::vector<size_t>& rows) {
  Tree t;
  t.trie = &trie;
  t.nm = p.metrics.size();
  const size_t n = trie.parent.size(), nm = t.nm;
  t.values.assign(n * nm, 0);
  t.rows.assign(n, 0);
  std::vector<int64_t> row(nm);
  for (size_t r : rows) {
    const auto& sv = p.stack_values[r];
    if (sv.stack >= trie.leaf_of_stack.size() || trie.leaf_of_stack[sv.stack] < 0) continue;
    bool any = false;
    for (size_t m = 0; m < nm; ++m) any |= (row[m] = detail::at(sv.values, static_cast<uint32_t>(m))) != 0;
    int32_t leaf = trie.leaf_of_stack[sv.stack];
    t.rows[leaf] += 1;
    if (!any) continue;
    for (int32_t node = leaf; node >= 0; node = trie.parent[node]) {
      int64_t* v = &t.values[static_cast<size_t>(node) * nm];
      for (size_t m = 0; m < nm; ++m) v[m] += row[m];
    }
  }
  return t;
}

json tree_json(const Tree& t, size_t budget) {
  const Trie& trie = *t.trie;
  const size_t n = trie.parent.size(), nm = t.nm;
  // Rows and nodes below each node (children have larger indexes than their parent).
  std::vector<uint32_t> sub_rows(t.rows);
  for (size_t i = n - 1; i >= 1; --i) sub_rows[trie.parent[i]] += sub_rows[i];
  // Nodes of this scope: those with a value or a row below them.
  std::vector<char> keep(n, 0);
  std::vector<uint32_t> candidates;
  keep[0] = 1;
  for (size_t i = 1; i < n; ++i) {
    bool any = sub_rows[i] > 0;
    for (size_t m = 0; m < nm && !any; ++m) any = t.v(i, m) != 0;
    if (any) candidates.push_back(static_cast<uint32_t>(i));
  }
  std::vector<char> in_scope(n, 0);
  in_scope[0] = 1;
  for (uint32_t i : candidates) in_scope[i] = 1;
  if (candidates.size() + 1 <= budget) {
    for (uint32_t i : candidates) keep[i] = 1;
  } else {
    // Score: the node's largest share of any metric of this tree.
    std::vector<double> inv_total(nm, 0.0);
    for (size_t m = 0; m < nm; ++m)
      if (t.v(0, m) > 0) inv_total[m] = 1.0 / static_cast<double>(t.v(0, m));
    std::vector<double> score(n, 0.0);
    for (uint32_t i : candidates)
      for (size_t m = 0; m < nm; ++m)
        score[i] = std::max(score[i], static_cast<double>(t.v(i, m)) * inv_total[m]);
    size_t k = budget > 1 ? budget - 1 : 0;
    std::nth_element(
        candidates.begin(), candidates.begin() + static_cast<long>(k), candidates.end(),
        [&](uint32_t a, uint32_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
    for (size_t i = 0; i < k; ++i) keep[candidates[i]] = 1;
    for (size_t i = 1; i < n; ++i) keep[i] = keep[i] && keep[trie.parent[i]];  // parents come first
  }
  std::vector<uint32_t> sub_nodes(n, 0);
  for (size_t i = n - 1; i >= 1; --i)
    if (in_scope[i]) sub_nodes[trie.parent[i]] += sub_nodes[i] + 1;
  std::vector<int32_t> new_index(n, -1);
  json parent = json::array(), frame = json::array();
  std::vector<json> values(nm, json::array());
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    new_index[i] = static_cast<int32_t>(parent.size());
    parent.push_back(i == 0 ? -1 : new_index[trie.parent[i]]);
    frame.push_back(trie.frame[i]);
    for (size_t m = 0; m < nm; ++m) values[m].push_back(t.v(i, m));
  }
  // Dropped subtrees: one "rare" child per kept parent.
  struct Rare {
    uint32_t stacks = 0, nodes = 0;
    std::vector<int64_t> values;
  };
  std::map<uint32_t, Rare> rare;
  uint32_t trimmed_nodes = 0, trimmed_rows = 0;
  std::vector<int64_t> trimmed_values(nm, 0);
  for (size_t i = 1; i < n; ++i) {
    if (keep[i] || !in_scope[i] || !keep[trie.parent[i]]) continue;
    Rare& r = rare[trie.parent[i]];
    if (r.values.empty()) r.values.assign(nm, 0);
    r.stacks += sub_rows[i];
    r.nodes += sub_nodes[i] + 1;
    for (size_t m = 0; m < nm; ++m) r.values[m] += t.v(i, m);
  }
  json rare_json = json::array();
  for (auto& [par, r] : rare) {
    int32_t idx = static_cast<int32_t>(parent.size());
    parent.push_back(new_index[par]);
    frame.push_back(-1);
    for (size_t m = 0; m < nm; ++m) values[m].push_back(r.values[m]);
    rare_json.push_back({idx, r.stacks});
    trimmed_nodes += r.nodes;
    trimmed_rows += r.stacks;
    for (size_t m = 0; m < nm; ++m) trimmed_values[m] += r.values[m];
  }
  json out;
  out["parent"] = std::move(parent);
  out["frame"] = std::move(frame);
  json vals = json::array();
  for (size_t m = 0; m < nm; ++m) vals.push_back(t.v(0, m) == 0 ? json(nullptr) : std::move(values[m]));
  out["values"] = std::move(vals);
  out["rare"] = std::move(rare_json);
  out["trimmed"] = {{"nodes", trimmed_nodes}, {"stacks", trimmed_rows}, {"values", trimmed_values}};
  return out;
}

}  // namespace

json flame_data(const Profile& p, const FlameOptions& opt) {
  FrameTable ft = frame_table(p);
  Trie trie = build_trie(p, ft);
  json out;
  out["frames"] = {{"name", ft.name}, {"file", ft.file}, {"line", ft.line}, {"kind", ft.kind}};
  json& trees = out["trees"] = json::array();
  std::vector<size_t> all(p.stack_values.size());
  std::iota(all.begin(), all.end(), size_t{0});
  json t = tree_json(build_tree(p, trie, all), opt.max_nodes);
  t["id"] = "all";
  t["label"] = "All threads";
  t["scope"] = "all";
  trees.push_back(std::move(t));

  // Rank processes and threads by their largest share of any metric.
  std::vector<double> thread_score(p.threads.size(), 0.0), process_score(p.processes.size(), 0.0);
  for (uint32_t m = 0; m < p.metrics.size(); ++m) {
    double total = static_cast<double>(detail::metric_total(p, m));
    if (total <= 0) continue;
    auto tt = detail::thread_totals(p, m);
    auto pt = detail::process_totals(p, m);
    for (size_t i = 0; i < tt.size() && i < thread_score.size(); ++i)
      thread_score[i] = std::max(thread_score[i], tt[i] / total);
    for (size_t i = 0; i < pt.size() && i < process_score.size(); ++i)
      process_score[i] = std::max(process_score[i], pt[i] / total);
  }
  auto top = [](const std::vector<double>& score, size_t n) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < score.size(); ++i)
      if (score[i] > 0) idx.push_back(i);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
    if (idx.size() > n) idx.resize(n);
    return idx;
  };
  if (p.processes.size() >= 2) {
    for (size_t pi : top(process_score, opt.max_process_trees)) {
      std::vector<size_t> rows;
      for (size_t r = 0; r < p.stack_values.size(); ++r) {
        uint32_t th = p.stack_values[r].thread;
        if (th < p.threads.size() && p.threads[th].process == pi) rows.push_back(r);
      }
      json pt = tree_json(build_tree(p, trie, rows), opt.max_nodes_each);
      const auto& proc = p.processes[pi];
      pt["id"] = fmt::format("p{}", pi);
      pt["label"] = fmt::format("process {} ({})", proc.pid, detail::process_name(proc));
      pt["scope"] = "process";
      pt["pid"] = proc.pid;
      trees.push_back(std::move(pt));
    }
  }
  if (p.threads.size() >= 2) {
    for (size_t ti : top(thread_score, opt.top_threads)) {
      std::vector<size_t> rows;
      for (size_t r = 0; r < p.stack_values.size(); ++r)
        if (p.stack_values[r].thread == ti) rows.push_back(r);
      json tt = tree_json(build_tree(p, trie, rows), opt.max_nodes_each);
      const auto& th = p.threads[ti];
      uint32_t pid = th.process < p.processes.size() ? p.processes[th.process].pid : 0;
      tt["id"] = fmt::format("t{}", ti);
      tt["label"] = fmt::format("thread {} {} (pid {})", th.tid, th.name, pid);
      tt["scope"] = "thread";
      tt["pid"] = pid;
      tt["tid"] = th.tid;
      trees.push_back(std::move(tt));
    }
  }
  out["threads_without_tree"] =
      p.threads.size() >= 2 && p.threads.size() > opt.top_threads ? p.threads.size() - opt.top_threads : 0;
  return out;
}

}  // namespace mlprof::report
