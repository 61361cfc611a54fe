// preload/modules.cpp: the module map behind MODULE_LOAD / MODULE_UNLOAD records, checked on this
// test process itself: the executable and libc with build ids and executable ranges, and a
// library coming and going through dlopen/dlclose.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "preload/modules.h"

namespace mlprof::preload {
namespace {

const std::string kPlugin = std::string(MLPROF_FIXTURE_DIR) + "/libfixture_plugin.so";

std::string real(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool covers(const ModuleRecord& m, const void* addr) {
  auto a = reinterpret_cast<uint64_t>(addr);
  return std::any_of(m.exec_ranges.begin(), m.exec_ranges.end(), [&](auto& r) { return a >= r.first && a < r.second; });
}

const ModuleRecord* module_at(const std::vector<ModuleRecord>& mods, const void* addr) {
  for (auto& m : mods)
    if (covers(m, addr)) return &m;
  return nullptr;
}

__attribute__((noinline)) int function_in_the_executable(int x) { return x * 3 + 1; }

TEST(ModuleMap, RescanFindsTheExecutableAndLibc) {
  ModuleMap map;
  std::vector<ModuleRecord> added;
  std::vector<uint32_t> removed;
  map.rescan(added, removed);
  EXPECT_TRUE(removed.empty());
  ASSERT_GE(added.size(), 2u);

  // The main program comes first, named by /proc/self/exe.
  EXPECT_EQ(added[0].path, self_exe());
  const ModuleRecord* exe = module_at(added, reinterpret_cast<const void*>(&function_in_the_executable));
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(exe, &added[0]);
  EXPECT_FALSE(exe->build_id.empty()) << "the toolchain links with --build-id";
  EXPECT_EQ(exe->build_id.size(), 20u) << "a SHA-1 build id";

  // libc: find it through a symbol looked up in libc itself.
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* fn = dlsym(libc, "getpid");
  ASSERT_NE(fn, nullptr);
  const ModuleRecord* c = module_at(added, fn);
  ASSERT_NE(c, nullptr) << "no module covers libc's getpid";
  Dl_info info;
  ASSERT_NE(dladdr(fn, &info), 0);
  EXPECT_EQ(c->path, real(info.dli_fname));
  EXPECT_NE(c->path.find("libc.so"), std::string::npos) << c->path;
  EXPECT_EQ(c->path[0], '/') << "paths are absolute";
  EXPECT_FALSE(c->build_id.empty());
  EXPECT_EQ(c->load_bias, reinterpret_cast<uint64_t>(info.dli_fbase)) << "a shared library's bias is its base";
  dlclose(libc);

  std::set<uint32_t> ids;
  for (auto& m : added) {
    EXPECT_NE(m.id, 0u) << m.path;
    EXPECT_TRUE(ids.insert(m.id).second) << "duplicate id " << m.id;
    EXPECT_FALSE(m.path.empty());
    ASSERT_FALSE(m.exec_ranges.empty()) << m.path;
    for (auto& [start, end] : m.exec_ranges) EXPECT_LT(start, end) << m.path;
  }

  // Nothing changed since: a second rescan reports nothing.
  std::vector<ModuleRecord> again;
  map.rescan(again, removed);
  EXPECT_TRUE(again.empty());
  EXPECT_TRUE(removed.empty());
}

TEST(ModuleMap, DlopenAndDlcloseAreNoticed) {
  ASSERT_EQ(dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr) << "the plugin must not be loaded yet";
  ModuleMap map;
  std::vector<ModuleRecord> added;
  std::vector<uint32_t> removed;
  EXPECT_TRUE(map.changed()) << "a map never scanned is out of date";
  map.rescan(added, removed);
  EXPECT_FALSE(map.changed()) << "right after a rescan";
  size_t before = added.size();

  void* h = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  void* fn = dlsym(h, "plugin_hot");
  ASSERT_NE(fn, nullptr);
  EXPECT_TRUE(map.changed()) << "after dlopen of a new library";
  added.clear();
  map.rescan(added, removed);
  EXPECT_TRUE(removed.empty());
  ASSERT_EQ(added.size(), 1u) << "only the new library is announced";
  const ModuleRecord plugin = added[0];
  EXPECT_EQ(plugin.path, real(kPlugin));
  EXPECT_TRUE(covers(plugin, fn));
  EXPECT_FALSE(plugin.build_id.empty());
  EXPECT_GT(plugin.id, before) << "ids are never reused";
  EXPECT_FALSE(map.changed());

  // Loading it again only bumps its reference count: no change in the map.
  void* h2 = dlopen(kPlugin.c_str(), RTLD_NOW);
  ASSERT_EQ(h2, h);
  dlclose(h2);
  added.clear();
  map.rescan(added, removed);
  EXPECT_TRUE(added.empty());
  EXPECT_TRUE(removed.empty());

  ASSERT_EQ(dlclose(h), 0);
  if (void* still = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    dlclose(still);
    GTEST_SKIP() << "the loader kept " << kPlugin << " mapped after dlclose (NODELETE): cannot observe an unload";
  }
  EXPECT_TRUE(map.changed()) << "after dlclose";
  map.rescan(added, removed);
  EXPECT_TRUE(added.empty());
  EXPECT_EQ(removed, std::vector<uint32_t>{plugin.id});
  EXPECT_FALSE(map.changed());

  // Loaded again (possibly at the same address): a new module with a new id.
  h = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr);
  added.clear();
  removed.clear();
  map.rescan(added, removed);
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].path, plugin.path);
  EXPECT_GT(added[0].id, plugin.id);
  dlclose(h);
}

