// GPU profiling: attaching CUPTI, the API ENTER callback and the activity buffers. See preload/gpu.h
// and docs/gpu.md. Every CUPTI entry point is resolved with dlsym from the handle gpu_loader.cpp
// opened: nothing links against CUDA. Built without the CUPTI headers, only the three functions at
// the end exist and attaching says so.
//
// Not signal context. The callback runs on application threads inside CUDA API calls: it takes
// the memory hooks' guard, never blocks (a full ring drops the event and counts it), and keeps
// errno. The buffer callbacks run on CUPTI's threads or inside a flush (possibly on the writer
// thread): they never wait for the writer either.
#include "common/clock.h"
#include "preload/gpu.h"

#if MLPROF_HAVE_CUPTI
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "common/wire_format.h"
#include "preload/config.h"
#include "preload/gpu_events.h"
#include "preload/mem_thread.h"
#include "preload/threads.h"
#include "preload/unwinder.h"
#endif

namespace mlprof::preload::gpu {

#if !MLPROF_HAVE_CUPTI

bool cupti_compiled() { return false; }
bool attach_cupti(void*) { return false; }
void flush_cupti(bool, void (*)(void*), void*) {}

#else

bool cupti_compiled() { return true; }

namespace {

struct Api {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiGetTimestamp) get_timestamp = nullptr;
  decltype(&cuptiGetVersion) get_version = nullptr;
  // optional
  decltype(&cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) timestamp_callback = nullptr;
  decltype(&cuptiActivityFlushPeriod) flush_period = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityDisable) activity_disable = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
};
Api g_api;
CUpti_SubscriberHandle g_subscriber = nullptr;
void* g_handle = nullptr;  // the libcupti attached from
bool g_own_clock = false;  // our timestamp callback is registered

// Attaching and yielding CUPTI to the program (see cuptiSubscribe below) exclude each other.
pthread_mutex_t g_owner_mu = PTHREAD_MUTEX_INITIALIZER;

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_MEMORY2,
                                     CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_OVERHEAD};

// Which API calls are recorded: g_class[domain][cbid] = wire::GpuApi + 1 (0 = not subscribed).
constexpr uint32_t kMaxCbid = 2048;
uint8_t g_class[2][kMaxCbid];

// Frames of these modules are cut from the leaf end of launch stacks: the preload, libcupti,
// libcuda (the stack then starts in the CUDA runtime's API function or the program's call).
struct Range {
  uint64_t lo, hi;
};
Range g_cut[3];

struct ThreadGpu {
  uint32_t depth;  // nesting of subscribed API calls on this thread
  uint32_t tid;
  uint64_t outer;  // correlation id of the outermost call in progress
};
__thread ThreadGpu t_gpu __attribute__((tls_model("initial-exec")));

uint64_t CUPTIAPI monotonic_timestamp() { return static_cast<uint64_t>(clock_ns()); }
// CUPTI's own default on Linux (cupti_activity.h): what the program's profiler gets back when
// mlprof yields (a registered callback cannot be removed, only replaced).
uint64_t CUPTIAPI realtime_timestamp() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint8_t classify(const char* name) {
  auto starts = [name](const char* p) { return strncmp(name, p, strlen(p)) == 0; };
  using A = wire::GpuApi;
  A a;
  if (starts("cudaLaunchHostFunc") || starts("cuLaunchHostFunc")) return 0;
  if (starts("cudaGraphLaunch") || starts("cuGraphLaunch"))
    a = A::kGraph;
  else if (starts("cudaLaunch") || starts("cuLaunch"))
    a = A::kKernel;
  else if (starts("cudaMemcpy") || starts("cuMemcpy"))
    a = A::kMemcpy;
  else if (starts("cudaMemset") || starts("cuMemset"))
    a = A::kMemset;
  else if (starts("cudaMalloc") || starts("cuMemAlloc"))
    a = A::kAlloc;
  else if (starts("cudaFree") || starts("cuMemFree"))
    a = A::kFree;
  else if (starts("cudaDeviceSynchronize") || starts("cudaStreamSynchronize") || starts("cudaEventSynchronize") ||
           starts("cuCtxSynchronize") || starts("cuStreamSynchronize") || starts("cuEventSynchronize"))
    a = A::kSync;
  else
    return 0;
  return static_cast<uint8_t>(static_cast<uint8_t>(a) + 1);
}

