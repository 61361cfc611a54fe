// mlprof's own DWARF CFI stack unwinder for x86-64 (the approach of async-profiler's DwarfParser
// and FrameDesc): eh_frame.cpp turns every module's .eh_frame into a sorted table of rows once,
// outside signal context; the handler only does binary searches and reads from the stack.
//
// SIGNAL SAFETY. unwind_cfi() and every function marked `// signal-safe` run in the profiler's
// signal handler, on any thread, at any instruction. Allowed there: loads of the published
// snapshot (acquire), loads from the tables it points to, and 8-byte-aligned loads from the
// interrupted thread's stack inside [bounds.lo, bounds.hi). Forbidden: malloc/free/new, locks,
// stdio, any syscall (so errno is never touched), dlsym/dl_iterate_phdr (the loader lock may be
// held by the interrupted code), exceptions, and reading module memory: a concurrent dlclose
// may unmap it; the tables are our own copies.
//
// PUBLICATION. cfi_refresh_modules() (not signal-safe; serialised by a mutex) builds a new
// immutable Snapshot (modules' executable ranges sorted by address, each pointing to its Table
// of rows) in fresh mmap'd memory and publishes it with one release store. Tables of modules
// that did not change (same path and load bias) are shared with the previous snapshot instead
// of being parsed again.
//
// RECLAMATION (grace period). A handler may still be walking a snapshot, and its tables, after
// a refresh replaced it. Replaced snapshots and tables of unloaded modules are therefore put on
// a retired list with the time of retirement and unmapped only by a later refresh, once they
// have been retired for at least the grace period (2 s). An unwind takes well under 10 µs and
// never blocks, so 2 s is a margin of five orders of magnitude. (Chosen over a per-thread
// in-handler counter: it costs the handler nothing and needs no coordination with the
// sampler's thread registry. The residual risk is a thread stopped by a debugger in the middle
// of unwind_cfi for more than 2 s while another thread refreshes.)
// Memory comes from mmap, never malloc, so a malloc interposer cannot recurse into us.
//
// LOOKUP. Per frame: the previous frame's range is tried first, else a binary search over the
// snapshot's ranges; then a bucket index narrows the row search to a few rows (see Table).
// Measured on a 2-vCPU KVM EPYC: ~20 ns/frame with warm caches; a handler interrupting
// cache-hungry code pays cache/TLB misses (~7 us for 15 frames, libunwind: ~18 us).
// LOCKS. g_refresh_serial is held for a whole refresh (one at a time). g_refresh_mutex guards
// what a fork must not copy half-done: it is held while modules are listed and copied, and while
// a snapshot is published and old ones retired, but not while the copies are parsed (the long
// part). FORK: the writer's atfork handlers call cfi_fork_prepare / cfi_fork_done: a fork waits
// for g_refresh_mutex only (the child re-initialises both; tables a parent's refresh was still
// parsing are then private memory the child never uses).
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/clock.h"
#include "common/wire_format.h"
#include "preload/eh_frame.h"
#include "preload/unwinder.h"

