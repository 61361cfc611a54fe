// The two macros of the preload's exported entries (memory_entry.cpp, memory_hooks.cpp,
// new_hooks.cpp, gpu_interpose.cpp): MLPROF_EXPORT gives a function C linkage and default
// visibility (the preload is built with hidden visibility), so the program's calls through its
// PLT resolve to it; MLPROF_CALLER is the entry's return address as a u64, the allocation's or
// call's site when the stack is not walked; expand it in the exported function itself (in a
// helper that is not inlined it would name the entry instead of the program's call).
#pragma once
#include <cstdint>

#define MLPROF_EXPORT extern "C" __attribute__((visibility("default")))
#define MLPROF_CALLER reinterpret_cast<uint64_t>(__builtin_return_address(0))
