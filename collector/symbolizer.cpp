// Symbolizer on elfutils libdw (see symbolizer.h for the contract).
//
// How a lookup works, for a module registered with load bias B and a pc:
//   offset = pc - B (- 1 for return addresses)          file vaddr, the cache key
//   name   = our index of the function symbols dwfl reads (.symtab, else .dynsym)
//   line   = dwfl_module_getsrc(offset)                 innermost source position
//   chain  = the CU's function DIE containing offset (our per-CU index), then down through
//            the scopes containing it: each DW_TAG_inlined_subroutine is an inlined frame, and
//            its DW_AT_call_file/line is the position in the next outer frame (the chain
//            eu-addr2line -i prints).
#include "collector/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "profile/warnings.h"

namespace mlprof::collector {
namespace {

// Demangles a C++ symbol or linkage name; other names come back unchanged. Symbol-table names
// of versioned definitions ("memcpy@@GLIBC_2.14") lose their version suffix first.
std::string demangle(const char* name) {
  if (name == nullptr) return {};
  std::string raw(name);
  if (size_t at = raw.find('@'); at != std::string::npos && at > 0) raw.resize(at);
  int status = 0;
  char* out = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return raw;
  std::string result(out);
  std::free(out);
  return result;
}

// Makes a DWARF file name absolute against the CU's compilation directory. libdw already
// prefixes file names with their directory entry (entry 0 is the comp dir), so this only
// matters for names relative to the comp dir. A relative comp dir (builds that map the prefix
// away with -fdebug-prefix-map, as distributions do: "./malloc") cannot be made absolute, and
// joining would double it, so such names stay relative.
std::string absolute_source(const char* file, const char* comp_dir) {
  if (file == nullptr) return {};
  if (file[0] == '/') return file;
  if (comp_dir == nullptr || comp_dir[0] != '/')
    return std::filesystem::path(file).lexically_normal().string();
  return (std::filesystem::path(comp_dir) / file).lexically_normal().string();
}

const char* die_comp_dir(Dwarf_Die* cu) {
  Dwarf_Attribute attr;
  return dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr));
}

// Pseudo modules that never exist as files: nothing to symbolize and nothing to warn about.
bool is_pseudo_path(const std::string& path) {
  return path.empty() || path[0] == '[' || path.starts_with("linux-vdso.so") ||
         path.starts_with("linux-gate.so") || path.starts_with("//anon");
}

}  // namespace

std::string build_id_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// One entry of a module's function symbol index.
struct Symbol {
  Dwarf_Addr start = 0, end = 0;  // [start, end) in Dwfl addresses
  const char* name = nullptr;     // in the ELF string table, alive as long as the Dwfl
  int rank = 0;                   // among aliases at one address, the lowest rank names it
};

// A concrete (out-of-line) function's code range in one CU, with its DIE.
struct FunctionRange {
  Dwarf_Addr low = 0, high = 0;  // [low, high) in DWARF addresses
  Dwarf_Die die;
};

// State shared by every handle that names the same file with the same build id.
struct FileState {
  std::string path;
  std::string build_id;  // as recorded from the process
  bool loaded = false;   // open() was attempted
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;  // null: nothing to look up (missing, changed, pseudo)
  Dwarf_Addr lookup_bias = 0;  // added to file vaddrs to get Dwfl addresses (0 by construction)
  bool have_dwarf = false;
  // dwfl_module_addrinfo scans the whole symbol table per call (~100 us in libc), and
  // dwarf_getscopes walks the whole CU per call; these indexes make lookups logarithmic.
  std::vector<Symbol> symbols;                 // sorted by start
  std::unordered_map<size_t, std::string> demangled;  // by index into symbols
  std::unordered_map<Dwarf_Off, std::vector<FunctionRange>> cu_functions;  // by CU DIE offset
  std::unordered_map<uint64_t, SymResult> cache;  // by file-relative offset; nodes are stable

