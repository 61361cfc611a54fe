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
// The same from a /proc/PID/environ block ("NAME=value\0NAME=value\0...").
std::map<std::string, std::string> thread_pool_env_block(const std::string& block);
// Adds `from` to `into`; where both set a variable, the larger number stays (processes of one
// service started with different pool sizes: the advice is about the largest).
void merge_thread_env(std::map<std::string, std::string>* into, const std::map<std::string, std::string>& from);

// `s` has its latency, resource and window fields filled; `w` is window_cpu over its window.
std::vector<std::string> serving_advice(const profile::Profile& p, const profile::Serving& s, const WindowCpu& w);

}  // namespace mlprof::tools
