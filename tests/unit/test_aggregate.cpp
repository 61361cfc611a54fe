// compute_aggregates(): hand-built stacks with recursion, inlined frames, a frame without line
// info, the same function name in two modules, duplicate strings and two metrics.
#include <gtest/gtest.h>

#include "profile/aggregate.h"
#include "profile/profile_io.h"
#include "profile/string_table.h"

using namespace mlprof::profile;

namespace {

struct Fixture {
  Profile p;
  const FunctionStat* func(const std::string& name, const std::string& module) const {
    const FunctionStat* found = nullptr;
    for (const auto& f : p.functions)
      if (p.str(f.function) == name && p.str(f.module) == module) {
        EXPECT_EQ(found, nullptr) << "duplicate function entry " << name << " in " << module;
        found = &f;
      }
    return found;
  }
  const LineStat* line(const std::string& file, uint32_t line) const {
    const LineStat* found = nullptr;
    for (const auto& l : p.lines)
      if (p.str(l.file) == file && l.line == line) {
        EXPECT_EQ(found, nullptr) << "duplicate line entry " << file << ":" << line;
        found = &l;
      }
    return found;
  }
};

Fixture build() {
  Fixture fx;
  Profile& p = fx.p;
  p.metrics = {{"cpu", "us"}, {"alloc", "bytes"}};
  {
    StringTable st(p.strings);
    const uint32_t app = st.intern("/bin/app"), other = st.intern("/lib/other.so"), libc = st.intern("libc.so.6");
    const uint32_t a_cc = st.intern("a.cc"), b_h = st.intern("b.h");
    const uint32_t main_ = st.intern("main"), f = st.intern("f"), g = st.intern("g"), h = st.intern("h");
    auto fr = [](uint32_t fn, uint32_t file, uint32_t line, uint32_t mod, bool inl = false) {
      return Frame{fn, file, line, mod, 0x1000u + line, FrameKind::kNative, inl};
    };
    p.frames = {
        fr(main_, a_cc, 10, app),   // 0
        fr(f, a_cc, 20, app),       // 1
        fr(f, a_cc, 21, app),       // 2
        fr(g, b_h, 5, app, true),   // 3: g inlined into f at a.cc:22
        fr(f, a_cc, 22, app),       // 4
        fr(h, 0, 0, libc),          // 5: no debug info
        fr(f, a_cc, 20, other),     // 6: another "f" in another module, same source line
    };
  }
  // A duplicate "f" string outside the table: must not split the function.
  p.strings.push_back("f");
  const uint32_t f_dup = static_cast<uint32_t>(p.strings.size() - 1);
  p.frames.push_back(Frame{f_dup, p.frames[2].file, 21, p.frames[2].module, 0, FrameKind::kNative, false});  // 7
  p.stacks = {
      {{1, 0}, false},           // S0 f@20 <- main
      {{2, 1, 0}, false},        // S1 f@21 <- f@20 <- main            (recursion)
      {{3, 4, 2, 1, 0}, false},  // S2 g@5 [inlined] <- f@22 <- f@21 <- f@20 <- main
      {{5, 1, 1, 0}, true},      // S3 h <- f@20 <- f@20 <- main        (same line twice)
      {{6, 0}, false},           // S4 other.so f@a.cc:20 <- main
      {{}, true},                // S5 empty
      {{7, 0}, false},           // S6 f (duplicate string) @21 <- main
  };
  p.processes = {Process{}};
  p.threads = {Thread{0, 1, "main", 0, 0}, Thread{0, 2, "worker", 0, 0}};
  p.stack_values = {
      {0, 0, {10, 100}}, {0, 1, {20, 200}}, {0, 2, {30, 0}},  {0, 3, {40, 400}},
      {0, 4, {50, 500}}, {0, 5, {60, 600}}, {0, 6, {5, 7}},   {1, 0, {1, 1}},
  };
  return fx;
}

using V = std::vector<int64_t>;

}  // namespace

