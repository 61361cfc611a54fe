// The pprof export: a profile as github.com/google/pprof/proto/profile.proto, the format that
// `go tool pprof`, pprof's web UI, Speedscope and many profilers read. Hand-encoded (the message
// is small and stable), gzipped with zlib. What maps to what: docs/export-formats.md.
#pragma once
#include <string>

#include "profile/model.h"
#include "profile/result.h"

namespace mlprof::report {

// The uncompressed profile.proto message: one sample type per metric (the default one, which
// pprof shows first: `default_metric`, else cpu), one sample per (thread, stack) with labels
// thread / tid / pid / process, a location per physical frame with its inlined frames as extra
// lines (innermost first), a mapping per module.
// Error: the profile has no metrics, or none named `default_metric`.
Result<std::string> pprof_proto(const profile::Profile&, const std::string& default_metric = "");

// pprof_proto, gzipped: what `mlprof export --format pprof` writes and `go tool pprof` reads.
Result<std::string> export_pprof(const profile::Profile&, const std::string& default_metric = "");

}  // namespace mlprof::report
