#include "tools/run_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>

namespace mlprof::tools {

bool parse_byte_size(const std::string& text, uint64_t* out, std::string* why) {
  size_t i = 0;
  uint64_t v = 0;
  constexpr uint64_t kMax = uint64_t{1} << 40;  // 1 TiB: far above any sensible interval
  while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) {
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    if (v > kMax) {
      *why = "'" + text + "' is too large (at most 1024G)";
      return false;
    }
    ++i;
  }
  if (i == 0) {
    *why = "'" + text + "' is not a byte count";
    return false;
  }
  std::string suffix = text.substr(i);
  for (auto& c : suffix) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") shift = 0;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  else {
    *why = "'" + text + "' has an unknown unit '" + text.substr(i) + "' (use K, M or G)";
    return false;
  }
  if (v > (kMax >> shift)) {
    *why = "'" + text + "' is too large (at most 1024G)";
    return false;
  }
  v <<= shift;
  if (v == 0) {
    *why = "'" + text + "' is zero";
    return false;
  }
  *out = v;
  return true;
}

bool parse_run_options(int argc, char** argv, RunOptions* o, int* exit_code) {
  CLI::App app{
      "Profile a command and every process it starts, then write a profile and an HTML report.\n"
      "Example: mlprof-run -o run.mlprof -- python3 serve.py --port 8080",
      "mlprof-run"};
  app.prefix_command();  // everything from the first non-option word (or after --) is the command
  app.add_option("-o,--output", o->output, "Profile file to write (default: mlprof-<command>-<time>.mlprof)");
  app.add_option("--html", o->html, "HTML report to write (default: the profile's name with .html)");
  app.add_flag("--no-html", o->no_html, "Do not write an HTML report");
  app.add_option("--rate", o->rate_hz, "Samples per CPU-second per thread")
      ->check(CLI::Range(1u, 10000u))
      ->capture_default_str();
  app.add_option("--duration", o->duration_s, "Stop the command after S seconds (SIGTERM) and still write everything")
      ->check(CLI::PositiveNumber);
  app.add_flag("-q,--quiet", o->quiet, "No status line, no summary, no messages from the profiler");
  app.add_option("--unwinder", o->unwinder, "Stack unwinder in the profiled process")
      ->check(CLI::IsMember({"cfi", "libunwind"}));
  app.add_option("--mode", o->mode,
                 "cpu: where CPU time goes; wall: also where threads wait off-CPU (sleep, I/O, locks, GIL)")
      ->check(CLI::IsMember({"cpu", "wall"}))
      ->capture_default_str();
  app.add_flag("--no-memory", o->no_memory, "Do not profile allocations and copies (CPU only)");
  std::string mem_interval;
  CLI::Option* mem_interval_opt = app.add_option("--mem-interval", mem_interval,
                 "Mean bytes allocated between two recorded allocations (e.g. 512K, 1M); 1 = exact: record every "
                 "allocation (slow)")
      ->option_text("BYTES");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    if (*exit_code != 0) *exit_code = 2;
    return false;
  }
  o->command = app.remaining();
  if (!o->command.empty() && o->command[0] == "--") o->command.erase(o->command.begin());
  if (o->command.empty()) {
    fprintf(stderr, "mlprof-run: no command given. Usage: mlprof-run [options] -- COMMAND [ARGS...]\n");
    *exit_code = 2;
    return false;
  }
  const bool interval_given = mem_interval_opt->count() > 0;
  if (interval_given) {
    std::string why;
    if (!parse_byte_size(mem_interval, &o->mem_interval, &why)) {
      fprintf(stderr,
              "mlprof-run: --mem-interval: %s; give a byte count such as 524288, 512K or 1M (1 = exact mode: "
              "every allocation)\n",
              why.c_str());
      *exit_code = 2;
      return false;
    }
  }
  if (o->no_memory && interval_given) {
    fprintf(stderr, "mlprof-run: --no-memory and --mem-interval contradict each other; use one\n");
    *exit_code = 2;
    return false;
  }
  if (o->no_html && !o->html.empty()) {
    fprintf(stderr, "mlprof-run: --html and --no-html contradict each other; use one\n");
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace mlprof::tools