TEST(Aggregate, FunctionsSelfAndTotal) {
  Fixture fx = build();
  compute_aggregates(fx.p);
  ASSERT_EQ(fx.p.functions.size(), 5u);

  const FunctionStat* main_ = fx.func("main", "/bin/app");
  ASSERT_NE(main_, nullptr);
  EXPECT_EQ(main_->self, (V{0, 0}));
  EXPECT_EQ(main_->total, (V{156, 1208}));  // every non-empty stack once
  EXPECT_EQ(main_->first_line, 10u);
  EXPECT_EQ(fx.p.str(main_->file), "a.cc");

  const FunctionStat* f = fx.func("f", "/bin/app");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->self, (V{11 + 20 + 5, 101 + 200 + 7}));
  EXPECT_EQ(f->total, (V{11 + 20 + 30 + 40 + 5, 101 + 200 + 0 + 400 + 7}));  // recursion counted once
  EXPECT_EQ(f->first_line, 20u);

  const FunctionStat* g = fx.func("g", "/bin/app");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->self, (V{30, 0}));  // the inlined leaf gets the self time, not f
  EXPECT_EQ(g->total, (V{30, 0}));
  EXPECT_EQ(g->first_line, 5u);
  EXPECT_EQ(fx.p.str(g->file), "b.h");

  const FunctionStat* h = fx.func("h", "libc.so.6");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->self, (V{40, 400}));
  EXPECT_EQ(h->total, (V{40, 400}));
  EXPECT_EQ(h->first_line, 0u);
  EXPECT_EQ(h->file, 0u);

  const FunctionStat* f2 = fx.func("f", "/lib/other.so");
  ASSERT_NE(f2, nullptr);
  EXPECT_EQ(f2->self, (V{50, 500}));
  EXPECT_EQ(f2->total, (V{50, 500}));
}

TEST(Aggregate, LinesSelfAndTotal) {
  Fixture fx = build();
  compute_aggregates(fx.p);
  ASSERT_EQ(fx.p.lines.size(), 5u);  // h has no line info

  const LineStat* l10 = fx.line("a.cc", 10);
  ASSERT_NE(l10, nullptr);
  EXPECT_EQ(l10->self, (V{0, 0}));
  EXPECT_EQ(l10->total, (V{156, 1208}));
  EXPECT_EQ(fx.p.str(l10->function), "main");

  const LineStat* l20 = fx.line("a.cc", 20);  // both modules' f share the source line
  ASSERT_NE(l20, nullptr);
  EXPECT_EQ(l20->self, (V{11 + 50, 101 + 500}));
  EXPECT_EQ(l20->total, (V{11 + 20 + 30 + 40 + 50, 101 + 200 + 0 + 400 + 500}));  // S3 counted once
  EXPECT_EQ(fx.p.str(l20->function), "f");

  const LineStat* l21 = fx.line("a.cc", 21);
  ASSERT_NE(l21, nullptr);
  EXPECT_EQ(l21->self, (V{20 + 5, 200 + 7}));
  EXPECT_EQ(l21->total, (V{20 + 30 + 5, 200 + 0 + 7}));

  const LineStat* l22 = fx.line("a.cc", 22);
  ASSERT_NE(l22, nullptr);
  EXPECT_EQ(l22->self, (V{0, 0}));
  EXPECT_EQ(l22->total, (V{30, 0}));

  const LineStat* l5 = fx.line("b.h", 5);
  ASSERT_NE(l5, nullptr);
  EXPECT_EQ(l5->self, (V{30, 0}));
  EXPECT_EQ(l5->total, (V{30, 0}));
  EXPECT_EQ(fx.p.str(l5->function), "g");
}

TEST(Aggregate, SelfSumsToStackValueTotals) {
  Fixture fx = build();
  compute_aggregates(fx.p);
  V self{0, 0}, all{0, 0};
  for (const auto& f : fx.p.functions)
    for (int k = 0; k < 2; ++k) self[k] += f.self[k];
  for (const auto& r : fx.p.stack_values)
    if (!fx.p.stacks[r.stack].frames.empty())
      for (int k = 0; k < 2; ++k) all[k] += r.values[k];
  EXPECT_EQ(self, all);
}