namespace mlprof::preload {
namespace {

using cfi::Row;

struct Table {
  Table* retired_next;
  uint64_t retired_ns;
  size_t map_size;
  uint64_t generation;  // the last refresh that included this table (refresh-only field)
  uintptr_t bias;
  const Row* rows;
  uint32_t nrows;
  uint32_t path_len;
  const char* path;
  // A bucket index over the rows, so that a lookup touches two or three cache lines instead of
  // the ~17 of a binary search over all rows (which cost ~10 us per cold stack): bucket b covers
  // pc offsets [rows[0].pc + (b << shift), +1 << shift) and index[b] is the row in force at its
  // start. shift is chosen so that there are no more buckets than rows.
  const uint32_t* index;
  uint32_t nbuckets;  // (span >> shift) + 2, so index[b + 1] always exists for in-span pcs
  uint32_t shift;
};

struct Range {  // one cache line: the handler needs nothing from the Table header
  uintptr_t start, end;  // an executable PT_LOAD segment, absolute addresses
  uintptr_t bias;        // copies of the table's fields
  const Row* rows;
  const uint32_t* index;
  uint32_t nrows;
  uint32_t shift;
  const Table* table;
  uint64_t pad;
};
static_assert(sizeof(Range) == 64);

struct Snapshot {
  Snapshot* retired_next;
  uint64_t retired_ns;
  uint64_t serial;  // unique per published snapshot (never reused, unlike its address)
  size_t map_size;
  uint32_t nranges;
  uint32_t ntables;
  const Range* ranges;  // sorted by start, non-overlapping
  Table** tables;       // each distinct table once (refresh-only: reuse and retirement)
};

std::atomic<const Snapshot*> g_snapshot{nullptr};
uint64_t g_snapshot_serial = 0;  // refresh-only

// The hooks' row cache: the rows a thread's hook unwinds (unwind_cfi_here, unwind_cfi_caller)
// looked up, by pc. A CUDA launch loop or an allocation site unwinds the same 30-40 frames again
// and again, through tables of millions of rows (libtorch): a hit skips find_range and find_row
// and the cache lines they touch. Direct-mapped, per thread; emptied when the snapshot changes
// (its rows may be retired), told apart by serial, not address. Never used by signal handlers
// (a handler interrupting a hook's unwind on the same thread would see a half-written entry):
// they unwind without it.
struct RowCache {
  static constexpr uint32_t kEntries = 256;
  struct Entry {
    uint64_t pc;  // the lookup pc; 0: empty
    const Range* range;
    const Row* row;  // nullptr: no unwind info at pc (cached too)
  };
  uint64_t serial;
  Entry e[kEntries];
};
__thread RowCache t_row_cache __attribute__((tls_model("initial-exec")));
std::atomic<bool> g_row_cache_on{true};

// Whether the stack still holds the frames remembered above frame mk, whose CFA and pc the unwind
// in progress just found again with return address ra: each remembered frame's return address is
// where that unwind read it. Returns -1 when it does, else the remembered frame whose return
// address differs (no later match at a frame up to that one can hold either).
template <class Reader>
int memo_tail_check(const UnwindMemo& m, int mk, uint64_t ra, Reader& rd) {
  if (mk + 1 >= m.n || ra != m.pc[mk + 1]) return mk;
  for (int i = mk + 1; i + 1 < m.n; ++i) {
    uint64_t v;
    if (!rd(m.cfa[i] - 8, &v) || v != m.pc[i + 1]) return i;
  }
  return -1;
}

// ---- the handler side --------------------------------------------------------------------------

// signal-safe
inline bool read_stack(const StackBounds& b, uint64_t addr, uint64_t* out) {
  if ((addr & 7) != 0 || addr < b.lo || b.hi < 8 || addr > b.hi - 8) return false;
  *out = *reinterpret_cast<const uint64_t*>(addr);
  return true;
}

// signal-safe: the executable range holding pc; `hint` (the previous frame's) is tried first.
const Range* find_range(const Snapshot* s, uint64_t pc, const Range* hint) {
  if (hint && pc >= hint->start && pc < hint->end) return hint;
  if (!s || s->nranges == 0 || pc < s->ranges[0].start) return nullptr;
  uint32_t lo = 0, hi = s->nranges;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s->ranges[mid].start <= pc) lo = mid; else hi = mid;
  }
  return pc < s->ranges[lo].end ? &s->ranges[lo] : nullptr;
}

// signal-safe: the row in force at pc, or nullptr.
const Row* find_row(const Range* r, uint64_t pc) {
  if (!r || pc < r->bias || r->nrows == 0) return nullptr;
  uint64_t off = pc - r->bias;
  const Row* rows = r->rows;
  if (off < rows[0].pc) return nullptr;
  uint32_t last = r->nrows - 1;
  if (off >= rows[last].pc) return rows[last].cfa_kind == cfi::kCfaNone ? nullptr : &rows[last];
  uint64_t b = (off - rows[0].pc) >> r->shift;  // < nbuckets - 1 since off < rows[last].pc
  uint32_t a = r->index[b], z = r->index[b + 1];  // the answer is in [a, z]
  while (a < z) {
    uint32_t mid = a + (z - a + 1) / 2;
    if (rows[mid].pc <= off) a = mid; else z = mid - 1;
  }
  return rows[a].cfa_kind == cfi::kCfaNone ? nullptr : &rows[a];
}

}  // namespace