  std::unordered_map<Dwarf_Off, std::string> qualifiers;  // see collect_functions
  // Function starts from .eh_frame_hdr's search table, sorted (read on the first unnamed pc).
  std::vector<uint64_t> fde_starts;
  bool fde_loaded = false;
  void index_fdes();
  uint64_t fde_start(uint64_t offset);

  void index_symbols();
  std::string symbol_name(Dwarf_Addr addr);
  const Dwarf_Die* function_die(Dwarf_Die* cu, Dwarf_Addr pc);
  void collect_functions(Dwarf_Die* parent, const std::string& scope, std::vector<FunctionRange>& out);
  std::string dwarf_name(Dwarf_Die* die);
};

void FileState::index_symbols() {
  // dwfl picks .symtab (from the file or its debug file), else .dynsym, plus .gnu_debugdata.
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, nullptr, nullptr);
    int type = GELF_ST_TYPE(sym.st_info);
    if (name == nullptr || name[0] == '\0' || sym.st_shndx == SHN_UNDEF ||
        (type != STT_FUNC && type != STT_GNU_IFUNC))
      continue;
    // Prefer global over weak over local names, then the one with fewer leading underscores
    // (malloc over __libc_malloc).
    int bind = GELF_ST_BIND(sym.st_info);
    int rank = (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2) * 64 +
               static_cast<int>(std::min<size_t>(std::strspn(name, "_"), 63));
    symbols.push_back({addr, addr + sym.st_size, name, rank});
  }
  std::sort(symbols.begin(), symbols.end(), [](const Symbol& a, const Symbol& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.rank != b.rank) return a.rank < b.rank;
    return std::strcmp(a.name, b.name) < 0;
  });
  // Sizeless functions (some assembly) reach to the next symbol.
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].end != symbols[i].start) continue;
    size_t j = i + 1;
    while (j < symbols.size() && symbols[j].start == symbols[i].start) ++j;
    symbols[i].end = j < symbols.size() ? symbols[j].start : symbols[i].start + 1;
  }
}

// .eh_frame_hdr (LSB): version 1, the encodings of eh_frame_ptr, fde_count and the table, then
// eh_frame_ptr, fde_count and fde_count (initial location, FDE address) pairs sorted by location.
// Only the table every toolchain here writes is read: fde_count udata4, pairs datarel sdata4.
void FileState::index_fdes() {
  fde_loaded = true;
  GElf_Addr bias = 0;
  Elf* elf = mod ? dwfl_module_getelf(mod, &bias) : nullptr;
  size_t shstrndx = 0;
  if (elf == nullptr || elf_getshdrstrndx(elf, &shstrndx) != 0) return;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    const char* name = gelf_getshdr(scn, &shdr) ? elf_strptr(elf, shstrndx, shdr.sh_name) : nullptr;
    if (name == nullptr || std::strcmp(name, ".eh_frame_hdr") != 0 || shdr.sh_type == SHT_NOBITS) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr || data->d_size < 12) return;
    const auto* b = static_cast<const uint8_t*>(data->d_buf);
    // version 1; eh_frame_ptr: pcrel sdata4 (0x1b); fde_count: udata4 (0x03); table: datarel sdata4 (0x3b).
    if (b[0] != 1 || b[1] != 0x1b || b[2] != 0x03 || b[3] != 0x3b) return;
    uint32_t count = 0;
    std::memcpy(&count, b + 8, 4);
    if (data->d_size < 12 + uint64_t{count} * 8) return;
    fde_starts.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      int32_t rel = 0;
      std::memcpy(&rel, b + 12 + uint64_t{i} * 8, 4);
      fde_starts.push_back(shdr.sh_addr + static_cast<int64_t>(rel));
    }
    std::sort(fde_starts.begin(), fde_starts.end());
    return;
  }
}

