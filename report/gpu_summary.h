// The GPU part of the terminal summary (`mlprof report`): per process with GPU activity, the GPU
// time by kind, the top kernels with their launching line, and per device the busy share and the
// device-memory peak with the lines holding it. Empty when the profile has no GPU section.
#pragma once
#include <cstddef>
#include <string>

#include "profile/model.h"

namespace mlprof::report {

std::string gpu_summary(const profile::Profile&, size_t top);

}  // namespace mlprof::report
