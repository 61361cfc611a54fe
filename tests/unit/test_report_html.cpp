#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <unistd.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "profile/aggregate.h"
#include "report/html.h"
#include "report/report.h"
#include "report_fixture.h"

using mlprof::profile::Profile;
using mlprof::report::html_report;
using mlprof::report_test::make_report_profile;

namespace {

const std::string kScript = "<script>alert(1)</script>";
const std::string kQuotes = "\"'&";
const std::string kBreakOut = "</script><img src=x onerror=alert(2)>";
const std::string kLineSep = "sep\xE2\x80\xA8" "arator";

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The text of <script type="application/json" id="mlprof-data">.
std::string embedded_json(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"mlprof-data\">";
  size_t b = html.find(open);
  if (b == std::string::npos) return "";
  b += open.size();
  size_t e = html.find("</script>", b);
  return e == std::string::npos ? "" : html.substr(b, e - b);
}

Profile hostile_profile() {
  Profile p = make_report_profile();
  auto& s = p.strings;
  s[p.frames[0].function] = "main" + kScript;         // function name (functions, lines)
  s[p.frames[1].function] = "compute" + kQuotes;
  s[p.frames[2].file] = "/src/" + kBreakOut + ".h";   // path
  s[p.frames[4].module] = "/lib/" + kScript + ".so";  // module path
  p.run.command = {"python3", kScript, kQuotes, kBreakOut};
  p.processes[0].argv = p.run.command;
  p.processes[1].exe = "/opt/" + kBreakOut;
  p.threads[0].name = kScript;
  p.threads[1].name = kQuotes + kLineSep;
  p.threads[2].name = kBreakOut;
  p.warnings.push_back("warning " + kScript);
  p.processes[1].messages.push_back(kQuotes + kBreakOut);
  p.run.cwd = "/home/" + kQuotes;
  return p;
}

}  // namespace

TEST(ReportHtml, EscapesHostileStrings) {
  std::string html = html_report(hostile_profile());
  EXPECT_EQ(html.find(kScript), std::string::npos);
  EXPECT_EQ(html.find(kQuotes), std::string::npos);
  EXPECT_EQ(html.find(kBreakOut), std::string::npos);
  EXPECT_EQ(lower(html).find("<img"), std::string::npos);
  EXPECT_EQ(html.find("alert(1)</script>"), std::string::npos);
  // Exactly the page's own two script elements: the data block and the code.
  EXPECT_EQ(count(lower(html), "<script"), 2u);
  EXPECT_EQ(count(lower(html), "</script"), 2u);
  // The escaped forms are there: HTML-escaped in the static parts, \u-escaped in the JSON.
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&quot;&#39;&amp;"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
  std::string json = embedded_json(html);
  EXPECT_NE(json.find("\\u003cscript\\u003ealert(1)\\u003c/script\\u003e"), std::string::npos);
  EXPECT_NE(json.find("\\\"'\\u0026"), std::string::npos);
  EXPECT_NE(json.find("\\u2028"), std::string::npos);
  EXPECT_EQ(json.find("\xE2\x80\xA8"), std::string::npos);
  for (char c : {'<', '>', '&'}) EXPECT_EQ(json.find(c), std::string::npos) << c;
}

TEST(ReportHtml, HostileStringsRoundTripThroughJson) {
  std::string html = html_report(hostile_profile());
  auto d = nlohmann::json::parse(embedded_json(html));
  EXPECT_EQ(d["run"]["command"][1], kScript);
  EXPECT_EQ(d["threads"][0]["name"], kScript);
  EXPECT_EQ(d["threads"][1]["name"], kQuotes + kLineSep);
  EXPECT_EQ(d["threads"][2]["name"], kBreakOut);
  EXPECT_EQ(d["processes"][1]["exe"], "/opt/" + kBreakOut);
  bool found = false;
  for (const auto& f : d["functions"]) found |= f["name"] == "main" + kScript;
  EXPECT_TRUE(found);
}

TEST(ReportHtml, SelfContained) {
  std::string html = lower(html_report(hostile_profile()));
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src="), html.find("src=x"));  // only the escaped hostile text, never a tag
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_NE(html.find("sortabletable"), std::string::npos);  // the embedded JS (assets/tables.js)
  EXPECT_NE(html.find("<noscript>"), std::string::npos);
  EXPECT_NE(html.find("<!doctype html>"), std::string::npos);
}

