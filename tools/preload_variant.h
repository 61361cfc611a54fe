// Which preload mlprof-run injects. libmlprof_preload.so is the default; libmlprof_preload_new.so
// is the same library plus hooks of C++ operator new/delete (preload/new_hooks.cpp), for programs
// whose LD_PRELOAD already holds an allocator that defines operator new itself (tcmalloc,
// jemalloc): that operator new never calls malloc, so only the variant sees C++ allocations.
#pragma once
#include <string>

namespace mlprof::tools {

// The first library of an LD_PRELOAD value (entries separated by ':' or spaces, as ld.so reads
// them) whose dynamic symbol table defines operator new (_Znwm); "" when none does. Bare names
// are looked up in LD_LIBRARY_PATH and the usual system library directories; a library that
// cannot be found or read counts as not defining it.
std::string library_defining_operator_new(const std::string& ld_preload);

// Whether the ELF shared object at `path` defines `symbol` in its dynamic symbol table.
bool elf_defines(const std::string& path, const char* symbol);

}  // namespace mlprof::tools