uint32_t current_tid() {
  if (!t_gpu.tid) t_gpu.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_gpu.tid;
}

bool cut(uint64_t pc) {
  for (const Range& r : g_cut)
    if (pc >= r.lo && pc < r.hi) return true;
  return false;
}

// The calling thread's stack without the frames of the preload, libcupti and libcuda, then its
// Python frames; as mem_profiler.cpp's capture_stack.
// The Python frames are read directly when the thread holds the GIL (python::WalkContext::kOwnCall):
// a CUDA call is made from C code the interpreter called, with the thread's frames consistent.
void capture_stack(RawGpuEvent* ev) {
  auto* pcs = reinterpret_cast<uint64_t*>(ev + 1);
  uint8_t flags = 0;
  const GpuStacks what = g_gpu.cfg ? g_gpu.cfg->gpu_stacks : GpuStacks::kFull;
  if (what == GpuStacks::kNone) {  // MLPROF_GPU_STACKS=none (a benchmark knob)
    ev->flags = wire::kStackLeafOnly;
    return;
  }
  ThreadSlot* slot = t_slot;
  const int n = unwind_here_after(slot ? &slot->bounds : nullptr, pcs, kMaxFrames, cut, &flags);
  // pcs[0] is now a return address: inside the call instruction, the lookup lands on the calling
  // line (frame 0 is looked up as is).
  if (n) pcs[0] -= 1;
  const int npy = what != GpuStacks::kFull ? 0
                                          : python_frames(reinterpret_cast<python::RawPyFrame*>(pcs + n), &flags, nullptr,
                                                          python::WalkContext::kOwnCall, slot ? &slot->bounds : nullptr);
  ev->nframes = static_cast<uint16_t>(n);
  ev->npy = static_cast<uint8_t>(npy);
  ev->flags = flags;
}

// Reserves ring space (the shared ring's lock is held until commit/abandon); nullptr when full.
uint8_t* reserve(uint32_t len) {
  g_gpu.ring.lock();
  uint8_t* p = g_gpu.ring.ring().reserve(len);
  if (!p) {
    g_gpu.ring.unlock();
    g_gpu.dropped.fetch_add(1, std::memory_order_relaxed);
  }
  return p;
}
void commit(uint32_t len) {
  g_gpu.ring.ring().commit(len);
  g_gpu.ring.unlock();
}

void emit_alias(uint64_t inner, uint64_t outer) {
  auto* ev = reinterpret_cast<RawGpuEvent*>(reserve(sizeof(RawGpuEvent)));
  if (!ev) return;
  memset(ev, 0, sizeof *ev);
  ev->type = static_cast<uint8_t>(EventType::kAlias);
  ev->a = inner;
  ev->b = outer;
  commit(sizeof *ev);
}

void emit_launch(uint64_t correlation, uint32_t cbid, uint8_t api) {
  const int64_t t = clock_ns();
  // The stack is captured into a local buffer first: the ring's lock is not held while unwinding.
  alignas(8) static __thread uint8_t buf[kMaxLaunchEvent] __attribute__((tls_model("initial-exec")));
  auto* ev = reinterpret_cast<RawGpuEvent*>(buf);
  memset(ev, 0, sizeof *ev);
  capture_stack(ev);
  ev->type = static_cast<uint8_t>(EventType::kLaunch);
  ev->t_ns = t;
  ev->a = correlation;
  ev->cbid = cbid;
  ev->api = api;
  ev->tid = current_tid();
  const uint32_t len = static_cast<uint32_t>(sizeof(RawGpuEvent) + ev->nframes * sizeof(uint64_t) +
                                             ev->npy * sizeof(python::RawPyFrame));
  uint8_t* p = reserve(len);
  if (!p) return;
  memcpy(p, buf, len);
  commit(len);
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const int d = domain == CUPTI_CB_DOMAIN_DRIVER_API ? 1 : 0;
  const uint8_t cls = cbid < kMaxCbid ? g_class[d][cbid] : 0;
  if (!cls || !data) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  ThreadGpu& t = t_gpu;
  if (cb->callbackSite != CUPTI_API_ENTER) {
    if (t.depth) --t.depth;
    return;
  }
  if (t.depth++ > 0) {  // a driver call inside a runtime call: its activity is the outer call's
    if (g_gpu.recording.load(std::memory_order_relaxed)) {
      const int saved = errno;
      mem::Guard guard;
      emit_alias(cb->correlationId, t.outer);
      errno = saved;
    }
    return;
  }
  t.outer = cb->correlationId;
  if (!g_gpu.recording.load(std::memory_order_relaxed)) return;
  const int saved = errno;
  mem::Guard guard;
  emit_launch(cb->correlationId, cbid | (d ? 0x80000000u : 0u), static_cast<uint8_t>(cls - 1));
  errno = saved;
}

