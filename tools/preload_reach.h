// Why LD_PRELOAD cannot reach a program: the loader ignores it for a statically linked
// executable (there is no loader) and for a setuid or setgid one run by another user (secure-
// execution mode). mlprof-run names the reason when a run profiled no process at all.
#pragma once
#include <string>

namespace mlprof::tools {

// The executable `command` runs (a path, or a name looked up in PATH as execvp does); "" if none.
std::string resolve_command(const std::string& command);

// "statically linked", "setuid", "setgid" (of the file at `path`), or "" when none applies or
// the file cannot be read.
std::string preload_blocker(const std::string& path);

}  // namespace mlprof::tools