// A rescan looks only at modules it has not seen: a module already announced keeps the path it was
// resolved to when it loaded, even when the symlink it was loaded through later points elsewhere
// (resolving every known path again on every rescan cost ~50,000 readlink calls while numpy, scipy
// and scikit-learn imported; and a re-pointed link made a loaded module look unloaded and new).
TEST(ModuleMap, KnownModulesAreNotResolvedAgain) {
  char dir_template[] = "/tmp/mlprof-modules-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, link = dir + "/libviaalink.so";
  ASSERT_EQ(symlink(real(kPlugin).c_str(), link.c_str()), 0);
  ModuleMap map;
  std::vector<ModuleRecord> added;
  std::vector<uint32_t> removed;
  map.rescan(added, removed);

  void* h = dlopen(link.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  added.clear();
  map.rescan(added, removed);
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].path, real(kPlugin)) << "announced under the file the link pointed to";
  const uint32_t id = added[0].id;

  // The link now points at another file; the map is rescanned.
  ASSERT_EQ(unlink(link.c_str()), 0);
  ASSERT_EQ(symlink(self_exe().c_str(), link.c_str()), 0);
  added.clear();
  removed.clear();
  map.rescan(added, removed);
  EXPECT_TRUE(removed.empty()) << "the plugin is still loaded: it must not be reported unloaded";
  for (auto& m : added) EXPECT_NE(m.path, real(kPlugin)) << "the plugin was announced again (id " << id << ")";

  dlclose(h);
  unlink(link.c_str());
  rmdir(dir.c_str());
}

TEST(ModuleMap, ResetAnnouncesEverythingAgain) {
  ModuleMap map;
  std::vector<ModuleRecord> first, second;
  std::vector<uint32_t> removed;
  map.rescan(first, removed);
  map.reset();
  EXPECT_TRUE(map.changed());
  map.rescan(second, removed);
  EXPECT_TRUE(removed.empty()) << "a fork child does not unload its parent's modules";
  ASSERT_EQ(second.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(second[i].path, first[i].path);
    EXPECT_EQ(second[i].load_bias, first[i].load_bias);
    EXPECT_EQ(second[i].build_id, first[i].build_id);
    EXPECT_EQ(second[i].exec_ranges, first[i].exec_ranges);
    EXPECT_GT(second[i].id, first.back().id) << "ids keep counting up";
  }
}

}  // namespace
}  // namespace mlprof::preload