// ---- activity buffers ------------------------------------------------------------------------

constexpr size_t kBufferBytes = 4u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  mem::Guard guard;
  void* p = nullptr;
  if (posix_memalign(&p, 8, kBufferBytes) != 0) p = nullptr;
  *buffer = static_cast<uint8_t*>(p);
  *size = p ? kBufferBytes : 0;
  *max_records = 0;
}

uint8_t copy_kind(uint8_t k) {
  using C = wire::GpuCopyKind;
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return static_cast<uint8_t>(C::kHtoD);
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return static_cast<uint8_t>(C::kDtoH);
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return static_cast<uint8_t>(C::kDtoD);
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return static_cast<uint8_t>(C::kHtoH);
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return static_cast<uint8_t>(C::kPtoP);
    default: return static_cast<uint8_t>(C::kOther);
  }
}

// Kernel names, interned. CUPTI gives every record of a kernel the same name pointer; PyTorch's
// names run to hundreds of bytes, several times the rest of a record, and a launch-bound loop
// completes tens of thousands of kernel records per activity buffer, all at once: carried in full
// they filled the ring (session 14, H200: half of a 300,000-launch loop's kernel records lost).
// The first record of a name carries it with a reference; the later ones the reference alone.
// The table is guarded by the ring's lock; a pointer found again must have the length and the
// 64-bit hash of the whole name it was first seen with (CUPTI may reuse an unloaded module's
// memory for other names, and template kernels' names often differ only in the middle). A full
// table, or references past 2^24, send names in full, as before.
struct NameRef {
  const char* ptr;
  uint32_t ref;   // 0: a free slot
  uint32_t len;
  uint64_t hash;  // FNV-1a of the name's bytes
  bool sent;      // an event carrying the name was committed: the writer will know ref
};
constexpr uint32_t kNameRefs = 4096;  // a power of two
constexpr int kNameProbes = 16;
constexpr uint32_t kMaxNameRef = 1u << 24;
NameRef g_name_refs[kNameRefs];
uint32_t g_next_name_ref = 1;

uint64_t name_hash(const char* name, uint32_t len) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t i = 0; i < len; ++i) h = (h ^ static_cast<uint8_t>(name[i])) * 0x100000001b3ULL;
  return h;
}

// Ring lock held. The slot for name (found or claimed), or nullptr when the table is full.
NameRef* name_ref(const char* name, uint32_t len, uint64_t hash) {
  uint32_t i = static_cast<uint32_t>((reinterpret_cast<uintptr_t>(name) >> 3) * 0x9E3779B1u) & (kNameRefs - 1);
  for (int probe = 0; probe < kNameProbes; ++probe, i = (i + 1) & (kNameRefs - 1)) {
    NameRef& e = g_name_refs[i];
    if (e.ref != 0 && e.ptr != name) continue;
    if (e.ref != 0 && e.len == len && e.hash == hash) return &e;
    // A free slot, or the pointer now names another kernel: a new reference for it, here.
    if (g_next_name_ref >= kMaxNameRef) return nullptr;
    e = NameRef{name, g_next_name_ref++, len, hash, false};
    return &e;
  }
  return nullptr;
}

