// Internal helpers shared by the summary, HTML and collapsed exports: names, units, text hygiene.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profile/model.h"

namespace mlprof::report::detail {

// Last path component ("" stays "").
std::string basename(std::string_view path);
// Valid UTF-8 out: invalid sequences become U+FFFD. With replace_controls, C0/C1 control characters
// and DEL become '?' (terminal escape sequences from the profiled program must not reach a tty).
std::string sanitize_utf8(std::string_view s, bool replace_controls);
// Number of code points (a good-enough column width for names and paths).
size_t display_width(std::string_view utf8);
// At most max_width code points; a cut string ends with "...".
std::string truncate_display(std::string_view utf8, size_t max_width);

bool is_time_unit(const std::string& unit);  // "us", "ns"
// 1234567 us -> "1.23 s", 12345 us -> "12.3 ms"; bytes -> "1.5 MiB"; others: the integer.
std::string format_value(int64_t value, const std::string& unit);
std::string format_duration_ns(int64_t ns);
std::string format_percent(int64_t part, int64_t whole);  // "12.3%", "-" when whole is 0

// argv joined with spaces; arguments with spaces or quotes are single-quoted.
std::string shell_join(const std::vector<std::string>& argv);
const char* end_reason_name(profile::EndReason);
std::string exit_status_text(int32_t status);  // "-" when unknown
// Short process name: basename of exe, else of argv[0], else "".
std::string process_name(const profile::Process&);
uint64_t counter(const profile::Process&, const std::string& name);
// Samples the process took: its preload's count, or for a process killed after its last counters
// the samples that reached the collector when more (the `samples_received` counter).
uint64_t samples_taken(const profile::Process&);

struct RunCounters {
  uint64_t samples = 0, ring_full = 0, no_thread = 0, transport = 0;
  uint64_t pool_wait = 0;  // pool threads spinning for work (pool_wait_samples)
  uint64_t dropped() const { return ring_full + no_thread + transport; }
};
RunCounters run_counters(const profile::Profile&);

// Index of `requested`, or when empty: "cpu" if present, else 0; kNone if absent / no metrics.
uint32_t pick_metric(const profile::Profile&, const std::string& requested);
std::string metric_names(const profile::Profile&);  // "cpu, alloc-bytes"
int64_t at(const std::vector<int64_t>& values, uint32_t i);  // 0 when out of range
// Sum of the metric over all stack values: the grand total that percentages refer to.
int64_t metric_total(const profile::Profile&, uint32_t metric);
// Per thread index / per process index: sum of the metric; per thread, sample events (signals).
std::vector<int64_t> thread_totals(const profile::Profile&, uint32_t metric);
std::vector<int64_t> thread_sample_counts(const profile::Profile&);
std::vector<int64_t> process_totals(const profile::Profile&, uint32_t metric);

// Function display name ("[unknown]" when the symbol is unknown) and where it lives
// ("file:first_line", "file", or the module basename).
std::string function_label(const profile::Profile&, const profile::FunctionStat&);
std::string function_location(const profile::Profile&, const profile::FunctionStat&);
// Indexes of functions / lines ordered by self (desc), then total (desc), then name.
std::vector<size_t> functions_by_self(const profile::Profile&, uint32_t metric);
std::vector<size_t> lines_by_self(const profile::Profile&, uint32_t metric);

// Run-level warnings, then each process's messages prefixed "[pid N name] ", the "no debug info"
// lines (one per library) last.
std::vector<std::string> all_warnings(const profile::Profile&);

}  // namespace mlprof::report::detail