namespace {

// The unwinding loop, over a stack reader: `rd(addr, &out)` loads the 8 bytes at addr or returns
// false. In the signal handler the reader loads directly from the interrupted thread's own stack
// (DirectReader); the writer thread, unwinding another thread, copies through process_vm_readv
// (CopyReader). fp_valid: whether fp holds the frame's rbp (unknown rbp: rules that need it stop).
// signal-safe when Reader is
// leaf_is_return: pc is a return address (its lookup is pc - 1 like every caller frame's), not
// an interrupted instruction.
// cache: the calling thread's row cache (hook unwinds only), or nullptr; memo: its stack memo
// (unwinder.h; hook unwinds with the cache only), or nullptr.
template <class Reader>
UnwindResult unwind_loop(uint64_t pc, uint64_t sp, uint64_t fp, bool fp_valid, Reader& rd, uint64_t* pcs,
                         int max_frames, bool leaf_is_return = false, RowCache* cache = nullptr,
                         UnwindMemo* memo = nullptr) {
  UnwindResult res;
  if (max_frames <= 0) return res;
  bool fp_fallback_used = false;
  const Snapshot* snap = g_snapshot.load(std::memory_order_acquire);
  if (cache && (!snap || !g_row_cache_on.load(std::memory_order_relaxed))) cache = nullptr;
  if (cache && cache->serial != snap->serial) {
    memset(cache->e, 0, sizeof cache->e);
    cache->serial = snap->serial;
  }
  // The stack memo: this unwind's CFAs go to memo->scratch; mk walks the remembered frames up to
  // the current frame's CFA.
  if (!cache || max_frames > UnwindMemo::kFrames) memo = nullptr;
  if (memo && memo->serial != snap->serial) {
    memo->n = memo->ncfa = 0;
    memo->serial = snap->serial;
  }
  int mk = 0, ncfa = 0;
  const bool memo_off = !memo || memo->ncfa == 0;

  const Range* range = nullptr;
  pcs[0] = pc;
  int n = 1;
  if (pc == 0) return {n, wire::kStackUnwindStop};
  for (;;) {
    // Return addresses point after the call; the call itself (pc-1) may be the last
    // instruction of a function whose successor has different rules (noreturn calls).
    uint64_t lookup = (n == 1 && !leaf_is_return) ? pc : pc - 1;
    const Row* row;
    if (cache) {
      RowCache::Entry& e = cache->e[(lookup ^ (lookup >> 8) ^ (lookup >> 16)) & (RowCache::kEntries - 1)];
      if (e.pc == lookup && lookup != 0) {
        range = e.range;
        row = e.row;
      } else {
        range = find_range(snap, lookup, range);
        row = find_row(range, lookup);
        e = RowCache::Entry{lookup, range, row};
      }
    } else {
      range = find_range(snap, lookup, range);
      row = find_row(range, lookup);
    }
    uint64_t cfa = 0, ra = 0;
    if (!row) {
      // No unwind info: one frame-pointer step, if rbp looks like a frame above us.
      uint64_t next_fp;
      if (fp_fallback_used || !fp_valid || fp < sp || !rd(fp, &next_fp) || !rd(fp + 8, &ra)) {
        res.flags |= wire::kStackUnwindStop;
        break;
      }
      fp_fallback_used = true;
      cfa = fp + 16;
      fp_valid = next_fp > fp;  // the chain must grow towards the stack's base
      fp = next_fp;
    } else {
      switch (row->cfa_kind) {
        case cfi::kCfaOutermost: goto done;  // RA undefined: _start, clone3 -- a clean end
        case cfi::kCfaRsp: cfa = sp + int64_t(row->cfa_off); break;
        case cfi::kCfaRbp:
          if (!fp_valid) goto stop;
          cfa = fp + int64_t(row->cfa_off);
          break;
        case cfi::kCfaPlt: cfa = sp + int64_t(row->cfa_off) + ((int64_t(pc & 15) >= row->rbp_off) ? 8 : 0); break;
        case cfi::kCfaRbpDeref:
          if (!fp_valid || !rd(fp + int64_t(row->cfa_off), &cfa)) goto stop;
          break;
        default: goto stop;  // kCfaStop
      }
      if (!rd(cfa - 8, &ra)) goto stop;
      switch (row->rbp_kind) {
        case cfi::kRbpSame: break;
        case cfi::kRbpAtCfa:
          if (!rd(cfa + int64_t(row->rbp_off), &fp)) goto stop;
          fp_valid = true;
          break;
        case cfi::kRbpValCfa: fp = cfa + int64_t(row->rbp_off); fp_valid = true; break;
        default: fp_valid = false; break;
      }
    }
    if (cfa <= sp) goto stop;  // the stack must unwind towards its base
    if (memo) memo->scratch[n - 1] = cfa, ncfa = n;
    if (!memo_off) {
      while (mk < memo->ncfa && memo->cfa[mk] < cfa) ++mk;
      if (mk < memo->ncfa && memo->cfa[mk] == cfa && memo->pc[mk] == pc) {
        const int differs = memo_tail_check(*memo, mk, ra, rd);
        if (differs < 0) {
          for (int i = mk + 1; i < memo->n; ++i) {
            if (n >= max_frames) {
              res.flags |= wire::kStackTruncated;
              goto done;
            }
            if (i < memo->ncfa) memo->scratch[n] = memo->cfa[i], ncfa = n + 1;
            pcs[n++] = memo->pc[i];
          }
          res.flags |= memo->flags;
          ++memo->hits;
          goto done;
        }
        // The stack changed above remembered frame `differs`: a later match can only be at a
        // frame above it (each frame's return address is compared once per unwind).
        ++memo->rejects;
        mk = differs + 1;
      }
    }
    if (ra == 0) break;        // a zeroed return address ends the chain by convention
    if (n >= max_frames) {
      res.flags |= wire::kStackTruncated;
      break;
    }
    pcs[n++] = ra;
    pc = ra;
    sp = cfa;
    continue;
  stop:
    res.flags |= wire::kStackUnwindStop;
    break;
  }
done:
  res.nframes = n;
  if (memo) {
    memcpy(memo->pc, pcs, static_cast<size_t>(n) * sizeof(uint64_t));
    memcpy(memo->cfa, memo->scratch, static_cast<size_t>(ncfa) * sizeof(uint64_t));
    memo->n = n;
    memo->ncfa = ncfa;
    memo->flags = res.flags & (wire::kStackUnwindStop | wire::kStackTruncated);
  }
  return res;
}

struct DirectReader {  // signal-safe: the interrupted thread's own stack, inside its bounds
  const StackBounds& b;
  bool operator()(uint64_t addr, uint64_t* out) const { return read_stack(b, addr, out); }
};

// Another thread's stack, copied a page at a time with process_vm_readv on our own pid: the
// thread may wake up, return and even exit while we read, so its stack is never dereferenced
// directly (a read of an unmapped page fails with EFAULT instead of faulting). Not signal context.
class CopyReader {
 public:
  CopyReader(const StackBounds& b, pid_t pid) : b_(b), pid_(pid) {}
  bool operator()(uint64_t addr, uint64_t* out) {
    if ((addr & 7) != 0 || addr < b_.lo || b_.hi < 8 || addr > b_.hi - 8) return false;
    const uint64_t page = addr & ~uint64_t(kPage - 1);
    Page* p = nullptr;
    for (Page& c : pages_)
      if (c.valid && c.base == page) p = &c;
    if (!p) {
      p = &pages_[next_++ % kPages];
      p->valid = false;
      const uint64_t lo = page < b_.lo ? b_.lo : page;
      const uint64_t hi = page + kPage > b_.hi ? b_.hi : page + kPage;
      struct iovec local = {p->data + (lo - page), size_t(hi - lo)};
      struct iovec remote = {reinterpret_cast<void*>(lo), size_t(hi - lo)};
      ++reads;
      if (syscall(SYS_process_vm_readv, pid_, &local, 1UL, &remote, 1UL, 0UL) != long(hi - lo)) return false;
      p->base = page;
      p->valid = true;
    }
    memcpy(out, p->data + (addr - page), 8);
    return true;
  }
  int reads = 0;

