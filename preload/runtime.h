// The preload's lifecycle, called by the interposed entry points (interpose.cpp) and the
// constructor (entry.cpp). Not signal context.
#pragma once

namespace mlprof::preload::runtime {

bool active();                 // profiling is on in this process
int sample_signal();           // the sampling signal, so sigmask hooks keep it unblocked
void thread_begin();           // first thing in every new thread
void before_dlclose();
void after_dlclose();
void before_exec();            // ends this image's stream (kExec)
void after_exec_failed();      // the exec returned: open a new stream
void before_exit(int status);  // _exit/_Exit: end the stream with the status
bool in_original_process();    // false in a vfork child (shares our memory: touch nothing)
// Returns envp, or a new array (never freed: exec follows) with the profiler's variables added
// when the program removed them, so exec'd programs stay profiled.
char* const* env_for_exec(char* const* envp);

}  // namespace mlprof::preload::runtime
