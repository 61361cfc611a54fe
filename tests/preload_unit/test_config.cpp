// preload/config.cpp: MLPROF_* environment variables -> Config, and the message each bad value
// produces (docs/environment.md). Messages are captured through load_config's report callback.
#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "preload/config.h"

namespace mlprof::preload {
namespace {

std::vector<std::string> g_messages;
void capture(const char* msg) { g_messages.emplace_back(msg); }

const char* const kVars[] = {"MLPROF_SOCKET", "MLPROF_OUTPUT_DIR", "MLPROF_RATE",  "MLPROF_SIGNAL",
                             "MLPROF_UNWINDER", "MLPROF_DISABLE",   "MLPROF_QUIET", "MLPROF_TIMER"};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : kVars) unsetenv(v);
    g_messages.clear();
  }
  // Loads a fresh Config from exactly these variables (all others unset).
  static Config load(const std::vector<std::pair<const char*, std::string>>& env) {
    clear();
    for (auto& [k, v] : env) setenv(k, v.c_str(), 1);
    Config cfg;
    load_config(cfg, capture);
    return cfg;
  }
};

constexpr const char* kSock = "/tmp/mlprof-abc/collector.sock";

TEST_F(ConfigTest, NoDestinationMeansDisabledSilently) {
  Config c = load({});
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(g_messages.empty());
  // Bad values are not even looked at when there is nowhere to send samples.
  c = load({{"MLPROF_RATE", "0"}, {"MLPROF_SIGNAL", "9"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(g_messages.empty());
  c = load({{"MLPROF_SOCKET", ""}, {"MLPROF_OUTPUT_DIR", ""}});
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(ConfigTest, SocketWithDefaults) {
  Config c = load({{"MLPROF_SOCKET", kSock}});
  EXPECT_TRUE(c.enabled);
  EXPECT_STREQ(c.socket_path, kSock);
  EXPECT_STREQ(c.output_dir, "");
  EXPECT_EQ(c.rate_hz, 100u);
  EXPECT_EQ(c.signo, SIGRTMIN + 5);
  EXPECT_EQ(c.unwinder, UnwinderKind::kCfi);
  EXPECT_FALSE(c.quiet);
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(ConfigTest, OutputDirAndPrecedence) {
  Config c = load({{"MLPROF_OUTPUT_DIR", "/tmp/events"}});
  EXPECT_TRUE(c.enabled);
  EXPECT_STREQ(c.output_dir, "/tmp/events");
  EXPECT_STREQ(c.socket_path, "");
  c = load({{"MLPROF_OUTPUT_DIR", "/tmp/events"}, {"MLPROF_SOCKET", kSock}});
  EXPECT_TRUE(c.enabled);
  EXPECT_STREQ(c.socket_path, kSock) << "the socket wins over the directory";
  EXPECT_STREQ(c.output_dir, "");
  c = load({{"MLPROF_OUTPUT_DIR", "/tmp/events"}, {"MLPROF_SOCKET", ""}});
  EXPECT_TRUE(c.enabled);
  EXPECT_STREQ(c.output_dir, "/tmp/events") << "an empty socket is no socket";
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(ConfigTest, Disable) {
  Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_DISABLE", "1"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_STREQ(c.socket_path, "");
  EXPECT_TRUE(g_messages.empty());
  c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_DISABLE", "1"}, {"MLPROF_RATE", "bogus"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(g_messages.empty()) << "a disabled preload says nothing";
  c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_DISABLE", "0"}});
  EXPECT_TRUE(c.enabled) << "only 1 disables";
}

TEST_F(ConfigTest, Quiet) {
  EXPECT_TRUE(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_QUIET", "1"}}).quiet);
  EXPECT_FALSE(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_QUIET", "0"}}).quiet);
  EXPECT_FALSE(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_QUIET", "yes"}}).quiet);
  // Read even when profiling is disabled, so a disabled preload stays quiet too.
  EXPECT_TRUE(load({{"MLPROF_DISABLE", "1"}, {"MLPROF_QUIET", "1"}}).quiet);
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(ConfigTest, RateValid) {
  for (auto [text, value] : {std::pair{"1", 1u}, {"97", 97u}, {"100", 100u}, {"10000", 10000u}}) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", text}});
    EXPECT_EQ(c.rate_hz, value) << text;
    EXPECT_TRUE(g_messages.empty()) << text;
  }
}

TEST_F(ConfigTest, RateInvalid) {
  for (const char* text : {"0", "10001", "100x", "", "-5", "x100", "1e3", "99999999999999999999999"}) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", text}});
    EXPECT_TRUE(c.enabled) << text;
    EXPECT_EQ(c.rate_hz, 100u) << text;
    ASSERT_EQ(g_messages.size(), 1u) << text;
    EXPECT_EQ(g_messages[0], std::string("MLPROF_RATE=") + text + " is not a sampling rate in Hz (1..10000); using 100");
  }
}

TEST_F(ConfigTest, SignalValid) {
  for (int sig : {SIGUSR1, SIGUSR2, SIGPROF, SIGRTMIN, SIGRTMAX}) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_SIGNAL", std::to_string(sig)}});
    EXPECT_EQ(c.signo, sig);
    EXPECT_TRUE(g_messages.empty()) << sig;
  }
}

TEST_F(ConfigTest, SignalInvalid) {
  // 9 SIGKILL and 19 SIGSTOP cannot be caught; 4, 7, 8, 11 are the synchronous fault signals the
  // program's own crash handling needs; 0 and SIGRTMAX+1 are no signal.
  std::vector<std::string> bad = {"9", "0", std::to_string(SIGRTMAX + 1), "19", "4", "7", "8", "11", "-10", "", "usr1",
                                  "10 "};
  for (const std::string& text : bad) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_SIGNAL", text}});
    EXPECT_TRUE(c.enabled) << text;
    EXPECT_EQ(c.signo, SIGRTMIN + 5) << text;
    ASSERT_EQ(g_messages.size(), 1u) << text;
    EXPECT_EQ(g_messages[0], "MLPROF_SIGNAL=" + text + " is not a usable signal number; using SIGRTMIN+5");
  }
  EXPECT_EQ(SIGRTMAX + 1, 65) << "on Linux: the brief's '65'";
}

TEST_F(ConfigTest, Unwinder) {
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_UNWINDER", "cfi"}}).unwinder, UnwinderKind::kCfi);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_UNWINDER", "libunwind"}}).unwinder, UnwinderKind::kLibunwind);
  EXPECT_TRUE(g_messages.empty());
  for (const char* text : {"bogus", "", "CFI", "libunwind "}) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_UNWINDER", text}});
    EXPECT_EQ(c.unwinder, UnwinderKind::kCfi) << text;
    ASSERT_EQ(g_messages.size(), 1u) << text;
    EXPECT_EQ(g_messages[0], std::string("MLPROF_UNWINDER=") + text + " is not an unwinder (cfi or libunwind); using cfi");
  }
}

TEST_F(ConfigTest, TimerFollowsTheRateUnlessChosen) {
  // auto (unset): POSIX CPU timers up to 100 Hz, which every kernel's tick delivers and which cost
  // nothing per context switch; perf task-clock events above, where the tick would limit the rate.
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}}).timer, TimerSource::kThreadCpuTimer);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "100"}}).timer, TimerSource::kThreadCpuTimer);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "101"}}).timer, TimerSource::kPerfTaskClock);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "1000"}, {"MLPROF_TIMER", "auto"}}).timer,
            TimerSource::kPerfTaskClock);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_TIMER", "perf"}}).timer, TimerSource::kPerfTaskClock);
  EXPECT_EQ(load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "1000"}, {"MLPROF_TIMER", "timer"}}).timer,
            TimerSource::kThreadCpuTimer);
  EXPECT_TRUE(g_messages.empty());
  for (const char* text : {"bogus", "", "PERF"}) {
    Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "500"}, {"MLPROF_TIMER", text}});
    EXPECT_EQ(c.timer, TimerSource::kPerfTaskClock) << text;  // auto at 500 Hz
    ASSERT_EQ(g_messages.size(), 1u) << text;
    EXPECT_EQ(g_messages[0], std::string("MLPROF_TIMER=") + text + " is not a timer source (auto, perf or timer); using auto");
  }
}