TEST(ReportHtml, EmbeddedJsonHoldsTheNumbers) {
  std::string html = html_report(make_report_profile());
  std::string text = embedded_json(html);
  ASSERT_FALSE(text.empty());
  nlohmann::json d = nlohmann::json::parse(text);  // throws (fails the test) when malformed
  ASSERT_EQ(d["metrics"].size(), 2u);
  EXPECT_EQ(d["metrics"][0]["name"], "cpu");
  EXPECT_EQ(d["metrics"][0]["unit"], "us");
  EXPECT_EQ(d["metrics"][0]["total"], 100000);
  EXPECT_EQ(d["metrics"][1]["total"], 4096);
  EXPECT_EQ(d["default_metric"], 0);
  EXPECT_EQ(d["counters"]["samples"], 100);
  EXPECT_EQ(d["counters"]["dropped_ring_full"], 2);
  EXPECT_EQ(d["counters"]["dropped_transport"], 1);
  EXPECT_EQ(d["run"]["duration_ns"], 2'500'000'000);
  EXPECT_EQ(d["run"]["rate_hz"], 99);
  ASSERT_EQ(d["functions"].size(), 6u);
  EXPECT_EQ(d["functions"][0]["name"], "add_one");  // ordered by self cpu
  EXPECT_EQ(d["functions"][0]["file"], "/src/math.h");
  EXPECT_EQ(d["functions"][0]["self"], nlohmann::json({50000, 0}));
  EXPECT_EQ(d["functions"][0]["total"], nlohmann::json({50000, 0}));
  ASSERT_EQ(d["lines"].size(), 3u);
  EXPECT_EQ(d["lines"][0]["line"], 5);
  ASSERT_EQ(d["processes"].size(), 2u);
  EXPECT_EQ(d["processes"][1]["pid"], 200);
  EXPECT_EQ(d["processes"][1]["end_reason"], "truncated");
  EXPECT_EQ(d["processes"][1]["exit_status"], 137);
  EXPECT_EQ(d["processes"][0]["values"], nlohmann::json({70000, 4096}));
  ASSERT_EQ(d["threads"].size(), 3u);
  EXPECT_EQ(d["threads"][1]["tid"], 101);
  EXPECT_EQ(d["threads"][1]["samples"], 1);  // one sample event (of weight 2: two ticks)
  EXPECT_EQ(d["threads"][1]["values"], nlohmann::json({20000, 4096}));
  EXPECT_EQ(d["warnings"].size(), 2u);
}

TEST(ReportHtml, StaticSummaryWithoutScript) {
  std::string html = html_report(make_report_profile());
  EXPECT_NE(html.find("<dt>Samples taken</dt><dd>100</dd>"), std::string::npos);
  EXPECT_NE(html.find("<dt>CPU time</dt><dd>100.0 ms</dd>"), std::string::npos);
  EXPECT_NE(html.find("<li>no debug info for /lib/libfoo.so</li>"), std::string::npos);
  size_t ns = html.find("<noscript>"), ne = html.find("</noscript>");
  ASSERT_NE(ns, std::string::npos);
  ASSERT_NE(ne, std::string::npos);
  EXPECT_NE(html.substr(ns, ne - ns).find("add_one"), std::string::npos);
}

TEST(ReportHtml, InvalidUtf8AndEmptyProfile) {
  Profile p = make_report_profile();
  p.threads[0].name = "bad\xff\xfe utf8";
  std::string html = html_report(p);
  auto d = nlohmann::json::parse(embedded_json(html));
  EXPECT_EQ(d["threads"][0]["name"], "bad\xEF\xBF\xBD\xEF\xBF\xBD utf8");
  Profile empty;
  auto e = nlohmann::json::parse(embedded_json(html_report(empty)));
  EXPECT_EQ(e["default_metric"], -1);
  EXPECT_TRUE(e["functions"].empty());
}

TEST(ReportHtml, EscapeHelpers) {
  EXPECT_EQ(mlprof::report::html_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
  EXPECT_EQ(mlprof::report::json_for_script(nlohmann::json("</script>\xE2\x80\xA9")),
            "\"\\u003c/script\\u003e\\u2029\"");
}

// Source text read from disk is data from the profiled program too: it is embedded escaped.
TEST(ReportHtml, SourceTextFromDiskIsEscaped) {
  std::string path = ::testing::TempDir() + "/mlprof_hostile_src.py";
  {
    std::ofstream f(path);
    f << "x = '</script><img src=x onerror=alert(1)>'\n";
  }
  mlprof::profile::Profile p;
  p.metrics = {{"cpu", "us"}};
  p.strings = {"", path, "<module>"};
  p.frames = {mlprof::profile::Frame{2, 1, 1, 0, 0, mlprof::profile::FrameKind::kPython, false}};
  p.stacks = {{{0}, false}};
  p.processes = {mlprof::profile::Process{}};
  p.threads = {{0, 1, "main", 0, 0}};
  p.stack_values = {{0, 0, {100}}};
  mlprof::profile::compute_aggregates(p);
  std::string html = html_report(p);
  EXPECT_EQ(html.find("<img src=x"), std::string::npos);
  auto d = nlohmann::json::parse(embedded_json(html));
  ASSERT_EQ(d["lines"].size(), 1u);
  EXPECT_EQ(d["lines"][0]["source"], "x = '</script><img src=x onerror=alert(1)>'");
  unlink(path.c_str());
}

// A long warnings list shows its first 6 lines; the rest are folded in a <details>, still in the
// page and still escaped. "no debug info" lines (one per library) go after the others, so that a
// warning that changes what the profile means is not folded behind them.
namespace {
TEST(ReportHtml, LongWarningListIsFoldedNotDropped) {
  auto p = hostile_profile();
  for (int i = 0; i < 9; ++i) p.warnings.push_back(fmt::format("no debug info for /lib/lib{}.so <b>", i));
  p.warnings.push_back("last one " + kScript);
  const std::string html = html_report(p);
  const size_t fold = html.find("<details class=\"more-warnings\">");
  ASSERT_NE(fold, std::string::npos);
  // The heading counts them all (run-level and process messages); 6 are shown, the rest folded.
  const size_t h = html.find("<h2>Warnings (");
  ASSERT_NE(h, std::string::npos);
  const int total = std::atoi(html.c_str() + h + 14);
  EXPECT_GE(total, 11);
  EXPECT_NE(html.find("<summary>" + std::to_string(total - 6) + " more</summary>", fold), std::string::npos);
  for (int i = 0; i < 9; ++i)
    EXPECT_NE(html.find(fmt::format("no debug info for /lib/lib{}.so &lt;b&gt;", i)), std::string::npos) << i;
  EXPECT_LT(html.find("last one "), fold) << "a warning given after the debug-info lines is shown before them";
  EXPECT_GT(html.find("no debug info for /lib/lib8.so"), fold) << "the last debug-info line is folded";
  EXPECT_EQ(html.find(kScript), std::string::npos);
}
}  // namespace
