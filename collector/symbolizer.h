// Turns native pcs into function / file / line frames, inlined calls expanded, using elfutils
// libdw. Works on files on disk (offline): each distinct ELF file gets its own Dwfl, reported at
// bias 0, and is looked up by file-relative address (pc - load bias), so one file's state and
// cache serve every process that mapped it, wherever ASLR put it.
//
// Never fails: missing debug info degrades to symbol-table names, missing symbols to an empty
// function (the caller prints module+0xOFFSET), a missing or changed file to an empty frame and a
// warning. Not thread-safe (the collector symbolizes from one thread).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlprof::collector {

struct ModuleInfo {
  std::string path;          // ELF file on disk (absolute); may be "[vdso]" or missing on disk
  uint64_t load_bias = 0;    // dlpi_addr from dl_iterate_phdr: runtime address = file vaddr + bias
  std::string build_id;      // raw bytes of NT_GNU_BUILD_ID from the process's memory; may be empty
};

// Raw build-id bytes as lowercase hex ("" for none).
std::string build_id_hex(const std::string& bytes);

struct SymFrame {
  std::string function;  // demangled name; empty if unknown
  std::string file;      // absolute source path when known; empty if unknown
  uint32_t line = 0;     // 0 if unknown
  bool inlined = false;  // true for every frame except the outermost (the real function)
};

struct SymResult {
  // Innermost first: inlined callees, then the containing function. Never empty.
  std::vector<SymFrame> frames;
  uint64_t module_offset = 0;  // file-relative address looked up (pc - bias, -1 for return addrs)
  // For a pc in no named function: the file-relative start of the function containing it, from
  // the unwind table (.eh_frame_hdr, present in stripped files too); kNoStart when not known.
  static constexpr uint64_t kNoStart = UINT64_MAX;
  uint64_t unnamed_start = kNoStart;
};

class Symbolizer {
 public:
  // extra_debug_dirs: searched (before the system default /usr/lib/debug) for separate debug
  // files, both as <dir>/.build-id/xx/rest.debug and by .gnu_debuglink name.
  explicit Symbolizer(std::vector<std::string> extra_debug_dirs = {});
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Registers a module; returns a handle (>= 0). Cheap: the file is opened on first use, and
  // modules with the same path and build id share state and cache.
  int add_module(const ModuleInfo& m);

  // Symbolizes a runtime pc of `module`. is_return_address: pc is a return address, so pc-1 is
  // looked up (the line of the call, inside the calling function). The reference stays valid
  // for the Symbolizer's lifetime. An unknown handle gives an empty frame.
  const SymResult& symbolize(int module, uint64_t pc, bool is_return_address);

  // Human-readable, deduplicated warnings so far, in the order they arose. A module's problems
  // are found when it is first symbolized, so only modules that appear in stacks warn.
  std::vector<std::string> warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlprof::collector
