// Memory profiling of Python objects: CPython's own allocator (pymalloc) serves most objects
// from arenas it carves itself, so malloc never sees them. Once an interpreter mlprof can read
// is running, the writer wraps the MEM and OBJ allocator domains (PyMem_GetAllocator /
// PyMem_SetAllocator, found with dlsym(RTLD_DEFAULT)): each wrapper calls the original allocator
// and samples the block like malloc does (AllocKind::kPython), with the Python frames of the
// calling thread. See docs/how-it-works.md ("Memory") for why this and not arena attribution or
// PYTHONMALLOC=malloc.
//
// The wrappers ignore their ctx argument and call the saved originals through globals, and the
// struct given to PyMem_SetAllocator carries the ORIGINAL ctx: a thread that reads the allocator
// struct while it is being replaced (a torn read: new function and old ctx, or the reverse) still
// ends up in the original allocator with its own ctx. The guard is held around the original
// call, so its nested malloc/mmap (large objects, new arenas) is not counted a second time;
// except, when the original is pymalloc, for requests of 1-512 bytes, which pymalloc serves
// from its pools: those tail-jump to it, and its arena allocator is wrapped to take the guard.
// The bookkeeping pymalloc does for a new arena in such a call (malloc'd, outside the guard) is
// recognised by its stack and dropped (mem::ThreadState::py_fast_ra, mem_profiler.cpp).
// Frees: when the original is pymalloc (and the interval is 64 KiB or more), its own free is
// installed, unwrapped, and a block to be sampled is asked for at 513 bytes or more, which
// pymalloc takes from malloc and gives back to free, where mlprof's libc hook sees it
// (mem_python.cpp, g_bump, install). Otherwise a free wrapper drops sampled blocks. Code
// objects' frees are seen at their type's dealloc (python.h).
// Writer thread only (try_hook, check_hook); the wrappers run on Python threads, not in signal context.
#pragma once

namespace mlprof::preload::mem {

// Wraps the domains once the interpreter is initialised (Py_IsInitialized): before that, its
// start-up may still replace the allocators. true once they are wrapped (and from then on).
// Needs a supported interpreter (python::detect()) and memory profiling on.
bool python_try_hook();

// Once hooked, each writer cycle: has someone replaced the wrappers? tracemalloc.stop() restores
// the allocator tracemalloc saved when it started, which drops mlprof's wrappers when tracemalloc
// had started first (PYTHONTRACEMALLOC, or tracemalloc.start() before mlprof hooked). A
// replacement that stays for two cycles is wrapped again, with a fresh generation of wrappers
// (at most 8 in a process's life; then kLost, once).
enum class HookCheck { kHooked, kRewrapped, kLost };
HookCheck python_check_hook();

}  // namespace mlprof::preload::mem