 private:
  static constexpr uint64_t kPage = 4096;
  static constexpr int kPages = 4;
  struct Page {
    uint64_t base = 0;
    bool valid = false;
    alignas(8) uint8_t data[kPage];
  };
  const StackBounds& b_;
  pid_t pid_;
  Page pages_[kPages];
  unsigned next_ = 0;
};

}  // namespace

// signal-safe
UnwindResult unwind_cfi(const void* ucontext, const StackBounds& bounds, uint64_t* pcs, int max_frames) {
  if (max_frames <= 0 || !ucontext) return {};
  const mcontext_t& mc = static_cast<const ucontext_t*>(ucontext)->uc_mcontext;
  DirectReader rd{bounds};
  return unwind_loop(uint64_t(mc.gregs[REG_RIP]), uint64_t(mc.gregs[REG_RSP]), uint64_t(mc.gregs[REG_RBP]), true, rd,
                     pcs, max_frames);
}

bool cfi_ready() { return g_snapshot.load(std::memory_order_acquire) != nullptr; }

void cfi_set_row_cache(bool on) { g_row_cache_on.store(on, std::memory_order_relaxed); }

// noinline: its frame must be a real frame of the stack it unwinds.
__attribute__((noinline)) UnwindResult unwind_cfi_here(const StackBounds& bounds, uint64_t* pcs, int max_frames,
                                                       UnwindMemo* memo) {
  uint64_t rip, rsp, rbp;
  // The address of the lea itself, and rsp/rbp at that instruction: the CFI row in force at rip
  // describes exactly this rsp.
  asm volatile("1: lea 1b(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(rip), "=r"(rsp), "=r"(rbp));
  DirectReader rd{bounds};
  return unwind_loop(rip, rsp, rbp, true, rd, pcs, max_frames, false, &t_row_cache, memo);
}

// noinline: its frame is where the frame-pointer walk starts.
__attribute__((noinline)) UnwindResult unwind_cfi_caller(const StackBounds& bounds, uint64_t caller, uint64_t* pcs,
                                                         int max_frames, UnwindMemo* memo) {
  if (max_frames <= 0 || !cfi_ready()) return {0, wire::kStackUnwindStop};
  uint64_t fp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  for (int depth = 0; depth < kMaxOwnFrames; ++depth) {
    uint64_t next_fp, ra;
    if (!read_stack(bounds, fp, &next_fp) || !read_stack(bounds, fp + 8, &ra)) break;
    if (ra == caller) {
      // The hook's frame: the caller resumes at ra with rsp just above the return address and
      // its own rbp restored from the hook's saved rbp.
      DirectReader rd{bounds};
      return unwind_loop(ra, fp + 16, next_fp, true, rd, pcs, max_frames, true, &t_row_cache, memo);
    }
    if (next_fp <= fp) break;  // the chain must grow towards the stack's base
    fp = next_fp;
  }
  return {0, wire::kStackUnwindStop};
}

UnwindResult unwind_cfi_regs(uint64_t rip, uint64_t rsp, uint64_t rbp, const StackBounds& bounds, uint64_t* pcs,
                             int max_frames) {
  CopyReader rd(bounds, static_cast<pid_t>(syscall(SYS_getpid)));
  return unwind_loop(rip, rsp, rbp, rbp != 0, rd, pcs, max_frames);
}

// ---- the refresh side (not signal-safe) --------------------------------------------------------

namespace {

constexpr int kMaxRangesPerModule = 8;

pthread_mutex_t g_refresh_serial = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_refresh_mutex = PTHREAD_MUTEX_INITIALIZER;
Table* g_retired_tables = nullptr;
Snapshot* g_retired_snapshots = nullptr;
uint64_t g_generation = 0;
std::atomic<uint64_t> g_grace_ns{2'000'000'000};
cfi::RegistryStats g_stats;

void* map_zeroed(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

struct Pending {
  Table* table;  // null until built (or when the build failed: the module then gets no ranges)
  uint32_t nranges;
  uintptr_t start[kMaxRangesPerModule];
  uintptr_t end[kMaxRangesPerModule];
  // A module to build after the loader lock is released: a private copy of the bytes the parse
  // reads, followed by the module's path (the loader's string may be gone by then).
  char* copy;
  size_t copy_size;
  cfi::EhFrameSource src;  // module addresses; src.delta points them into the copy
  const char* path;        // inside the copy
  size_t path_len;
  uintptr_t bias;
  bool built_now;  // table parsed by this refresh (not carried over)
};

struct IterContext {
  const Snapshot* old;
  cfi::MmapArray* pendings;  // of Pending
  cfi::MmapArray* scratch;   // of Row
};

std::atomic<bool> g_cancel{false};  // cfi_cancel_refresh: parsing stops (exit, exec)
std::atomic<void (*)(const char*, bool)> g_parse_hook{nullptr};

Table* find_reusable(const Snapshot* old, const char* path, size_t path_len, uintptr_t bias) {
  if (!old) return nullptr;
  for (uint32_t i = 0; i < old->ntables; ++i) {
    Table* t = old->tables[i];
    if (t->bias == bias && t->path_len == path_len && memcmp(t->path, path, path_len) == 0) return t;
  }
  return nullptr;
}

// Where the module's eh_frame data lies (module addresses); false when it has no .eh_frame_hdr.
bool module_source(const dl_phdr_info* info, uintptr_t text_base, cfi::EhFrameSource* src) {
  const ElfW(Phdr)* hdr = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) hdr = &info->dlpi_phdr[i];
  if (!hdr) return false;
  src->eh_frame_hdr = info->dlpi_addr + hdr->p_vaddr;
  src->bias = info->dlpi_addr;
  src->text_base = text_base;
  src->cancel = &g_cancel;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && hdr->p_vaddr >= ph.p_vaddr && hdr->p_vaddr < ph.p_vaddr + ph.p_filesz) {
      src->lo = info->dlpi_addr + ph.p_vaddr;
      src->hi = src->lo + ph.p_filesz;
    }
  }
  return true;
}

// Parses src (null: a module without eh_frame data, which gets an empty table) into a new Table.
Table* build_table(const cfi::EhFrameSource* src, const char* path, size_t path_len, uintptr_t bias,
                   cfi::MmapArray& scratch) {
  scratch.clear();
  if (auto hook = g_parse_hook.load(std::memory_order_relaxed)) hook(path, !src || src->delta == 0);
  if (src && !cfi::parse_eh_frame(*src, scratch, nullptr)) scratch.clear();
  if (g_cancel.load(std::memory_order_relaxed)) return nullptr;
  size_t nrows = scratch.size();
  uint32_t shift = 4, nbuckets = 0;
  if (nrows) {
    uint64_t span = static_cast<Row*>(scratch.at(nrows - 1))->pc - static_cast<Row*>(scratch.at(0))->pc;
    while ((span >> shift) + 2 > nrows + 2) ++shift;
    nbuckets = uint32_t((span >> shift) + 2);
  }
  size_t size = sizeof(Table) + nrows * sizeof(Row) + nbuckets * sizeof(uint32_t) + path_len + 1;
  auto* mem = static_cast<char*>(map_zeroed(size));
  if (!mem) return nullptr;
  auto* t = reinterpret_cast<Table*>(mem);
  auto* rows = reinterpret_cast<Row*>(mem + sizeof(Table));
  for (size_t i = 0; i < nrows; ++i) memcpy(&rows[i], scratch.at(i), sizeof(Row));
  auto* index = reinterpret_cast<uint32_t*>(mem + sizeof(Table) + nrows * sizeof(Row));
  for (uint32_t b = 0, r = 0; b < nbuckets; ++b) {  // the last row with pc <= bucket start
    uint64_t start = uint64_t(rows[0].pc) + (uint64_t(b) << shift);
    while (r + 1 < nrows && rows[r + 1].pc <= start) ++r;
    index[b] = r;
  }
  char* p = reinterpret_cast<char*>(index + nbuckets);
  memcpy(p, path, path_len);
  t->map_size = size;
  t->bias = bias;
  t->rows = rows;
  t->nrows = uint32_t(nrows);
  t->path = p;
  t->path_len = uint32_t(path_len);
  t->index = index;
  t->nbuckets = nbuckets;
  t->shift = shift;
  return t;
}

// Copies the bytes of src that the parse reads, and the path, into one private mapping, and points
// pending->src at the copy. False when the extent is unknown (no search table) or out of memory.
bool copy_source(const cfi::EhFrameSource& src, const char* path, size_t path_len, Pending* pending) {
  uintptr_t lo, hi;
  if (!cfi::eh_frame_extent(src, &lo, &hi) || hi <= lo) return false;
  size_t size = (hi - lo) + path_len + 1;
  auto* copy = static_cast<char*>(map_zeroed(size));
  if (!copy) return false;
  memcpy(copy, reinterpret_cast<const void*>(lo), hi - lo);
  memcpy(copy + (hi - lo), path, path_len);
  pending->copy = copy;
  pending->copy_size = size;
  pending->src = src;
  pending->src.lo = lo;
  pending->src.hi = hi;
  pending->src.delta = reinterpret_cast<intptr_t>(copy) - static_cast<intptr_t>(lo);
  pending->path = copy + (hi - lo);
  pending->path_len = path_len;
  return true;
}

// Runs inside dl_iterate_phdr's callback, which holds the loader lock: the module cannot be
// unmapped meanwhile, and a thread calling dlopen/dlclose (an `import` of an extension module)
// waits. So new modules are only copied here (a memcpy of their .eh_frame_hdr and .eh_frame, a
// few ms for libtorch) and parsed after the lock is released (0.2-0.4 s for torch's libraries,
// which an import used to wait for); only a module without a search table is parsed in place.
int on_module(dl_phdr_info* info, size_t, void* data) {
  auto* ctx = static_cast<IterContext*>(data);
  if (g_cancel.load(std::memory_order_relaxed)) return 1;
  Pending pending{};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && ph.p_memsz && pending.nranges < kMaxRangesPerModule) {
      pending.start[pending.nranges] = info->dlpi_addr + ph.p_vaddr;
      pending.end[pending.nranges] = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
      ++pending.nranges;
    }
  }
  if (pending.nranges == 0) return 0;  // only code matters
  const char* path = info->dlpi_name ? info->dlpi_name : "";
  size_t path_len = strlen(path);
  pending.bias = info->dlpi_addr;
  Table* t = find_reusable(ctx->old, path, path_len, info->dlpi_addr);
  if (t) {
    ++g_stats.tables_reused;
  } else {
    cfi::EhFrameSource src;
    bool has_src = module_source(info, pending.start[0], &src);
    if (!has_src || !copy_source(src, path, path_len, &pending)) {
      t = build_table(has_src ? &src : nullptr, path, path_len, info->dlpi_addr, *ctx->scratch);
      if (!t) return 0;  // out of memory or cancelled: the module's pcs find no rows
      pending.built_now = true;
    }
  }
  pending.table = t;
  void* slot = ctx->pendings->push();
  if (!slot) {
    if (pending.copy) munmap(pending.copy, pending.copy_size);
    return 1;
  }
  memcpy(slot, &pending, sizeof pending);
  return 0;
}

