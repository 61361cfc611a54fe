// The descriptors the preload keeps open inside the program: the collector's socket (or the event
// file), /proc/self/statm and /proc/self/status, wall mode's /proc task files and the per-thread
// perf events.
//
// The descriptor table is the program's. It may close ours (closerange(3, ~0), a daemon's
// close-every-descriptor loop), after which its next open() can get the number back; or it may
// dup2() over it (a shell's `exec 3>file`). A preload that went on using the number would then
// write its event stream into the program's file or socket, read the program's data, or close the
// program's file under it. So each descriptor is moved to a high number, where programs do not
// reach by chance, and is checked to still be the file the preload opened before it is written,
// read from a stream or closed: a number that names another file now is forgotten, never used and
// never closed.
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace mlprof::preload {

// What an open file is: its device and inode (fstat). Perf events share one anonymous inode, so
// for them the event's id is compared too (perf_event_id).
struct FdId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t perf_id = 0;  // 0: not a perf event
};

// Moves fd to the lowest free number at or above the high floor (half the soft RLIMIT_NOFILE, at
// most 512, at least 10), close-on-exec, and closes the old number; returns the new number, or fd
// itself when the move fails (out of descriptors). Async-signal-safe.
int fd_move_high(int fd);

// Takes fd over: moved high, its identity in *id; -1 (fd closed) when fstat fails, as for fd -1.
int own_fd(int fd, FdId* id);
// open(path, flags | O_CLOEXEC), owned (own_fd); -1 when it cannot be opened.
int open_owned(const char* path, int flags, FdId* id);

// The identity of an open descriptor; false when fd is not open.
bool fd_identity(int fd, FdId* out);
// The same, for a perf event (its id from PERF_EVENT_IOC_ID as well).
bool perf_fd_identity(int fd, FdId* out);

// Whether fd still names the file `id` was taken from.
bool fd_still(int fd, const FdId& id);

// Closes fd if it still names id's file; returns whether it did.
bool fd_close_if(int fd, const FdId& id);

}  // namespace mlprof::preload