// The drain of a flush in progress on this thread (flush_cupti), or none: CUPTI's own thread, or a
// flush whose caller cannot drain.
struct FlushDrain {
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
};
__thread FlushDrain t_flush_drain __attribute__((tls_model("initial-exec")));
// The drain of the flush in progress, for every thread: CUPTI may deliver a flush's buffers on its
// worker thread while the flushing writer waits inside cuptiActivityFlushAll, unable to drain
// (H200, session 15: ~0.4 s of kernel records lost around each of the writer's once-a-second
// flushes of a launch-bound loop). g_drain_mu serialises the ring's consumers while a flush runs;
// flush_cupti takes it to clear g_flush_drain, so no drain on another thread is still running
// when the writer goes on with its own state.
pthread_mutex_t g_drain_mu = PTHREAD_MUTEX_INITIALIZER;
FlushDrain g_flush_drain;  // g_drain_mu

// Drains the ring for the flush in progress (this thread's, else any thread's), if there is one.
// Not another flush's drain on a thread inside one of the program's CUDA calls: the drain encodes
// and may send, which the program's call would wait for.
void drain_for_flush() {
  pthread_mutex_lock(&g_drain_mu);
  const FlushDrain d = t_flush_drain.fn ? t_flush_drain : t_gpu.depth == 0 ? g_flush_drain : FlushDrain{};
  if (d.fn) d.fn(d.arg);
  pthread_mutex_unlock(&g_drain_mu);
}

void emit_activity(RawGpuActivity a, const char* name) {
  uint32_t name_len = name ? static_cast<uint32_t>(strnlen(name, kMaxNameLen)) : 0;
  // A ring half full during a flush: emptied before it overflows (not under the ring's lock, which
  // the launching threads take). Outside a flush a full ring drops (gpu_dropped): waking the
  // writer early and letting CUPTI's thread wait up to 20 ms for it changed nothing on an H200
  // (session 15), the losses were the flushes'.
  if (g_gpu.ring.ring().fill() > 0.5) drain_for_flush();
  const uint64_t hash = name_len ? name_hash(name, name_len) : 0;
  g_gpu.ring.lock();
  NameRef* ref = name_len ? name_ref(name, name_len, hash) : nullptr;
  if (ref) {
    a.name_ref = ref->ref;
    if (ref->sent) name_len = 0;
  }
  const uint32_t len = sizeof(RawGpuEvent) + sizeof(RawGpuActivity) + name_len;
  uint8_t* p = g_gpu.ring.ring().reserve(len);
  if (!p) {
    g_gpu.ring.unlock();
    g_gpu.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* ev = reinterpret_cast<RawGpuEvent*>(p);
  memset(ev, 0, sizeof *ev);
  ev->type = static_cast<uint8_t>(EventType::kActivity);
  ev->name_len = static_cast<uint16_t>(name_len);
  memcpy(p + sizeof *ev, &a, sizeof a);
  if (name_len) memcpy(p + sizeof *ev + sizeof a, name, name_len);
  if (ref && name_len) ref->sent = true;
  commit(len);
}

// The struct versions are the ones of the headers this preload was built with (CUDA 13:
// Kernel10, Memcpy6, Memset4, Memory4, Synchronization2); the fields read here sit at the same
// offsets in the versions other CUPTI releases emit: NOT verified against a real GPU yet
// (docs/gpu.md, "Record layouts").
// The fields kernel, memcpy and memset records share (same names in each CUPTI struct).
template <class Record>
void copy_span(const Record* r, RawGpuActivity* a) {
  a->correlation = r->correlationId;
  a->start = r->start;
  a->end = r->end;
  a->device = r->deviceId;
  a->stream = r->streamId;
}

void convert(const CUpti_Activity* rec) {
  RawGpuActivity a;
  memset(&a, 0, sizeof a);
  using K = wire::GpuActivityKind;
  const char* name = nullptr;
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      a.kind = static_cast<uint8_t>(K::kKernel);
      copy_span(k, &a);
      a.grid[0] = static_cast<uint32_t>(k->gridX);
      a.grid[1] = static_cast<uint32_t>(k->gridY);
      a.grid[2] = static_cast<uint32_t>(k->gridZ);
      a.block[0] = static_cast<uint32_t>(k->blockX);
      a.block[1] = static_cast<uint32_t>(k->blockY);
      a.block[2] = static_cast<uint32_t>(k->blockZ);
      name = k->name;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      a.kind = static_cast<uint8_t>(K::kMemcpy);
      copy_span(m, &a);
      a.bytes = m->bytes;
      a.copy_kind = copy_kind(m->copyKind);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      a.kind = static_cast<uint8_t>(K::kMemset);
      copy_span(m, &a);
      a.bytes = m->bytes;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(rec);
      if (m->memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) return;  // device memory only
      if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION)
        a.kind = static_cast<uint8_t>(K::kMemAlloc);
      else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
        a.kind = static_cast<uint8_t>(K::kMemFree);
      else
        return;
      a.correlation = m->correlationId;
      a.start = a.end = m->timestamp;
      a.device = m->deviceId;
      a.stream = m->streamId;
      a.bytes = m->bytes;
      a.address = m->address;
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
      a.kind = static_cast<uint8_t>(K::kSync);
      a.correlation = s->correlationId;
      a.start = s->start;
      a.end = s->end;
      a.stream = s->streamId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(rec);
      a.kind = static_cast<uint8_t>(K::kOverhead);
      a.start = o->start;
      a.end = o->end;
      break;
    }
    default:
      return;
  }
  emit_activity(a, name);
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  mem::Guard guard;
  const int saved = errno;
  if (buffer && valid > 0) {
    CUpti_Activity* rec = nullptr;
    while (g_api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS && rec) convert(rec);
  }
  size_t dropped = 0;
  if (g_api.num_dropped && g_api.num_dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
    g_gpu.cupti_dropped.fetch_add(dropped, std::memory_order_relaxed);
  free(buffer);
  errno = saved;
}

