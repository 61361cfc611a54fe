// The writer's GPU side: drains the GPU ring (preload/gpu_events.h) into wire records 20-24
// (docs/wire-format.md), and flushes CUPTI's activity buffers once a second. Writer thread (or
// an application thread running the writer's final cycle), under the writer's lock.
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

void Writer::drain_gpu(int64_t now) {
  gpu::State& g = gpu::g_gpu;
  // Events exist only once CUPTI is attached (the ring is mapped before the phase says so).
  if (!gpu::attached()) return;
  {
    if (!gpu_config_sent_) {
      enc_.begin(wire::Record::kGpuConfig);
      enc_.u(g.clock);
      enc_.s(g.clock_offset_ns);
      enc_.u(g.cupti_version);
      enc_.end();
      gpu_config_sent_ = true;
    }
    if (now - gpu_last_flush_ns_ >= kGpuFlushNs) {
      gpu_last_flush_ns_ = now;
      gpu::flush(false);  // completed buffers only; CUPTI's own period (1 s) does the same
    }
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
        if (ev.name_len) {
          std::string name(reinterpret_cast<const char*>(data + sizeof ev + sizeof a), ev.name_len);
          auto [it, fresh] = gpu_names_.try_emplace(std::move(name), gpu_names_.size() + 1);
          name_id = it->second;
          if (fresh) {
            enc_.begin(wire::Record::kGpuName);
            enc_.u(name_id);
            enc_.str(it->first);
            enc_.end();
          }
        }
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
