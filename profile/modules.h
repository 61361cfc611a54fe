// What kind of code a module (a mapped file's path, as frames and functions name it) holds.
#pragma once
#include <string_view>

namespace mlprof::profile {

// The C runtime libraries (libc, libm, libpthread, the loader, libdl, librt, the vdso) and
// mlprof's own preload, whose memory hooks stand in front of malloc/memcpy and CPython's
// allocator: code a program calls for its own work, none of it the program's.
bool is_c_runtime_module(std::string_view path);

// The file name of a module's path (what follows the last '/').
std::string_view module_basename(std::string_view path);

// The interpreter's own file: python3.X (a static build) or libpython3.X.so.
bool is_interpreter_module(std::string_view path);

// The runtimes whose worker threads run other threads' work: OpenMP (GNU libgomp, also as the
// renamed copies wheels bundle, LLVM's libomp, Intel's libiomp5), OpenBLAS's thread server,
// PyTorch's intra-op pool (libc10) and its QNNPACK/XNNPACK pool (libpthreadpool), oneTBB and MKL's
// threading layers. A thread whose first frame above the C runtime's thread start is in one of them
// is a pool worker (collector/pool_attribution.h).
bool is_thread_pool_module(std::string_view path);

// Of those, the runtimes that hold nothing but the pool (OpenMP's, pthreadpool, oneTBB): their own
// functions (a team's start, its barriers, the spin while a thread waits for work) are nobody's
// work, where OpenBLAS's and MKL's threading layers also hold the kernels their workers run.
bool is_pool_runtime_only_module(std::string_view path);

}  // namespace mlprof::profile
