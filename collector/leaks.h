// Leak candidates of one process from its memory accounting (docs/report.md, "Leak candidates").
//
//  * unfreed-at-exit: the process exited cleanly and at least kMinLiveSamples of a site's sampled
//    allocations were still live at the end. One sampled block (a stdio buffer, the C++ EH pool,
//    one-time init) is never a candidate: in sampled mode a single small block stands for a whole
//    interval of bytes and would be a false candidate.
//  * growth: the site's live bytes, cut at their last maximum (the teardown of a process that
//    frees everything at exit must not hide a leak), peak late in the run, and a straight line
//    fitted over the window from 20% of the run to that maximum climbs with R^2 >= 0.7 by more
//    than the sampling noise and a minimum number of bytes. A cache that fills early then stays
//    flat has no such climb.
// A site that is both is one candidate: unfreed-at-exit with the growth rate filled in.
#pragma once
#include <cstdint>
#include <vector>

#include "collector/memory_tracker.h"
#include "profile/model.h"

namespace mlprof::collector {

struct LeakRules {
  uint64_t min_live_samples = 2;        // unfreed-at-exit: sampled blocks still live at the end
  double late_fraction = 0.8;           // growth: the last maximum at or after this part of the run
  double window_start_fraction = 0.2;   // growth: the fit starts here (start-up excluded)
  double min_window_fraction = 0.3;     // growth: the window spans at least this part of the run
  size_t min_points = 5;                // growth: points in the window
  double min_r2 = 0.7;                  // growth: fit quality
  double min_noise_ratio = 3.0;         // growth: rise >= this x the sampling noise (sd)
  int64_t min_rise_bytes = 64 << 10;    // growth: rise >= this, and >= min_rise_intervals x interval
  double min_rise_intervals = 4.0;
  size_t max_candidates = 100;          // per process, biggest first
};

// One allocation site (profile stack) of one process.
struct LeakSite {
  uint32_t stack = 0;        // index into Profile::stacks
  bool suppressed = false;   // runtime-internal allocations (runtime_internal_stack): never a candidate
  int64_t end_bytes = 0;     // estimated live bytes at the end of the stream
  double end_count = 0;      // estimated live blocks at the end
  uint64_t end_samples = 0;  // sampled allocations live at the end
  uint32_t first_tick = 0;   // series[i] was taken at LeakInput::ticks[first_tick + i]
  std::vector<MemSeriesPoint> series;
};

struct LeakInput {
  uint32_t process = 0;       // index into Profile::processes
  int64_t start_ns = 0, end_ns = 0;
  bool exited = false;        // the process exited cleanly (exit(), return from main)
  uint64_t interval_bytes = 0;  // sampling interval; 1 = exact mode
  std::vector<int64_t> ticks;   // times of the series points
  std::vector<LeakSite> sites;
};

struct GrowthFit {
  bool found = false;
  double bytes_per_s = 0, r2 = 0;
  double noise_ratio = 0;    // rise / sampling noise (infinity when there is no noise)
  size_t peak = 0;           // index into the series of the last maximum
};

// The growth rule on one site's series.
GrowthFit fit_growth(const LeakInput& in, const LeakSite& site, const LeakRules& rules = {});

// Candidates of one process, biggest first.
std::vector<profile::LeakCandidate> find_leaks(const LeakInput& in, const LeakRules& rules = {});

// Allocations a runtime keeps on purpose for the life of the process:
//  * the C runtime's: the thread-stack cache's TLS blocks (glibc's pthread_create ->
//    _dl_allocate_tls, dynamic TLS in __tls_get_addr);
//  * what a Python extension module's initialization keeps: CPython never unloads extension
//    modules, so the types, tables and objects their PyInit_* function sets up live until exit.
//    Recognised by the importer's Python frame that runs it (create_module of
//    <frozen importlib._bootstrap_external>'s ExtensionFileLoader, or of <frozen
//    importlib._bootstrap>'s BuiltinImporter), which is there even when the native frames of a
//    module loaded a moment before could not be unwound yet, or by a native PyInit_* frame.
bool runtime_internal_stack(const profile::Profile& p, uint32_t stack);

}  // namespace mlprof::collector
