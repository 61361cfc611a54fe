// mlprof-run's choice of preload (tools/preload_variant.h): a library in the user's LD_PRELOAD that
// defines operator new is recognised from its dynamic symbol table.
#include "tools/preload_variant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace {

using mlprof::tools::elf_defines;
using mlprof::tools::library_defining_operator_new;

const char* kLibDir = "/usr/lib/x86_64-linux-gnu";

std::string lib(const char* name) { return std::string(kLibDir) + "/" + name; }

TEST(PreloadVariant, ReadsDefinedDynamicSymbols) {
  ASSERT_EQ(access(lib("libstdc++.so.6").c_str(), R_OK), 0) << "libstdc++ not found in " << kLibDir;
  EXPECT_TRUE(elf_defines(lib("libstdc++.so.6"), "_Znwm"));
  EXPECT_FALSE(elf_defines(lib("libstdc++.so.6"), "_Znwm_no_such_symbol"));
  EXPECT_TRUE(elf_defines(lib("libc.so.6"), "malloc"));
  // libc++ users aside, libc references operator new nowhere and defines it nowhere.
  EXPECT_FALSE(elf_defines(lib("libc.so.6"), "_Znwm"));
  // libstdc++ imports malloc: an undefined entry is not a definition.
  EXPECT_FALSE(elf_defines(lib("libstdc++.so.6"), "malloc"));
}

TEST(PreloadVariant, FindsTheFirstLibraryDefiningOperatorNew) {
  EXPECT_EQ(library_defining_operator_new("libc.so.6"), "");
  EXPECT_EQ(library_defining_operator_new("libc.so.6:libstdc++.so.6"), "libstdc++.so.6");
  EXPECT_EQ(library_defining_operator_new("  libm.so.6 " + lib("libstdc++.so.6") + " "), lib("libstdc++.so.6"));
  EXPECT_EQ(library_defining_operator_new(""), "");
  EXPECT_EQ(library_defining_operator_new("::"), "");
}

TEST(PreloadVariant, MissingOrForeignFilesDefineNothing) {
  EXPECT_EQ(library_defining_operator_new("libmlprof_no_such_library.so.1"), "");
  EXPECT_FALSE(elf_defines("/nonexistent/libx.so", "_Znwm"));
  const std::string text = testing::TempDir() + "/not_elf.so";
  std::ofstream(text) << "_Znwm is not an ELF file\n";
  EXPECT_FALSE(elf_defines(text, "_Znwm"));
  const std::string truncated = testing::TempDir() + "/truncated.so";
  {
    std::ifstream in(lib("libstdc++.so.6"), std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary) << head;
  }
  EXPECT_FALSE(elf_defines(truncated, "_Znwm"));
}

}  // namespace
