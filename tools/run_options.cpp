#include "tools/run_options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

namespace mlprof::tools {

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
  if (o->no_html && !o->html.empty()) {
    fprintf(stderr, "mlprof-run: --html and --no-html contradict each other; use one\n");
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace mlprof::tools
