#include "tools/serving_load.h"

#include <curl/curl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <deque>
#include <memory>

#include "collector/memory_tracker.h"
#include "common/clock.h"

namespace mlprof::tools {

namespace {


size_t discard(char*, size_t size, size_t n, void*) { return size * n; }

// Settings every handle shares: no proxy (the service is local: an http_proxy in the environment
// must not reroute it), no signals (threads), responses discarded.
void common_setup(CURL* h, const std::string& url, double timeout_s, char* errbuf) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROXY, "");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(1.0, timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
}

struct Slot {
  CURL* easy = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};
  size_t request = 0;  // index into result.requests
  bool busy = false;
};

}  // namespace

bool child_exited(pid_t pid) {
  if (pid <= 0) return false;
  siginfo_t si{};
  if (waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  return si.si_pid == pid;
}

ReadyResult wait_ready(const std::string& url, double timeout_s, const std::atomic<bool>& stop, pid_t service_pid) {
  ReadyResult r;
  CURL* h = curl_easy_init();
  if (!h) {
    r.last_error = "libcurl could not create a handle";
    return r;
  }
  char errbuf[CURL_ERROR_SIZE] = {};
  common_setup(h, url, 1.0, errbuf);
  curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  const int64_t deadline = clock_ns() + static_cast<int64_t>(timeout_s * 1e9);
  for (;;) {
    if (stop.load() || child_exited(service_pid)) {
      r.stopped = true;
      break;
    }
    errbuf[0] = 0;
    const int64_t t0 = clock_ns();
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    // 503 Service Unavailable is a server saying it is not ready yet (a model still loading
    // behind a listening socket); any other answer means it is.
    if (rc == CURLE_OK && code > 0 && code != 503) {
      r.ready = true;
      r.ready_ns = clock_ns();
      break;
    }
    r.last_error = rc == CURLE_OK ? "HTTP 503 Service Unavailable" : errbuf[0] ? errbuf : curl_easy_strerror(rc);
    const int64_t t = clock_ns();
    if (t >= deadline) break;
    const int64_t wait = std::min<int64_t>(deadline - t, std::max<int64_t>(0, 100000000 - (t - t0)));
    struct timespec ts = {static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
    nanosleep(&ts, nullptr);
  }
  curl_easy_cleanup(h);
  return r;
}

LoadResult run_load(const LoadConfig& c, const std::atomic<bool>& stop, collector::MemWindow* window) {
  LoadResult res;
  const auto& bodies = *c.bodies;
  const uint64_t total = c.max_requests ? c.max_requests : bodies.size();
  const uint64_t warmup = std::min(c.warmup, total);
  const bool open_loop = c.rps > 0;
  // Open loop: as many in flight as the schedule needs, bounded (a service that stops answering
  // must not make us open thousands of connections); starts beyond that are late.
  const uint32_t slots_n = open_loop ? 1024 : std::max<uint32_t>(1, c.concurrency);
  res.requests.reserve(static_cast<size_t>(std::min<uint64_t>(total, 1u << 22)));

  CURLM* multi = curl_multi_init();
  struct curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, ("Content-Type: " + c.content_type).c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip on larger bodies
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<Slot*> free_slots;
  auto get_slot = [&]() -> Slot* {
    if (!free_slots.empty()) {
      Slot* s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    if (slots.size() >= slots_n) return nullptr;
    auto s = std::make_unique<Slot>();
    s->easy = curl_easy_init();
    if (!s->easy) return nullptr;
    common_setup(s->easy, c.url, c.timeout_s, s->errbuf);
    curl_easy_setopt(s->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s.get());
    slots.push_back(std::move(s));
    return slots.back().get();
  };

  uint32_t in_flight = 0;
  uint64_t sent = 0;
  bool service_gone = false;
  auto start_request = [&](Slot* s) {
    const std::string& body = bodies[sent % bodies.size()];
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, body.data());
    s->errbuf[0] = 0;
    s->request = res.requests.size();
    s->busy = true;
    res.requests.push_back({clock_ns(), 0, 0});
    curl_multi_add_handle(multi, s->easy);
    ++sent;
    ++in_flight;
    res.max_in_flight = std::max(res.max_in_flight, in_flight);
  };
  auto finish = [&](Slot* s, CURLcode rc) {
    auto& r = res.requests[s->request];
    const int64_t t = clock_ns();
    long code = 0;
    curl_off_t total_us = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
    // libcurl's own timing of the transfer is closer to the wire than our loop's wake-up.
    if (rc == CURLE_OK && curl_easy_getinfo(s->easy, CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK && total_us > 0)
      r.latency_ns = std::min<int64_t>(static_cast<int64_t>(total_us) * 1000, t - r.start_ns);
    else
      r.latency_ns = t - r.start_ns;
    r.status = rc == CURLE_OK                     ? static_cast<int32_t>(code)
               : rc == CURLE_OPERATION_TIMEDOUT ? profile::ServingRequest::kTimedOut
                                                : 0;
    if (rc != CURLE_OK && res.first_error.empty()) res.first_error = s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc);
    // A failed transfer may mean the service is gone: stop at once rather than burn through the
    // rest of the requests on refused connections.
    // A refused connection or an empty reply is what a dying service gives: its sockets close a
    // moment before it can be waited for, so allow it 100 ms to show as exited.
    if (rc != CURLE_OK && c.service_pid > 0) {
      const bool dying = rc == CURLE_COULDNT_CONNECT || rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR ||
                         rc == CURLE_SEND_ERROR;
      for (int i = 0; !service_gone && i < (dying ? 100 : 1); ++i) {
        if (child_exited(c.service_pid)) service_gone = true;
        else if (dying) usleep(1000);
      }
    }
    curl_multi_remove_handle(multi, s->easy);
    s->busy = false;
    free_slots.push_back(s);
    --in_flight;
  };
  auto drain_done = [&]() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      Slot* s = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &s);
      if (s) finish(s, m->data.result);
    }
  };

  res.start_ns = clock_ns();
  const int64_t limit = c.duration_s > 0 ? res.start_ns + static_cast<int64_t>(c.duration_s * 1e9) : INT64_MAX;
  const int64_t cut_at = limit == INT64_MAX ? INT64_MAX : limit + static_cast<int64_t>(kDurationGraceS * 1e9);
  bool cut = false;
  // Two phases: warmup (the first K requests, all answered before the window opens), then steady.
  for (int phase = warmup ? 0 : 1; phase < 2 && !res.stopped && !cut; ++phase) {
    const uint64_t phase_end = phase == 0 ? warmup : total;
    const uint64_t phase_first = sent;
    const int64_t phase_t0 = clock_ns();
    if (phase == 1) {
      res.window_start_ns = phase_t0;
      if (window) window->start_ns.store(phase_t0, std::memory_order_release);
    }
    for (;;) {
      if (stop.load() || service_gone) {
        res.stopped = true;
        break;
      }
      int64_t t = clock_ns();
      if (sent < phase_end && t >= limit) res.time_limit = true;
      if (t >= cut_at && in_flight > 0) {  // --duration is over, and its grace: cut them off
        cut = true;
        break;
      }
      const bool more = sent < phase_end && !res.time_limit;
      int64_t wait_ms = 100;
      if (more && !open_loop) {
        while (sent < phase_end) {
          Slot* s = get_slot();
          if (!s) break;
          start_request(s);
        }
      } else if (more) {
        for (;;) {
          if (sent >= phase_end) break;
          const int64_t due = phase_t0 + static_cast<int64_t>(static_cast<double>(sent - phase_first) * 1e9 / c.rps);
          if (due > t) {
            wait_ms = std::min<int64_t>(wait_ms, (due - t) / 1000000);
            break;
          }
          Slot* s = get_slot();
          if (!s) break;  // every slot busy: it starts late
          if (t - due > 1000000) ++res.late_starts;
          start_request(s);
          t = clock_ns();
        }
      }
      if (!more && in_flight == 0) break;
      int running = 0;
      curl_multi_perform(multi, &running);
      drain_done();
      if (in_flight > 0 || more) {
        // Closed loop with free slots and more to send: go round at once.
        if (!open_loop && more && !free_slots.empty()) continue;
        curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::max<int64_t>(wait_ms, 0)), nullptr);
        curl_multi_perform(multi, &running);
        drain_done();
      }
    }
  }
  const int64_t end = clock_ns();
  // Abandoned transfers: failed requests, timed until now (stopped: the session decides which the
  // interruption cut off); cut off at --duration's end: in no figure.
  for (auto& s : slots)
    if (s->busy) {
      auto& r = res.requests[s->request];
      r.latency_ns = end - r.start_ns;
      r.status = cut && !res.stopped ? profile::ServingRequest::kAborted : 0;
      res.cut_at_limit += r.status == profile::ServingRequest::kAborted;
      curl_multi_remove_handle(multi, s->easy);
      s->busy = false;
    }
  res.end_ns = end;
  if (res.window_start_ns) {
    res.window_end_ns = end;
    if (window) window->end_ns.store(end, std::memory_order_release);
  }
  for (auto& s : slots) curl_easy_cleanup(s->easy);
  curl_slist_free_all(headers);
  curl_multi_cleanup(multi);
  return res;
}

}  // namespace mlprof::tools
