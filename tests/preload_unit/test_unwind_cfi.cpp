// mlprof's CFI unwinder (preload/unwind_cfi.cpp) checked against libunwind on the same signal
// contexts, plus bad bounds, dlopen/dlclose and concurrent refreshes.
// The fixtures (tests/fixtures/unwind_*.cpp) are built -O2 -fomit-frame-pointer and -O0.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <ucontext.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <gtest/gtest.h>

#include "common/wire_format.h"
#include "preload/eh_frame.h"
#include "preload/unwinder.h"

extern "C" uint64_t ufx_run_mix(uint64_t scale);
extern "C" uint64_t ufx_o2_recurse(int depth, uint64_t iters);
extern "C" uint64_t ufx_o0_recurse(int depth, uint64_t iters);

namespace mlprof::preload {
namespace {

constexpr int kMaxFrames = 64;

struct Sample {
  int n_cfi, n_lu;
  uint8_t flags;
  uint64_t cfi_ns, lu_ns;
  uint64_t cfi[kMaxFrames];
  uint64_t lu[kMaxFrames];
};

Sample* g_samples = nullptr;
int g_capacity = 0;
std::atomic<int> g_nsamples{0};
__attribute__((tls_model("initial-exec"))) thread_local StackBounds t_bounds;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

StackBounds current_thread_bounds() {
  pthread_attr_t attr;
  void* addr = nullptr;
  size_t size = 0;
  EXPECT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  return StackBounds{uintptr_t(addr), uintptr_t(addr) + size};
}

int libunwind_from(unw_context_t* uc, int init_flags, uint64_t* pcs, int max) {
  unw_cursor_t cursor;
  if (unw_init_local2(&cursor, uc, init_flags) < 0) return 0;
  int n = 0;
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0) break;
    pcs[n++] = ip;
  } while (n < max && unw_step(&cursor) > 0);
  return n;
}

void on_sigprof(int, siginfo_t*, void* uc) {
  int saved_errno = errno;
  if (t_bounds.hi != 0) {
    int i = g_nsamples.fetch_add(1, std::memory_order_relaxed);
    if (i < g_capacity) {
      Sample& s = g_samples[i];
      uint64_t t0 = now_ns();
      UnwindResult r = unwind_cfi(uc, t_bounds, s.cfi, kMaxFrames);
      s.cfi_ns = now_ns() - t0;
      s.n_cfi = r.nframes;
      s.flags = r.flags;
      t0 = now_ns();
      s.n_lu = libunwind_from(static_cast<unw_context_t*>(uc), UNW_INIT_SIGNAL_FRAME, s.lu, kMaxFrames);
      s.lu_ns = now_ns() - t0;
    }
  }
  errno = saved_errno;
}

// Same pcs; libunwind may report one more outermost frame past _start/clone3.
bool stacks_match(const uint64_t* a, int na, const uint64_t* b, int nb, uint8_t flags) {
  if (na != nb && !(nb == na + 1 && flags == 0)) return false;
  return std::equal(a, a + na, b);
}

std::string describe(uint64_t pc) {
  Dl_info info;
  char buf[256];
  if (dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_fname) {
    const char* base = strrchr(info.dli_fname, '/');
    snprintf(buf, sizeof buf, "%#lx %s!%s+%#lx", static_cast<unsigned long>(pc), base ? base + 1 : info.dli_fname,
             info.dli_sname ? info.dli_sname : "?",
             static_cast<unsigned long>(pc - uintptr_t(info.dli_sname ? info.dli_saddr : info.dli_fbase)));
  } else {
    snprintf(buf, sizeof buf, "%#lx", static_cast<unsigned long>(pc));
  }
  return buf;
}

std::atomic<bool> g_stop_workers{false};

// A 1 ms timer on the calling thread's CPU clock that sends it SIGPROF (one per thread doubles
// the sample rate of a process-wide ITIMER_PROF, which the kernel tick caps at ~250/s).
timer_t start_thread_timer() {
  sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev._sigev_un._tid = gettid();
  timer_t timer{};
  EXPECT_EQ(timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer), 0);
  itimerspec its{{0, 1000000}, {0, 1000000}};
  EXPECT_EQ(timer_settime(timer, 0, &its, nullptr), 0);
  return timer;
}

void* worker_thread(void*) {
  t_bounds = current_thread_bounds();
  timer_t timer = start_thread_timer();
  uint64_t s = 0;
  while (!g_stop_workers.load(std::memory_order_relaxed)) s += ufx_run_mix(3);
  timer_delete(timer);
  t_bounds = StackBounds{};
  return reinterpret_cast<void*>(s);
}

