// Options of mlprof-run (docs/usage.md). Parsed with CLI11; every value is validated before the
// command starts, so a typo never costs a long run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/serving_options.h"

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
  bool no_memory = false;    // --no-memory: MLPROF_MEMORY=0 (no allocation / copy profiling)
  bool no_gpu = false;       // --no-gpu: MLPROF_GPU=0 (no CUDA profiling through CUPTI, docs/gpu.md)
  uint64_t mem_interval = 0; // --mem-interval: mean sampling interval in bytes; 1 = exact; 0 = preload default
  ServingOptions serving;    // --requests/--url ...: the serving workflow (docs/serving.md)
  std::vector<std::string> command;
};

// A byte count: plain digits or digits with a K, M or G suffix (binary: 64K = 65536; "KiB", "MB",
// "k" are accepted spellings of the same). Returns false with *why set on anything else, on 0 and on
// values above 1 TiB.
bool parse_byte_size(const std::string& text, uint64_t* out, std::string* why);

// Parses argv. On --help or an error, prints and returns false with *exit_code set.
bool parse_run_options(int argc, char** argv, RunOptions* out, int* exit_code);

}  // namespace mlprof::tools
