// Interposed libc entry points (the preload's exported symbols). Each forwards to the next
// definition (dlsym(RTLD_NEXT)) and adds only what profiling needs:
//
//   pthread_create            required  new threads get a slot, a ring and a CPU-time timer
//   dlclose                   required  drain and rescan modules before a library goes away
//   execve/execv/execvp/      required  end this image's stream cleanly; keep the profiler's
//   execvpe/execl/execlp/execle         variables in the new image's environment
//   _exit/_Exit               optional  send the last samples and the exit status
//   pthread_sigmask/sigprocmask optional keep the sampling signal deliverable when the program
//                                       blocks "all signals" in its worker threads
//
// dlopen is deliberately NOT interposed: glibc resolves $ORIGIN and RUNPATH of dlopen("libx.so")
// from the caller's return address, which a wrapper would replace with its own. New modules are
// found by the writer through the loader's add/remove counters (modules.cpp) within one cycle.
//
// Not signal context (but sigprocmask may be called by the program from its own handlers: that
// hook only copies a sigset and calls through).
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include "preload/runtime.h"

namespace rt = mlprof::preload::runtime;

namespace {

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

#define MLPROF_NEXT(name) \
  static auto real = next<decltype(&::name)>(#name)

struct Trampoline {
  void* (*fn)(void*);
  void* arg;
};

void* thread_start(void* p) {
  Trampoline t = *static_cast<Trampoline*>(p);
  free(p);
  int saved = errno;
  rt::thread_begin();
  errno = saved;
  return t.fn(t.arg);
}

// Removes the sampling signal from a mask the program is about to block.
const sigset_t* keep_sampling_signal(int how, const sigset_t* set, sigset_t* copy) {
  if (!set || how == SIG_UNBLOCK || !rt::active()) return set;
  int sig = rt::sample_signal();
  if (sigismember(set, sig) != 1) return set;
  *copy = *set;
  sigdelset(copy, sig);
  return copy;
}

// execve and execvpe: keep the profiler's variables in the new environment, end this image's
// stream, exec; if the exec returns (it failed), go on profiling with errno as the exec left it.
using ExecFn = int (*)(const char*, char* const[], char* const[]);
int exec_through(ExecFn real, const char* file, char* const argv[], char* const envp[]) {
  char* const* env = rt::env_for_exec(envp);
  rt::before_exec();
  int rc = real(file, argv, env);
  int saved = errno;
  rt::after_exec_failed();
  errno = saved;
  return rc;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                           void* (*fn)(void*), void* arg) {
  MLPROF_NEXT(pthread_create);
  if (!rt::active()) return real(thread, attr, fn, arg);
  auto* t = static_cast<Trampoline*>(malloc(sizeof(Trampoline)));
  if (!t) return real(thread, attr, fn, arg);
  t->fn = fn;
  t->arg = arg;
  int rc = real(thread, attr, thread_start, t);
  if (rc != 0) free(t);
  return rc;
}

__attribute__((visibility("default"))) int dlclose(void* handle) {
  MLPROF_NEXT(dlclose);
  rt::before_dlclose();
  int rc = real(handle);
  int saved = errno;
  rt::after_dlclose();
  errno = saved;
  return rc;
}

__attribute__((visibility("default"))) int execve(const char* path, char* const argv[], char* const envp[]) {
  MLPROF_NEXT(execve);
  return exec_through(real, path, argv, envp);
}

__attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[], char* const envp[]) {
  MLPROF_NEXT(execvpe);
  return exec_through(real, file, argv, envp);
}

__attribute__((visibility("default"))) int execv(const char* path, char* const argv[]) {
  return execve(path, argv, environ);
}

__attribute__((visibility("default"))) int execvp(const char* file, char* const argv[]) {
  return execvpe(file, argv, environ);
}

// The variadic forms collect their arguments and call the vector forms.
#define MLPROF_COLLECT_ARGS(first, ap, argv)                         \
  size_t argc_ = 1;                                                   \
  va_start(ap, first);                                                \
  while (va_arg(ap, const char*)) ++argc_;                            \
  va_end(ap);                                                         \
  char** argv = static_cast<char**>(alloca((argc_ + 1) * sizeof(char*))); \
  va_start(ap, first);                                                \
  argv[0] = const_cast<char*>(first);                                 \
  for (size_t i_ = 1; i_ <= argc_; ++i_) argv[i_] = va_arg(ap, char*);

__attribute__((visibility("default"))) int execl(const char* path, const char* arg, ...) {
  va_list ap;
  MLPROF_COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execve(path, argv, environ);
}

__attribute__((visibility("default"))) int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  MLPROF_COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execvpe(file, argv, environ);
}

__attribute__((visibility("default"))) int execle(const char* path, const char* arg, ...) {
  va_list ap;
  MLPROF_COLLECT_ARGS(arg, ap, argv);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv, envp);
}

__attribute__((visibility("default"), noreturn)) void _exit(int status) {
  MLPROF_NEXT(_exit);
  rt::before_exit(status);
  real(status);
  __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status) {
  MLPROF_NEXT(_Exit);
  rt::before_exit(status);
  real(status);
  __builtin_unreachable();
}

__attribute__((visibility("default"))) int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  MLPROF_NEXT(pthread_sigmask);
  sigset_t copy;
  return real(how, keep_sampling_signal(how, set, &copy), old);
}

__attribute__((visibility("default"))) int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  MLPROF_NEXT(sigprocmask);
  sigset_t copy;
  return real(how, keep_sampling_signal(how, set, &copy), old);
}

}  // extern "C"