const char* result_text(CUptiResult r) {
  const char* s = nullptr;
  if (g_api.result_string && g_api.result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "unknown CUPTI error";
}

void say(const char* fmt, int code, const char* text) {
  static char buf[768];
  snprintf(buf, sizeof buf, fmt, code, text);
  g_gpu.report(buf);
}

template <typename T>
bool resolve(void* h, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(h, name));
  return *out != nullptr;
}

// CLOCK_MONOTONIC - cuptiGetTimestamp, from the tightest of a few bracketing pairs.
int64_t calibrate_offset() {
  int64_t best_gap = INT64_MAX, offset = 0;
  for (int i = 0; i < 7; ++i) {
    uint64_t c = 0;
    const int64_t before = clock_ns();
    if (g_api.get_timestamp(&c) != CUPTI_SUCCESS) return 0;
    const int64_t after = clock_ns();
    if (after - before < best_gap) {
      best_gap = after - before;
      offset = before + (after - before) / 2 - static_cast<int64_t>(c);
    }
  }
  return offset;
}

// Set while this thread is in mlprof's own CUPTI set-up or yield: should libcupti call one of its
// exported functions through its PLT and reach the preload's export, that is no program's call.
__thread bool t_own_call __attribute__((tls_model("initial-exec")));

// attach_cupti's work, with g_owner_mu held.
bool attach_locked(void* h) {
  if (g_gpu.yielded.load(std::memory_order_acquire)) {
    g_gpu.report("the program started its own CUPTI client (torch.profiler, or a tool in the process) before mlprof "
                 "attached: GPU profiling stays off so that CUPTI is the program's (CPU and memory profiling go on)");
    return false;
  }
  g_handle = h;
  bool ok = resolve(h, "cuptiSubscribe", &g_api.subscribe) && resolve(h, "cuptiEnableCallback", &g_api.enable_callback) &&
            resolve(h, "cuptiGetCallbackName", &g_api.callback_name) &&
            resolve(h, "cuptiActivityEnable", &g_api.activity_enable) &&
            resolve(h, "cuptiActivityRegisterCallbacks", &g_api.register_callbacks) &&
            resolve(h, "cuptiActivityGetNextRecord", &g_api.next_record) &&
            resolve(h, "cuptiActivityFlushAll", &g_api.flush_all) && resolve(h, "cuptiGetTimestamp", &g_api.get_timestamp) &&
            resolve(h, "cuptiGetVersion", &g_api.get_version);
  resolve(h, "cuptiActivityGetNumDroppedRecords", &g_api.num_dropped);
  resolve(h, "cuptiActivityRegisterTimestampCallback", &g_api.timestamp_callback);
  resolve(h, "cuptiActivityFlushPeriod", &g_api.flush_period);
  resolve(h, "cuptiGetResultString", &g_api.result_string);
  resolve(h, "cuptiActivityDisable", &g_api.activity_disable);
  resolve(h, "cuptiUnsubscribe", &g_api.unsubscribe);
  if (!ok) {
    g_gpu.report("the libcupti found lacks functions mlprof needs (too old?); GPU profiling off (CPU and memory "
                 "profiling go on). Point MLPROF_CUPTI_PATH at the CUPTI of your CUDA toolkit");
    return false;
  }
  uint32_t version = 0;
  g_api.get_version(&version);
  CUptiResult r = g_api.subscribe(&g_subscriber, on_callback, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    g_gpu.report("CUPTI is already in use by another tool in this process (torch.profiler, Nsight Systems/Compute, "
                 "another profiler: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); GPU profiling off (CPU and memory "
                 "profiling go on). Run without the other tool, or use mlprof-run --no-gpu");
    return false;
  }
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) {
    g_gpu.report("CUPTI refused access to GPU performance data (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); GPU profiling "
                 "off (CPU and memory profiling go on). Allow non-admin profiling (NVreg_RestrictProfilingToAdminUsers=0, "
                 "see https://developer.nvidia.com/ERR_NVGPUCTRPERM) or run as root");
    return false;
  }
  if (r != CUPTI_SUCCESS) {
    say("cuptiSubscribe failed (error %d: %s); GPU profiling off (CPU and memory profiling go on)", static_cast<int>(r),
        result_text(r));
    return false;
  }
  // Which callbacks: by name, so that every version's variants (_v2, _ptsz, _ptds, Ex) are in.
  const CUpti_CallbackDomain domains[2] = {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API};
  const uint32_t sizes[2] = {CUPTI_RUNTIME_TRACE_CBID_SIZE, CUPTI_DRIVER_TRACE_CBID_SIZE};
  uint32_t enabled = 0;
  for (int d = 0; d < 2; ++d) {
    for (uint32_t cbid = 1; cbid < sizes[d] && cbid < kMaxCbid; ++cbid) {
      const char* name = nullptr;
      if (g_api.callback_name(domains[d], cbid, &name) != CUPTI_SUCCESS || !name) continue;
      const uint8_t cls = classify(name);
      if (!cls) continue;
      g_class[d][cbid] = cls;
      if (g_api.enable_callback(1, g_subscriber, domains[d], cbid) == CUPTI_SUCCESS) ++enabled;
    }
  }
  // Frames to cut from launch stacks.
  module_text_range(reinterpret_cast<const void*>(&on_callback), &g_cut[0].lo, &g_cut[0].hi);
  module_text_range(reinterpret_cast<const void*>(g_api.subscribe), &g_cut[1].lo, &g_cut[1].hi);
  named_text_range("libcuda.so", &g_cut[2].lo, &g_cut[2].hi);
  // Clock: CUPTI's timestamps in CLOCK_MONOTONIC when it takes our clock, else the measured offset.
  // (Registered before any activity kind is enabled, as CUPTI requires.)
  if (g_api.timestamp_callback && g_api.timestamp_callback(monotonic_timestamp) == CUPTI_SUCCESS) {
    g_own_clock = true;
    g_gpu.clock = static_cast<uint8_t>(wire::GpuClock::kMonotonic);
    g_gpu.clock_offset_ns = 0;
  } else {
    g_gpu.clock = static_cast<uint8_t>(wire::GpuClock::kOffset);
    g_gpu.clock_offset_ns = calibrate_offset();
  }
  g_gpu.cupti_version = version;
  r = g_api.register_callbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    say("cuptiActivityRegisterCallbacks failed (error %d: %s); GPU profiling off", static_cast<int>(r), result_text(r));
    return false;
  }
  for (CUpti_ActivityKind k : kKinds) {
    r = g_api.activity_enable(k);
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
      g_gpu.report("CUPTI refused activity tracing (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); GPU profiling off (CPU and "
                   "memory profiling go on). See https://developer.nvidia.com/ERR_NVGPUCTRPERM");
      return false;
    }
    // Other kinds failing (SYNCHRONIZATION on an old driver) only lose that kind.
  }
  if (g_api.flush_period) g_api.flush_period(1000);
  (void)enabled;
  return true;
}

}  // namespace

