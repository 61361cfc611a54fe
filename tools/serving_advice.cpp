#include "tools/serving_advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

namespace mlprof::tools {

namespace {

constexpr const char* kPoolVars[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "NUMEXPR_NUM_THREADS", "TORCH_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"};

std::string pct(int64_t part, int64_t whole) {
  return whole > 0 ? fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "0%";
}
std::string cores(int64_t millicores) { return fmt::format("{:.1f}", millicores / 1000.0); }
// A latency with 2-3 significant digits: "46 us", "1.4 ms", "250 ms".
std::string ms(int64_t ns) {
  if (ns < 1'000'000) return fmt::format("{:.0f} us", ns / 1e3);
  if (ns < 100'000'000) return fmt::format("{:.1f} ms", ns / 1e6);
  return fmt::format("{:.0f} ms", ns / 1e6);
}
std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }
// "12% of the steady-state CPU (0.34 ms per request)": a part of the window's CPU, and per request.
std::string cpu_share(int64_t part_us, const WindowCpu& w, const profile::Serving& s) {
  return fmt::format("{} of the steady-state CPU ({:.2f} ms per request)", pct(part_us, w.total_us),
                     s.window_requests ? part_us / 1000.0 / s.window_requests : 0.0);
}

constexpr int64_t kMinShareCpuUs = 200000;

// Adds the entry "NAME=value" (n bytes) to `out` when NAME is a thread-pool variable.
void add_pool_var(const char* e, size_t n, std::map<std::string, std::string>* out) {
  for (const char* v : kPoolVars) {
    const size_t k = strlen(v);
    if (n > k && strncmp(e, v, k) == 0 && e[k] == '=') (*out)[v] = std::string(e + k + 1, n - k - 1);
  }
}

}  // namespace

std::map<std::string, std::string> thread_pool_env(char** env) {
  std::map<std::string, std::string> out;
  for (char** e = env; e && *e; ++e) add_pool_var(*e, strlen(*e), &out);
  return out;
}

std::map<std::string, std::string> thread_pool_env_block(const std::string& block) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < block.size();) {
    const size_t end = std::min(block.find('\0', i), block.size());
    add_pool_var(block.data() + i, end - i, &out);
    i = end + 1;
  }
  return out;
}

void merge_thread_env(std::map<std::string, std::string>* into, const std::map<std::string, std::string>& from) {
  for (const auto& [k, v] : from) {
    auto it = into->find(k);
    if (it == into->end() || strtol(v.c_str(), nullptr, 10) > strtol(it->second.c_str(), nullptr, 10)) (*into)[k] = v;
  }
}

