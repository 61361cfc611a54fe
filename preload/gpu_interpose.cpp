// The two calls by which a CUPTI client takes CUPTI, exported so that the program's calls (through
// its PLT) come here first: mlprof yields CUPTI to it (gpu::yield_to_program, docs/gpu.md), then
// the call goes on to the real libcupti. Without this, torch.profiler under mlprof-run got
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and no CUDA events (seen on an H100).
// mlprof's own calls use the pointers resolved from its handle and never come here.
// Not signal context. Built only with the CUPTI headers (without them mlprof never attaches).
#if MLPROF_HAVE_CUPTI
#include <cupti.h>

#include <cerrno>

#include "preload/export.h"
#include "preload/gpu.h"

namespace {

// The real `name` of type Fn, after mlprof yielded CUPTI (unless this is mlprof's own call);
// nullptr when no libcupti defines it. The program's errno is kept.
template <class Fn>
Fn real_after_yield(const char* name) {
  using namespace mlprof::preload;
  const int saved = errno;
  auto real = reinterpret_cast<Fn>(gpu::real_cupti(name));
  if (real && !gpu::own_cupti_call()) gpu::yield_to_program();
  errno = saved;
  return real;
}

}  // namespace

MLPROF_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                                  void* userdata) {
  auto real = real_after_yield<decltype(&cuptiSubscribe)>("cuptiSubscribe");
  return real ? real(subscriber, callback, userdata) : CUPTI_ERROR_NOT_INITIALIZED;
}

MLPROF_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                                  CUpti_BuffersCallbackCompleteFunc completed) {
  auto real = real_after_yield<decltype(&cuptiActivityRegisterCallbacks)>("cuptiActivityRegisterCallbacks");
  return real ? real(requested, completed) : CUPTI_ERROR_NOT_INITIALIZED;
}
#endif
