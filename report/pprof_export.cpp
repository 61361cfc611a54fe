// The pprof export (profile.proto, gzipped). A small protobuf writer and one pass over the
// profile: strings, functions, locations and mappings are interned as samples reference them,
// so the work is linear in the size of the profile. docs/export-formats.md has the mapping.
#include "report/pprof_export.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/varint.h"
#include "report/format.h"
#include "report/report.h"

namespace mlprof::report {

using profile::Frame;
using profile::Profile;

namespace {

// profile.proto field numbers (github.com/google/pprof/proto/profile.proto).
namespace field {
enum ProfileField : uint32_t {
  kSampleType = 1, kSample = 2, kMapping = 3, kLocation = 4, kFunction = 5, kStringTable = 6,
  kTimeNanos = 9, kDurationNanos = 10, kPeriodType = 11, kPeriod = 12, kComment = 13,
  kDefaultSampleType = 14,
};
enum ValueTypeField : uint32_t { kVtType = 1, kVtUnit = 2 };
enum SampleField : uint32_t { kSampleLocation = 1, kSampleValue = 2, kSampleLabel = 3 };
enum LabelField : uint32_t { kLabelKey = 1, kLabelStr = 2, kLabelNum = 3 };
enum MappingField : uint32_t {
  kMappingId = 1, kMappingStart = 2, kMappingLimit = 3, kMappingOffset = 4, kMappingFilename = 5,
  kMappingBuildId = 6, kHasFunctions = 7, kHasFilenames = 8, kHasLineNumbers = 9, kHasInlineFrames = 10,
};
enum LocationField : uint32_t { kLocationId = 1, kLocationMapping = 2, kLocationAddress = 3, kLocationLine = 4 };
enum LineField : uint32_t { kLineFunction = 1, kLineLine = 2 };
enum FunctionField : uint32_t { kFunctionId = 1, kFunctionName = 2, kFunctionSystemName = 3, kFunctionFilename = 4 };
}  // namespace field

// Protobuf wire encoding appended to a string. Scalars equal to 0 are omitted (proto3
// defaults); strings and messages are always written (the string table's "" must be present).
class ProtoWriter {
 public:
  std::string data;

  void varint(uint64_t v) {
    uint8_t buf[varint::kMaxBytes];
    data.append(reinterpret_cast<const char*>(buf), varint::encode(v, buf));
  }
  void tag(uint32_t f, uint32_t wire_type) { varint(static_cast<uint64_t>(f) << 3 | wire_type); }
  void u64(uint32_t f, uint64_t v) {
    if (v == 0) return;
    tag(f, 0);
    varint(v);
  }
  void i64(uint32_t f, int64_t v) { u64(f, static_cast<uint64_t>(v)); }  // int64: two's complement
  void boolean(uint32_t f, bool v) { u64(f, v ? 1 : 0); }
  void bytes(uint32_t f, std::string_view s) {
    tag(f, 2);
    varint(s.size());
    data.append(s);
  }
  // A packed repeated varint field (int64 / uint64).
  template <typename T>
  void packed(uint32_t f, const std::vector<T>& values) {
    if (values.empty()) return;
    size_t n = 0;
    for (T v : values) n += varint::encoded_size(static_cast<uint64_t>(v));
    tag(f, 2);
    varint(n);
    for (T v : values) varint(static_cast<uint64_t>(v));
  }
  void message(uint32_t f, const ProtoWriter& m) { bytes(f, m.data); }
};

std::string pprof_unit(const std::string& unit) {
  if (unit == "us") return "microseconds";
  if (unit == "ns") return "nanoseconds";
  return unit;  // "bytes", "count", and whatever later metrics use
}

class Encoder {
 public:
  Encoder(const Profile& p, uint32_t default_metric)
      : p_(p), default_metric_(default_metric), profile_str_(p.strings.size(), -1) {
    strings_.push_back("");
    string_ids_.emplace("", 0);
    loc_of_frame_.assign(p.frames.size(), 0);
    mapping_of_module_.assign(p.strings.size(), 0);
    build_id_of_module_.assign(p.strings.size(), std::string());
    for (const auto& m : p.modules)
      if (m.path < build_id_of_module_.size()) build_id_of_module_[m.path] = m.build_id;
  }