uint64_t FileState::fde_start(uint64_t offset) {
  if (!fde_loaded) index_fdes();
  auto it = std::upper_bound(fde_starts.begin(), fde_starts.end(), offset);
  return it == fde_starts.begin() ? SymResult::kNoStart : *std::prev(it);
}

// Demangled name of the function symbol containing addr, or "".
std::string FileState::symbol_name(Dwarf_Addr addr) {
  auto it = std::upper_bound(symbols.begin(), symbols.end(), addr,
                             [](Dwarf_Addr a, const Symbol& s) { return a < s.start; });
  // Walk back over the last few starts at or below addr: the nearest one usually contains
  // addr; a few steps more cover a small symbol nested at the start of a larger one.
  for (int steps = 0; it != symbols.begin() && steps < 8; ++steps) {
    --it;
    if (addr >= it->end) continue;
    while (it != symbols.begin() && std::prev(it)->start == it->start) --it;  // best alias
    size_t index = static_cast<size_t>(it - symbols.begin());
    auto [name, inserted] = demangled.try_emplace(index);
    if (inserted) name->second = demangle(it->name);
    return name->second;
  }
  return {};
}

// Indexes the code ranges of every concrete function in a CU (one walk of its DIE tree), and
// the scope ("ns::Class::") of functions without a linkage name (static and anonymous-namespace
// functions), which DWARF only gives by position in the tree.
void FileState::collect_functions(Dwarf_Die* parent, const std::string& scope,
                                  std::vector<FunctionRange>& out) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    int tag = dwarf_tag(&child);
    Dwarf_Attribute attr;
    const char* name = dwarf_formstring(dwarf_attr(&child, DW_AT_name, &attr));
    if (tag == DW_TAG_subprogram) {
      Dwarf_Addr base = 0, low = 0, high = 0;
      for (ptrdiff_t off = 0; (off = dwarf_ranges(&child, off, &base, &low, &high)) > 0;)
        if (high > low) out.push_back({low, high, child});
      if (name != nullptr && !scope.empty() && !dwarf_hasattr(&child, DW_AT_linkage_name))
        qualifiers.emplace(dwarf_dieoffset(&child), scope);
    }
    // Function definitions can sit in namespaces and classes, and (nested functions, local
    // classes) inside other functions and their blocks.
    if (tag == DW_TAG_namespace)
      collect_functions(&child, scope + (name ? name : "(anonymous namespace)") + "::", out);
    else if (tag == DW_TAG_subprogram || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
             tag == DW_TAG_union_type || tag == DW_TAG_module)
      collect_functions(&child, name ? scope + name + "::" : scope, out);
    else if (tag == DW_TAG_lexical_block)
      collect_functions(&child, scope, out);
  } while (dwarf_siblingof(&child, &child) == 0);
}

// The display name of a subprogram or inlined_subroutine DIE. The linkage name, demangled,
// carries namespace, class and parameters, like the symbol table's name; it and DW_AT_name live
// on the DIE that DW_AT_abstract_origin (inlined instances) or DW_AT_specification (member
// definitions) points to. Without a linkage name: DW_AT_name, qualified by its scope.
std::string FileState::dwarf_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name})
    if (const char* s = dwarf_formstring(dwarf_attr_integrate(die, at, &attr))) return demangle(s);
  Dwarf_Die cur = *die;
  for (int hop = 0; hop < 8; ++hop) {
    if (const char* name = dwarf_formstring(dwarf_attr(&cur, DW_AT_name, &attr))) {
      auto q = qualifiers.find(dwarf_dieoffset(&cur));
      return q == qualifiers.end() ? name : q->second + name;
    }
    Dwarf_Die next;
    if (dwarf_formref_die(dwarf_attr(&cur, DW_AT_abstract_origin, &attr), &next) == nullptr &&
        dwarf_formref_die(dwarf_attr(&cur, DW_AT_specification, &attr), &next) == nullptr)
      break;
    cur = next;
  }
  return {};
}