TEST_F(ConfigTest, SocketPathLength) {
  // sockaddr_un::sun_path holds 108 bytes with the NUL: 107 characters fit, 108 do not.
  std::string fits = "/tmp/" + std::string(102, 's');
  ASSERT_EQ(fits.size(), 107u);
  Config c = load({{"MLPROF_SOCKET", fits}});
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(std::string(c.socket_path), fits);
  EXPECT_TRUE(g_messages.empty());

  std::string too_long = fits + "x";
  c = load({{"MLPROF_SOCKET", too_long}, {"MLPROF_OUTPUT_DIR", "/tmp/events"}});
  EXPECT_FALSE(c.enabled) << "a socket that cannot be reached does not fall back to the directory";
  EXPECT_STREQ(c.socket_path, "");
  ASSERT_EQ(g_messages.size(), 1u);
  EXPECT_EQ(g_messages[0], "MLPROF_SOCKET=" + too_long + " is longer than a Unix socket path may be; not profiling");
}

TEST_F(ConfigTest, OutputDirLength) {
  // Room is kept for "/<pid>-<mono_ns>.mlpw" (up to 64 bytes) in the 512-byte buffer.
  std::string fits = "/" + std::string(446, 'd');
  Config c = load({{"MLPROF_OUTPUT_DIR", fits}});
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(std::string(c.output_dir), fits);
  std::string too_long = fits + "d";
  c = load({{"MLPROF_OUTPUT_DIR", too_long}});
  EXPECT_FALSE(c.enabled);
  ASSERT_EQ(g_messages.size(), 1u);
  EXPECT_EQ(g_messages[0], "MLPROF_OUTPUT_DIR=" + too_long + " is too long; not profiling");
}

TEST_F(ConfigTest, EveryProblemIsReportedInOrder) {
  Config c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", "fast"}, {"MLPROF_SIGNAL", "9"}, {"MLPROF_UNWINDER", "gdb"}});
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.rate_hz, 100u);
  EXPECT_EQ(c.signo, SIGRTMIN + 5);
  EXPECT_EQ(c.unwinder, UnwinderKind::kCfi);
  EXPECT_EQ(g_messages, (std::vector<std::string>{
                            "MLPROF_RATE=fast is not a sampling rate in Hz (1..10000); using 100",
                            "MLPROF_SIGNAL=9 is not a usable signal number; using SIGRTMIN+5",
                            "MLPROF_UNWINDER=gdb is not an unwinder (cfi or libunwind); using cfi",
                        }));
  // A value longer than the message buffer is cut, not overflowed.
  std::string huge(2000, '7');
  c = load({{"MLPROF_SOCKET", kSock}, {"MLPROF_RATE", huge}});
  ASSERT_EQ(g_messages.size(), 1u);
  EXPECT_EQ(g_messages[0].rfind("MLPROF_RATE=777", 0), 0u);
  EXPECT_LT(g_messages[0].size(), 768u);
}

}  // namespace
}  // namespace mlprof::preload