TEST(UnwindCfi, MatchesLibunwindInSignalHandler) {
  ASSERT_TRUE(cfi_refresh_modules());
  cfi::RegistryStats st = cfi::registry_stats();
  printf("[cfi] %u modules, %u rows\n", st.modules, st.rows);
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  {  // warm libunwind up outside the handler
    unw_context_t uc;
    unw_getcontext(&uc);
    uint64_t pcs[kMaxFrames];
    libunwind_from(&uc, 0, pcs, kMaxFrames);
  }
  std::vector<Sample> samples(4000);
  g_samples = samples.data();
  g_capacity = int(samples.size());
  g_nsamples = 0;
  g_stop_workers = false;

  struct sigaction sa {};
  sa.sa_sigaction = on_sigprof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_sa {};
  ASSERT_EQ(sigaction(SIGPROF, &sa, &old_sa), 0);
  t_bounds = current_thread_bounds();
  pthread_t worker;
  ASSERT_EQ(pthread_create(&worker, nullptr, worker_thread, nullptr), 0);
  timer_t timer = start_thread_timer();
  const int kWanted = 1200;
  uint64_t t_start = now_ns(), deadline = t_start + 30ull * 1000000000ull;
  uint64_t sink = 0;
  while (g_nsamples.load() < kWanted && now_ns() < deadline) sink += ufx_run_mix(3);
  timer_delete(timer);
  printf("[cfi] %d samples in %.1f s\n", g_nsamples.load(), double(now_ns() - t_start) / 1e9);
  g_stop_workers = true;
  pthread_join(worker, nullptr);
  t_bounds = StackBounds{};
  sigaction(SIGPROF, &old_sa, nullptr);
  EXPECT_NE(sink, 1u);

  int n = std::min(g_nsamples.load(), g_capacity);
  ASSERT_GE(n, 1000) << "too few samples";
  int matched = 0, longer_lu = 0, printed = 0;
  uint64_t total_ns = 0, total_lu_ns = 0, total_frames = 0;
  std::vector<uint64_t> ns;
  std::map<std::string, int> leaf_modules, seen_funcs;
  for (int i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    total_ns += s.cfi_ns;
    total_lu_ns += s.lu_ns;
    ns.push_back(s.cfi_ns);
    total_frames += uint64_t(s.n_cfi);
    if (stacks_match(s.cfi, s.n_cfi, s.lu, s.n_lu, s.flags)) {
      ++matched;
      if (s.n_lu == s.n_cfi + 1) ++longer_lu;
    } else if (printed++ < 8) {
      printf("[cfi] mismatch in sample %d (cfi %d frames, flags %u; libunwind %d frames):\n", i, s.n_cfi,
             s.flags, s.n_lu);
      for (int k = 0; k < std::max(s.n_cfi, s.n_lu); ++k)
        printf("   %2d  %-60s %s\n", k, k < s.n_cfi ? describe(s.cfi[k]).c_str() : "-",
               k < s.n_lu ? describe(s.lu[k]).c_str() : "-");
    }
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(s.cfi[0]), &info) && info.dli_fname) {
      const char* base = strrchr(info.dli_fname, '/');
      ++leaf_modules[base ? base + 1 : info.dli_fname];
    }
    for (int k = 0; k < s.n_cfi; ++k)
      if (dladdr(reinterpret_cast<void*>(s.cfi[k] - (k ? 1 : 0)), &info) && info.dli_sname) {
        std::string name = info.dli_sname;
        if (name.rfind("ufx_", 0) == 0 || name.rfind("qsort", 0) == 0 || name == "start_thread" || name == "__libc_start_main") {
          ++seen_funcs[name];
        }
      }
  }
  std::sort(ns.begin(), ns.end());
  double rate = 100.0 * matched / n;
  printf("[cfi] %d samples, %d match libunwind exactly (%.2f%%), %d with one more outermost frame in libunwind\n",
         n, matched, rate, longer_lu);
  printf("[cfi] unwind_cfi in the handler (cold caches): mean %.0f ns, median %lu ns, mean depth %.1f frames;"
         " libunwind on the same contexts: mean %.0f ns\n",
         double(total_ns) / n, static_cast<unsigned long>(ns[ns.size() / 2]), double(total_frames) / n,
         double(total_lu_ns) / n);
  for (auto& [m, c] : leaf_modules) printf("[cfi]   leaf in %-40s %d\n", m.c_str(), c);
  for (auto& [f, c] : seen_funcs) printf("[cfi]   frames of %-40s %d\n", f.c_str(), c);
  EXPECT_GE(rate, 99.0);
  g_samples = nullptr;
  g_capacity = 0;
}