TEST(Aggregate, ReplacesPreviousResultsAndIsDeterministic) {
  Fixture fx = build();
  compute_aggregates(fx.p);
  const auto functions = fx.p.functions;
  const auto lines = fx.p.lines;
  compute_aggregates(fx.p);  // again: same result, not doubled
  EXPECT_EQ(fx.p.functions, functions);
  EXPECT_EQ(fx.p.lines, lines);
  // The result is a valid profile that survives the file format.
  ASSERT_TRUE(validate_profile(fx.p).ok()) << validate_profile(fx.p).error;
  auto bytes = encode_profile(fx.p);
  auto back = decode_profile(bytes.data(), bytes.size(), "agg.mlprof");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->functions, functions);
  EXPECT_EQ(back->lines, lines);
}

TEST(Aggregate, ToleratesBadRowsAndNoMetrics) {
  Fixture fx = build();
  fx.p.stack_values.push_back({0, 999, {1, 1}});  // stack out of range: ignored
  fx.p.stack_values.push_back({0, 0, {1000}});    // short row: missing metric counts as 0
  compute_aggregates(fx.p);
  const FunctionStat* f = fx.func("f", "/bin/app");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->self, (V{36 + 1000, 308}));

  Fixture none = build();
  none.p.metrics.clear();
  for (auto& r : none.p.stack_values) r.values.clear();
  compute_aggregates(none.p);
  EXPECT_EQ(none.p.functions.size(), 5u);
  for (const auto& fn : none.p.functions) EXPECT_TRUE(fn.self.empty() && fn.total.empty());
}

// A Python frame's self time is the time it is the innermost Python frame; the native leaf keeps
// its own self time too (the two kinds add up separately).
TEST(AggregatePython, InnermostPythonFrameGetsSelfTime) {
  using namespace mlprof::profile;
  Profile p;
  p.metrics = {{"cpu", "us"}};
  auto s = [&](const char* x) {
    p.strings.push_back(x);
    return static_cast<uint32_t>(p.strings.size() - 1);
  };
  uint32_t py_file = s("app.py"), interp = s("libpython3.11.so"), f_inner = s("inner"), f_outer = s("outer"),
           f_mul = s("long_mul"), f_main = s("main");
  Frame leaf{f_mul, 0, 0, interp, 0, FrameKind::kNative, false};
  Frame inner{f_inner, py_file, 10, 0, 0, FrameKind::kPython, false};
  Frame outer{f_outer, py_file, 20, 0, 0, FrameKind::kPython, false};
  Frame main_{f_main, 0, 0, interp, 0, FrameKind::kNative, false};
  p.frames = {leaf, inner, outer, main_};
  p.stacks = {{{0, 1, 2, 3}, false},   // long_mul <- inner:10 <- outer:20 <- main
              {{1, 2, 3}, false}};     // a stack whose leaf is a Python frame (merge fallback)
  p.threads = {{0, 1, "t", 0, 0}};
  p.processes = {Process{}};
  p.stack_values = {{0, 0, {100}}, {0, 1, {7}}};
  compute_aggregates(p);
  auto fn = [&](uint32_t name) -> const FunctionStat& {
    for (auto& f : p.functions)
      if (f.function == name) return f;
    ADD_FAILURE() << "no function " << p.strings[name];
    return p.functions.front();
  };
  EXPECT_EQ(fn(f_mul).self[0], 100);
  EXPECT_EQ(fn(f_inner).self[0], 107);  // innermost Python frame in both stacks, counted once each
  EXPECT_EQ(fn(f_outer).self[0], 0);
  EXPECT_EQ(fn(f_outer).total[0], 107);
  int64_t line10 = 0, line20 = 0;
  for (auto& l : p.lines) (l.line == 10 ? line10 : line20) += l.self[0];
  EXPECT_EQ(line10, 107);
  EXPECT_EQ(line20, 0);
}
