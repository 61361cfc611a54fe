// Parsing of a module's .eh_frame_hdr / .eh_frame into a compact, sorted table of unwind rows
// (x86-64 only), and the internal interface of mlprof's CFI unwinder (unwind_cfi.cpp).
//
// NOT signal-safe, except where marked: parsing runs in cfi_refresh_modules(). Only the Row
// layout and the lookup helpers marked `// signal-safe` are used by the handler.
//
// The approach is async-profiler's (DwarfParser / FrameDesc): run every FDE's CFA program once,
// outside signal context, and keep for each pc range only what an x86-64 frame-walker needs:
// how to compute the CFA (rsp+off or rbp+off), where rbp was saved, and whether the return
// address is defined at all. The return address is always at CFA-8 on x86-64 (the call pushed
// it); FDEs that say otherwise (signal trampolines, hand-written asm) get a "stop" row.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mlprof::preload::cfi {

enum CfaKind : uint8_t {
  kCfaRsp = 0,        // cfa = rsp + cfa_off
  kCfaRbp = 1,        // cfa = rbp + cfa_off
  kCfaPlt = 2,        // the linker's PLT expression: cfa = rsp + cfa_off + ((pc & 15) >= rbp_off ? 8 : 0)
  kCfaRbpDeref = 3,   // cfa = *(rbp + cfa_off)  (GCC's stack realignment, DW_OP_breg6 off; DW_OP_deref)
  kCfaNone = 4,       // no FDE covers this pc (gap between FDEs, end of the last FDE)
  kCfaStop = 5,       // unwind info we do not model: stop here, flagged
  kCfaOutermost = 6,  // the return address is undefined: _start, clone3; a clean end
};

enum RbpKind : uint8_t {
  kRbpSame = 0,     // rbp is unchanged in the caller
  kRbpAtCfa = 1,    // the caller's rbp is saved at cfa + rbp_off
  kRbpValCfa = 2,   // the caller's rbp = cfa + rbp_off
  kRbpUnknown = 3,  // not recoverable (in another register, an expression): rbp-based CFAs stop
};

// One row: valid from `pc` (offset from the module's load bias) up to the next row's pc.
struct Row {
  uint32_t pc;
  int32_t cfa_off;
  int16_t rbp_off;  // for kCfaPlt: the threshold of the (pc & 15) test instead
  uint8_t cfa_kind;
  uint8_t rbp_kind;
};
static_assert(sizeof(Row) == 12, "keep rows compact");

// A growable array of trivially copyable T in its own anonymous mapping. Never malloc: a future
// malloc interposer must not recurse into the unwinder's bookkeeping. Not signal-safe.
class MmapArray {
 public:
  explicit MmapArray(size_t elem_size) : elem_size_(elem_size) {}
  ~MmapArray();
  MmapArray(const MmapArray&) = delete;
  MmapArray& operator=(const MmapArray&) = delete;
  void* push();  // a zeroed slot at the end, or nullptr when out of memory
  void clear() { size_ = 0; }
  void pop() { if (size_) --size_; }
  size_t size() const { return size_; }
  void* at(size_t i) const { return static_cast<char*>(data_) + i * elem_size_; }
  bool failed() const { return failed_; }

 private:
  void* data_ = nullptr;
  size_t elem_size_;
  size_t size_ = 0;
  size_t cap_bytes_ = 0;
  bool failed_ = false;
};

// Where a module's eh_frame data can be read: [lo, hi) is the loaded segment that holds
// .eh_frame_hdr (and, with every linker we know of, .eh_frame); reads outside it are refused.
// All fields are the module's own addresses; `delta` says where their bytes are read.
struct EhFrameSource {
  uintptr_t eh_frame_hdr = 0;
  uintptr_t lo = 0;
  uintptr_t hi = 0;
  uintptr_t bias = 0;       // the module's load bias: row pcs are offsets from it
  uintptr_t text_base = 0;  // base for DW_EH_PE_textrel (start of the first executable segment)
  intptr_t delta = 0;       // the byte at address a is read at a + delta: 0 in place, else a copy's offset
  const std::atomic<bool>* cancel = nullptr;  // when it turns true, parsing stops (returns false)
};

// The bytes parse_eh_frame reads for a module whose .eh_frame_hdr has a search table, as module
// addresses [*start, *end) within [src.lo, src.hi): the header and its table, and .eh_frame from
// its start to the end of the last FDE (every CIE precedes the FDEs that use it). False when
// there is no table (the walk of .eh_frame has no known end) or the header is unusable.
// unwind_cfi.cpp copies these bytes while the loader lock keeps the module mapped, then parses
// the copy without the lock.
bool eh_frame_extent(const EhFrameSource& src, uintptr_t* start, uintptr_t* end);

struct ParseStats {
  uint32_t fdes = 0;      // FDEs turned into rows
  uint32_t bad_fdes = 0;  // FDEs skipped (bad encoding, out of range) or cut short (unknown opcode)
};

// Appends the rows of every FDE listed by the module's .eh_frame_hdr to `rows` (elements of
// type Row), then sorts and compacts them. Returns false if the header is unusable or parsing
// was cancelled.
bool parse_eh_frame(const EhFrameSource& src, MmapArray& rows, ParseStats* stats);

// Sorts rows by pc (a real row wins over a kCfaNone end marker at the same pc) and drops rows
// that repeat their predecessor. Returns the new count.
size_t sort_and_compact(Row* rows, size_t n);

// signal-safe: the row covering pc_off (offset from the load bias), or nullptr.
inline const Row* find_row(const Row* rows, uint32_t n, uint64_t pc_off) {
  if (n == 0 || pc_off < rows[0].pc || pc_off > 0xffffffffu) return nullptr;
  uint32_t lo = 0, hi = n;  // invariant: rows[lo].pc <= pc_off, answer in [lo, hi)
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (rows[mid].pc <= pc_off) lo = mid; else hi = mid;
  }
  return rows[lo].cfa_kind == kCfaNone ? nullptr : &rows[lo];
}

// Diagnostics and test hooks of the unwinder's module registry (unwind_cfi.cpp). Not signal-safe.
struct RegistryStats {
  uint32_t modules = 0;        // modules with executable segments in the published snapshot
  uint32_t rows = 0;           // rows over all of them
  uint32_t tables_built = 0;   // tables parsed since start (reused ones are not parsed again)
  uint32_t tables_reused = 0;  // tables carried over from the previous snapshot
  uint32_t retired = 0;        // snapshots + tables waiting for their grace period
  uint32_t freed = 0;          // snapshots + tables unmapped since start
};
RegistryStats registry_stats();
// The grace period before retired tables are unmapped (default 2 s); tests shorten it.
void set_grace_period_ns(uint64_t ns);
// Tests: called on the refreshing thread before each module's table is parsed, with whether it
// is parsed in place (inside dl_iterate_phdr, the loader lock held) or from a copy (without it).
void set_parse_hook(void (*hook)(const char* path, bool in_place));

}  // namespace mlprof::preload::cfi
