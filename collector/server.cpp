#include "collector/server.h"

#include "collector/proc_stat.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fmt/format.h"

namespace mlprof::collector {

namespace {

// Whether process `pid` still runs and is not exiting: /proc/PID/stat's state is not a zombie's
// and its flags lack PF_EXITING (set as do_exit starts, before the process's descriptors close,
// so a killed or crashing process whose connection just closed reads as exiting).
bool process_running(uint32_t pid) {
  ProcStat st;
  if (!read_proc_stat("/proc/" + std::to_string(pid) + "/stat", &st)) return false;
  constexpr uint64_t kPfExiting = 0x4;
  return st.state != 'Z' && st.state != 'X' && st.state != 'x' && (st.flags & kPfExiting) == 0;
}

}  // namespace

Server::~Server() { shutdown(); }

Status Server::listen() {
  const char* tmp = getenv("TMPDIR");
  std::string base = (tmp && *tmp) ? tmp : "/tmp";
  std::string templ = base + "/mlprof-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))  // mkdtemp creates the directory with mode 0700
    return {fmt::format("cannot create a private directory in {}: {} (set TMPDIR to a writable directory)", base,
                        strerror(errno))};
  dir_ = buf.data();
  socket_path_ = dir_ + "/collector.sock";
  struct sockaddr_un addr;
  if (socket_path_.size() >= sizeof addr.sun_path)
    return {fmt::format("socket path {} is too long for a Unix socket; set TMPDIR to a shorter directory", socket_path_)};
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return {fmt::format("cannot create a socket: {}", strerror(errno))};
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 128) != 0)
    return {fmt::format("cannot listen on {}: {}", socket_path_, strerror(errno))};
  chmod(socket_path_.c_str(), 0600);
  return {};
}

void Server::accept_new() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid()) {
      warnings_.push_back(fmt::format("refused a connection from uid {} (only uid {} may send events)",
                                      static_cast<long>(cred.uid), static_cast<long>(getuid())));
      close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->decoder.stream().memory.set_window(window_);
    conns_.push_back(std::move(c));
  }
}

bool Server::read_conn(Conn& c) {
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      if (!c.decoder.feed(buf, static_cast<size_t>(n))) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or error
  }
}

bool Server::poll_once(int timeout_ms, int extra_fd) {
  std::vector<pollfd> fds;
  fds.push_back({listen_fd_, POLLIN, 0});
  for (auto& c : conns_) fds.push_back({c->fd, POLLIN, 0});
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  int rc = poll(fds.data(), fds.size(), timeout_ms);
  if (rc <= 0) return false;
  bool extra = extra_fd >= 0 && (fds.back().revents & POLLIN);
  if (fds[0].revents & POLLIN) accept_new();
  // Connections accepted above are read on the next call (their fds were not polled yet).
  size_t polled = fds.size() - 1 - (extra_fd >= 0 ? 1 : 0);
  for (size_t i = 0; i < polled && i < conns_.size();) {
    short ev = fds[i + 1].revents;
    if (ev && !read_conn(*conns_[i])) {
      close(conns_[i]->fd);
      ProcessStream& st = conns_[i]->decoder.stream();
      // A stream the decoder rejected ended here, not by the process's doing.
      if (st.started && !st.ended && st.error.empty() && conns_[i]->decoder.error().empty())
        st.closed_while_running = process_running(st.pid);
      conns_[i]->decoder.finish();
      done_.push_back(std::move(conns_[i]));
      conns_.erase(conns_.begin() + static_cast<ptrdiff_t>(i));
      fds.erase(fds.begin() + static_cast<ptrdiff_t>(i) + 1);
      polled--;
      continue;
    }
    ++i;
  }
  return extra;
}

void Server::broadcast(uint8_t command) {
  for (auto& c : conns_) {
    ssize_t w = send(c->fd, &command, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
}

size_t Server::open_connections() const { return conns_.size(); }

uint64_t Server::samples() const {
  uint64_t n = 0;
  for (auto& c : conns_) n += c->decoder.samples();
  for (auto& c : done_) n += c->decoder.samples();
  return n;
}

uint64_t Server::dropped() const {
  uint64_t n = 0;
  auto add = [&](const StreamDecoder& d) {
    auto& ctr = d.stream().counters;
    for (auto k : {wire::Counter::kDroppedRingFull, wire::Counter::kDroppedNoThread}) {
      auto it = ctr.find(k);
      if (it != ctr.end()) n += it->second;
    }
  };
  for (auto& c : conns_) add(c->decoder);
  for (auto& c : done_) add(c->decoder);
  return n;
}

uint64_t Server::flushed_replies() const {
  uint64_t n = 0;
  for (auto& c : conns_) n += c->decoder.flushed_replies();
  return n;
}

std::vector<ProcessStream> Server::take_streams() {
  for (auto& c : conns_) {
    read_conn(*c);
    close(c->fd);
    c->decoder.finish();
    done_.push_back(std::move(c));
  }
  conns_.clear();
  std::vector<ProcessStream> out;
  for (auto& c : done_) {
    if (c->decoder.stream().started) out.push_back(std::move(c->decoder.stream()));
  }
  done_.clear();
  return out;
}

void Server::shutdown() {
  for (auto& c : conns_) close(c->fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
  if (!dir_.empty()) rmdir(dir_.c_str());
  socket_path_.clear();
  dir_.clear();
}

}  // namespace mlprof::collector
