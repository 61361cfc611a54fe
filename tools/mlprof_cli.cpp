// mlprof: works on saved profiles (and builds them from offline event files).
//   mlprof report FILE [--html OUT] [--top N] [--color auto|always|never]
//   mlprof export FILE --format collapsed [--metric NAME] [--by-process] [--by-thread] [-o OUT]
//   mlprof export FILE --format pprof|chrome-trace [-o OUT]   (docs/export-formats.md)
//   mlprof export FILE --format json [-o OUT]   (docs/json-format.md)
//   mlprof collect EVENTS... -o OUT      (offline mode: event files from MLPROF_OUTPUT_DIR)
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "collector/profile_builder.h"
#include "collector/stream_decoder.h"
#include "fmt/format.h"
#include "profile/profile_io.h"
#include "report/chrome_trace.h"
#include "report/json_export.h"
#include "report/pprof_export.h"
#include "report/report.h"
#include "tools/output_files.h"

namespace {

using namespace mlprof;

bool write_text(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    return static_cast<bool>(std::cout);
  }
  if (std::string err = profile::write_file(path, text.data(), text.size()); !err.empty()) {
    fprintf(stderr, "mlprof: cannot write %s\n", err.c_str());
    return false;
  }
  return true;
}

Result<profile::Profile> load(const std::string& path) {
  auto r = profile::read_profile(path);
  if (!r) fprintf(stderr, "mlprof: %s\n", r.error().c_str());
  return r;
}