// Unwinds its own stack from a getcontext() at the bottom of a recursion.
struct Probe {
  StackBounds bounds;
  int repeat = 1;
  uint64_t pcs[kMaxFrames];
  UnwindResult result;
  uint64_t ns = 0;
};

__attribute__((noinline)) void probe_here(Probe* p) {
  ucontext_t uc;
  getcontext(&uc);
  uint64_t t0 = now_ns();
  for (int i = 0; i < p->repeat; ++i) p->result = unwind_cfi(&uc, p->bounds, p->pcs, kMaxFrames);
  p->ns = now_ns() - t0;
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) int probe_recurse(Probe* p, int depth) {
  if (depth == 0) {
    probe_here(p);
    return 0;
  }
  int r = probe_recurse(p, depth - 1);
  asm volatile("" : "+r"(r));
  return r + 1;
}

TEST(UnwindCfi, SpeedOfTwentyFrameStack) {
  ASSERT_TRUE(cfi_refresh_modules());
  Probe p;
  p.bounds = current_thread_bounds();
  p.repeat = 200000;
  probe_recurse(&p, 14);
  EXPECT_GE(p.result.nframes, 20);
  printf("[cfi] %d-frame stack: %.1f ns per unwind_cfi (flags %u)\n", p.result.nframes, double(p.ns) / p.repeat,
         p.result.flags);
}

TEST(UnwindCfi, BadBoundsAndRegistersStopWithoutCrashing) {
  ASSERT_TRUE(cfi_refresh_modules());
  ucontext_t uc;
  getcontext(&uc);
  uint64_t pcs[kMaxFrames];
  StackBounds real = current_thread_bounds();
  uint64_t sp = uint64_t(uc.uc_mcontext.gregs[REG_RSP]);

  UnwindResult r = unwind_cfi(&uc, real, pcs, kMaxFrames);
  EXPECT_GE(r.nframes, 3);
  EXPECT_EQ(r.flags & wire::kStackUnwindStop, 0);

  r = unwind_cfi(&uc, StackBounds{real.lo, sp}, pcs, kMaxFrames);  // nothing above sp readable
  EXPECT_EQ(r.nframes, 1);
  EXPECT_TRUE(r.flags & wire::kStackUnwindStop);

  r = unwind_cfi(&uc, StackBounds{0, 0}, pcs, kMaxFrames);
  EXPECT_EQ(r.nframes, 1);
  EXPECT_TRUE(r.flags & wire::kStackUnwindStop);

  r = unwind_cfi(&uc, real, pcs, 2);
  EXPECT_EQ(r.nframes, 2);
  EXPECT_TRUE(r.flags & wire::kStackTruncated);

  ucontext_t bad = uc;
  bad.uc_mcontext.gregs[REG_RIP] = 0;
  r = unwind_cfi(&bad, real, pcs, kMaxFrames);
  EXPECT_EQ(r.nframes, 1);
  EXPECT_TRUE(r.flags & wire::kStackUnwindStop);

  // Garbage registers: misaligned/out-of-range sp and rbp, a pc in no module, a pc in code.
  const uint64_t pcs_to_try[] = {0x1234, uint64_t(&ufx_o2_recurse), uint64_t(&ufx_o2_recurse) + 7,
                                 uint64_t(&memcpy), uint64_t(-1)};
  const uint64_t sps_to_try[] = {0, 8, sp + 3, sp, real.hi - 8, real.hi, real.lo, uint64_t(-8)};
  for (uint64_t pc : pcs_to_try)
    for (uint64_t s : sps_to_try)
      for (uint64_t fp : {uint64_t(0), sp, sp + 1, real.hi - 16, uint64_t(0xdeadbeefdeadbeef)}) {
        bad.uc_mcontext.gregs[REG_RIP] = int64_t(pc);
        bad.uc_mcontext.gregs[REG_RSP] = int64_t(s);
        bad.uc_mcontext.gregs[REG_RBP] = int64_t(fp);
        r = unwind_cfi(&bad, real, pcs, kMaxFrames);
        EXPECT_GE(r.nframes, 1);
        EXPECT_LE(r.nframes, kMaxFrames);
        for (int k = 1; k < r.nframes; ++k) EXPECT_NE(pcs[k], 0u);
      }
}

