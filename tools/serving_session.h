// The serving workflow inside mlprof-run (docs/serving.md): a load thread (wait until the URL
// answers, then replay the request file) and a resource thread (poll the service's process tree
// at 10 Hz) run beside the collector's loop on the main thread. The main loop asks
// load_finished() to know when to stop the service, tells service_exited() when the command ends,
// and after the profile is built, finish() fills Profile::serving and says how mlprof-run exits.
#pragma once
#include "common/clock.h"
#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collector/memory_tracker.h"
#include "profile/model.h"
#include "tools/serving_load.h"
#include "tools/serving_options.h"

namespace mlprof::tools {

// mlprof-run's exit status in serving mode.
inline constexpr int kExitServingOk = 0;          // the replay ran (or hit --duration) and the service was stopped
inline constexpr int kExitServingNotReady = 3;    // the URL never answered within --ready-timeout
inline constexpr int kExitServingExited = 4;      // the service exited before the replay ended
inline constexpr int kExitServingInterrupted = 130;

class ServingSession {
 public:
  ServingSession(ServingOptions o, double duration_s, std::vector<std::string> bodies, char** env);
  ~ServingSession();
  collector::MemWindow* window() { return &window_; }
  // ancestor: whose descendants are the service (mlprof-run); service: the command's pid.
  void start(pid_t ancestor, pid_t service);
  bool load_finished() const { return done_.load(); }
  void service_exited(int exit_code);  // 128+N for signal N
  void interrupt() {
    int64_t none = 0;
    interrupted_ns_.compare_exchange_strong(none, clock_ns());
    interrupted_ = true, stop_ = true;
  }
  void join();
  // Fills prof.serving (latency fields, resources, recommendation, window tables, advice); prints
  // a clear error to stderr when the replay did not complete. Returns mlprof-run's exit status.
  int finish(profile::Profile& prof);

 private:
  void load_main();
  void poll_main(pid_t ancestor);

  ServingOptions o_;
  double duration_s_;
  std::vector<std::string> bodies_;
  std::map<std::string, std::string> thread_env_;  // guarded by points_mu_ (mlprof-run's until a service process's is read)
  collector::MemWindow window_;
  std::atomic<bool> stop_{false}, stop_poll_{false}, done_{false}, interrupted_{false};
  std::atomic<bool> poll_now_{false};  // the load thread asks for a resource point (at ready)
  std::atomic<bool> ready_seen_{false};  // the service answered: the poller counts busy CPU from here
  std::atomic<bool> exited_{false};
  std::atomic<int> exit_code_{0};
  std::atomic<int64_t> exited_ns_{0};
  std::atomic<int64_t> interrupted_ns_{0};  // the first interrupt()
  std::thread load_thread_, poll_thread_;
  pid_t service_pid_ = 0;
  ReadyResult ready_;
  LoadResult load_;
  std::mutex points_mu_;
  std::vector<profile::ServingResourcePoint> points_;
  int64_t peak_hwm_bytes_ = 0;  // guarded by points_mu_: TreePoller::peak_hwm_bytes
};

}  // namespace mlprof::tools