// Event files named on the command line, or every *.mlpw inside named directories.
std::vector<std::string> expand_event_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (auto& in : inputs) {
    struct stat st;
    if (stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      if (DIR* d = opendir(in.c_str())) {
        while (dirent* e = readdir(d)) {
          std::string n = e->d_name;
          if (n.size() > 5 && n.compare(n.size() - 5, 5, ".mlpw") == 0) files.push_back(in + "/" + n);
        }
        closedir(d);
      }
    } else {
      files.push_back(in);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

int collect(const std::vector<std::string>& inputs, const std::string& out) {
  std::vector<collector::ProcessStream> streams;
  profile::RunInfo run;
  run.mode = "cpu";
  run.timer = "thread-cpu-timer";  // replaced by the streams' own clock in build_profile
  run.mlprof_version = MLPROF_VERSION;
  std::vector<std::string> problems;
  for (auto& path : expand_event_inputs(inputs)) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      fprintf(stderr, "mlprof: cannot read %s\n", path.c_str());
      return 1;
    }
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    collector::StreamDecoder d;
    d.feed(data.data(), data.size());
    d.finish();
    if (!d.stream().started) {
      fprintf(stderr, "mlprof: %s: %s\n", path.c_str(),
              d.error().empty() ? "not an mlprof event file (no process start record)" : d.error().c_str());
      return 1;
    }
    streams.push_back(std::move(d.stream()));
  }
  if (streams.empty()) {
    fprintf(stderr, "mlprof: no event files (*.mlpw) found in the inputs\n");
    return 1;
  }
  int64_t start = INT64_MAX, end = 0;
  for (auto& s : streams) {
    if (s.start_mono_ns < start) {
      start = s.start_mono_ns;
      run.start_realtime_ns = s.start_realtime_ns;
      run.command = s.argv;
      if (s.period_ns > 0) run.rate_hz = static_cast<uint32_t>(1000000000 / s.period_ns);
    }
    for (auto& smp : s.samples) end = std::max(end, smp.t_ns);
    end = std::max(end, s.end_ns);
  }
  run.start_ns = start;
  run.end_ns = end;
  profile::Profile p = collector::build_profile(streams, run);
  if (Status st = profile::write_profile(p, out); !st.ok()) {
    fprintf(stderr, "mlprof: %s\n", st.error.c_str());
    return 1;
  }
  fprintf(stderr, "mlprof: %zu process streams collected into %s\n", streams.size(), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlprof: reports and exports from mlprof profiles", "mlprof"};
  app.require_subcommand(1);

  std::string file, html, color = "auto", format, metric = "cpu", out;
  size_t top = 15;
  bool by_process = false, by_thread = false;
  std::vector<std::string> inputs;

  auto* rep = app.add_subcommand("report", "Print a summary of a profile, or write its HTML report");
  rep->add_option("file", file, "Profile file (.mlprof)")->required();
  rep->add_option("--html", html, "Write the HTML report to this file");
  rep->add_option("--top", top, "Rows per table")->check(CLI::Range(1, 100000))->capture_default_str();
  rep->add_option("--color", color, "Colour the terminal summary")->check(CLI::IsMember({"auto", "always", "never"}));

  auto* exp = app.add_subcommand("export", "Export a profile in a format other tools read");
  exp->add_option("file", file, "Profile file (.mlprof)")->required();
  exp->add_option("--format", format,
                  "Output format: collapsed (folded stacks of one metric), pprof (gzipped profile.proto, "
                  "every metric), chrome-trace (trace-event JSON for Perfetto / chrome://tracing), json (run, "
                  "processes, memory, top functions/lines/sites per metric, leak candidates)")
      ->required()
      ->check(CLI::IsMember({"collapsed", "pprof", "chrome-trace", "json"}));
  exp->add_option("--metric", metric, "Metric to export (cpu, ...)")->capture_default_str();
  exp->add_flag("--by-process", by_process, "Put the process as the root frame");
  exp->add_flag("--by-thread", by_thread, "Put the thread as a root frame");
  exp->add_option("-o,--output", out, "Output file (default: stdout)");

  auto* col = app.add_subcommand("collect", "Build a profile from event files written with MLPROF_OUTPUT_DIR");
  col->add_option("events", inputs, "Event files (.mlpw) or directories holding them")->required();
  col->add_option("-o,--output", out, "Profile file to write")->required();

  // CLI11 says "A subcommand is required" of a mistyped one.
  if (argc > 1 && argv[1][0] != '-' && strcmp(argv[1], "report") != 0 && strcmp(argv[1], "export") != 0 &&
      strcmp(argv[1], "collect") != 0) {
    fprintf(stderr, "mlprof: unknown subcommand '%s': use report, export or collect (mlprof --help)\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (*col) {
    if (!getenv("MLPROF_DEBUGINFOD")) unsetenv("DEBUGINFOD_URLS");  // see mlprof_run.cpp
    return collect(inputs, out);
  }

  // Options that do not apply to the chosen format are refused, not ignored.
  if (*exp) {
    const bool metric_given = exp->get_option("--metric")->count() > 0;
    if (metric_given && (format == "chrome-trace" || format == "json")) {
      fprintf(stderr, "mlprof: --metric does not apply to --format %s (it carries every metric); it chooses the "
                      "collapsed export's metric and the pprof export's default sample type\n", format.c_str());
      return 2;
    }
    if ((by_process || by_thread) && format != "collapsed") {
      fprintf(stderr, "mlprof: --by-process and --by-thread apply to --format collapsed only (%s keeps the "
                      "processes and threads apart already)\n", format.c_str());
      return 2;
    }
  }
  // An output that cannot be written, or that is the profile being read, is refused before any work.
  const std::string& target = *rep ? html : out;
  if (!target.empty() && target != "-") {
    std::string why = tools::output_problem(target, false);
    if (why.empty() && tools::same_file(file, target)) why = "it is the profile being read (the output would replace it)";
    if (!why.empty()) {
      fprintf(stderr, "mlprof: cannot write %s: %s\n", target.c_str(), why.c_str());
      return 2;
    }
  }

  auto prof = load(file);
  if (!prof) return 1;
  if (*rep) {
    if (!html.empty()) {
      if (!write_text(html, report::html_report(*prof))) return 1;
      fprintf(stderr, "mlprof: report written to %s\n", html.c_str());
      return 0;
    }
    report::SummaryOptions so;
    so.top = top;
    so.color = color == "always" || (color == "auto" && isatty(STDOUT_FILENO));
    return write_text("", report::text_summary(*prof, so)) ? 0 : 1;
  }
  if (format == "json") return write_text(out, report::export_json(*prof)) ? 0 : 1;
  if (format == "pprof") {
    if ((out.empty() || out == "-") && isatty(STDOUT_FILENO)) {
      fprintf(stderr, "mlprof: the pprof export is binary (gzip); write it to a file with -o FILE.pb.gz\n");
      return 2;
    }
    auto data = report::export_pprof(*prof, exp->get_option("--metric")->count() > 0 ? metric : "");
    if (!data) {
      fprintf(stderr, "mlprof: %s\n", data.error().c_str());
      return 2;
    }
    return write_text(out, *data) ? 0 : 1;
  }
  if (format == "chrome-trace") {
    bool to_stdout = out.empty() || out == "-";
    std::ofstream f;
    if (!to_stdout) {
      errno = 0;
      f.open(out, std::ios::binary);
      if (!f) {
        fprintf(stderr, "mlprof: cannot write %s: %s\n", out.c_str(), errno ? strerror(errno) : "cannot open it");
        return 1;
      }
    }
    std::ostream& os = to_stdout ? std::cout : f;
    Status st = report::write_chrome_trace(*prof, os);
    if (st.ok() && !os.flush()) st.error = "output stream failed";
    if (!st.ok()) {
      fprintf(stderr, "mlprof: cannot write %s: %s\n", to_stdout ? "stdout" : out.c_str(), st.error.c_str());
      return 1;
    }
    return 0;
  }
  report::CollapsedOptions co;
  co.metric = metric;
  co.by_process = by_process;
  co.by_thread = by_thread;
  auto text = report::export_collapsed(*prof, co);
  if (!text) {
    fprintf(stderr, "mlprof: %s\n", text.error().c_str());
    return 2;
  }
  return write_text(out, *text) ? 0 : 1;
}