// ---- dlopen / dlclose ------------------------------------------------------------------------

using DsoCall = uint64_t (*)(uint64_t (*)(void*), void*, int);
const char* dso_path() { return MLPROF_FIXTURE_DIR "/libunwind_fixture_dso.so"; }

struct DsoProbe {
  StackBounds bounds;
  uint64_t cfi[kMaxFrames], lu[kMaxFrames];
  int n_cfi = 0, n_lu = 0;
  uint8_t flags = 0;
};

uint64_t dso_callback(void* arg) {
  auto* p = static_cast<DsoProbe*>(arg);
  unw_context_t uc;  // on x86-64 a ucontext_t: both unwinders start from the same registers
  unw_getcontext(&uc);
  UnwindResult r = unwind_cfi(&uc, p->bounds, p->cfi, kMaxFrames);
  p->n_cfi = r.nframes;
  p->flags = r.flags;
  p->n_lu = libunwind_from(&uc, 0, p->lu, kMaxFrames);
  return uint64_t(r.nframes);
}

int count_in(const uint64_t* pcs, int n, void* handle_sym) {
  Dl_info want, got;
  if (!dladdr(handle_sym, &want)) return 0;
  int c = 0;
  for (int k = 0; k < n; ++k)
    if (dladdr(reinterpret_cast<void*>(pcs[k]), &got) && got.dli_fbase == want.dli_fbase) ++c;
  return c;
}

TEST(UnwindCfi, DlopenedLibraryBecomesUnwindableAfterRefresh) {
  ASSERT_TRUE(cfi_refresh_modules());
  void* h = dlopen(dso_path(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto call = reinterpret_cast<DsoCall>(dlsym(h, "ufx_dso_call"));
  ASSERT_NE(call, nullptr);
  DsoProbe before, after;
  before.bounds = after.bounds = current_thread_bounds();

  call(dso_callback, &before, 6);  // tables do not know the library yet
  EXPECT_GE(before.n_lu, 10);
  EXPECT_LT(before.n_cfi, before.n_lu - 3) << "unwound through a library without its CFI?";
  // Only the DSO frame dso_callback returns to is found (through dso_callback's own CFI). The
  // one frame-pointer step then either stops (flagged) or, when the frame whose rbp the library
  // kept has a frame chain (a Debug build of this test), lands above the library and goes on to
  // the root: a stack that does not reach libunwind's root must say it stopped early.
  EXPECT_EQ(count_in(before.cfi, before.n_cfi, reinterpret_cast<void*>(call)), 1);
  const bool reached_root = before.n_cfi > 0 && before.cfi[before.n_cfi - 1] == before.lu[before.n_lu - 1];
  EXPECT_TRUE(reached_root || (before.flags & wire::kStackUnwindStop))
      << before.n_cfi << " frames, flags " << int(before.flags);

  ASSERT_TRUE(cfi_refresh_modules());
  call(dso_callback, &after, 6);
  EXPECT_TRUE(stacks_match(after.cfi, after.n_cfi, after.lu, after.n_lu, after.flags))
      << "cfi " << after.n_cfi << " frames, libunwind " << after.n_lu;
  EXPECT_EQ(count_in(after.cfi, after.n_cfi, reinterpret_cast<void*>(call)), 7);
  EXPECT_EQ(after.flags, 0);
  dlclose(h);
  EXPECT_TRUE(cfi_refresh_modules());
}

TEST(UnwindCfi, ConcurrentRefreshWithDlcloseDoesNotDisturbUnwinding) {
  ASSERT_TRUE(cfi_refresh_modules());
  cfi::set_grace_period_ns(20'000'000);  // 20 ms: still 1000x an unwind, but frees in the test
  cfi::RegistryStats st0 = cfi::registry_stats();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> stale_pc{0};
  struct Result {
    long unwinds = 0, short_stacks = 0;
    int min_frames = kMaxFrames;
  } res;
  std::thread unwinder([&] {
    Probe p;
    p.bounds = current_thread_bounds();
    while (!stop.load(std::memory_order_relaxed)) {
      probe_recurse(&p, 8);
      ++res.unwinds;
      res.min_frames = std::min(res.min_frames, p.result.nframes);
      if (p.result.nframes < 12 || (p.result.flags & wire::kStackUnwindStop)) ++res.short_stacks;
      // A context whose pc lies in the library being loaded and unloaded, on a stale stack.
      ucontext_t uc;
      getcontext(&uc);
      uc.uc_mcontext.gregs[REG_RIP] = int64_t(stale_pc.load(std::memory_order_relaxed));
      uc.uc_mcontext.gregs[REG_RSP] -= 512;
      uint64_t pcs[kMaxFrames];
      unwind_cfi(&uc, p.bounds, pcs, kMaxFrames);
    }
  });
  int rounds = 0;
  uint64_t t_end = now_ns() + 1500ull * 1000000ull;
  while (now_ns() < t_end) {
    void* h = dlopen(dso_path(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    stale_pc = uint64_t(dlsym(h, "ufx_dso_call")) + 4;
    ASSERT_TRUE(cfi_refresh_modules());
    dlclose(h);
    ASSERT_TRUE(cfi_refresh_modules());
    ++rounds;
  }
  stop = true;
  unwinder.join();
  cfi::RegistryStats st1 = cfi::registry_stats();
  cfi::set_grace_period_ns(2'000'000'000);
  printf("[cfi] %d dlopen/dlclose rounds, %ld unwinds alongside (min %d frames), %u tables built, %u freed\n",
         rounds, res.unwinds, res.min_frames, st1.tables_built - st0.tables_built, st1.freed - st0.freed);
  EXPECT_GT(rounds, 10);
  EXPECT_GT(res.unwinds, 1000);
  EXPECT_EQ(res.short_stacks, 0);
  EXPECT_GT(st1.freed, st0.freed);
}

// ---- parsing without the loader lock ----------------------------------------------------------

struct ModuleSource {
  std::string path;
  cfi::EhFrameSource src;
};

int collect_sources(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<ModuleSource>*>(data);
  const ElfW(Phdr)* hdr = nullptr;
  uintptr_t text = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) hdr = &info->dlpi_phdr[i];
    if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X) && !text)
      text = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
  }
  if (!hdr || !text) return 0;
  ModuleSource m;
  m.path = info->dlpi_name ? info->dlpi_name : "";
  m.src.eh_frame_hdr = info->dlpi_addr + hdr->p_vaddr;
  m.src.bias = info->dlpi_addr;
  m.src.text_base = text;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && hdr->p_vaddr >= ph.p_vaddr && hdr->p_vaddr < ph.p_vaddr + ph.p_filesz) {
      m.src.lo = info->dlpi_addr + ph.p_vaddr;
      m.src.hi = m.src.lo + ph.p_filesz;
    }
  }
  out->push_back(m);
  return 0;
}

