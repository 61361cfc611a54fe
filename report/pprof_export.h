// The pprof export: a profile as github.com/google/pprof/proto/profile.proto, the format that
// `go tool pprof`, pprof's web UI, Speedscope and many profilers read. Hand-encoded (the message
// is small and stable), gzipped with zlib. What maps to what: docs/export-formats.md.
#pragma once
#include <string>

#include "profile/model.h"
#include "profile/result.h"

namespace mlprof::report {

// The uncompressed profile.proto message: one sample type per metric (default: cpu), one sample
// per (thread, stack) with labels thread / tid / pid / process, a location per physical frame
// with its inlined frames as extra lines (innermost first), a mapping per module.
// Error: the profile has no metrics.
Result<std::string> pprof_proto(const profile::Profile&);

// pprof_proto, gzipped: what `mlprof export --format pprof` writes and `go tool pprof` reads.
Result<std::string> export_pprof(const profile::Profile&);

}  // namespace mlprof::report
