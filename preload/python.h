// Reading CPython's own structures from inside the process: which interpreter is loaded, and in
// the signal handler, the interrupted thread's Python frames (code object + instruction offset).
// Layouts per version for 3.8–3.12, _Py_DebugOffsets for 3.13+ (see docs/python.md).
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "preload/fmix.h"

namespace mlprof::preload::python {

// Line table formats, as shipped to the collector.
enum class TableFormat : uint8_t {
  kLnotab = 0,       // <= 3.9 co_lnotab
  kLinetable310 = 1, // 3.10 co_linetable (PEP 626)
  kLocations311 = 2, // >= 3.11 co_linetable (location table)
};

enum FrameFlags : uint8_t {
  kFrameEntry = 1,  // this frame was entered by a new C-level call of the eval loop (3.11 is_entry;
                    // 3.12+: the frame below a CSTACK shim; <= 3.10: every frame)
  kFrameInGc = 2,   // innermost frame of a CPU / wall sample: the thread is the one collecting
                    // (its interpreter's gc.collecting set, and it held the GIL when a sample first
                    // saw it set: python.cpp, gc_owner_is)
};

// One Python frame as the handler records it.
struct RawPyFrame {
  uint64_t code;          // address of the code object
  uint32_t instr_offset;  // byte offset of the current instruction in the code's bytecode;
                          // kBeforeStart when the frame has not started yet
  uint8_t flags;          // FrameFlags
  uint8_t fp[3];          // fingerprint24() of the code object when sampled (little-endian)
};
inline constexpr uint32_t kBeforeStart = UINT32_MAX;

enum SampleFlags : uint8_t {
  kSampleHasPython = 1,  // the thread has a Python thread state
  kSampleGilHeld = 2,    // the thread held the GIL when interrupted
  kSampleWalkFailed = 4, // the frame chain was inconsistent (a read failed or a check did not hold)
  kSampleNewCode = 8,    // a code object the writer has not named was among the frames: the writer
                         // should read it soon (an imported module's <module> code lives for ms)
};

struct Interpreter {
  bool present = false;       // a CPython runtime is in the process
  bool supported = false;     // and mlprof can read its frames
  uint32_t version_hex = 0;   // PY_VERSION_HEX, e.g. 0x030b07f0
  std::string description;    // "CPython 3.11.7" or why it is not supported
};

// Not signal-safe. Detects the interpreter (symbols resolved with dlsym, PLT entries bound,
// layout chosen). Called at start and when modules change (Python embedded via dlopen).
// Idempotent once an interpreter was found.
const Interpreter& detect();

// Where a walk runs: in a signal handler (possibly on a small altstack: small read buffers), in
// a hook on the thread's own stack (native memory hooks: ~7 KiB of buffers, a quarter of the
// reads on deep stacks; plain copies while the thread holds the GIL, see walk()), in a library
// call made from C code (kOwnCall: GPU callbacks), or in CPython's own allocator call
// (kPythonAllocator: the MEM and OBJ domain wrappers, which CPython calls with the GIL held from
// code whose frame chain is complete: the walk reads it directly, no syscall; see walk()).
enum class WalkContext : uint8_t { kSignal, kHook, kPythonAllocator, kOwnCall };

// signal-safe. Walks the calling thread's Python frames, innermost first, into out[0..max).
// Returns the count; *sample_flags gets SampleFlags. In a signal handler, and in a hook or call
// without the GIL, every read of interpreter memory is fault-tolerant (a bad pointer ends the
// walk with kSampleWalkFailed, never a crash). In kPythonAllocator it is a plain copy: the frame
// chain, its code objects and the thread state are what CPython's tracemalloc reads with plain
// loads from the very same calls (its traceback_get_frames, 3.8-3.13), so they are live and
// consistent there; the values are still checked as in the other contexts. Only for a sample
// taken inside a PyMem_/PyObject_ allocator call of the calling thread. kHook: plain copies when
// the thread holds the GIL (the test below), else fault-tolerant: a native allocation with the
// GIL held is made either through PyMem_RawMalloc, where CPython's tracemalloc takes the GIL (a
// no-op for its holder) and reads the same frames with plain loads (its raw-domain hook,
// 3.8-3.13), or by C code holding the GIL, which may as well call PyObject_Malloc there.
// kOwnCall: a callback inside a library call the calling thread made from C code (a CUDA API
// call: gpu_cupti.cpp); plain copies as in kPythonAllocator when the thread holds the GIL
// (checked with plain loads of the GIL holder: <= 3.11 the runtime's tstate_current, 3.12+ the
// main interpreter's GIL), which makes the state the same as in any C extension code that may
// allocate, where tracemalloc reads it; also on the interpreter's main thread
// (_PyRuntime.main_thread) without the GIL (PyTorch releases it around each operator: its
// launches come that way), whose state shutdown never frees under it (shutdown runs there); else
// fault-tolerant as a hook (another thread without the GIL may be a daemon thread whose state
// interpreter shutdown frees).
// own_stack_lo/hi (kHook, kOwnCall): the calling thread's stack when the caller knows it (its
// ThreadSlot's bounds), else 0, 0. What the walk reads between its own frame and the top (3.11/3.12
// the _PyCFrame, 3.12+ the eval loop's C-stack entry frames) is then copied instead of read with a
// syscall: those are its callers' live frames. kSignal: the interrupted code's live stack, from
// its stack pointer to the top of the thread's stack (empty when the pointer lies elsewhere),
// copied likewise. And a hook's walk guesses where the thread's frames start from its previous
// walk, reading them with the thread state (python.cpp, WalkGuess).
int walk(RawPyFrame* out, int max, uint8_t* sample_flags, WalkContext ctx = WalkContext::kSignal,
         uint64_t own_stack_lo = 0, uint64_t own_stack_hi = 0);

// Code-object frees, seen at PyCode_Type.tp_dealloc, which mlprof replaces with its own
// forwarding function once memory profiling hooks the interpreter (track_code_frees). While
// tracked, the walker's cache entry of a code object is dropped before the object is freed, so a
// hook walk (WalkContext::kHook: the thread's own, consistent frames) can trust the fingerprint
// it cached with the entry instead of reading it from every frame's code object each time (one
// page pinned per frame by process_vm_readv, ~0.6 us). g_code_track holds the tracking epoch
// (0: off, 1 once tracking started): fingerprints cached before it carry no epoch and are not trusted.
extern std::atomic<uint32_t> g_code_track;
extern uint64_t g_code_type_addr;  // &PyCode_Type once detected
// Writer thread. track_code_frees: installs the dealloc hook and starts an epoch (once; not when
// no interpreter was detected). check_code_frees, each cycle: tracking stops for
// good when someone replaced the hook.
void track_code_frees();
void check_code_frees();
void forget_code(uint64_t addr);

// The code objects the writer has named (its code table) in a fixed table a signal handler can
// read: one entry per address, holding the fingerprint24 of the code object last named there
// (naming another one at that address replaces it). A walk that met a code object its cache did
// not hold wakes the writer, to read it while it lives, only when some frame's (address,
// fingerprint) is not in this table: two hot code objects sharing a slot of the walker's cache
// otherwise woke the writer at nearly every sample (the example HTTP service: 87 writer cycles a
// second instead of ~26, each a wake-up of a thread in the profiled process). Writer thread:
// note_code_named (a full probe run leaves the address out: its code objects wake the writer as
// before), forget_named_codes (a new stream). code_was_named: signal-safe.
void note_code_named(uint64_t code, uint32_t fp);
void forget_named_codes();
bool code_was_named(uint64_t code, uint32_t fp);

// NOT signal-safe: the writer thread (wall mode). Walks ANOTHER thread's Python frames: finds its
// thread state in the interpreters' thread lists (native_thread_id == tid on 3.11+, or
// thread_id == pthread_id, its pthread_self()) and walks it like walk(), with the same
// fault-tolerant reads. 0 frames and no flags when the thread has no thread state.
int walk_thread(uint64_t pthread_id, uint32_t tid, RawPyFrame* out, int max, uint8_t* sample_flags);

struct CodeInfo {
  std::string filename;
  std::string qualname;   // co_qualname (3.11+), else co_name
  uint32_t firstlineno = 0;
  std::string linetable;  // raw bytes of co_lnotab / co_linetable
  TableFormat format = TableFormat::kLnotab;
};

// Not signal-safe (the writer thread). Reads a code object with fault-tolerant reads; false if
// `code` is not (or no longer) a code object.
bool read_code(uint64_t code, CodeInfo* out);

// Not signal-safe (the writer thread). A fingerprint of the code object at `code` (its filename and
// name objects and first line), or 0 when it is not a code object: tells a code object from
// another one later allocated at the same address.
uint64_t code_identity(uint64_t code);

// signal-safe. The hash code_identity() returns, from the three fields it covers. Every input bit
// reaches the top 24 bits (fingerprint24): two functions of one file differ by their name objects'
// addresses, often by a few dozen bytes; until session 15 the name was only added in, so with the
// same filename object and first line such fingerprints were always equal (a code object compiled
// at a freed one's address then took its name: the rare 3.12/3.13 failures of
// PythonMemory.AllocationsInReplacedCodeObjectsStayOnTheirOwnLines).
inline uint64_t identity_hash(uint64_t filename, uint64_t name, int32_t firstlineno) {
  uint64_t h = fmix64(filename ^ 0x9e3779b97f4a7c15ull);
  h = fmix64(h ^ name);
  h = fmix64(h ^ static_cast<uint32_t>(firstlineno));
  return h | 1;  // never 0
}
// The 24 bits of an identity that the handler stores with each frame (RawPyFrame::fp): the writer
// names a frame only if the code object at its address still has them (a code object freed
// between the sample and the writer's read, its address reused, must not lend its name).
inline uint32_t fingerprint24(uint64_t identity) { return static_cast<uint32_t>(identity >> 40) & 0xffffffu; }
inline uint32_t frame_fingerprint(const RawPyFrame& f) { return f.fp[0] | (f.fp[1] << 8) | (uint32_t{f.fp[2]} << 16); }

}  // namespace mlprof::preload::python
