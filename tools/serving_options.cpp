#include "tools/serving_options.h"

#include <curl/curl.h>
#include <strings.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace mlprof::tools {

bool check_service_url(const std::string& url, std::string* why) {
  CURLU* u = curl_url();
  if (!u) {
    *why = "libcurl could not parse it (out of memory)";
    return false;
  }
  bool ok = false;
  char* scheme = nullptr;
  char* host = nullptr;
  char* port = nullptr;
  const size_t authority = url.find("://");
  if (authority == std::string::npos) {
    *why = "it has no scheme (write http://" + url + ")";
  } else if (authority + 3 >= url.size() || strchr("/?#", url[authority + 3])) {
    // libcurl reads http:///score as the host "score" (and the run waited for --ready-timeout).
    *why = "it names no host (write http://127.0.0.1:PORT" + url.substr(std::min(url.size(), authority + 3)) + ")";
  } else if (CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK) {
    *why = curl_url_strerror(rc);  // "Port number was not a decimal number between 0 and 65535", ...
  } else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK || !scheme ||
             (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)) {
    *why = "it is not an http:// or https:// URL";
  } else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !*host) {
    *why = "it names no host";
  } else if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && port && strcmp(port, "0") == 0) {
    *why = "port 0 is not a port a service can listen on";
  } else {
    ok = true;
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return ok;
}

bool read_request_bodies(const std::string& path, std::vector<std::string>* out, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "cannot read the request file " + path + ": " + strerror(errno);
    return false;
  }
  std::string line;
  for (bool first = true; std::getline(f, line); first = false) {
    // A UTF-8 byte order mark (editors on Windows write one) is no part of the first body.
    if (first && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out->push_back(std::move(line));
  }
  if (f.bad()) {
    *why = "cannot read the request file " + path + ": read error";
    return false;
  }
  if (out->empty()) {
    *why = "the request file " + path + " has no request: give one POST body per line";
    return false;
  }
  return true;
}

}  // namespace mlprof::tools
