// The writer's GPU side: drains the GPU ring (preload/gpu_events.h) into wire records 20-24
// (docs/wire-format.md), and flushes CUPTI's activity buffers once a second. Writer thread (or
// an application thread running the writer's final cycle), under the writer's lock.
#include <pthread.h>

#include <cstring>
#include <string>

#include "common/wire_format.h"
#include "preload/gpu.h"
#include "preload/gpu_events.h"
#include "preload/writer.h"

namespace mlprof::preload {

namespace {
constexpr int64_t kGpuFlushNs = 1'000'000'000;
}

// The stream's id of an activity's kernel name, sending the name the first time (0: no name). A
// name carried in full (name_len) is remembered under its reference (the preload's interned
// names, gpu_cupti.cpp): later events carry the reference alone. References outlive a stream
// (restart), the stream's ids do not.
uint64_t Writer::gpu_name_id(uint32_t ref, const uint8_t* name, uint32_t name_len) {
  if (name_len) {
    if (ref) {
      if (ref >= gpu_ref_names_.size()) gpu_ref_names_.resize(ref + 1);
      gpu_ref_names_[ref].assign(reinterpret_cast<const char*>(name), name_len);
    }
  } else {
    if (ref < gpu_ref_ids_.size() && gpu_ref_ids_[ref]) return gpu_ref_ids_[ref];
    if (ref >= gpu_ref_names_.size() || gpu_ref_names_[ref].empty())
      return 0;  // cannot happen: the preload sends a name in full until an event with it is in the ring
  }
  std::string text = name_len ? std::string(reinterpret_cast<const char*>(name), name_len) : gpu_ref_names_[ref];
  auto [it, fresh] = gpu_names_.try_emplace(std::move(text), gpu_names_.size() + 1);
  if (fresh) {
    enc_.begin(wire::Record::kGpuName);
    enc_.u(it->second);
    enc_.str(it->first);
    enc_.end();
  }
  if (ref) {
    if (ref >= gpu_ref_ids_.size()) gpu_ref_ids_.resize(ref + 1);
    gpu_ref_ids_[ref] = it->second;
  }
  return it->second;
}

void Writer::drain_gpu(int64_t now) {
  // Events exist only once CUPTI is attached (the ring is mapped before the phase says so).
  if (!gpu::attached()) return;
  // On the writer thread only: a cycle run on another thread (sync_cycle, for a dlclose) holds mu_
  // there, and a flush's drain may run on CUPTI's thread meanwhile, taking the drain lock before
  // mu_ at exit (Writer::finish): the flush waits for the writer's own cycle.
  if (now - gpu_last_flush_ns_ >= kGpuFlushNs && pthread_equal(pthread_self(), thread_)) {
    gpu_last_flush_ns_ = now;
    flush_gpu(false);  // completed buffers only; CUPTI's own period (1 s) does the same
  }
  drain_gpu_ring();
}

void Writer::flush_gpu(bool forced) {
  gpu::flush(forced, [](void* w) { static_cast<Writer*>(w)->drain_gpu_ring(); }, this);
}

void Writer::drain_gpu_ring() {
  gpu::State& g = gpu::g_gpu;
  if (!gpu::attached()) return;
  if (!gpu_config_sent_) {
    enc_.begin(wire::Record::kGpuConfig);
    enc_.u(g.clock);
    enc_.s(g.clock_offset_ns);
    enc_.u(g.cupti_version);
    enc_.end();
    gpu_config_sent_ = true;
  }
  // The writer is the ring's only consumer: drain() needs no lock (producers serialise on it).
  g.ring.ring().drain([&](const uint8_t* data, uint32_t len) {
    gpu::RawGpuEvent ev;
    if (len < sizeof ev) return;
    memcpy(&ev, data, sizeof ev);
    switch (static_cast<gpu::EventType>(ev.type)) {
      case gpu::EventType::kLaunch: {
        if (sizeof ev + ev.nframes * sizeof(uint64_t) + ev.npy * sizeof(python::RawPyFrame) > len) return;
        const auto* pcs = reinterpret_cast<const uint64_t*>(data + sizeof ev);
        const auto* py = reinterpret_cast<const python::RawPyFrame*>(pcs + ev.nframes);
        const uint64_t id = stack_id(pcs, ev.nframes, ev.flags, py, ev.npy);
        enc_.begin(wire::Record::kGpuLaunch);
        enc_.u(ev.tid);
        enc_.u(id);
        enc_.u(static_cast<uint64_t>(ev.t_ns));
        enc_.u(ev.a);
        enc_.u(ev.api);
        enc_.u(ev.cbid);
        enc_.end();
        ++gpu_launches_;
        break;
      }
      case gpu::EventType::kAlias:
        enc_.begin(wire::Record::kGpuCorrelation);
        enc_.u(ev.a);
        enc_.u(ev.b);
        enc_.end();
        break;
      case gpu::EventType::kActivity: {
        gpu::RawGpuActivity a;
        if (sizeof ev + sizeof a + ev.name_len > len) return;
        memcpy(&a, data + sizeof ev, sizeof a);
        uint64_t name_id = 0;
        if (ev.name_len || a.name_ref) name_id = gpu_name_id(a.name_ref, data + sizeof ev + sizeof a, ev.name_len);
        enc_.begin(wire::Record::kGpuActivity);
        enc_.u(a.kind);
        enc_.u(a.correlation);
        enc_.u(a.start);
        enc_.u(a.end);
        enc_.u(a.device);
        enc_.u(a.stream);
        enc_.u(a.bytes);
        enc_.u(a.copy_kind);
        enc_.u(name_id);
        for (uint32_t v : a.grid) enc_.u(v);
        for (uint32_t v : a.block) enc_.u(v);
        enc_.u(a.address);
        enc_.end();
        ++gpu_activities_;
        break;
      }
      default:
        return;
    }
    if (enc_.out().size() > (256u << 10)) flush_out();
  });
}

}  // namespace mlprof::preload
