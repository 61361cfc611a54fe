// A collector that vanishes or stops reading never blocks or changes the program; the
// collector's socket is private to the user.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "collector/server.h"
#include "e2e_util.h"

namespace {

using namespace e2e;

// A fake collector: accepts connections and then either closes them or never reads.
class FakeCollector {
 public:
  explicit FakeCollector(bool close_after_accept) : close_(close_after_accept) {
    path_ = scratch() + "/fake.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeCollector() {
    stop_ = true;
    thread_.join();
    for (int c : conns_) close(c);
    close(fd_);
  }
  const std::string& path() const { return path_; }
  int accepted() const { return accepted_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      ++accepted_;
      if (close_) close(c);
      else conns_.push_back(c);  // never read: the kernel buffer fills and sends block
    }
  }
  bool close_;
  std::string path_;
  int fd_ = -1;
  std::vector<int> conns_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

void expect_unharmed(const std::string& socket, double max_extra_s) {
  // fixture_threads at 1 kHz: plenty of samples to send. A hold-up by the profiler is a stall of
  // seconds (a blocked send, a bounded final flush); ctest runs two tests at once, so the same
  // program's wall time also varies by up to ~2x with the other test's load: the unprofiled run
  // is timed before and after, and the profiled one may take 1.5x the slower of them plus
  // max_extra_s.
  auto timed = [](const std::vector<std::string>& env, RunResult* r) {
    auto t0 = std::chrono::steady_clock::now();
    *r = run({fixture("fixture_threads"), "800"}, env);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  RunResult direct, app, direct2;
  const double before_s = timed({}, &direct);
  const double app_s = timed({"LD_PRELOAD=" MLPROF_PRELOAD, "MLPROF_SOCKET=" + socket, "MLPROF_RATE=1000"}, &app);
  const double after_s = timed({}, &direct2);
  EXPECT_EQ(app.exit_code, direct.exit_code);
  EXPECT_EQ(app.out, direct.out);
  EXPECT_LT(app_s, 1.5 * std::max(before_s, after_s) + max_extra_s)
      << "the program was held up by the profiler (unprofiled " << before_s << " s and " << after_s << " s)";
}

TEST(Robustness, CollectorThatHangsUpDoesNotHarmTheProgram) {
  FakeCollector fake(/*close_after_accept=*/true);
  expect_unharmed(fake.path(), 1.0);
  EXPECT_GE(fake.accepted(), 1);
}

TEST(Robustness, CollectorThatStopsReadingDoesNotBlockTheProgram) {
  FakeCollector fake(/*close_after_accept=*/false);
  // The writer gives up after 2 s of a full socket; the program itself never waits on it,
  // except at exit for that bounded final flush.
  expect_unharmed(fake.path(), 5.0);
}

TEST(Robustness, MissingCollectorIsReportedOnceAndTheProgramRuns) {
  RunResult direct = run({fixture("fixture_behave"), "output", "300"});
  RunResult app = run({fixture("fixture_behave"), "output", "300"},
                      {"LD_PRELOAD=" MLPROF_PRELOAD, "MLPROF_SOCKET=/nonexistent/mlprof.sock"});
  EXPECT_EQ(app.exit_code, direct.exit_code);
  EXPECT_EQ(app.out, direct.out);
  EXPECT_NE(app.err.find("mlprof: cannot reach the collector"), std::string::npos) << app.err;
  EXPECT_EQ(app.err.find("cannot reach", app.err.find("cannot reach") + 1), std::string::npos);
}

TEST(Security, SocketDirectoryIsPrivateAndOtherUsersAreRefused) {
  mlprof::collector::Server server;
  ASSERT_TRUE(server.listen().ok());
  std::string dir = server.socket_path().substr(0, server.socket_path().rfind('/'));
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, getuid());
  if (getuid() != 0) GTEST_SKIP() << "connecting as another user needs root";
  // The directory is private, so only root can reach the socket as another uid: a child drops to
  // uid 65534 after connecting (the credentials are taken at connect, so connect as that uid).
  // Open the directory and the socket file to the other uid, to prove SO_PEERCRED itself refuses.
  chmod(dir.c_str(), 0711);
  chmod(server.socket_path().c_str(), 0666);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    strncpy(a.sun_path, server.socket_path().c_str(), sizeof a.sun_path - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(3);
    const char hdr[8] = {'M', 'L', 'P', 'W', 1, 0, 0, 0};
    ssize_t w = send(fd, hdr, sizeof hdr, MSG_NOSIGNAL);  // the refused connection may be closed already
    (void)w;
    usleep(200000);
    _exit(0);
  }
  int status = 0;
  for (int i = 0; i < 20; ++i) server.poll_once(50);
  waitpid(pid, &status, 0);
  chmod(dir.c_str(), 0700);
  chmod(server.socket_path().c_str(), 0600);
  ASSERT_TRUE(WIFEXITED(status));
  int code = WEXITSTATUS(status);
  if (code == 3) GTEST_SKIP() << "socket permissions kept uid 65534 out before SO_PEERCRED was needed";
  ASSERT_EQ(code, 0);
  EXPECT_EQ(server.streams(), 0u);
  ASSERT_FALSE(server.warnings().empty());
  EXPECT_NE(server.warnings()[0].find("refused a connection from uid 65534"), std::string::npos);
}

}  // namespace
