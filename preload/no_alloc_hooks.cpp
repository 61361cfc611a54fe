// libmlprof_preload_cpu.so, the CPU-only preload (mlprof-run --no-memory): it exports no
// allocation or copy functions (memory_entry.cpp, memory_hooks.cpp are not in it), so a program's
// malloc, free and memcpy calls go straight to libc instead of through an entry that would only
// forward them (~1.3 ns a call: 3% of a program that does nothing but allocate). What the
// constructor calls of the hooks is answered here: there are none.
#include "preload/mem_profiler.h"

namespace mlprof::preload::mem {

void hooks_init() {}
bool alloc_hooks_present() { return false; }

}  // namespace mlprof::preload::mem
