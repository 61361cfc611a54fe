#include "preload/owned_fd.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace mlprof::preload {
namespace {

constexpr int kMaxFloor = 512;
constexpr int kMinFloor = 10;  // above the numbers shells and programs pick by hand (0-9)

std::atomic<int> g_floor{0};

int high_floor() {
  int f = g_floor.load(std::memory_order_relaxed);
  if (f > 0) return f;
  struct rlimit rl;
  f = kMaxFloor;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < kMaxFloor)
    f = static_cast<int>(rl.rlim_cur / 2);
  if (f < kMinFloor) f = kMinFloor;
  g_floor.store(f, std::memory_order_relaxed);
  return f;
}

}  // namespace

int fd_move_high(int fd) {
  if (fd < 0) return fd;
  const int saved = errno;
  int floor = high_floor();
  if (fd >= floor) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (moved < 0) moved = fcntl(fd, F_DUPFD_CLOEXEC, kMinFloor);  // a low limit, or the high numbers taken
  if (moved < 0) {
    errno = saved;
    return fd;
  }
  close(fd);
  errno = saved;
  return moved;
}

int own_fd(int fd, FdId* id) {
  if (fd < 0) return -1;
  fd = fd_move_high(fd);
  if (!fd_identity(fd, id)) {
    close(fd);
    return -1;
  }
  return fd;
}

int open_owned(const char* path, int flags, FdId* id) { return own_fd(open(path, flags | O_CLOEXEC), id); }

bool fd_identity(int fd, FdId* out) {
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) return false;
  out->dev = static_cast<uint64_t>(sb.st_dev);
  out->ino = static_cast<uint64_t>(sb.st_ino);
  out->perf_id = 0;
  return true;
}

bool perf_fd_identity(int fd, FdId* out) {
  uint64_t id = 0;
  if (!fd_identity(fd, out) || ioctl(fd, PERF_EVENT_IOC_ID, &id) != 0 || id == 0) return false;
  out->perf_id = id;
  return true;
}

bool fd_still(int fd, const FdId& id) {
  const int saved = errno;
  FdId now;
  bool same = fd_identity(fd, &now) && now.dev == id.dev && now.ino == id.ino;
  if (same && id.perf_id != 0) {
    uint64_t pid = 0;
    same = ioctl(fd, PERF_EVENT_IOC_ID, &pid) == 0 && pid == id.perf_id;
  }
  errno = saved;
  return same;
}

bool fd_close_if(int fd, const FdId& id) {
  if (!fd_still(fd, id)) return false;
  const int saved = errno;
  close(fd);
  errno = saved;
  return true;
}

}  // namespace mlprof::preload
