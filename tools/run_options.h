// Options of mlprof-run (docs/usage.md). Parsed with CLI11; every value is validated before the
// command starts, so a typo never costs a long run.
#pragma once
#include <string>
#include <vector>

namespace mlprof::tools {

struct RunOptions {
  std::string output;        // -o: profile path
  std::string html;          // --html: report path ("" = next to the profile)
  bool no_html = false;
  unsigned rate_hz = 100;
  double duration_s = 0;     // 0 = until the command ends
  bool quiet = false;
  std::string unwinder;      // "" (preload default), "cfi", "libunwind"
  std::string mode = "cpu";  // "cpu" or "wall" (off-CPU waits too)
  std::vector<std::string> command;
};

// Parses argv. On --help or an error, prints and returns false with *exit_code set.
bool parse_run_options(int argc, char** argv, RunOptions* out, int* exit_code);

}  // namespace mlprof::tools
