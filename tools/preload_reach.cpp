#include "tools/preload_reach.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace mlprof::tools {

std::string resolve_command(const std::string& command) {
  if (command.empty()) return "";
  if (command.find('/') != std::string::npos) return access(command.c_str(), X_OK) == 0 ? command : "";
  const char* path = getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::string cand = (d.empty() ? "." : d) + "/" + command;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

std::string preload_blocker(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return "";
  // Secure mode only when the set id differs from the caller's (mlprof-run's, which the command
  // inherits).
  if ((st.st_mode & S_ISUID) && st.st_uid != geteuid()) return "setuid";
  if ((st.st_mode & S_ISGID) && st.st_gid != getegid()) return "setgid";
  // An ELF executable without a PT_INTERP program header has no dynamic loader to preload with.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  Elf64_Ehdr eh;
  std::string why;
  if (pread(fd, &eh, sizeof eh, 0) == static_cast<ssize_t>(sizeof eh) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0 &&
      eh.e_phnum < 512) {
    bool interp = false, read_all = true;
    for (int i = 0; i < eh.e_phnum && !interp; ++i) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph)) != static_cast<ssize_t>(sizeof ph)) {
        read_all = false;
        break;
      }
      interp = ph.p_type == PT_INTERP;
    }
    if (read_all && !interp) why = "statically linked";
  }
  close(fd);
  return why;
}

}  // namespace mlprof::tools
