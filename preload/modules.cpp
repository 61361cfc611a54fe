#include "preload/modules.h"

#include <elf.h>
#include <limits.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace mlprof::preload {
namespace {

std::string read_build_id(const struct dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr)* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof(ElfW(Nhdr));
      size_t name_sz = (nh->n_namesz + 3) & ~3u;
      const uint8_t* desc = name + name_sz;
      size_t desc_sz = (nh->n_descsz + 3) & ~3u;
      if (desc + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0)
        return std::string(reinterpret_cast<const char*>(desc), nh->n_descsz);
      p = desc + desc_sz;
    }
  }
  return {};
}

struct ScanState {
  std::vector<ModuleRecord>* out;
  const std::vector<ModuleRecord>* known = nullptr;
  unsigned long long adds = 0, subs = 0;
};

// The known record of the module the loader lists at `bias` under `name`, or null.
const ModuleRecord* find_known(const std::vector<ModuleRecord>* known, uint64_t bias, const char* name) {
  if (!known) return nullptr;
  for (const ModuleRecord& k : *known)
    if (k.load_bias == bias && k.loader_name == name) return &k;
  return nullptr;
}

int collect(struct dl_phdr_info* info, size_t size, void* data) {
  auto* st = static_cast<ScanState*>(data);
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    st->adds = info->dlpi_adds;
    st->subs = info->dlpi_subs;
  }
  if (!st->out) return 1;  // only the counters were wanted
  const char* name = info->dlpi_name;
  const bool named = name != nullptr && name[0] != '\0';
  const ModuleRecord* k = named || st->out->empty() ? find_known(st->known, info->dlpi_addr, named ? name : "") : nullptr;
  if (k) {
    st->out->push_back(*k);
    return 0;
  }
  ModuleRecord m;
  m.load_bias = info->dlpi_addr;
  m.loader_name = name ? name : "";
  if (name == nullptr || name[0] == '\0') {
    if (st->out->empty()) {  // the first entry is the main program
      char exe[PATH_MAX];
      ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      if (n > 0) m.path.assign(exe, static_cast<size_t>(n));
    }
  } else if (strncmp(name, "linux-vdso", 10) == 0 || strncmp(name, "linux-gate", 10) == 0) {
    m.path = "[vdso]";
  } else {
    char real[PATH_MAX];
    m.path = realpath(name, real) ? real : name;
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      m.exec_ranges.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (m.path.empty() || m.exec_ranges.empty()) {
    // Keep the main-program slot even when nameless so "first entry" stays detectable.
    if (!st->out->empty() || m.exec_ranges.empty()) return 0;
  }
  m.build_id = read_build_id(info);
  st->out->push_back(std::move(m));
  return 0;
}

}  // namespace

bool ModuleMap::changed() const {
  ScanState st{nullptr};
  dl_iterate_phdr(collect, &st);
  return st.adds != adds_ || st.subs != subs_;
}

void ModuleMap::rescan(std::vector<ModuleRecord>& added, std::vector<uint32_t>& removed) {
  std::vector<ModuleRecord> now;
  ScanState st{&now, &known_};
  dl_iterate_phdr(collect, &st);
  adds_ = st.adds;
  subs_ = st.subs;
  auto same = [](const ModuleRecord& a, const ModuleRecord& b) {
    return a.load_bias == b.load_bias && a.path == b.path;
  };
  std::vector<ModuleRecord> next;
  for (auto& m : now) {
    auto it = std::find_if(known_.begin(), known_.end(), [&](const ModuleRecord& k) { return same(k, m); });
    if (it != known_.end()) {
      next.push_back(*it);
    } else {
      m.id = next_id_++;
      added.push_back(m);
      next.push_back(std::move(m));
    }
  }
  for (auto& k : known_) {
    if (std::none_of(next.begin(), next.end(), [&](const ModuleRecord& m) { return same(k, m); }))
      removed.push_back(k.id);
  }
  known_ = std::move(next);
}

}  // namespace mlprof::preload