// The DIE of the innermost concrete function in `cu` whose code contains pc, or null.
const Dwarf_Die* FileState::function_die(Dwarf_Die* cu, Dwarf_Addr pc) {
  auto [it, inserted] = cu_functions.try_emplace(dwarf_dieoffset(cu));
  std::vector<FunctionRange>& ranges = it->second;
  if (inserted) {
    collect_functions(cu, "", ranges);
    std::sort(ranges.begin(), ranges.end(),
              [](const FunctionRange& a, const FunctionRange& b) { return a.low < b.low; });
  }
  auto r = std::upper_bound(ranges.begin(), ranges.end(), pc,
                            [](Dwarf_Addr a, const FunctionRange& f) { return a < f.low; });
  const FunctionRange* best = nullptr;
  for (int steps = 0; r != ranges.begin() && steps < 8; ++steps) {
    --r;
    if (pc < r->high && (best == nullptr || r->high - r->low < best->high - best->low)) best = &*r;
  }
  return best ? &best->die : nullptr;
}

struct Handle {
  FileState* file;
  uint64_t load_bias;
};

struct Symbolizer::Impl {
  // Dwfl keeps pointers to the callbacks and to the path string, so they live here, in the
  // heap-allocated Impl, for as long as any Dwfl.
  std::string debuginfo_path_storage;
  char* debuginfo_path = nullptr;
  Dwfl_Callbacks callbacks{};

  std::map<std::pair<std::string, std::string>, std::unique_ptr<FileState>> files;
  std::vector<Handle> handles;
  std::map<std::pair<FileState*, uint64_t>, int> handle_ids;
  std::vector<std::string> warnings;
  std::set<std::string> warned;
  SymResult empty;  // for unknown handles

  void warn(std::string message) {
    if (warned.insert(message).second) warnings.push_back(std::move(message));
  }
  void open(FileState& f);
  SymResult lookup(FileState& f, uint64_t offset);
  void add_frames(FileState& f, Dwarf_Addr addr, SymResult& out);
};

void Symbolizer::Impl::open(FileState& f) {
  f.loaded = true;
  if (is_pseudo_path(f.path)) return;
  if (::access(f.path.c_str(), R_OK) != 0) {
    warn(f.path + " not found: its frames are shown as module+offset");
    return;
  }
  f.dwfl = dwfl_begin(&callbacks);
  if (f.dwfl == nullptr) {
    warn(f.path + ": cannot start libdw (" + dwfl_errmsg(-1) + "): its frames are shown as module+offset");
    return;
  }
  // One module per Dwfl. base 0 with add_p_vaddr=true gives bias 0 for ET_DYN (vaddr + 0) and
  // ET_EXEC alike (whose base libdw ignores): Dwfl addresses are then exactly file vaddrs, which
  // is what pc - dlpi_addr is for both kinds. (With add_p_vaddr=false, `base` would instead be
  // the address of the first PT_LOAD, i.e. bias = base - its p_vaddr.)
  dwfl_report_begin(f.dwfl);
  Dwfl_Module* mod = dwfl_report_elf(f.dwfl, f.path.c_str(), f.path.c_str(), -1, 0, true);
  dwfl_report_end(f.dwfl, nullptr, nullptr);
  if (mod == nullptr) {
    warn(f.path + " is not a readable ELF file (" + dwfl_errmsg(-1) +
         "): its frames are shown as module+offset");
    return;
  }
  // A file rebuilt since the process mapped it has other code at the same offsets: better
  // module+offset than confidently wrong names.
  const unsigned char* id = nullptr;
  GElf_Addr id_vaddr = 0;
  int id_len = dwfl_module_build_id(mod, &id, &id_vaddr);
  std::string file_id = id_len > 0 ? std::string(reinterpret_cast<const char*>(id), id_len) : "";
  if (!f.build_id.empty() && file_id != f.build_id) {
    warn(f.path + " changed on disk since it was profiled (build id differs: " + build_id_hex(f.build_id) +
         " in the process, " + (file_id.empty() ? "none" : build_id_hex(file_id)) +
         " on disk): its frames are shown as module+offset");
    return;
  }
  // Guard the bias-0 assumption rather than trust it: whatever libdw chose, add it back.
  if (dwfl_module_getelf(mod, &f.lookup_bias) == nullptr) {
    warn(f.path + " is not a readable ELF file: its frames are shown as module+offset");
    return;
  }
  f.mod = mod;
  f.index_symbols();
  // Loads DWARF now, from the file itself or a separate debug file found by build id or
  // .gnu_debuglink under debuginfo_path.
  Dwarf_Addr dwarf_bias = 0;
  f.have_dwarf = dwfl_module_getdwarf(mod, &dwarf_bias) != nullptr;
  if (!f.have_dwarf) {
    bool system = f.path.starts_with("/usr/") || f.path.starts_with("/lib");
    warn(std::string(profile::kNoDebugInfoPrefix) + f.path + ": functions only (" +
         (system ? "install its -dbgsym package" : "rebuild it with -g") + ")");
  }
}