std::vector<std::string> serving_advice(const profile::Profile& p, const profile::Serving& s, const WindowCpu& w) {
  std::vector<std::string> out;
  // The share rules (interpreter, matrix products, garbage collector) need enough samples in the
  // window: below kMinShareCpuUs of CPU (~20 samples at 100 Hz) a share is one or two samples.
  const bool enough = w.total_us >= kMinShareCpuUs;
  const int64_t span = s.window_end_ns - s.window_start_ns;
  const double avail = s.available_millicores / 1000.0;

  // Threads busy in the window (>= 0.1 core each), those of them a thread pool's workers, and the
  // processes they belong to.
  int busy = 0, busy_pool = 0;
  std::set<uint32_t> procs;
  for (auto& [t, us] : w.per_thread_us)
    if (span > 0 && us * 1000 * 10 >= span && t < p.threads.size()) {  // us*1000 ns >= span/10
      ++busy;
      busy_pool += w.pool_threads.count(t) > 0;
      procs.insert(p.threads[t].process);
    }
  const size_t nproc = std::max<size_t>(1, procs.size());
  const double used_cores = span > 0 ? static_cast<double>(w.total_us) * 1000.0 / static_cast<double>(span) : 0;
  if (s.available_millicores > 0 && busy > 0 && busy * 1000 > s.available_millicores) {
    if (busy_pool > 0)
      out.push_back(fmt::format(
          "{} threads were busy (each at least 0.1 core) in the steady state across {} process(es), {} of them a "
          "thread pool's workers, but only {} cores are available: the threads compete for CPU and latency suffers; "
          "limit the thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, torch.set_num_threads) so threads x processes "
          "stays at or below {}.",
          busy, nproc, busy_pool, cores(s.available_millicores), cores(s.available_millicores)));
    else if (used_cores >= 0.9 * avail)
      // The service's own threads (request handlers): a pool variable would change nothing. They
      // compete only when together they use the cores (Python handlers take turns on the GIL).
      out.push_back(fmt::format(
          "{} of the service's own threads (request handlers: no math library's thread pool was busy) used {:.1f} of "
          "the {} available cores in the steady state: the service is CPU-bound at this load, and more threads or "
          "connections add latency, not throughput; give it more cores or lower the load per instance.",
          busy, used_cores, cores(s.available_millicores)));
  }
  // A pool variable matters when a pool runs: matrix products or a pool's busy workers in the window.
  const bool pools_busy = w.matmul_us > 0 || busy_pool > 0;
  for (const auto& [var, value] : s.thread_env) {
    long n = strtol(value.c_str(), nullptr, 10);
    if (n > 0 && pools_busy && s.available_millicores > 0 && static_cast<double>(n) * nproc > avail)
      out.push_back(fmt::format("{}={} x {} process(es) = {} threads for {} available cores: lower {} to {}.", var,
                                value, nproc, n * static_cast<long>(nproc), cores(s.available_millicores), var,
                                std::max<long>(1, static_cast<long>(avail / nproc))));
  }
  if (s.thread_env.empty() && w.matmul_us > 0 && nproc > 1)
    out.push_back(fmt::format(
        "No thread-pool variable (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) is set and {} processes do "
        "matrix products: each BLAS library starts one thread per CPU in every process; set OMP_NUM_THREADS to about "
        "{} / {}.",
        nproc, cores(s.available_millicores), nproc));

  if (w.total_us > 0 && !enough)
    out.push_back(fmt::format(
        "The steady state holds only {:.0f} ms of sampled CPU ({} requests): too little to say what share of it the "
        "interpreter, matrix products, the GIL's handoffs or the garbage collector take; replay more requests "
        "(--max-requests) for that advice.",
        w.total_us / 1000.0, s.window_requests));
  if (enough && w.interpreter_us * 2 >= w.total_us)
    out.push_back(fmt::format(
        "{} runs in the Python interpreter: batch requests or vectorize the per-request Python code (the per-line "
        "table shows which lines).",
        cpu_share(w.interpreter_us, w, s)));
  if (enough && w.matmul_us * 10 >= w.total_us * 3)
    out.push_back(fmt::format(
        "{} of the steady-state CPU is in matrix products (BLAS/GEMM frames): the service is compute-bound in the "
        "model; quantization (int8) or a smaller model would cut it.",
        pct(w.matmul_us, w.total_us)));
  if (enough && w.pool_wait_us * 10 >= w.total_us) {
    // Which pools, most first: each has its own knob.
    std::vector<std::pair<int64_t, std::string>> by;
    for (const auto& [lib, us] : w.pool_wait_by_library) by.push_back({us, lib});
    std::sort(by.rbegin(), by.rend());
    std::string which;
    for (const auto& [us, lib] : by) which += (which.empty() ? "" : ", ") + lib + " " + pct(us, w.total_us);
    out.push_back(fmt::format(
        "{} was thread pools' threads spinning while they waited for work ({}), CPU no request asked for and part "
        "of the cores used above: OMP_WAIT_POLICY=passive makes OpenMP's threads (libgomp, libomp, libiomp5) sleep "
        "instead, and fewer pool threads (OMP_NUM_THREADS, torch.set_num_threads, whose count PyTorch's pthreadpool "
        "follows) spin less.",
        cpu_share(w.pool_wait_us, w, s), which));
  }
  if (enough && w.gil_us * 10 >= w.total_us)
    out.push_back(fmt::format(
        "{} {} (PyEval_SaveThread / PyEval_RestoreThread: a thread lets go of it around each blocking call, and "
        "waking the next one or waiting to take it back costs system calls): serve from several single-threaded "
        "worker processes instead of threads, or make fewer blocking calls per request.",
        cpu_share(w.gil_us, w, s), profile::kGilHandoffAdvice));
  if (s.window_requests > 0) {
    const double per = static_cast<double>(s.window_copy_bytes) / static_cast<double>(s.window_requests);
    if (per >= 1048576.0)
      out.push_back(fmt::format(
          "The service copied {} per request in the steady state (memcpy/memmove, sampled): look for conversions "
          "between lists, arrays and tensors, and copies of the input (see copy-bytes in the report).",
          mib(per)));
  }
  if (s.p50_ns > 0 && s.p99_ns >= 3 * s.p50_ns) {
    std::string why;
    if (enough && w.gc_us * 20 >= w.total_us)
      why = fmt::format(" {} of the steady-state CPU is in the Python garbage collector: pauses there are a "
                        "likely cause (gc.freeze() after loading the model, or fewer temporary objects).",
                        pct(w.gc_us, w.total_us));
    else if (w.lock_wait_us > 0)
      why = fmt::format(" Threads waited {:.0f} ms on locks or the GIL in the steady state: contention is a likely "
                        "cause.", w.lock_wait_us / 1000.0);
    else if (p.run.mode != "wall")
      why = " Run again with --mode wall to see where requests wait (locks, GIL, I/O).";
    out.push_back(fmt::format("The latency tail is long: p99 {} is {:.1f}x the median {}.{}", ms(s.p99_ns),
                              static_cast<double>(s.p99_ns) / static_cast<double>(s.p50_ns), ms(s.p50_ns), why));
  }
  if (s.available_millicores > 0 && s.max_utilized_millicores * 10 >= s.available_millicores * 9)
    out.push_back(fmt::format("The service used up to {} of the {} available cores: it is CPU-bound at this load; "
                              "more cores or less CPU per request raise throughput.",
                              cores(s.max_utilized_millicores), cores(s.available_millicores)));
  if (s.requested_millicores > s.available_millicores && s.available_millicores > 0)  // 0: no recommendation
    out.push_back(fmt::format("The recommended {} cores exceed the {} available here: the measured peak may be "
                              "capped by this machine; measure on a larger one before sizing.",
                              cores(s.requested_millicores), cores(s.available_millicores)));
  return out;
}

}  // namespace mlprof::tools
