// Source view data (html_source.h).
#include "report/html_source.h"

#include <algorithm>
#include <map>
#include <set>

#include "report/format.h"
#include "report/source.h"

namespace mlprof::report {

using nlohmann::json;
using profile::Profile;

json source_data(const Profile& p, const SourceOptions& opt) {
  const size_t nm = p.metrics.size();
  std::vector<int64_t> totals(nm);
  for (uint32_t m = 0; m < nm; ++m) totals[m] = detail::metric_total(p, m);
  std::vector<double> score(p.lines.size(), 0.0);
  for (size_t i = 0; i < p.lines.size(); ++i)
    for (uint32_t m = 0; m < nm; ++m)
      if (totals[m] > 0)
        score[i] = std::max(score[i], static_cast<double>(detail::at(p.lines[i].self, m)) / totals[m]);
  std::vector<size_t> order;
  for (size_t i = 0; i < p.lines.size(); ++i)
    if (score[i] > 0 && !p.str(p.lines[i].file).empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });

  // Hot lines and their files (by content: duplicate strings do not split a file).
  std::vector<char> hot(p.lines.size(), 0);
  std::vector<std::string> files;
  std::map<std::string, double> file_score;
  for (size_t k = 0; k < order.size() && k < opt.max_hot_lines; ++k) {
    size_t i = order[k];
    if (score[i] < opt.hot_share && k >= opt.min_hot_lines) break;
    hot[i] = 1;
    const std::string& f = p.str(p.lines[i].file);
    if (file_score.emplace(f, score[i]).second) files.push_back(f);
  }
  // Files in order of the default metric (CPU when present), then of their hottest line.
  uint32_t dm = detail::pick_metric(p, "");
  std::map<std::string, int64_t> file_default;
  if (dm != profile::kNone)
    for (const auto& l : p.lines) file_default[p.str(l.file)] += detail::at(l.self, dm);
  std::stable_sort(files.begin(), files.end(), [&](const std::string& a, const std::string& b) {
    if (file_default[a] != file_default[b]) return file_default[a] > file_default[b];
    return file_score[a] > file_score[b];
  });
  std::set<std::string> all_files;
  for (size_t i : order) all_files.insert(p.str(p.lines[i].file));
  size_t listed = std::min(files.size(), opt.max_files);
  files.resize(listed);

  json out;
  json& jfiles = out["files"] = json::array();
  for (const std::string& path : files) {
    std::vector<size_t> rows;
    for (size_t i : order)  // hottest first, then cut, then by line number
      if (p.str(p.lines[i].file) == path) rows.push_back(i);
    if (rows.size() > opt.max_lines_per_file) rows.resize(opt.max_lines_per_file);
    std::stable_sort(rows.begin(), rows.end(),
                     [&](size_t a, size_t b) { return p.lines[a].line < p.lines[b].line; });
    json jl = json::array(), jfn = json::array(), jhot = json::array(), jself = json::array();
    std::vector<int64_t> file_total(nm, 0);
    std::vector<uint32_t> hot_lines;
    for (size_t i : rows) {
      const auto& l = p.lines[i];
      jl.push_back(l.line);
      jfn.push_back(p.str(l.function));
      jhot.push_back(hot[i] ? 1 : 0);
      json v = json::array();
      for (uint32_t m = 0; m < nm; ++m) {
        v.push_back(detail::at(l.self, m));
        file_total[m] += detail::at(l.self, m);
      }
      jself.push_back(std::move(v));
      if (hot[i]) hot_lines.push_back(l.line);
    }
    std::vector<std::string> text = source_lines(path, p.run.cwd);
    json regions = json::array();
    if (!text.empty()) {
      // Hot lines +- context, merged when they touch.
      std::vector<std::pair<uint32_t, uint32_t>> spans;
      for (uint32_t n : hot_lines) {
        if (n == 0 || n > text.size()) continue;
        uint32_t a = n > opt.context ? n - opt.context : 1;
        uint32_t b = std::min<uint32_t>(static_cast<uint32_t>(text.size()), n + opt.context);
        if (!spans.empty() && a <= spans.back().second + 1)
          spans.back().second = std::max(spans.back().second, b);
        else
          spans.emplace_back(a, b);
      }
      for (auto [a, b] : spans) {
        json t = json::array();
        for (uint32_t n = a; n <= b; ++n) t.push_back(text[n - 1]);
        regions.push_back({{"start", a}, {"text", std::move(t)}});
      }
    }
    jfiles.push_back({{"path", path},
                      {"readable", !text.empty()},
                      {"score", file_score[path]},
                      {"total", file_total},
                      {"line", std::move(jl)},
                      {"function", std::move(jfn)},
                      {"hot", std::move(jhot)},
                      {"self", std::move(jself)},
                      {"regions", std::move(regions)}});
  }
  out["omitted_files"] = all_files.size() - listed;
  return out;
}

}  // namespace mlprof::report