// Fills out.frames for Dwfl address `addr`, innermost first.
void Symbolizer::Impl::add_frames(FileState& f, Dwarf_Addr addr, SymResult& out) {
  // Innermost source position, from the line table.
  std::string file;
  uint32_t line = 0;
  if (f.have_dwarf) {
    if (Dwfl_Line* l = dwfl_module_getsrc(f.mod, addr)) {
      int lineno = 0;
      const char* src = dwfl_lineinfo(l, nullptr, &lineno, nullptr, nullptr, nullptr);
      if (src != nullptr && lineno > 0) {
        file = absolute_source(src, dwfl_line_comp_dir(l));
        line = static_cast<uint32_t>(lineno);
      }
    }
  }

  // The function's DIE, then down through the scopes that contain pc: the inlined_subroutine
  // DIEs met on the way are the inlined calls, outermost first. (dwarf_getscopes would give
  // the lexical scopes of the inlined function's *definition* past the first inlined scope,
  // and walks the whole CU per call.)
  std::string outer_name;
  std::vector<Dwarf_Die> inlined;
  Dwarf_Addr cu_bias = 0;
  Dwarf_Die* cu = f.have_dwarf ? dwfl_module_addrdie(f.mod, addr, &cu_bias) : nullptr;
  const Dwarf_Die* function = cu ? f.function_die(cu, addr - cu_bias) : nullptr;
  if (function != nullptr) {
    Dwarf_Die scope = *function;
    outer_name = f.dwarf_name(&scope);
    for (bool deeper = true; deeper;) {
      deeper = false;
      Dwarf_Die child;
      if (dwarf_child(&scope, &child) != 0) break;
      do {
        int tag = dwarf_tag(&child);
        if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
             tag == DW_TAG_try_block || tag == DW_TAG_catch_block) &&
            dwarf_haspc(&child, addr - cu_bias) == 1) {
          if (tag == DW_TAG_inlined_subroutine) inlined.push_back(child);
          scope = child;
          deeper = true;
          break;
        }
      } while (dwarf_siblingof(&child, &child) == 0);
    }
  }

  // Innermost first: each inlined call is a frame at the current position, and its call site
  // (DW_AT_call_file, an index into the CU's file table, and DW_AT_call_line) becomes the
  // position in the frame outside it.
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  bool have_files = !inlined.empty() && dwarf_getsrcfiles(cu, &files, &nfiles) == 0;
  const char* comp_dir = cu ? die_comp_dir(cu) : nullptr;
  for (auto it = inlined.rbegin(); it != inlined.rend(); ++it) {
    out.frames.push_back({f.dwarf_name(&*it), file, line, true});
    Dwarf_Attribute attr;
    Dwarf_Word call_file = 0, call_line = 0;
    file.clear();
    line = 0;
    if (dwarf_formudata(dwarf_attr(&*it, DW_AT_call_line, &attr), &call_line) == 0)
      line = static_cast<uint32_t>(call_line);
    if (have_files && dwarf_formudata(dwarf_attr(&*it, DW_AT_call_file, &attr), &call_file) == 0 &&
        call_file < nfiles)
      file = absolute_source(dwarf_filesrc(files, call_file, nullptr, nullptr), comp_dir);
  }
  // Outer frame: the symbol table's name, as without debug info (it also has the parameters
  // that DWARF lacks for static functions, and marks .cold/.constprop parts), else DWARF's.
  if (std::string sym = f.symbol_name(addr); !sym.empty()) outer_name = std::move(sym);
  out.frames.push_back({std::move(outer_name), std::move(file), line, false});
}

