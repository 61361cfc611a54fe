// Advice from the measured serving run (docs/serving.md): plain sentences, each with the numbers
// behind it, about thread pools vs available cores, interpreter vs native (matmul) CPU, copy
// volume, the latency tail, and CPU saturation. Rules and thresholds are documented there.
#pragma once
#include <string>
#include <vector>

#include "profile/model.h"
#include "tools/serving_window.h"

namespace mlprof::tools {

// The thread-pool variables the advice reads (OMP_NUM_THREADS, ...) from an environment.
std::map<std::string, std::string> thread_pool_env(char** environ_);

// `s` has its latency, resource and window fields filled; `w` is window_cpu over its window.
std::vector<std::string> serving_advice(const profile::Profile& p, const profile::Serving& s, const WindowCpu& w);

}  // namespace mlprof::tools
