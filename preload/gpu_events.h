// GPU profiling: the events the CUPTI callbacks (gpu_cupti.cpp) hand to the writer thread
// (gpu_writer.cpp), through one shared ring. In-memory only, never on the wire.
//
// One ring for the whole process (mem::FallbackRing: a spinlocked SPSC ring), because CUDA work
// is launched by few threads and CUPTI delivers activity buffers on its own threads. Producers
// never wait: when the ring is full the event is dropped and counted (wire::Counter::kGpuDropped)
// -- a buffer-completed callback may run on the writer thread itself (inside a flush), so waiting
// for the writer could deadlock.
// Not signal context.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/python.h"
#include "preload/sampler.h"

namespace mlprof::preload::gpu {

enum class EventType : uint8_t { kLaunch = 1, kAlias = 2, kActivity = 3, kConfig = 4 };

// Header of every event.
struct RawGpuEvent {
  int64_t t_ns;      // launch: CLOCK_MONOTONIC of the ENTER callback
  uint64_t a;        // launch: correlation id; alias: inner id; config: clock offset (as int64)
  uint64_t b;        // alias: outer id; config: cupti version
  uint32_t tid;      // launch
  uint32_t cbid;     // launch: CUPTI callback id, bit 31 set for the driver domain; config: GpuClock
  uint8_t type;      // EventType
  uint8_t api;       // launch: wire::GpuApi
  uint8_t flags;     // launch: wire::StackFlags
  uint8_t npy;       // launch: Python frames
  uint16_t nframes;  // launch: native frames
  uint16_t name_len; // activity: bytes of the kernel name after the RawGpuActivity
  // launch: nframes uint64_t pcs (leaf first), then npy python::RawPyFrame
  // activity: one RawGpuActivity, then name_len bytes
};
static_assert(sizeof(RawGpuEvent) == 40);

struct RawGpuActivity {
  uint64_t correlation;
  uint64_t start, end;   // CUPTI timestamps
  uint64_t bytes;
  uint64_t address;
  uint32_t device, stream;
  uint32_t grid[3], block[3];
  uint8_t kind;          // wire::GpuActivityKind
  uint8_t copy_kind;     // wire::GpuCopyKind
  uint16_t reserved;
  // The kernel name's reference (gpu_cupti.cpp, interned names), 0: none. An event whose name_len
  // is not 0 carries the name (and tells the writer what name_ref stands for); later events of the
  // same kernel carry name_ref alone.
  uint32_t name_ref;
};
static_assert(sizeof(RawGpuActivity) == 80);

inline constexpr uint32_t kMaxNameLen = 4096;  // longer kernel names are cut
inline constexpr uint32_t kMaxLaunchEvent =
    sizeof(RawGpuEvent) + kMaxFrames * sizeof(uint64_t) + kMaxPyFrames * sizeof(python::RawPyFrame);
inline constexpr uint32_t kRingBytes = 8u << 20;

}  // namespace mlprof::preload::gpu
