// The Serving part of the text summary (mlprof report, mlprof-run's summary): the cloud-style
// figures, the recommendation, advice and the top per-request lines and sites. "" without a
// serving run.
#pragma once
#include <cstddef>
#include <string>

#include "profile/model.h"

namespace mlprof::report {

std::string serving_summary(const profile::Profile& p, size_t top);

}  // namespace mlprof::report