// The refresh copies a module's .eh_frame_hdr and .eh_frame (eh_frame_extent) and parses the copy
// after releasing the loader lock: the copy must give exactly the rows of the module itself.
TEST(UnwindCfi, ACopyOfTheEhFrameParsesToTheSameRows) {
  std::vector<ModuleSource> mods;
  dl_iterate_phdr(collect_sources, &mods);
  int compared = 0;
  size_t rows_total = 0;
  bool saw_libc = false;
  for (const ModuleSource& m : mods) {
    cfi::MmapArray in_place(sizeof(cfi::Row)), copied(sizeof(cfi::Row));
    if (!cfi::parse_eh_frame(m.src, in_place, nullptr)) continue;
    uintptr_t lo = 0, hi = 0;
    ASSERT_TRUE(cfi::eh_frame_extent(m.src, &lo, &hi)) << m.path;
    ASSERT_LE(m.src.lo, lo) << m.path;
    ASSERT_LT(lo, hi) << m.path;
    ASSERT_LE(hi, m.src.hi) << m.path;
    std::vector<uint8_t> copy(reinterpret_cast<const uint8_t*>(lo), reinterpret_cast<const uint8_t*>(hi));
    cfi::EhFrameSource src = m.src;
    src.lo = lo;
    src.hi = hi;
    src.delta = reinterpret_cast<intptr_t>(copy.data()) - static_cast<intptr_t>(lo);
    ASSERT_TRUE(cfi::parse_eh_frame(src, copied, nullptr)) << m.path;
    ASSERT_EQ(copied.size(), in_place.size()) << m.path;
    for (size_t i = 0; i < in_place.size(); ++i)
      ASSERT_EQ(memcmp(in_place.at(i), copied.at(i), sizeof(cfi::Row)), 0) << m.path << " row " << i;
    rows_total += in_place.size();
    saw_libc |= m.path.find("libc.so") != std::string::npos;
    ++compared;
  }
  printf("[cfi] %d modules, %zu rows: the same from a copy\n", compared, rows_total);
  EXPECT_GE(compared, 4);
  EXPECT_TRUE(saw_libc);
  EXPECT_GT(rows_total, 10000u);
}

