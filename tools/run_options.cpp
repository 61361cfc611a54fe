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

namespace {

// A decimal whole number in [lo, hi], checked and normalised on the text before CLI11 converts
// it (used with ->transform): "-1" would wrap to 2^64 - 1 in an unsigned option, and CLI11 reads a
// leading 0 as octal ("010" = 8, "08" refused), so leading zeros are dropped here.
CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::string was = text;
        bool digits = !text.empty();
        for (char c : text) digits = digits && isdigit(static_cast<unsigned char>(c));
        if (digits) {
          text.erase(0, std::min(text.find_first_not_of('0'), text.size() - 1));  // "007" -> "7", "0" stays
          digits = text.size() <= 19;
        }
        if (!digits || std::stoull(text) < lo || std::stoull(text) > hi)
          return "'" + was + "' is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
        return "";
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// A number of seconds above 0 and at most `hi` (CLI::PositiveNumber's message printed the largest
// double in full).
CLI::Validator seconds_above_zero(double hi) {
  return CLI::Validator(
      [hi](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !(v > 0) || v > hi)
          return "'" + text + "' is not a number of seconds above 0 (e.g. 30 or 2.5)";
        return "";
      },
      "SECONDS");
}

}  // namespace

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
      ->transform(whole_number(1, 10000))
      ->capture_default_str();
  app.add_option("--duration", o->duration_s, "Stop the command after S seconds (SIGTERM) and still write everything")
      ->transform(seconds_above_zero(1e9));
  app.add_flag("-q,--quiet", o->quiet, "No status line, no summary, no messages from the profiler");
  app.add_option("--unwinder", o->unwinder, "Stack unwinder in the profiled process")
      ->check(CLI::IsMember({"cfi", "libunwind"}));
  app.add_option("--mode", o->mode,
                 "cpu: where CPU time goes; wall: also where threads wait off-CPU (sleep, I/O, locks, GIL)")
      ->check(CLI::IsMember({"cpu", "wall"}))
      ->capture_default_str();
  app.add_flag("--no-memory", o->no_memory, "Do not profile allocations and copies (CPU only)");
  app.add_flag("--no-gpu", o->no_gpu, "Do not profile CUDA kernels, copies and device memory (CUPTI is not loaded)");
  std::string mem_interval;
  CLI::Option* mem_interval_opt = app.add_option("--mem-interval", mem_interval,
                 "Mean bytes allocated between two recorded allocations (default 1M; e.g. 256K, 4M); 1 = exact: record every "
                 "allocation (slow)")
      ->option_text("BYTES");
  // The serving workflow (docs/serving.md).
  ServingOptions& sv = o->serving;
  const char* kServing = "Serving (replay requests against the service)";
  auto* req_opt = app.add_option("--requests", sv.requests,
                                 "Request file: one POST body per line, replayed in order against --url")
                      ->group(kServing)->option_text("FILE");
  auto* url_opt = app.add_option("--url", sv.url, "Where the service answers, e.g. http://127.0.0.1:8080/score")
                      ->group(kServing);
  auto* conc_opt = app.add_option("--concurrency", sv.concurrency, "Closed loop: requests in flight (default 1)")
                       ->group(kServing)->transform(whole_number(1, 1024));
  auto* rps_opt = app.add_option("--rps", sv.rps, "Open loop: requests started per second, whatever the latency")
                      ->group(kServing)->check(CLI::Range(0.001, 1e6));
  auto* max_opt = app.add_option("--max-requests", sv.max_requests,
                                 "Send this many requests, cycling through the file (default: the file once)")
                      ->group(kServing)->transform(whole_number(1, 100000000));
  auto* warm_opt = app.add_option("--warmup", sv.warmup, "The first K requests warm up: kept out of the steady state")
                       ->group(kServing)->transform(whole_number(0, 100000000));
  auto* ct_opt = app.add_option("--content-type", sv.content_type, "Content-Type of the requests")
                     ->group(kServing)->capture_default_str();
  auto* to_opt = app.add_option("--timeout", sv.timeout_s, "Seconds per request before it counts as failed")
                     ->group(kServing)->check(CLI::Range(0.001, 3600.0))->capture_default_str();
  auto* rto_opt = app.add_option("--ready-timeout", sv.ready_timeout_s,
                                 "Seconds to wait for the URL to answer at all (model loading)")
                      ->group(kServing)->check(CLI::Range(0.1, 86400.0))->capture_default_str();
  auto* ru_opt = app.add_option("--ready-url", sv.ready_url,
                                "Where to poll (GET) until the service is ready, e.g. a health route (default: --url)")
                     ->group(kServing);
  auto* np_opt = app.add_flag("--no-profile", sv.no_profile,
                              "Serving: run the service without the profiler (a baseline for the same load)")
                     ->group(kServing);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    if (*exit_code != 0) *exit_code = 2;
    return false;
  }
  o->command = app.remaining();
  // CLI11 hands an option it does not know to the command (prefix_command): a mistyped option
  // would then be run as the program. A command that starts with '-' comes after --.
  if (!o->command.empty() && o->command[0] != "--" && o->command[0].size() > 1 && o->command[0][0] == '-') {
    fprintf(stderr,
            "mlprof-run: unknown option '%s' (see mlprof-run --help); a command whose name starts with '-' goes "
            "after --\n",
            o->command[0].c_str());
    *exit_code = 2;
    return false;
  }
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
  auto fail = [&](const std::string& m) {
    fprintf(stderr, "mlprof-run: %s\n", m.c_str());
    *exit_code = 2;
    return false;
  };
  const bool serving_opt = req_opt->count() || url_opt->count() || conc_opt->count() || rps_opt->count() ||
                           max_opt->count() || warm_opt->count() || ct_opt->count() || to_opt->count() ||
                           rto_opt->count() || np_opt->count() || ru_opt->count();
  if (serving_opt) {
    if (sv.requests.empty() || sv.url.empty())
      return fail("the serving options need both --requests FILE (one POST body per line) and --url URL (where the "
                  "service answers)");
    if (std::string why; !check_service_url(sv.url, &why))
      return fail("--url '" + sv.url + "' cannot be used: " + why + "; give e.g. http://127.0.0.1:8080/score");
    if (std::string why; !sv.ready_url.empty() && !check_service_url(sv.ready_url, &why))
      return fail("--ready-url '" + sv.ready_url + "' cannot be used: " + why +
                  "; give e.g. http://127.0.0.1:8080/health");
    if (sv.content_type.empty())
      return fail("--content-type is empty; give the media type of the request bodies, e.g. application/json");
    if (conc_opt->count() && rps_opt->count())
      return fail("--concurrency (closed loop) and --rps (open loop) contradict each other; use one");
    if (max_opt->count() && sv.warmup >= sv.max_requests)
      return fail("--warmup must be smaller than --max-requests: no request would be left for the steady state");
  }
  if (o->no_html && !o->html.empty()) {
    fprintf(stderr, "mlprof-run: --html and --no-html contradict each other; use one\n");
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace mlprof::tools