bool own_cupti_call() { return t_own_call; }

bool attach_cupti(void* h) {
  pthread_mutex_lock(&g_owner_mu);
  t_own_call = true;
  const bool ok = attach_locked(h);
  t_own_call = false;
  pthread_mutex_unlock(&g_owner_mu);
  return ok;
}

// The program's own CUPTI client (torch.profiler's Kineto, a tool linked into a server) takes
// CUPTI: mlprof stops its activity, hands its last records to the ring, unsubscribes and puts
// CUPTI's default clock back, so that the program's profiler works as it would without mlprof.
// The GPU data until then is kept. Called on the program's thread, before its call goes on.
void yield_to_program() {
  mem::Guard guard;  // CUPTI's work and the message's allocation are mlprof's, not the program's
  pthread_mutex_lock(&g_owner_mu);
  const bool was_on = !g_gpu.yielded.exchange(true, std::memory_order_acq_rel) && attached();
  if (was_on) {
    t_own_call = true;
    if (g_api.activity_disable)
      for (CUpti_ActivityKind k : kKinds) g_api.activity_disable(k);
    g_api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // our buffers come back to buffer_completed
    if (g_api.unsubscribe) g_api.unsubscribe(g_subscriber);
    if (g_own_clock) g_api.timestamp_callback(realtime_timestamp);
    t_own_call = false;
  }
  pthread_mutex_unlock(&g_owner_mu);
  if (was_on)
    g_gpu.report("the program started its own CUPTI client (torch.profiler, or a tool in the process): mlprof's GPU "
                 "profiling stopped there and left CUPTI to it; the GPU data until then is kept (CPU and memory "
                 "profiling go on)");
}

