// Turns decoded process streams into a Profile: symbolizes every stack once, merges identical
// symbolized stacks across threads and processes, links parents and exec chains, and computes
// the per-function and per-line tables.
#pragma once
#include <set>
#include <vector>

#include "collector/stream_decoder.h"
#include "profile/model.h"

namespace mlprof::collector {

struct BuildOptions {
  std::vector<std::string> extra_debug_dirs;
  // Sum the trackers' window figures (MemoryTracker::set_window) per profile stack into
  // Profile::serving.sites (mlprof-run --requests); serving.present is left to the caller.
  bool memory_window = false;
  // The processes mlprof-run itself stopped (--duration, end of the serving load: a flush of every
  // stream, then SIGTERM to the command and every process below it): a stream of theirs ending
  // without END is expected, not a warning; their end reason is `stopped`
  // (RunInfo::extra["stopped_by"] says how). Empty: none.
  std::set<uint32_t> stopped_pids;
  // The command's process (mlprof-run's child). When the stream of its last image ended without
  // END (killed by a signal, crashed, stopped by mlprof-run), its exit status is RunInfo's, which
  // the parent's waitpid gave: "128 + signal" instead of unknown. 0: not known.
  uint32_t command_pid = 0;
};

// `run` carries what the caller knows about the run (command, times, rate, exit status...).
profile::Profile build_profile(std::vector<ProcessStream>& streams, const profile::RunInfo& run,
                               const BuildOptions& opts = {});

}  // namespace mlprof::collector
