// The two calls by which a CUPTI client takes CUPTI, exported so that the program's calls (through
// its PLT) come here first: mlprof yields CUPTI to it (gpu::yield_to_program, docs/gpu.md), then
// the call goes on to the real libcupti. Without this, torch.profiler under mlprof-run got
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and no CUDA events (seen on an H100).
// mlprof's own calls use the pointers resolved from its handle and never come here.
// Not signal context. Built only with the CUPTI headers (without them mlprof never attaches).
#if MLPROF_HAVE_CUPTI
#include <cupti.h>

#include <cerrno>

#include "preload/gpu.h"

#define MLPROF_EXPORT extern "C" __attribute__((visibility("default")))

MLPROF_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                                  void* userdata) {
  using namespace mlprof::preload;
  auto real = reinterpret_cast<decltype(&cuptiSubscribe)>(gpu::real_cupti("cuptiSubscribe"));
  if (!real) return CUPTI_ERROR_NOT_INITIALIZED;
  const int saved = errno;
  if (!gpu::own_cupti_call()) gpu::yield_to_program();
  errno = saved;
  return real(subscriber, callback, userdata);
}

MLPROF_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                                  CUpti_BuffersCallbackCompleteFunc completed) {
  using namespace mlprof::preload;
  auto real = reinterpret_cast<decltype(&cuptiActivityRegisterCallbacks)>(
      gpu::real_cupti("cuptiActivityRegisterCallbacks"));
  if (!real) return CUPTI_ERROR_NOT_INITIALIZED;
  const int saved = errno;
  if (!gpu::own_cupti_call()) gpu::yield_to_program();
  errno = saved;
  return real(requested, completed);
}
#endif
