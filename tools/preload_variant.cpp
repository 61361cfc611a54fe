#include "tools/preload_variant.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace mlprof::tools {
namespace {

std::vector<std::string> split(const std::string& s, const char* seps) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find_first_of(seps, i);
    const size_t end = j == std::string::npos ? s.size() : j;
    if (end > i) out.push_back(s.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

// Where ld.so would find a bare library name: LD_LIBRARY_PATH, then the usual directories (the
// ld.so cache is not read: a library only listed there is not found, and counts as not defining).
std::string locate(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::vector<std::string> dirs;
  if (const char* llp = getenv("LD_LIBRARY_PATH")) dirs = split(llp, ":;");
  for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                        "/usr/lib", "/usr/local/lib"})
    dirs.emplace_back(d);
  for (const auto& d : dirs) {
    std::string p = d + "/" + name;
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return "";
}

}  // namespace

bool elf_defines(const std::string& path, const char* symbol) {
  if (elf_version(EV_CURRENT) == EV_NONE) return false;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool found = false;
  if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr)) {
    Elf_Scn* scn = nullptr;
    while (!found && (scn = elf_nextscn(elf, scn)) != nullptr) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || sh.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (!data) continue;
      const size_t n = sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; i < n && !found; ++i) {
        GElf_Sym sym;
        if (!gelf_getsym(data, static_cast<int>(i), &sym) || sym.st_shndx == SHN_UNDEF) continue;
        const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
        found = name && strcmp(name, symbol) == 0;
      }
    }
    elf_end(elf);
  }
  close(fd);
  return found;
}

std::string library_defining_operator_new(const std::string& ld_preload) {
  for (const auto& entry : split(ld_preload, ": \t")) {
    const std::string path = locate(entry);
    if (!path.empty() && elf_defines(path, "_Znwm")) return entry;
  }
  return "";
}

}  // namespace mlprof::tools