SymResult Symbolizer::Impl::lookup(FileState& f, uint64_t offset) {
  SymResult out;
  out.module_offset = offset;
  if (f.mod != nullptr) add_frames(f, offset + f.lookup_bias, out);
  if (out.frames.empty()) out.frames.emplace_back();
  if (f.mod != nullptr && out.frames.back().function.empty()) out.unnamed_start = f.fde_start(offset);
  return out;
}

Symbolizer::Symbolizer(std::vector<std::string> extra_debug_dirs) : impl_(std::make_unique<Impl>()) {
  // libdw's debuginfo_path: ':'-separated; "" = the file's own directory, ".debug" = a
  // subdirectory of it, absolute dirs are searched for .build-id/xx/rest.debug and by
  // debuglink name. A candidate found either way must match the file's build id.
  std::string path;
  for (const std::string& d : extra_debug_dirs) path += d + ":";
  path += ":.debug:/usr/lib/debug";
  impl_->debuginfo_path_storage = std::move(path);
  impl_->debuginfo_path = impl_->debuginfo_path_storage.data();
  impl_->callbacks.find_elf = dwfl_build_id_find_elf;
  impl_->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
  impl_->callbacks.section_address = dwfl_offline_section_address;
  impl_->callbacks.debuginfo_path = &impl_->debuginfo_path;
}

Symbolizer::~Symbolizer() {
  for (auto& [key, f] : impl_->files)
    if (f->dwfl != nullptr) dwfl_end(f->dwfl);
}

int Symbolizer::add_module(const ModuleInfo& m) {
  auto& slot = impl_->files[{m.path, m.build_id}];
  if (!slot) {
    slot = std::make_unique<FileState>();
    slot->path = m.path;
    slot->build_id = m.build_id;
  }
  auto [it, inserted] = impl_->handle_ids.try_emplace({slot.get(), m.load_bias},
                                                      static_cast<int>(impl_->handles.size()));
  if (inserted) impl_->handles.push_back({slot.get(), m.load_bias});
  return it->second;
}

const SymResult& Symbolizer::symbolize(int module, uint64_t pc, bool is_return_address) {
  if (module < 0 || static_cast<size_t>(module) >= impl_->handles.size()) {
    if (impl_->empty.frames.empty()) impl_->empty.frames.emplace_back();
    return impl_->empty;
  }
  const Handle& h = impl_->handles[module];
  FileState& f = *h.file;
  // A return address points after the call; pc-1 is inside the call instruction, so the line,
  // the inlined chain and even the function (for a noreturn call at a function's end) are right.
  uint64_t offset = pc - h.load_bias - (is_return_address ? 1 : 0);
  if (auto it = f.cache.find(offset); it != f.cache.end()) return it->second;
  if (!f.loaded) impl_->open(f);
  return f.cache.emplace(offset, impl_->lookup(f, offset)).first->second;
}

std::vector<std::string> Symbolizer::warnings() const { return impl_->warnings; }

}  // namespace mlprof::collector