  std::string encode() {
    ProtoWriter out;
    // Sample types: one per metric, in the profile's order (sample values follow it).
    for (const auto& m : p_.metrics) {
      ProtoWriter vt;
      vt.i64(field::kVtType, str(m.name));
      vt.i64(field::kVtUnit, str(pprof_unit(m.unit)));
      out.message(field::kSampleType, vt);
    }
    encode_samples(out);
    encode_mappings(out);
    out.data += locations_.data;
    out.data += functions_.data;

    if (p_.run.start_realtime_ns > 0) out.i64(field::kTimeNanos, p_.run.start_realtime_ns);
    if (p_.run.end_ns > p_.run.start_ns) out.i64(field::kDurationNanos, p_.run.end_ns - p_.run.start_ns);
    const profile::MetricDesc& dm = p_.metrics[default_metric_];
    // The sampling period, in the default metric's unit, when that is a time and the rate known.
    if (p_.run.rate_hz > 0 && detail::is_time_unit(dm.unit)) {
      ProtoWriter vt;
      vt.i64(field::kVtType, str(dm.name));
      vt.i64(field::kVtUnit, str(pprof_unit(dm.unit)));
      out.message(field::kPeriodType, vt);
      int64_t per_second = dm.unit == "ns" ? 1'000'000'000 : 1'000'000;
      out.i64(field::kPeriod, per_second / p_.run.rate_hz);
    }
    std::vector<int64_t> comments;
    if (!p_.run.command.empty()) comments.push_back(str("command: " + detail::shell_join(p_.run.command)));
    if (!p_.run.hostname.empty()) comments.push_back(str("host: " + p_.run.hostname));
    if (!p_.run.mlprof_version.empty()) comments.push_back(str("mlprof " + p_.run.mlprof_version));
    out.packed(field::kComment, comments);
    out.i64(field::kDefaultSampleType, str(dm.name));
    // The string table last: every index above is final by now.
    for (const auto& s : strings_) out.bytes(field::kStringTable, s);
    return std::move(out.data);
  }

 private:
  // Index of s in the string table (made valid UTF-8: proto3 strings must be).
  int64_t str(std::string_view s) {
    std::string clean = detail::sanitize_utf8(s, false);
    auto [it, inserted] = string_ids_.try_emplace(std::move(clean), static_cast<int64_t>(strings_.size()));
    if (inserted) strings_.push_back(it->first);
    return it->second;
  }
  // The same for a string of the profile, cached per profile string index.
  int64_t pstr(uint32_t i) {
    if (i >= profile_str_.size()) return 0;
    if (profile_str_[i] < 0) profile_str_[i] = str(p_.strings[i]);
    return profile_str_[i];
  }

  uint64_t function_id(const Frame& f) {
    int64_t name, file = 0;
    if (f.function != 0) {
      name = pstr(f.function);
      file = pstr(f.file);
    } else {
      // No symbol: the collapsed export's "module+0xoffset" names the function, so every
      // location carries a function and pprof has nothing left to (mis)symbolize.
      std::string module = detail::basename(p_.str(f.module));
      name = str(fmt::format("{}+{:#x}", module.empty() ? "[unknown]" : module, f.module_offset));
    }
    uint64_t key = static_cast<uint64_t>(name) << 32 | static_cast<uint64_t>(file);
    auto [it, inserted] = function_ids_.try_emplace(key, function_ids_.size() + 1);
    if (inserted) {
      ProtoWriter fn;
      fn.u64(field::kFunctionId, it->second);
      fn.i64(field::kFunctionName, name);
      fn.i64(field::kFunctionSystemName, name);
      fn.i64(field::kFunctionFilename, file);
      functions_.message(field::kFunction, fn);
    }
    return it->second;
  }

  // A function of its own for the markers "[truncated]" and "[unknown]" (no mapping).
  uint64_t marker_location(const char* name) {
    auto [it, inserted] = marker_locations_.try_emplace(name, 0);
    if (inserted) {
      uint64_t fid = function_ids_.size() + 1;
      function_ids_.emplace(static_cast<uint64_t>(str(name)) << 32 | 0xffffffffu, fid);
      ProtoWriter fn;
      fn.u64(field::kFunctionId, fid);
      fn.i64(field::kFunctionName, str(name));
      fn.i64(field::kFunctionSystemName, str(name));
      functions_.message(field::kFunction, fn);
      it->second = ++location_count_;
      ProtoWriter line, loc;
      line.u64(field::kLineFunction, fid);
      loc.u64(field::kLocationId, it->second);
      loc.message(field::kLocationLine, line);
      locations_.message(field::kLocation, loc);
    }
    return it->second;
  }