std::atomic<int> g_copies_parsed{0}, g_loader_blocked{0};

// On the refreshing thread, before a table is parsed: another thread walks the loaded modules
// (dl_iterate_phdr takes the loader's write lock, as dlopen does when it adds a library). If the
// refresh held that lock now, the walk could not finish.
void loader_lock_probe(const char*, bool in_place) {
  if (in_place) return;
  g_copies_parsed.fetch_add(1);
  auto* done = new std::atomic<bool>(false);  // leaked if the walker stays blocked
  std::thread walker([done] {
    dl_iterate_phdr([](dl_phdr_info*, size_t, void*) { return 0; }, nullptr);
    done->store(true);
  });
  uint64_t deadline = now_ns() + 5'000'000'000ull;
  while (!done->load() && now_ns() < deadline) usleep(200);
  if (done->load()) {
    walker.join();
    delete done;
  } else {
    g_loader_blocked.fetch_add(1);
    walker.detach();
  }
}

TEST(UnwindCfi, NewModulesAreParsedWithoutHoldingTheLoaderLock) {
  ASSERT_TRUE(cfi_refresh_modules());
  void* h = dlopen(dso_path(), RTLD_NOW | RTLD_LOCAL);  // a module the next refresh must parse
  ASSERT_NE(h, nullptr) << dlerror();
  g_copies_parsed = g_loader_blocked = 0;
  cfi::set_parse_hook(loader_lock_probe);
  EXPECT_TRUE(cfi_refresh_modules());
  cfi::set_parse_hook(nullptr);
  EXPECT_GE(g_copies_parsed.load(), 1);
  EXPECT_EQ(g_loader_blocked.load(), 0) << "a thread needing the loader lock waited for a table's parse";
  auto call = reinterpret_cast<DsoCall>(dlsym(h, "ufx_dso_call"));
  ASSERT_NE(call, nullptr);
  DsoProbe p;
  p.bounds = current_thread_bounds();
  call(dso_callback, &p, 6);
  EXPECT_TRUE(stacks_match(p.cfi, p.n_cfi, p.lu, p.n_lu, p.flags)) << "cfi " << p.n_cfi << ", libunwind " << p.n_lu;
  EXPECT_EQ(count_in(p.cfi, p.n_cfi, reinterpret_cast<void*>(call)), 7);
  dlclose(h);
  EXPECT_TRUE(cfi_refresh_modules());
}

