// Options of the serving workflow (mlprof-run --requests FILE --url URL ..., docs/serving.md) and
// the request file they name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlprof::tools {

struct ServingOptions {
  std::string requests;      // --requests: one POST body per line ("" = no serving workflow)
  std::string url;           // --url: where to POST (http:// or https://)
  std::string ready_url;     // --ready-url: where readiness is polled (GET); "" = url
  uint32_t concurrency = 1;  // --concurrency: closed loop, requests in flight
  double rps = 0;            // --rps: open loop, arrivals per second (0 = closed loop)
  uint64_t max_requests = 0; // --max-requests: cycle through the file until this many (0 = the file once)
  uint64_t warmup = 0;       // --warmup: first K requests kept out of the steady window
  std::string content_type = "application/json";
  double timeout_s = 30;       // --timeout: per request
  double ready_timeout_s = 60; // --ready-timeout: for the URL to answer at all
  bool no_profile = false;     // --no-profile: run the service without the preload (load baseline)
  bool enabled() const { return !requests.empty(); }
  const std::string& readiness_url() const { return ready_url.empty() ? url : ready_url; }
};

// Whether --url is one the load loop can use: parsed by libcurl's URL API, scheme http or https
// (any case), a host, a numeric port if one is given. False with *why set (what is wrong).
bool check_service_url(const std::string& url, std::string* why);

// The request bodies: every non-empty line of the file (a trailing "\r" removed), in order.
// False with *why set (a sentence naming the file) when it cannot be read or has no body.
bool read_request_bodies(const std::string& path, std::vector<std::string>* out, std::string* why);

}  // namespace mlprof::tools
