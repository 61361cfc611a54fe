// The process's module map (dl_iterate_phdr), for MODULE_LOAD/UNLOAD records. Writer thread only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlprof::preload {

struct ModuleRecord {
  uint32_t id = 0;
  uint64_t load_bias = 0;
  std::string path;      // absolute path; "[vdso]" for the vDSO
  std::string build_id;  // raw bytes of NT_GNU_BUILD_ID, may be empty
  std::vector<std::pair<uint64_t, uint64_t>> exec_ranges;  // [start, end) of executable segments
  std::string loader_name;  // dl_iterate_phdr's dlpi_name as given (not sent): tells a known module
};

class ModuleMap {
 public:
  // Cheap check (the loader's add/remove counters) whether a rescan is needed.
  bool changed() const;
  // Rescans; appends newly loaded modules to `added` and ids of vanished ones to `removed`. A module
  // already known (same load address, same loader name) is not looked at again: resolving every
  // path (realpath: a readlink per path component) on every rescan made importing numpy, scipy
  // and scikit-learn, which load ~150 libraries one after another, cost the writer ~50,000
  // readlink calls.
  void rescan(std::vector<ModuleRecord>& added, std::vector<uint32_t>& removed);
  // Forget everything (fork child: the new stream must announce every module again).
  void reset() { known_.clear(); adds_ = subs_ = ~0ull; }

 private:
  std::vector<ModuleRecord> known_;
  uint32_t next_id_ = 1;
  unsigned long long adds_ = ~0ull, subs_ = ~0ull;
};

}  // namespace mlprof::preload