// At exit the writer's refresh is cancelled: it keeps the published tables (a library loaded
// since stays unknown) and a refresh after the cancel is lifted builds what was missing.
TEST(UnwindCfi, ACancelledRefreshKeepsThePublishedTables) {
  ASSERT_TRUE(cfi_refresh_modules());
  cfi::RegistryStats st0 = cfi::registry_stats();
  void* h = dlopen(dso_path(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto call = reinterpret_cast<DsoCall>(dlsym(h, "ufx_dso_call"));
  ASSERT_NE(call, nullptr);
  cfi_cancel_refresh(true);
  EXPECT_TRUE(cfi_refresh_modules());  // the old snapshot stays published
  cfi_cancel_refresh(false);
  cfi::RegistryStats st1 = cfi::registry_stats();
  EXPECT_EQ(st1.modules, st0.modules);
  EXPECT_EQ(st1.rows, st0.rows);
  DsoProbe before, after;
  before.bounds = after.bounds = current_thread_bounds();
  call(dso_callback, &before, 6);
  EXPECT_LE(count_in(before.cfi, before.n_cfi, reinterpret_cast<void*>(call)), 1) << "the cancelled refresh published the library";

  ASSERT_TRUE(cfi_refresh_modules());
  EXPECT_EQ(cfi::registry_stats().modules, st0.modules + 1);
  call(dso_callback, &after, 6);
  EXPECT_TRUE(stacks_match(after.cfi, after.n_cfi, after.lu, after.n_lu, after.flags));
  EXPECT_EQ(count_in(after.cfi, after.n_cfi, reinterpret_cast<void*>(call)), 7);
  dlclose(h);
  EXPECT_TRUE(cfi_refresh_modules());
}

// A fork while the writer parses a new module's table: the fork waits only for the refresh's short
// locked phases (cfi_fork_prepare), and the child, which inherits no refresh, can refresh itself.
std::atomic<bool> g_parse_started{false}, g_forked{false};

void hold_parse_until_forked(const char*, bool in_place) {
  if (in_place) return;
  g_parse_started = true;
  uint64_t deadline = now_ns() + 5'000'000'000ull;
  while (!g_forked.load() && now_ns() < deadline) usleep(200);
}

TEST(UnwindCfi, AForkDuringAParseWaitsNeitherForItNorInheritsItsLocks) {
  ASSERT_TRUE(cfi_refresh_modules());
  void* h = dlopen(dso_path(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  g_parse_started = g_forked = false;
  cfi::set_parse_hook(hold_parse_until_forked);
  std::thread refresher([] { cfi_refresh_modules(); });
  uint64_t deadline = now_ns() + 5'000'000'000ull;
  while (!g_parse_started.load() && now_ns() < deadline) usleep(200);
  ASSERT_TRUE(g_parse_started.load());
  uint64_t t0 = now_ns();
  cfi_fork_prepare();
  const double prepare_ms = double(now_ns() - t0) / 1e6;
  pid_t pid = fork();
  if (pid == 0) {
    cfi_fork_done(true);
    cfi::set_parse_hook(nullptr);
    _exit(cfi_refresh_modules() ? 0 : 1);
  }
  cfi_fork_done(false);
  g_forked = true;
  refresher.join();
  cfi::set_parse_hook(nullptr);
  ASSERT_GT(pid, 0);
  int status = -1;
  for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(10'000);
  if (status == -1) kill(pid, SIGKILL), waitpid(pid, &status, 0);
  EXPECT_LT(prepare_ms, 2000) << "the fork waited for the parse";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's refresh hung or failed";
  dlclose(h);
  EXPECT_TRUE(cfi_refresh_modules());
}

// The hooks' row cache (unwind_cfi_here): the same stacks as without it, at depths that share
// frames and after a refresh (a new snapshot empties it); and how much faster a repeated stack is.
struct HereProbe {
  StackBounds bounds;
  uint64_t pcs[64];
  UnwindResult result;
  int repeat = 1;
  int64_t ns = 0;
  UnwindMemo* memo = nullptr;  // the stack memo, with the row cache
};

__attribute__((noinline)) void here_probe(HereProbe* p) {
  const uint64_t t0 = now_ns();
  for (int i = 0; i < p->repeat; ++i) p->result = unwind_cfi_here(p->bounds, p->pcs, 64, p->memo);
  p->ns = static_cast<int64_t>(now_ns() - t0);
}

__attribute__((noinline)) int here_recurse(HereProbe* p, int depth) {
  if (depth == 0) {
    here_probe(p);
    return 0;
  }
  int r = here_recurse(p, depth - 1);
  asm volatile("" : "+r"(r));
  return r + 1;
}

// One call site for every probe: the stacks then differ only above here_run's frame.
__attribute__((noinline)) void here_run(HereProbe* p, int depth, bool cache) {
  cfi_set_row_cache(cache);
  here_recurse(p, depth);
  asm volatile("" ::: "memory");
}

// here_run's twin: the same code, so probes through either have the same frames (pcs and CFAs)
// up to here_run's or here_run_b's own, and different ones from there on.
__attribute__((noinline)) void here_run_b(HereProbe* p, int depth, bool cache) {
  cfi_set_row_cache(cache);
  here_recurse(p, depth);
  asm volatile("nop" ::: "memory");  // not identical code: GCC's -fipa-icf would merge the twins
}

void expect_same_stack(const HereProbe& got, const HereProbe& want, const char* what) {
  ASSERT_EQ(got.result.nframes, want.result.nframes) << what;
  EXPECT_EQ(got.result.flags, want.result.flags) << what;
  for (int i = 0; i < want.result.nframes; ++i) EXPECT_EQ(got.pcs[i], want.pcs[i]) << what << ", frame " << i;
}

enum class Via { kRun, kTwin };

// One call site for every probe of the memo test, through here_run or its twin.
__attribute__((noinline)) void probe_via(HereProbe* p, int depth, bool cache, Via via) {
  if (via == Via::kRun)
    here_run(p, depth, cache);
  else
    here_run_b(p, depth, cache);
  asm volatile("" ::: "memory");
}

// The stack memo: a repeated stack takes its frames from it; a stack that shares the memo's inner
// frames (the same pcs at the same CFAs) but not the ones above them is checked, refused there,
// and unwound up to the next frame it shares; a deeper stack takes its outer frames from it. Each
// compared with the same probe unwound without the cache.
TEST(UnwindCfi, TheStackMemoGivesTheSameStacks) {
  ASSERT_TRUE(cfi_refresh_modules());
  static UnwindMemo memo;  // zeroed: empty (4.6 KiB: not on the test's stack)
  HereProbe a_off, b_off, deep_off, a1, a2, b, deep;
  for (HereProbe* p : {&a1, &a2, &b, &deep}) p->memo = &memo;
  struct Case {
    HereProbe* p;
    int depth;
    bool cache;
    Via via;
    uint64_t hits = 0, rejects = 0;
  } cases[] = {{&a_off, 10, false, Via::kRun},  {&b_off, 10, false, Via::kTwin}, {&deep_off, 16, false, Via::kRun},
               {&a1, 10, true, Via::kRun},      {&a2, 10, true, Via::kRun},     {&b, 10, true, Via::kTwin},
               {&deep, 16, true, Via::kRun}};
  for (Case& c : cases) {
    c.p->bounds = current_thread_bounds();
    const uint64_t h = memo.hits, r = memo.rejects;
    probe_via(c.p, c.depth, c.cache, c.via);
    c.hits = memo.hits - h;
    c.rejects = memo.rejects - r;
  }
  cfi_set_row_cache(true);
  // unwind_cfi_here, here_probe, 11 here_recurse: the same through both; here_run's frame: not.
  for (int i = 0; i < 13; ++i) ASSERT_EQ(a_off.pcs[i], b_off.pcs[i]) << "frame " << i;
  ASSERT_NE(a_off.pcs[13], b_off.pcs[13]);
  expect_same_stack(a1, a_off, "first");
  expect_same_stack(a2, a_off, "repeated");
  EXPECT_EQ(cases[4].hits, 1u) << "the same stack again: all from the memo";
  EXPECT_EQ(cases[4].rejects, 0u);
  expect_same_stack(b, b_off, "through the twin");
  EXPECT_EQ(cases[5].rejects, 1u) << "the twin's frames must be checked and refused";
  EXPECT_EQ(cases[5].hits, 1u) << "the frames above probe_via: from the memo";
  expect_same_stack(deep, deep_off, "deeper");
  EXPECT_EQ(cases[6].hits, 1u) << "the deeper stack's outer frames: from the memo";
}

TEST(UnwindCfi, TheHooksRowCacheGivesTheSameStacks) {
  ASSERT_TRUE(cfi_refresh_modules());
  for (int round = 0; round < 2; ++round) {
    for (int depth : {3, 12, 7, 12, 0, 20}) {
      HereProbe off, on, again;
      off.bounds = on.bounds = again.bounds = current_thread_bounds();
      for (HereProbe* p : {&off, &on, &again}) here_run(p, depth, p != &off);  // on fills (or hits), again hits
      // unwind_cfi_here, here_probe, depth + 1 here_recurse, here_run: the same in all three.
      const int same = depth + 4;
      ASSERT_GE(off.result.nframes, same + 1);
      for (const HereProbe* p : {&on, &again}) {
        ASSERT_EQ(p->result.nframes, off.result.nframes) << "depth " << depth;
        EXPECT_EQ(p->result.flags, off.result.flags);
        for (int i = 0; i < same; ++i) EXPECT_EQ(p->pcs[i], off.pcs[i]) << "frame " << i << ", depth " << depth;
      }
    }
    ASSERT_TRUE(cfi_refresh_modules());  // a new snapshot: the cache starts over
  }
  static UnwindMemo memo;
  HereProbe off, on, memoed;
  off.bounds = on.bounds = memoed.bounds = current_thread_bounds();
  off.repeat = on.repeat = memoed.repeat = 100000;
  memoed.memo = &memo;
  here_run(&off, 25, false);
  here_run(&on, 25, true);
  here_run(&memoed, 25, true);
  printf("[cfi] %d-frame hook unwind: %.1f ns without the row cache, %.1f ns with it, %.1f ns with the stack memo "
         "too (the same stack every time)\n",
         on.result.nframes, double(off.ns) / off.repeat, double(on.ns) / on.repeat, double(memoed.ns) / memoed.repeat);
}

}  // namespace
}  // namespace mlprof::preload
