#include "preload/transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mlprof::preload {
namespace {
constexpr int kSendTimeoutMs = 2000;  // a collector stuck this long is treated as gone

int64_t mono_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
}  // namespace

bool Transport::open_socket(const char* path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    failure_ = "cannot create a socket";
    return false;
  }
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  int rc;
  do rc = connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    ::close(fd);
    failure_ = "cannot connect to the collector (is mlprof-run still running?)";
    return false;
  }
  // Non-blocking: send() below bounds how long the writer thread waits on a slow collector.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return adopt(fd, true);
}

bool Transport::adopt(int fd, bool socket) {
  fd = own_fd(fd, &id_);
  if (fd < 0) {
    failure_ = "cannot use its own descriptor";
    return false;
  }
  fd_ = fd;
  socket_ = socket;
  lost_fd_ = -1;
  return true;
}

bool Transport::still_ours() {
  if (fd_ < 0) return false;
  if (fd_still(fd_, id_)) return true;
  failure_ = "the program closed mlprof's descriptor for its event stream";
  lost_fd_ = fd_;
  fd_ = -1;  // forgotten, not closed: the number may name the program's file now
  return false;
}

bool Transport::open_file(const char* dir, int pid, int64_t mono_ns) {
  char path[640];
  snprintf(path, sizeof path, "%s/%d-%lld.mlpw", dir, pid, static_cast<long long>(mono_ns));
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    failure_ = "cannot create the event file in MLPROF_OUTPUT_DIR";
    return false;
  }
  return adopt(fd, false);
}

bool Transport::send(const uint8_t* data, size_t n) {
  if (!still_ours()) {
    dropped_bytes_ += n;
    return false;
  }
  size_t done = 0;
  int64_t deadline = mono_ms() + kSendTimeoutMs;
  while (done < n) {
    ssize_t w = socket_ ? ::send(fd_, data + done, n - done, MSG_NOSIGNAL) : ::write(fd_, data + done, n - done);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int left = static_cast<int>(deadline - mono_ms());
      if (left > 0) {
        struct pollfd p = {fd_, POLLOUT, 0};
        poll(&p, 1, left);
        // The program may have closed the number while we waited (a close does not wake a poll in
        // another thread): the rest of the record is dropped, never sent to its file.
        if (!still_ours()) {
          dropped_bytes_ += n - done;
          return false;
        }
        continue;
      }
      failure_ = "the collector stopped reading for 2 s";
    } else {
      failure_ = socket_ ? "the collector went away" : "writing the event file failed (disk full?)";
    }
    // A partly sent record would corrupt the stream: end it here; the collector keeps what came.
    dropped_bytes_ += n - done;
    close();
    return false;
  }
  return true;
}

int Transport::poll_command() {
  if (fd_ < 0 || !socket_ || !still_ours()) return -1;
  uint8_t b;
  ssize_t r = recv(fd_, &b, 1, MSG_DONTWAIT);
  if (r == 1) return b;
  if (r == 0) {  // collector closed its end
    failure_ = "the collector went away";
    close();
  }
  return -1;
}

void Transport::close() {
  if (fd_ >= 0) fd_close_if(fd_, id_);
  fd_ = -1;
}

void Transport::abandon() {
  // The descriptor is shared with the parent: closing our copy leaves the parent's stream intact.
  if (fd_ >= 0) fd_close_if(fd_, id_);
  fd_ = -1;
  lost_fd_ = -1;
  dropped_bytes_ = 0;
  failure_ = nullptr;
}

}  // namespace mlprof::preload