  struct ModuleInfo {
    uint32_t module = 0;  // profile string index of the path
    uint64_t max_address = 0;
    bool all_files = true, all_lines = true;
  };

  uint64_t mapping_id(const Frame& f) {
    if (f.module == 0 || f.module >= mapping_of_module_.size() || f.kind == profile::FrameKind::kPython) return 0;
    uint64_t& id = mapping_of_module_[f.module];
    if (id == 0) {
      modules_.push_back({f.module, 0, true, true});
      id = modules_.size();
    }
    return id;
  }

  // The location of frames[begin, end) of a stack: inlined frames, then the frame they are
  // inlined into (the one with the address).
  uint64_t location_id(const std::vector<uint32_t>& frames, size_t begin, size_t end) {
    uint64_t* slot;
    if (end - begin == 1) {
      slot = &loc_of_frame_[frames[begin]];
    } else {
      std::string key(reinterpret_cast<const char*>(&frames[begin]), (end - begin) * sizeof(uint32_t));
      slot = &inline_locations_[key];
    }
    if (*slot != 0) return *slot;
    *slot = ++location_count_;
    const Frame& outer = p_.frames[frames[end - 1]];
    uint64_t mapping = mapping_id(outer);
    ProtoWriter loc;
    loc.u64(field::kLocationId, *slot);
    loc.u64(field::kLocationMapping, mapping);
    loc.u64(field::kLocationAddress, outer.module_offset);
    for (size_t i = begin; i < end; ++i) {  // innermost first, as profile.proto wants
      const Frame& f = p_.frames[frames[i]];
      ProtoWriter line;
      line.u64(field::kLineFunction, function_id(f));
      line.i64(field::kLineLine, f.line);
      loc.message(field::kLocationLine, line);
      if (mapping != 0) {
        ModuleInfo& m = modules_[mapping - 1];
        m.all_files &= f.file != 0;
        m.all_lines &= f.line != 0;
      }
    }
    if (mapping != 0) modules_[mapping - 1].max_address = std::max(modules_[mapping - 1].max_address, outer.module_offset);
    locations_.message(field::kLocation, loc);
    return *slot;
  }

  // Location ids of a stack, leaf first; computed once per stack.
  const std::vector<uint64_t>& stack_locations(uint32_t stack) {
    auto [it, inserted] = stack_locs_.try_emplace(stack);
    if (!inserted) return it->second;
    std::vector<uint64_t>& locs = it->second;
    if (stack >= p_.stacks.size()) {
      locs.push_back(marker_location("[unknown]"));
      return locs;
    }
    const profile::Stack& st = p_.stacks[stack];
    const auto& fr = st.frames;
    for (size_t i = 0; i < fr.size();) {
      if (fr[i] >= p_.frames.size()) {  // a broken reference: keep the sample, name the gap
        locs.push_back(marker_location("[invalid frame]"));
        ++i;
        continue;
      }
      size_t end = i;
      while (end + 1 < fr.size() && fr[end + 1] < p_.frames.size() && p_.frames[fr[end]].inlined) ++end;
      locs.push_back(location_id(fr, i, end + 1));
      i = end + 1;
    }
    if (fr.empty()) locs.push_back(marker_location("[unknown]"));
    if (st.truncated) locs.push_back(marker_location("[truncated]"));  // a root of its own
    return locs;
  }

  void encode_samples(ProtoWriter& out) {
    int64_t k_thread = str("thread"), k_tid = str("tid"), k_pid = str("pid"), k_process = str("process");
    std::vector<int64_t> values(p_.metrics.size());
    ProtoWriter sample;
    for (const auto& sv : p_.stack_values) {
      bool any = false;
      for (size_t m = 0; m < values.size(); ++m) {
        values[m] = detail::at(sv.values, static_cast<uint32_t>(m));
        any |= values[m] != 0;
      }
      if (!any) continue;
      sample.data.clear();
      sample.packed(field::kSampleLocation, stack_locations(sv.stack));
      // Packed values are written even when 0: pprof needs one value per sample type.
      size_t n = 0;
      for (int64_t v : values) n += varint::encoded_size(static_cast<uint64_t>(v));
      sample.tag(field::kSampleValue, 2);
      sample.varint(n);
      for (int64_t v : values) sample.varint(static_cast<uint64_t>(v));
      if (sv.thread < p_.threads.size()) {
        const profile::Thread& t = p_.threads[sv.thread];
        auto label = [&](int64_t key, int64_t s, int64_t num) {
          ProtoWriter l;
          l.i64(field::kLabelKey, key);
          l.i64(field::kLabelStr, s);
          l.i64(field::kLabelNum, num);
          sample.message(field::kSampleLabel, l);
        };
        if (!t.name.empty()) label(k_thread, str(t.name), 0);
        label(k_tid, 0, t.tid);
        if (t.process < p_.processes.size()) {
          const profile::Process& proc = p_.processes[t.process];
          label(k_pid, 0, proc.pid);
          std::string name = detail::process_name(proc);
          if (!name.empty()) label(k_process, str(name), 0);
        }
      }
      out.message(field::kSample, sample);
    }
  }

