// Wall-clock mode (MLPROF_MODE=wall): off-CPU time of blocked threads, WITHOUT signalling them.
//
// A signal makes nanosleep/poll/select/epoll_wait return EINTR even with SA_RESTART (signal(7)),
// which would change the program's behaviour, so blocked threads are only looked at: on every
// writer cycle (one wall period, 1/rate, at least 1 ms) the writer reads each live thread's
// /proc/self/task/TID/syscall through a descriptor kept open per thread (one pread):
//   "running"                      the thread is on a CPU or runnable: nothing to do, its CPU
//                                  clock samples on-CPU time;
//   "NR args... SP PC" / "-1 SP PC"  it is blocked (in syscall NR, or off CPU outside one) with
//                                  user stack pointer SP and program counter PC.
// A blocked thread's wait is sent as a STACK flagged wire::kStackOffCpuWait (native frames
// unwound from (PC, SP) with the CFI tables, rbp unknown; Python frames of ITS thread state) and
// SAMPLEs weighing wall periods: the first tick that finds it blocked sends its off-CPU time
// since its counters were read (its previous tick that read /proc, or the start of the wait it
// was last seen in, less what was sent for that one): elapsed - CPU time - run-queue delay, from
// the CPU clock and schedstat read at both (WallThreadState::counters_ns), in whole periods, the
// rest carried (WallThreadState::carry_ns, at most what is held back: below) with the off-CPU
// time of spans that ended with the thread running (waits that ended between ticks: where is not
// known, so they go with the next wait it is found in; signed, since schedstat adds a wait for a
// core only once the thread gets one). Not the tick's periods: a thread found blocked at a tick
// waited the whole period only on average over ticks that fall independently of it, and a writer
// that waits for a core gets one most often just as a thread blocks. Without
// schedstat, and at a thread's first tick, the periods are sent as counted. Later ticks of the same
// wait are held back and sent as described below.
// A blocked thread's stack does not change while it stays blocked. Each tick first reads the
// thread's CPU clock (clock_gettime on its per-thread CPU clock, ~0.3 us): when it has not moved
// since a tick that found the thread blocked, the thread has not run since, so it is still blocked
// at the same place and the previous stack id stands without reading /proc (~2.2 us per
// pread of the syscall file through the cached descriptor; ~6.3 us to open, read and close it
// each time). Only a thread that ran (CPU time moved) is read again, and unwound again if blocked:
// comparing (PC, SP) alone would miss a thread that woke, ran and blocked again at the same PC and
// SP from another caller or another Python line.
// An unmoved CPU clock cannot tell a blocked thread from one that woke and waits for a core (on a
// busy machine, tens of ms after a sleep): so the periods of reused ticks are held back, up to
// kHoldNs (at least two periods), and settled when a tick finds the thread running (or blocked elsewhere) with
// /proc/self/task/TID/schedstat, read when the blocked stack was taken and again now: elapsed
// minus CPU time minus run-queue delay since then was the wait, in whole periods (the rest carried), less
// what was already sent (settle). The same settles a late tick (the writer waited for
// a core) that finds running a thread it last saw blocked: the part of its periods that was still
// that wait goes to the blocked stack. Periods still held at the last cycle, at a collector's
// flush, before stack ids are voided (a module unloaded), or when the thread exits, are sent as
// counted (finish). Without schedstat nothing is held: reused ticks count as they come. Samples
// are stamped where the periods they weigh ended.
//
// Writer thread only (not signal context); the per-thread state lives in ThreadSlot::wall.
#pragma once
#include <cstdint>

#include "preload/python.h"
#include "preload/threads.h"

namespace mlprof::preload {

// Where wait samples go: the writer's stack dedup and SAMPLE encoding.
class WallSink {
 public:
  virtual uint64_t wall_stack(const uint64_t* pcs, uint16_t n, uint8_t flags, const python::RawPyFrame* py,
                              uint8_t npy) = 0;
  virtual void wall_sample(uint32_t tid, uint64_t stack_id, int64_t t_ns, uint32_t weight) = 0;
  // Changes whenever earlier stack ids stop being valid (modules unloaded, new stream).
  virtual uint64_t stack_generation() const = 0;

 protected:
  ~WallSink() = default;
};

// What /proc/self/task/TID/syscall says (exposed for tests).
struct SyscallState {
  bool running = false;
  int64_t nr = -1;  // the syscall number; -1: blocked outside a syscall
  uint64_t sp = 0, pc = 0;
};
// Parses the file's text; false when it is neither "running" nor a syscall line.
bool parse_syscall_line(const char* text, SyscallState* out);

class WallSampler {
 public:
  void set_period(int64_t period_ns) {
    period_ns_ = period_ns;
    hold_periods_ = period_ns > 0 && kHoldNs / period_ns > 2 ? kHoldNs / period_ns : 2;
  }
  int64_t period_ns() const { return period_ns_; }
  // One tick of one live thread at `now` (CLOCK_MONOTONIC): accounts the wall periods since its
  // previous tick as wait when it is blocked (sent, held back, or settled: above).
  void tick(ThreadSlot* s, int64_t now, bool python, WallSink& sink);
  // Sends the periods held back for s's wait as counted: at the last cycle, a collector's flush,
  // before stack ids are voided, and before its slot is released (its thread exited: no
  // schedstat to settle them with).
  void finish(ThreadSlot* s, int64_t now, WallSink& sink);
  // How long reused ticks' periods are held back (at least two periods): a wake-up's run-queue
  // delay up to this long is not counted as wait.
  static constexpr int64_t kHoldNs = 100000000;

  uint64_t wait_samples = 0;  // wait samples sent
  uint64_t unwinds = 0;       // blocked stacks unwound (the rest reused the previous tick's)
  uint64_t reads = 0;         // /proc reads

 private:
  void send(ThreadSlot* s, uint64_t id, int64_t t, int64_t periods, WallSink& sink);
  void hold(ThreadSlot* s, uint64_t id, int64_t now, int64_t periods, WallSink& sink);
  void settle(ThreadSlot* s, uint64_t id, int64_t now, bool known, int64_t off, int64_t extra, int64_t reserved_ns,
              WallSink& sink);
  // Off-CPU time carried to the next wait, at least 0 and at most hold_periods_ periods.
  void set_carry(WallThreadState& w, int64_t ns) const;

  int64_t period_ns_ = 10000000;
  int64_t hold_periods_ = 10;
};

}  // namespace mlprof::preload
