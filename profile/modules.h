// What kind of code a module (a mapped file's path, as frames and functions name it) holds.
#pragma once
#include <string_view>

namespace mlprof::profile {

// The C runtime libraries (libc, libm, libpthread, the loader, libdl, librt, the vdso) and
// mlprof's own preload, whose memory hooks stand in front of malloc/memcpy and CPython's
// allocator: code a program calls for its own work, none of it the program's.
bool is_c_runtime_module(std::string_view path);

}  // namespace mlprof::profile