  void encode_mappings(ProtoWriter& out) {
    for (size_t i = 0; i < modules_.size(); ++i) {
      const ModuleInfo& m = modules_[i];
      ProtoWriter mp;
      mp.u64(field::kMappingId, i + 1);
      // Load addresses are not in the profile: addresses are file-relative (pc - load bias), so
      // the mapping spans [0, highest address] at file offset 0.
      mp.u64(field::kMappingStart, 0);
      mp.u64(field::kMappingLimit, m.max_address + 1);
      mp.i64(field::kMappingFilename, pstr(m.module));
      if (m.module < build_id_of_module_.size() && !build_id_of_module_[m.module].empty())
        mp.i64(field::kMappingBuildId, str(build_id_of_module_[m.module]));
      mp.boolean(field::kHasFunctions, true);  // every location carries a function
      mp.boolean(field::kHasFilenames, m.all_files);
      mp.boolean(field::kHasLineNumbers, m.all_lines);
      mp.boolean(field::kHasInlineFrames, m.all_lines);  // DWARF lines come with inline chains
      out.message(field::kMapping, mp);
    }
  }

  const Profile& p_;
  uint32_t default_metric_;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, int64_t> string_ids_;
  std::vector<int64_t> profile_str_;
  std::unordered_map<uint64_t, uint64_t> function_ids_;  // (name, file) string ids -> id
  std::vector<uint64_t> loc_of_frame_;                   // frame id -> location id (0: none yet)
  std::unordered_map<std::string, uint64_t> inline_locations_;  // frame id run -> location id
  std::unordered_map<std::string, uint64_t> marker_locations_;
  std::unordered_map<uint32_t, std::vector<uint64_t>> stack_locs_;
  std::vector<std::string> build_id_of_module_;  // module string index -> hex build id (Profile::modules)
  std::vector<uint64_t> mapping_of_module_;  // module string index -> mapping id (0: none yet)
  std::vector<ModuleInfo> modules_;
  uint64_t location_count_ = 0;
  ProtoWriter locations_, functions_;
};

Result<std::string> gzip(const std::string& in) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's. Level 1, as Go's runtime/pprof:
  // profiles compress well even so, and a million samples stay quick.
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return Error{"cannot start gzip compression (zlib deflateInit2 failed)"};
  std::string out;
  char buf[1 << 16];
  size_t pos = 0;
  int rc = Z_OK;
  // Chunks of at most 1 GiB: zlib counts with 32-bit lengths.
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && pos < in.size()) {
      size_t n = std::min<size_t>(in.size() - pos, size_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
      zs.avail_in = static_cast<uInt>(n);
      pos += n;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = deflate(&zs, pos == in.size() ? Z_FINISH : Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return Error{fmt::format("gzip compression failed (zlib error {})", rc)};
  return out;
}

}  // namespace

Result<std::string> pprof_proto(const Profile& p, const std::string& default_metric) {
  if (p.metrics.empty())
    return Error{"this profile has no metrics, so there is nothing to export; was it recorded by a "
                 "run that took no samples?"};
  const uint32_t def = detail::pick_metric(p, default_metric);
  if (def == profile::kNone)
    return Error{fmt::format("this profile has no metric '{}' (it has: {})", default_metric, detail::metric_names(p))};
  return Encoder(p, def).encode();
}

Result<std::string> export_pprof(const Profile& p, const std::string& default_metric) {
  auto proto = pprof_proto(p, default_metric);
  if (!proto) return proto;
  return gzip(*proto);
}

}  // namespace mlprof::report