// The real CUPTI function `name` for a call the program made through our export: the next
// definition in the global scope, else the libcupti mlprof attached from, else the first libcupti
// loaded (a Python extension's libcupti is in its dlopen's local scope, which RTLD_NEXT skips).
void* real_cupti(const char* name) {
  if (void* f = dlsym(RTLD_NEXT, name)) return f;
  if (g_handle)
    if (void* f = dlsym(g_handle, name)) return f;
  struct Found {
    char path[512];
  } found{};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* arg) -> int {
        const char* n = info->dlpi_name;
        const char* slash = n ? strrchr(n, '/') : nullptr;
        if (!slash || strncmp(slash + 1, "libcupti.so", 11) != 0) return 0;
        snprintf(static_cast<Found*>(arg)->path, sizeof(Found::path), "%s", n);
        return 1;
      },
      &found);
  if (!found.path[0]) return nullptr;
  void* h = dlopen(found.path, RTLD_LAZY | RTLD_NOLOAD);
  void* f = h ? dlsym(h, name) : nullptr;
  if (h) dlclose(h);  // RTLD_NOLOAD took a reference of a library that stays loaded
  return f;
}

void flush_cupti(bool forced, void (*drain)(void*), void* arg) {
  if (g_gpu.yielded.load(std::memory_order_acquire)) return;  // CUPTI is the program's now
  if (!g_api.flush_all) return;
  const FlushDrain saved = t_flush_drain;
  t_flush_drain = FlushDrain{drain, arg};
  // Only the writer thread, or the exiting thread once the writer is joined, flushes with a
  // drain (Writer::drain_gpu, Writer::finish): flushes with drains do not overlap. The previous
  // value is put back all the same.
  auto set_global = [](FlushDrain d) {
    pthread_mutex_lock(&g_drain_mu);
    const FlushDrain before = g_flush_drain;
    g_flush_drain = d;
    pthread_mutex_unlock(&g_drain_mu);
    return before;
  };
  FlushDrain before{};
  if (drain) before = set_global(FlushDrain{drain, arg});
  g_api.flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  if (drain) set_global(before);
  t_flush_drain = saved;
}

#endif  // MLPROF_HAVE_CUPTI

}  // namespace mlprof::preload::gpu
