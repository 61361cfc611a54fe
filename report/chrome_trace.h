// The Chrome trace export: trace-event JSON (the "JSON Object Format" of the Trace Event Format)
// for Perfetto (ui.perfetto.dev) and chrome://tracing. Each thread's samples become a flame
// chart of nested "X" slices on that thread's track; memory timelines become "C" counters.
// What maps to what, and why slices rather than the samples/stackFrames format:
// docs/export-formats.md.
#pragma once
#include <ostream>
#include <string>

#include "profile/model.h"
#include "profile/result.h"

namespace mlprof::report {

// Writes the trace to `out` as it goes (a million samples make a trace of hundreds of MB).
// Timestamps are microseconds since the run's start. Error: writing to `out` failed.
Status write_chrome_trace(const profile::Profile&, std::ostream& out);

// The same trace as a string (tests, small profiles).
std::string chrome_trace(const profile::Profile&);

}  // namespace mlprof::report
