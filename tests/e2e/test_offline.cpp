// Offline collection: the preload writes event files (MLPROF_OUTPUT_DIR) without a collector, and
// `mlprof collect` turns them into a profile later.
#include <sys/stat.h>

#include "e2e_util.h"

namespace {

using namespace e2e;

TEST(Offline, EventFilesBecomeAProfile) {
  std::string dir = scratch();
  std::string events = dir + "/events";
  mkdir(events.c_str(), 0700);
  RunResult app = run({fixture("fixture_fork_exec"), "1500"},
                      {"LD_PRELOAD=" MLPROF_PRELOAD, "MLPROF_OUTPUT_DIR=" + events});
  ASSERT_EQ(app.exit_code, 0) << app.err;
  EXPECT_EQ(app.err, "");
  RunResult col = run({MLPROF_CLI, "collect", events, "-o", dir + "/run.mlprof"});
  ASSERT_EQ(col.exit_code, 0) << col.err;
  auto prof = profile::read_profile(dir + "/run.mlprof");
  ASSERT_TRUE(prof) << prof.error();
  ASSERT_EQ(prof->processes.size(), 2u);  // parent and forked child (which exits with 3)
  EXPECT_GT(process_function_total(*prof, 0, "parent_hot"), 0);
  EXPECT_GT(process_function_total(*prof, 1, "child_hot"), 0);
  EXPECT_EQ(prof->processes[1].exit_status, 3);
  EXPECT_EQ(prof->processes[1].parent, 0u);

  RunResult rep = run({MLPROF_CLI, "report", dir + "/run.mlprof", "--top", "5"});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("parent_hot"), std::string::npos) << rep.out;
}

TEST(Offline, CollectRejectsForeignFiles) {
  std::string dir = scratch();
  {
    std::ofstream f(dir + "/junk.mlpw");
    f << "junk junk junk";
  }
  RunResult col = run({MLPROF_CLI, "collect", dir + "/junk.mlpw", "-o", dir + "/run.mlprof"});
  EXPECT_EQ(col.exit_code, 1);
  EXPECT_NE(col.err.find("not an mlprof event stream"), std::string::npos) << col.err;
}

TEST(Offline, PreloadWithoutDestinationStaysSilentAndHarmless) {
  RunResult direct = run({fixture("fixture_behave"), "output", "300"});
  RunResult app = run({fixture("fixture_behave"), "output", "300"}, {"LD_PRELOAD=" MLPROF_PRELOAD});
  EXPECT_EQ(app.exit_code, direct.exit_code);
  EXPECT_EQ(app.out, direct.out);
  EXPECT_EQ(app.err, direct.err);
}

}  // namespace
