#include <gtest/gtest.h>

#include "report/report.h"
#include "report_fixture.h"

using mlprof::profile::Frame;
using mlprof::profile::Profile;
using mlprof::report::CollapsedOptions;
using mlprof::report::export_collapsed;
using mlprof::report::frame_name;
using mlprof::report_test::make_report_profile;

TEST(ReportFrameName, FunctionFileLine) {
  Profile p = make_report_profile();
  EXPECT_EQ(frame_name(p, 0), "main (/src/main.cpp:10)");
  EXPECT_EQ(frame_name(p, 2), "add_one (/src/math.h:5)");  // inlined frames use the same form
}

TEST(ReportFrameName, FunctionAndModule) {
  Profile p = make_report_profile();
  EXPECT_EQ(frame_name(p, 3), "memcpy (libc.so.6)");
  // A file without a line is not "file:line": the module form is used.
  p.frames[3].file = p.frames[0].file;
  EXPECT_EQ(frame_name(p, 3), "memcpy (libc.so.6)");
  p.frames[3].module = 0;
  p.frames[3].file = 0;
  EXPECT_EQ(frame_name(p, 3), "memcpy");
}

TEST(ReportFrameName, ModuleOffset) {
  Profile p = make_report_profile();
  EXPECT_EQ(frame_name(p, 4), "libfoo.so+0x1a2b");
  p.frames[4].module = 0;
  EXPECT_EQ(frame_name(p, 4), "[unknown]+0x1a2b");
  EXPECT_EQ(frame_name(p, 99), "[invalid frame 99]");
}

TEST(ReportCollapsed, PlainMergesThreads) {
  auto r = export_collapsed(make_report_profile(), {});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r,
            "[truncated];compute (/src/compute.cpp:20) 10000\n"
            "main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 50000\n"
            "main (/src/main.cpp:10);compute (/src/compute.cpp:20);memcpy (libc.so.6) 10000\n"
            "main (/src/main.cpp:10);libfoo.so+0x1a2b 25000\n"
            "main (/src/main.cpp:10);operator:weird name (app.bin) 5000\n");
}

TEST(ReportCollapsed, ByProcess) {
  CollapsedOptions o;
  o.by_process = true;
  auto r = export_collapsed(make_report_profile(), o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r,
            "process python3 (pid 100);[truncated];compute (/src/compute.cpp:20) 10000\n"
            "process python3 (pid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 50000\n"
            "process python3 (pid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);memcpy (libc.so.6) 10000\n"
            "process worker (pid 200);main (/src/main.cpp:10);libfoo.so+0x1a2b 25000\n"
            "process worker (pid 200);main (/src/main.cpp:10);operator:weird name (app.bin) 5000\n");
}

TEST(ReportCollapsed, ByProcessAndThread) {
  CollapsedOptions o;
  o.by_process = true;
  o.by_thread = true;
  auto r = export_collapsed(make_report_profile(), o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r,
            "process python3 (pid 100);thread loader (tid 101);main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 20000\n"
            "process python3 (pid 100);thread python3 (tid 100);[truncated];compute (/src/compute.cpp:20) 10000\n"
            "process python3 (pid 100);thread python3 (tid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 30000\n"
            "process python3 (pid 100);thread python3 (tid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);memcpy (libc.so.6) 10000\n"
            "process worker (pid 200);thread (tid 200);main (/src/main.cpp:10);libfoo.so+0x1a2b 25000\n"
            "process worker (pid 200);thread (tid 200);main (/src/main.cpp:10);operator:weird name (app.bin) 5000\n");
}

TEST(ReportCollapsed, ByThreadOnly) {
  CollapsedOptions o;
  o.by_thread = true;
  auto r = export_collapsed(make_report_profile(), o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r,
            "thread (tid 200);main (/src/main.cpp:10);libfoo.so+0x1a2b 25000\n"
            "thread (tid 200);main (/src/main.cpp:10);operator:weird name (app.bin) 5000\n"
            "thread loader (tid 101);main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 20000\n"
            "thread python3 (tid 100);[truncated];compute (/src/compute.cpp:20) 10000\n"
            "thread python3 (tid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);add_one (/src/math.h:5) 30000\n"
            "thread python3 (tid 100);main (/src/main.cpp:10);compute (/src/compute.cpp:20);memcpy (libc.so.6) 10000\n");
}

TEST(ReportCollapsed, OtherMetricOmitsZeroLines) {
  CollapsedOptions o;
  o.metric = "alloc";
  auto r = export_collapsed(make_report_profile(), o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, "main (/src/main.cpp:10);compute (/src/compute.cpp:20);memcpy (libc.so.6) 4096\n");
}

TEST(ReportCollapsed, SeparatorsInProcessAndThreadNamesAreReplaced) {
  Profile p = make_report_profile();
  p.threads[2].name = "a;b\nc";
  p.processes[1].exe = "/opt/we;ird";
  CollapsedOptions o;
  o.by_process = o.by_thread = true;
  auto r = export_collapsed(p, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->find("process we:ird (pid 200);thread a:b c (tid 200);main"), std::string::npos) << *r;
  // Every line is "frames value" with exactly one newline at its end.
  size_t lines = 0;
  for (char c : *r) lines += c == '\n';
  EXPECT_EQ(lines, 6u);
}

TEST(ReportCollapsed, UnknownMetricListsMetrics) {
  CollapsedOptions o;
  o.metric = "gpu";
  auto r = export_collapsed(make_report_profile(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("gpu"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("cpu, alloc"), std::string::npos) << r.error();

  Profile empty;
  auto e = export_collapsed(empty, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("no metrics"), std::string::npos) << e.error();
}

TEST(ReportCollapsed, EmptyProfileIsEmptyText) {
  Profile p = make_report_profile();
  p.stack_values.clear();
  auto r = export_collapsed(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "");
}
