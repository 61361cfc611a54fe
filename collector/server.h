// The collector's listening side: a Unix socket in a private (0700) directory that accepts only
// connections from processes of the same user (SO_PEERCRED), one connection per process image.
// Single-threaded: poll_once() accepts, reads and decodes whatever is ready.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "collector/stream_decoder.h"
#include "profile/result.h"

namespace mlprof::collector {

class Server {
 public:
  ~Server();
  // Creates $TMPDIR/mlprof-XXXXXX (0700) and the socket inside it.
  Status listen();
  const std::string& socket_path() const { return socket_path_; }
  // Waits up to timeout_ms for activity, also on extra_fd when >= 0 (e.g. a signal self-pipe).
  // Returns true when extra_fd became readable.
  bool poll_once(int timeout_ms, int extra_fd = -1);
  // Commands to every open stream (wire::Command).
  void broadcast(uint8_t command);
  size_t open_connections() const;
  size_t streams() const { return conns_.size() + done_.size(); }
  uint64_t samples() const;
  uint64_t dropped() const;       // samples lost in the preloads (ring full), as last reported
  uint64_t flushed_replies() const;
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Closes everything and hands over every stream decoded so far (open ones marked truncated).
  std::vector<ProcessStream> take_streams();
  void shutdown();  // removes the socket and its directory
  // Every stream's memory tracker also sums allocations inside `w` (MemoryTracker::set_window);
  // call before the first connection. w outlives the server.
  void set_memory_window(const MemWindow* w) { window_ = w; }

 private:
  struct Conn {
    int fd = -1;
    StreamDecoder decoder;
  };
  void accept_new();
  bool read_conn(Conn& c);  // false once the connection is finished

  int listen_fd_ = -1;
  std::string dir_, socket_path_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> done_;
  std::vector<std::string> warnings_;
  const MemWindow* window_ = nullptr;
};

}  // namespace mlprof::collector