void unmap_expired(uint64_t now) {
  uint64_t grace = g_grace_ns.load(std::memory_order_relaxed);
  for (Table** link = &g_retired_tables; *link;) {
    Table* t = *link;
    if (now - t->retired_ns >= grace) {
      *link = t->retired_next;
      munmap(t, t->map_size);
      --g_stats.retired;
      ++g_stats.freed;
    } else {
      link = &t->retired_next;
    }
  }
  for (Snapshot** link = &g_retired_snapshots; *link;) {
    Snapshot* s = *link;
    if (now - s->retired_ns >= grace) {
      *link = s->retired_next;
      munmap(s, s->map_size);
      --g_stats.retired;
      ++g_stats.freed;
    } else {
      link = &s->retired_next;
    }
  }
}

struct MutexGuard {
  explicit MutexGuard(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
  ~MutexGuard() { pthread_mutex_unlock(m_); }
  pthread_mutex_t* m_;
};

}  // namespace

bool cfi_refresh_modules() {
  MutexGuard serial(&g_refresh_serial);
  const Snapshot* old = g_snapshot.load(std::memory_order_relaxed);  // only refreshes store it
  cfi::MmapArray pendings(sizeof(Pending));
  cfi::MmapArray scratch(sizeof(Row));
  {
    MutexGuard guard(&g_refresh_mutex);
    IterContext ctx{old, &pendings, &scratch};
    dl_iterate_phdr(on_module, &ctx);
  }

  // Neither the loader lock nor g_refresh_mutex is held: parse the copies.
  bool any_rows = false;
  uint32_t nranges = 0, ntables = 0, built = 0;
  for (size_t i = 0; i < pendings.size(); ++i) {
    auto* p = static_cast<Pending*>(pendings.at(i));
    if (p->copy) {
      p->table = build_table(&p->src, p->path, p->path_len, p->bias, scratch);
      p->built_now = true;
      munmap(p->copy, p->copy_size);
      p->copy = nullptr;
    }
    if (!p->table) continue;  // out of memory or cancelled: the module's pcs find no rows
    if (p->table->nrows) any_rows = true;
    if (p->built_now) ++built;
    nranges += p->nranges;
    ++ntables;
  }
  MutexGuard guard(&g_refresh_mutex);
  g_stats.tables_built += built;
  if (g_cancel.load(std::memory_order_relaxed)) {  // keep the published snapshot as it is
    for (size_t i = 0; i < pendings.size(); ++i) {
      auto* p = static_cast<Pending*>(pendings.at(i));
      if (p->copy) munmap(p->copy, p->copy_size);
      if (p->built_now && p->table) munmap(p->table, p->table->map_size);
    }
    return old != nullptr;
  }
  size_t size = sizeof(Snapshot) + nranges * sizeof(Range) + ntables * sizeof(Table*);
  auto* mem = static_cast<char*>(map_zeroed(size));
  if (!mem) {  // keep the old snapshot; tables built for it now would leak, unpublished
    return old != nullptr;
  }
  auto* snap = reinterpret_cast<Snapshot*>(mem);
  auto* ranges = reinterpret_cast<Range*>(mem + sizeof(Snapshot));
  auto** tables = reinterpret_cast<Table**>(mem + sizeof(Snapshot) + nranges * sizeof(Range));
  ++g_generation;
  uint32_t k = 0, rows = 0, nt = 0;
  for (size_t i = 0; i < pendings.size(); ++i) {
    auto* p = static_cast<Pending*>(pendings.at(i));
    if (!p->table) continue;
    tables[nt++] = p->table;
    p->table->generation = g_generation;
    rows += p->table->nrows;
    for (uint32_t j = 0; j < p->nranges; ++j) ranges[k++] = Range{p->start[j], p->end[j], p->table->bias, p->table->rows, p->table->index,
                         p->table->nrows, p->table->shift, p->table, 0};
  }
  std::sort(ranges, ranges + nranges, [](const Range& a, const Range& b) { return a.start < b.start; });
  snap->map_size = size;
  snap->serial = ++g_snapshot_serial;
  snap->nranges = nranges;
  snap->ntables = ntables;
  snap->ranges = ranges;
  snap->tables = tables;
  g_snapshot.store(snap, std::memory_order_release);
  g_stats.modules = ntables;
  g_stats.rows = rows;

  uint64_t now = static_cast<uint64_t>(clock_ns());
  if (old) {
    for (uint32_t i = 0; i < old->ntables; ++i) {
      Table* t = old->tables[i];
      if (t->generation == g_generation) continue;  // still published
      t->retired_ns = now;
      t->retired_next = g_retired_tables;
      g_retired_tables = t;
      ++g_stats.retired;
    }
    auto* o = const_cast<Snapshot*>(old);
    o->retired_ns = now;
    o->retired_next = g_retired_snapshots;
    g_retired_snapshots = o;
    ++g_stats.retired;
  }
  unmap_expired(now);
  return any_rows;
}

void cfi_cancel_refresh(bool cancel) { g_cancel.store(cancel, std::memory_order_relaxed); }

void cfi_fork_prepare() { pthread_mutex_lock(&g_refresh_mutex); }

void cfi_fork_done(bool child) {
  if (child) {  // the forking thread is the only one: a refresh the writer had begun is gone
    pthread_mutex_init(&g_refresh_serial, nullptr);
    pthread_mutex_init(&g_refresh_mutex, nullptr);
  } else {
    pthread_mutex_unlock(&g_refresh_mutex);
  }
}

namespace cfi {

RegistryStats registry_stats() {
  MutexGuard guard(&g_refresh_mutex);
  return g_stats;
}

void set_grace_period_ns(uint64_t ns) { g_grace_ns.store(ns, std::memory_order_relaxed); }

void set_parse_hook(void (*hook)(const char*, bool)) { g_parse_hook.store(hook, std::memory_order_relaxed); }

}  // namespace cfi
}  // namespace mlprof::preload
