// Where the writer thread's bytes go: the collector's Unix socket, or an event file (offline mode).
// Only the writer thread (or a hook holding the writer's lock) uses it. A collector that goes away
// or stops reading never blocks the application: the transport gives up, counts what it dropped,
// and the rings then overflow into counted drops. Its descriptor sits at a high number and is
// checked before each use (preload/owned_fd.h): a program that closed it (and perhaps opened
// one of its own files at that number) loses its profile from there, never its file.
#pragma once
#include <cstddef>
#include <cstdint>

#include "preload/owned_fd.h"

namespace mlprof::preload {

class Transport {
 public:
  // Connects to the collector; false (transport dead) when it cannot.
  bool open_socket(const char* path);
  // Creates dir/<pid>-<mono_ns>.mlpw; false when it cannot.
  bool open_file(const char* dir, int pid, int64_t mono_ns);
  // Sends all n bytes or none are counted as sent; after a failure the transport is dead.
  bool send(const uint8_t* data, size_t n);
  // A command byte from the collector if one is waiting, else -1; never blocks.
  int poll_command();
  void close();
  // In a fork child: forget the parent's connection without shutting it down for the parent.
  void abandon();
  bool alive() const { return fd_ >= 0; }
  bool is_socket() const { return socket_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  const char* failure() const { return failure_; }
  // The descriptor number the program closed or took over (the transport died of it), or -1.
  int lost_descriptor() const { return lost_fd_; }

 private:
  bool adopt(int fd, bool socket);
  // False (and the transport dead, the number forgotten, not closed) when fd_ no longer names the
  // file it opened.
  bool still_ours();

  int fd_ = -1;
  int lost_fd_ = -1;
  FdId id_;
  bool socket_ = false;
  uint64_t dropped_bytes_ = 0;
  const char* failure_ = nullptr;
};

}  // namespace mlprof::preload
