// preload/config.cpp, memory profiling variables: MLPROF_MEMORY, MLPROF_MEM_INTERVAL,
// MLPROF_COPY_INTERVAL (defaults, valid values, one message per bad value and the default kept).
#include <stdlib.h>

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "preload/config.h"

namespace mlprof::preload {
namespace {

std::vector<std::string> g_said;
void capture(const char* msg) { g_said.emplace_back(msg); }

Config load(const std::vector<std::pair<const char*, const char*>>& env) {
  for (const char* v : {"MLPROF_SOCKET", "MLPROF_OUTPUT_DIR", "MLPROF_DISABLE", "MLPROF_MEMORY", "MLPROF_MEM_INTERVAL",
                        "MLPROF_COPY_INTERVAL"})
    unsetenv(v);
  setenv("MLPROF_OUTPUT_DIR", "/tmp", 1);
  for (auto& [k, v] : env) setenv(k, v, 1);
  g_said.clear();
  Config cfg;
  load_config(cfg, capture);
  for (auto& [k, v] : env) unsetenv(k);
  unsetenv("MLPROF_OUTPUT_DIR");
  return cfg;
}

TEST(MemConfig, DefaultsAreOnWithTheDocumentedIntervals) {
  Config c = load({});
  EXPECT_TRUE(c.memory);
  EXPECT_EQ(c.mem_interval, 1024u * 1024);
  EXPECT_EQ(c.copy_interval, 1024u * 1024);
  EXPECT_TRUE(g_said.empty());
}

TEST(MemConfig, ValidValues) {
  Config c = load({{"MLPROF_MEMORY", "0"}});
  EXPECT_FALSE(c.memory);
  c = load({{"MLPROF_MEMORY", "1"}, {"MLPROF_MEM_INTERVAL", "1"}, {"MLPROF_COPY_INTERVAL", "0"}});
  EXPECT_TRUE(c.memory);
  EXPECT_EQ(c.mem_interval, 1u);   // exact mode
  EXPECT_EQ(c.copy_interval, 0u);  // copies not sampled
  c = load({{"MLPROF_MEM_INTERVAL", "1099511627776"}, {"MLPROF_COPY_INTERVAL", "4096"}});
  EXPECT_EQ(c.mem_interval, uint64_t{1} << 40);
  EXPECT_EQ(c.copy_interval, 4096u);
  EXPECT_TRUE(g_said.empty());
}

TEST(MemConfig, BadValuesSayWhatIsWrongAndKeepTheDefault) {
  Config c = load({{"MLPROF_MEMORY", "yes"}});
  EXPECT_TRUE(c.memory);
  ASSERT_EQ(g_said.size(), 1u);
  EXPECT_NE(g_said[0].find("MLPROF_MEMORY=yes"), std::string::npos) << g_said[0];
  EXPECT_NE(g_said[0].find("stays on"), std::string::npos) << g_said[0];

  for (const char* bad : {"0", "-5", "12k", "", "1099511627777", "99999999999999999999999"}) {
    c = load({{"MLPROF_MEM_INTERVAL", bad}});
    EXPECT_EQ(c.mem_interval, kDefaultMemInterval) << bad;
    ASSERT_EQ(g_said.size(), 1u) << bad;
    EXPECT_NE(g_said[0].find(std::string("MLPROF_MEM_INTERVAL=") + bad + " is not"), std::string::npos) << g_said[0];
    EXPECT_NE(g_said[0].find("using 1048576"), std::string::npos) << g_said[0];
  }
  c = load({{"MLPROF_COPY_INTERVAL", "1M"}});
  EXPECT_EQ(c.copy_interval, kDefaultCopyInterval);
  ASSERT_EQ(g_said.size(), 1u);
  EXPECT_NE(g_said[0].find("MLPROF_COPY_INTERVAL=1M is not"), std::string::npos) << g_said[0];
  EXPECT_NE(g_said[0].find("using 1048576"), std::string::npos) << g_said[0];
}

TEST(MemConfig, NotLookedAtWithoutADestination) {
  unsetenv("MLPROF_OUTPUT_DIR");
  unsetenv("MLPROF_SOCKET");
  setenv("MLPROF_MEM_INTERVAL", "bad", 1);
  g_said.clear();
  Config c;
  load_config(c, capture);
  unsetenv("MLPROF_MEM_INTERVAL");
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(g_said.empty());
}

}  // namespace
}  // namespace mlprof::preload
