// Thread-pool workers' samples charged to the stack that started their work
// (collector/pool_attribution.h), on hand-made stacks whose right answer is known: which launcher
// (the nearest in time), where the splice goes, and which threads and frames are never matched.
#include <gtest/gtest.h>

#include <map>

#include "collector/pool_attribution.h"
#include "profile/modules.h"
#include "profile/string_table.h"

using namespace mlprof;
using namespace mlprof::profile;
using mlprof::collector::PoolCounts;
using mlprof::collector::PoolSample;

namespace {

class PoolFixture : public ::testing::Test {
 protected:
  PoolFixture() : st_(p_.strings) {}

  uint32_t frame(const char* fn, const char* module, uint64_t offset = 0, FrameKind kind = FrameKind::kNative,
                 uint32_t line = 0) {
    p_.frames.push_back({fn[0] ? st_.intern(fn) : 0u, kind == FrameKind::kPython ? st_.intern("serve.py") : 0u, line,
                         module[0] ? st_.intern(module) : 0u, offset, kind, false});
    return static_cast<uint32_t>(p_.frames.size() - 1);
  }
  uint32_t py(const char* fn, uint32_t line) { return frame(fn, "", 0, FrameKind::kPython, line); }
  // Frames leaf first.
  uint32_t stack(std::vector<uint32_t> frames) {
    p_.stacks.push_back({std::move(frames), false});
    return static_cast<uint32_t>(p_.stacks.size() - 1);
  }
  PoolCounts charge(std::vector<PoolSample>& samples) {
    return collector::charge_pool_workers(
        p_, samples,
        [this](uint32_t f) {
          auto it = starts_.find(f);
          return it == starts_.end() ? collector::kNoFunctionStart : it->second;
        },
        [this] { return marker_ = frame(kPoolWorkersFrameName, ""); },
        [this](std::vector<uint32_t> frames, bool truncated) {
          p_.stacks.push_back({std::move(frames), truncated});
          return static_cast<uint32_t>(p_.stacks.size() - 1);
        });
  }
  std::string names(uint32_t s) {
    std::string out;
    for (uint32_t f : p_.stacks.at(s).frames) {
      const Frame& fr = p_.frames.at(f);
      out += (out.empty() ? "" : " <- ") + (fr.function ? p_.str(fr.function) : "?");
      if (fr.kind == FrameKind::kPython) out += ":" + std::to_string(fr.line);
    }
    return out;
  }

  Profile p_;
  StringTable st_;
  uint32_t marker_ = kNone;
  std::map<uint32_t, uint64_t> starts_;  // unnamed frames' function starts (the unwind table's)
};

constexpr const char* kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
constexpr const char* kGomp = "/usr/lib/x86_64-linux-gnu/libgomp.so.1";
constexpr const char* kLib = "/opt/app/libwork.so";
constexpr const char* kPython = "/usr/bin/python3";

// Two Python lines start the same parallel function at different times: each worker sample goes to
// the line whose thread ran that function nearest in time, spliced at the call that started it.
TEST_F(PoolFixture, AWorkerSampleTakesTheNearestLauncherCallers) {
  const uint32_t start = frame("start_thread", kLibc), clone = frame("clone3", kLibc),
                 gomp_loop = frame("", kGomp, 0x1c2f0), fn = frame("work._omp_fn.0", kLib),
                 kernel = frame("kernel", kLib), parallel = frame("GOMP_parallel", kGomp),
                 work = frame("work", kLib), ffi = frame("ffi_call", kPython), eval = frame("_PyEval_EvalFrameDefault", kPython),
                 main = frame("main", kPython);
  const uint32_t line12 = py("<module>", 12), line13 = py("<module>", 13);
  const uint32_t worker = stack({kernel, fn, gomp_loop, start, clone});
  const uint32_t at12 = stack({kernel, fn, parallel, work, ffi, eval, line12, main});
  const uint32_t at13 = stack({fn, parallel, work, ffi, eval, line13, main});
  // Thread 1 starts the teams; thread 2 is the pool's worker.
  std::vector<PoolSample> samples = {{at12, 100, true, 1}, {worker, 110, true, 2}, {at13, 500, true, 1},
                                     {worker, 480, true, 2}, {worker, 1000, true, 2}};
  const PoolCounts c = charge(samples);
  EXPECT_EQ(c.worker_samples, 3u);
  EXPECT_EQ(c.charged, 3u);
  EXPECT_EQ(names(samples[1].stack),
            "kernel <- work._omp_fn.0 <- [thread-pool workers] <- GOMP_parallel <- work <- ffi_call <- "
            "_PyEval_EvalFrameDefault <- <module>:12 <- main");
  EXPECT_EQ(names(samples[3].stack),
            "kernel <- work._omp_fn.0 <- [thread-pool workers] <- GOMP_parallel <- work <- ffi_call <- "
            "_PyEval_EvalFrameDefault <- <module>:13 <- main");
  EXPECT_EQ(samples[4].stack, samples[3].stack);  // after the last launcher sample: the last one
  EXPECT_EQ(samples[0].stack, at12);              // launchers keep their own
  EXPECT_EQ(samples[2].stack, at13);
}

// A pool's threads in nothing but the pool runtime's own code (its spin before sleeping) are waiting
// for work: counted apart, charged to no line, unless a launcher spun in the same function (a
// team's barrier), which charges the sample instead. Work no launcher ran is not waiting.
TEST_F(PoolFixture, APoolSpinningForWorkIsCountedAsWaiting) {
  const uint32_t start = frame("start_thread", kLibc), clone = frame("clone3", kLibc),
                 thread_start = frame("", kGomp, 0x1cd67), spin = frame("", kGomp, 0x1f622),
                 yield = frame("sched_yield", kLibc), fn = frame("work._omp_fn.0", kLib), other = frame("other", kLib),
                 parallel = frame("GOMP_parallel", kGomp), eval = frame("_PyEval_EvalFrameDefault", kPython);
  starts_[thread_start] = 0x1cd00;
  starts_[spin] = 0x1f600;
  const uint32_t line7 = py("<module>", 7);
  const uint32_t idle = stack({spin, thread_start, start, clone});          // spinning in libgomp
  const uint32_t idle_yield = stack({yield, spin, thread_start, start, clone});
  const uint32_t leaf_only = stack({thread_start, start, clone});           // pthreadpool-like: the routine itself
  const uint32_t unknown_work = stack({other, thread_start, start, clone});  // work no launcher ran
  const uint32_t launcher = stack({fn, parallel, eval, line7});
  std::vector<PoolSample> samples = {{idle, 10, true, 2}, {idle_yield, 20, true, 2}, {leaf_only, 30, true, 2},
                                     {unknown_work, 40, true, 2}, {launcher, 50, true, 1}};
  PoolCounts c = charge(samples);
  EXPECT_EQ(c.waiting, 3u);
  EXPECT_EQ(c.charged, 0u);
  // The launcher at a team's barrier spins in the same libgomp function: a pool runtime's own
  // function is nobody's work, so the worker's spin is not charged to that line (it was: the idle
  // spin between teams went to the line of the last team).
  const uint32_t barrier = stack({spin, parallel, eval, line7});
  std::vector<PoolSample> team = {{idle, 10, true, 2}, {barrier, 12, true, 1}, {leaf_only, 30, true, 2}};
  c = charge(team);
  EXPECT_EQ(c.charged, 0u);
  EXPECT_EQ(c.waiting, 2u);
  EXPECT_EQ(team[0].stack, idle);
}

// PyTorch's QNNPACK/XNNPACK pool (libpthreadpool, Debian's torch): the worker runs the task
// function the calling thread also runs through pthreadpool_parallelize_*, both unnamed in the
// stripped libraries, matched by their function starts. libpthreadpool's name begins like
// libpthread's, which once made its frames the C runtime's and its threads no pool's.
TEST_F(PoolFixture, PthreadpoolWorkersAreChargedToTheLineThatParallelized) {
  constexpr const char* kPool = "/usr/lib/x86_64-linux-gnu/libpthreadpool.so.0";
  constexpr const char* kTorch = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";
  const uint32_t start = frame("start_thread", kLibc), clone = frame("clone3", kLibc),
                 thread_main = frame("", kPool, 0xd8a1), wait = frame("", kPool, 0xde79),
                 thread_fn = frame("", kPool, 0x23f4), task = frame("", kTorch, 0x5844d27),
                 kernel = frame("", kTorch, 0x584f9b8), caller_fn = frame("", kPool, 0x2410),
                 parallelize = frame("pthreadpool_parallelize_2d_tile_2d", kPool),
                 qlinear = frame("at::native::qlinear_dynamic", kTorch), eval = frame("_PyEval_EvalFrameDefault", kPython);
  starts_[thread_fn] = starts_[caller_fn] = 0x23c0;  // the same function at two return addresses
  starts_[task] = 0x5844c00;
  starts_[kernel] = 0x584f800;
  starts_[thread_main] = 0xd800;
  starts_[wait] = 0xde00;
  const uint32_t line11 = py("<module>", 11);
  const uint32_t worker = stack({kernel, task, thread_fn, wait, thread_main, start, clone});
  const uint32_t at11 = stack({kernel, task, caller_fn, parallelize, qlinear, eval, line11});
  std::vector<PoolSample> samples = {{at11, 100, true, 1}, {worker, 105, true, 2}};
  const PoolCounts c = charge(samples);
  EXPECT_EQ(c.worker_samples, 1u);
  EXPECT_EQ(c.charged, 1u);
  // Matched at the task function (pthreadpool's own functions never match), spliced under the
  // launcher's call of it.
  EXPECT_EQ(names(samples[1].stack),
            "? <- ? <- [thread-pool workers] <- ? <- pthreadpool_parallelize_2d_tile_2d <- at::native::qlinear_dynamic <- "
            "_PyEval_EvalFrameDefault <- <module>:11");
}

// Only a pool's thread is charged: a thread the library started itself runs the same function on
// its own behalf; and a worker sample matches neither in the C runtime (everyone's memcpy), nor
// deeper than the handed-over function's first frames, nor with a wait sample.
TEST_F(PoolFixture, OnlyPoolThreadsAreChargedAndOnlyAtTheirOwnFunctions) {
  const uint32_t start = frame("start_thread", kLibc), pool_loop = frame("blas_thread_server", "/usr/lib/libopenblas.so.0"),
                 own_loop = frame("my_thread_main", kLib), fn = frame("inner", kLib), memcpy_ = frame("memcpy", kLibc),
                 caller = frame("run", kLib), line7 = py("<module>", 7);
  const uint32_t launcher = stack({memcpy_, fn, caller, line7});
  const uint32_t not_pool = stack({fn, own_loop, start});
  const uint32_t via_memcpy = stack({memcpy_, frame("pool_private", "/usr/lib/libopenblas.so.0", 0x40), pool_loop, start});
  std::vector<uint32_t> deep = {fn};
  for (int i = 0; i < 10; ++i) deep.push_back(frame(("layer" + std::to_string(i)).c_str(), kLib));
  deep.push_back(pool_loop);
  deep.push_back(start);
  const uint32_t too_deep = stack(deep);
  const uint32_t pooled = stack({fn, pool_loop, start});
  // A stack cut short inside the pool's code has no thread start at its root: not a worker's (here
  // a launcher, farther in time); nor one the unwinder flagged as truncated, which is no launcher
  // either.
  const uint32_t cut = stack({fn, pool_loop});
  const uint32_t flagged = stack({fn, pool_loop, start});
  p_.stacks[flagged].truncated = true;
  // (The library's own thread runs `inner` too: it is a launcher like any thread that is not a
  // pool's, here farther in time from the pooled sample than line 7's.)
  std::vector<PoolSample> samples = {{launcher, 10, true, 1}, {not_pool, 30, true, 3}, {via_memcpy, 12, true, 2},
                                     {too_deep, 13, true, 2},  {pooled, 14, false, 2},  {pooled, 15, true, 2},
                                     {cut, 40, true, 4},       {flagged, 16, true, 5}};
  const PoolCounts c = charge(samples);
  EXPECT_EQ(samples[1].stack, not_pool);
  EXPECT_EQ(samples[2].stack, via_memcpy);
  EXPECT_EQ(samples[3].stack, too_deep);
  EXPECT_EQ(samples[4].stack, pooled);  // a wait sample: not eligible
  EXPECT_EQ(names(samples[5].stack), "inner <- [thread-pool workers] <- run <- <module>:7");
  EXPECT_EQ(samples[6].stack, cut);
  EXPECT_EQ(samples[7].stack, flagged);
  EXPECT_EQ(c.worker_samples, 3u);  // via_memcpy, too_deep, the eligible pooled one
  EXPECT_EQ(c.charged, 1u);
}

// A stripped library's static functions have no name: they match by the function's start from the
// unwind table, whatever the pc inside it; without a start, only at the same address.
TEST_F(PoolFixture, UnnamedFunctionsMatchByTheirStart) {
  const char* lib = "/usr/lib/python3/dist-packages/sklearn/_predictor.so";
  const uint32_t start = frame("start_thread", kLibc), gomp = frame("", kGomp, 0x1cd67),
                 fn_a = frame("", lib, 0xa4e0), fn_b = frame("", lib, 0xa519), other = frame("", lib, 0xb000),
                 parallel = frame("GOMP_parallel", kGomp), line5 = py("predict", 5);
  starts_ = {{fn_a, 0xa4c0}, {fn_b, 0xa4c0}, {other, 0xaf00}};
  const uint32_t launcher = stack({fn_a, parallel, frame("", lib, 0x1df7d), line5});
  const uint32_t same_fn = stack({fn_b, gomp, start});
  const uint32_t other_fn = stack({other, gomp, start});
  std::vector<PoolSample> samples = {{launcher, 1, true, 1}, {same_fn, 2, true, 2}, {other_fn, 3, true, 2}};
  charge(samples);
  EXPECT_EQ(names(samples[1].stack), "? <- [thread-pool workers] <- GOMP_parallel <- ? <- predict:5");
  EXPECT_EQ(p_.stacks[samples[1].stack].frames.front(), fn_b);  // the worker's own pc
  EXPECT_EQ(samples[2].stack, other_fn);
}

TEST_F(PoolFixture, UnnamedFunctionsWithoutAStartMatchOnlyAtTheSameAddress) {
  const char* blas = "/usr/lib/x86_64-linux-gnu/libopenblas.so.0";
  const uint32_t start = frame("start_thread", kLibc), server = frame("", blas, 0x100),
                 inner_a = frame("", blas, 0x2000), inner_b = frame("", blas, 0x2040), gemm = frame("dgemm_", blas),
                 line3 = py("<module>", 3);
  const uint32_t launcher = stack({inner_a, frame("", blas, 0x3000), gemm, line3});
  const uint32_t same_site = stack({inner_a, server, start});
  const uint32_t other_site = stack({inner_b, server, start});
  std::vector<PoolSample> samples = {{launcher, 1, true, 1}, {same_site, 2, true, 2}, {other_site, 3, true, 2}};
  charge(samples);
  EXPECT_NE(samples[1].stack, same_site);
  EXPECT_EQ(p_.stacks[samples[1].stack].frames.back(), line3);
  EXPECT_EQ(samples[2].stack, other_site);
  // No sample charged: nothing interned, not even the marker frame.
  const size_t frames = p_.frames.size(), stacks = p_.stacks.size();
  std::vector<PoolSample> alone = {{other_site, 4, true, 2}};
  charge(alone);
  EXPECT_EQ(p_.frames.size(), frames);
  EXPECT_EQ(p_.stacks.size(), stacks);
}

// OpenBLAS's kernels are assembly without unwind information: both threads' stacks there end at
// the kernel. On a pool's thread (one with a stack from blas_thread_server) such a cut stack is
// matched from the frames it has, to a starting thread's cut stack whose Python frames give the
// line; a cut stack without Python frames gives no callers, and a cut stack on a thread that is no
// pool's stays as it is.
TEST_F(PoolFixture, CutStacksOnAPoolThreadMatchStartingStacksWithPythonFrames) {
  const char* blas = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so";
  const uint32_t start = frame("start_thread", kLibc), server = frame("", blas, 0x37492c),
                 yield = frame("__sched_yield", kLibc), kernel = frame("dgemm_kernel_HASWELL", blas),
                 caller = frame("dgemm_nn", blas), line5 = py("<module>", 5);
  const uint32_t spin = stack({yield, server, start});
  const uint32_t cut_worker = stack({kernel});
  const uint32_t cut_launcher = stack({kernel, line5});
  const uint32_t cut_native = stack({kernel, caller});
  for (uint32_t s : {cut_worker, cut_launcher, cut_native}) p_.stacks[s].truncated = true;
  std::vector<PoolSample> samples = {{spin, 5, true, 2},          {cut_launcher, 10, true, 1},
                                     {cut_native, 19, true, 4},   {cut_worker, 20, true, 2},
                                     {cut_worker, 21, true, 3}};
  const PoolCounts c = charge(samples);
  EXPECT_EQ(names(samples[3].stack), "dgemm_kernel_HASWELL <- [thread-pool workers] <- <module>:5");
  EXPECT_TRUE(p_.stacks[samples[3].stack].truncated);
  EXPECT_EQ(samples[4].stack, cut_worker);  // thread 3 is no pool's
  EXPECT_EQ(samples[0].stack, spin);        // the idle spin: no one's function
  EXPECT_EQ(c.worker_samples, 1u);
  EXPECT_EQ(c.charged, 1u);
  EXPECT_EQ(c.waiting, 1u);  // the spin: its thread routine calling sched_yield
}

TEST(PoolModules, ThreadPoolRuntimesAreKnownByTheirFiles) {
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libgomp.so.1", "/site-packages/torch/lib/libgomp-a34b3233.so.1",
                        "/opt/intel/lib/libiomp5.so", "/usr/lib/llvm-16/lib/libomp.so.5", "/usr/lib/libopenblas.so.0",
                        "/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so", "/site-packages/torch/lib/libc10.so",
                        "/usr/lib/x86_64-linux-gnu/libpthreadpool.so.0", "/usr/lib/libtbb.so.12", "/opt/intel/lib/libmkl_intel_thread.so.2"})
    EXPECT_TRUE(is_thread_pool_module(m)) << m;
  // Runtimes of nothing but the pool, whose functions are nobody's work; OpenBLAS, MKL's threading
  // layers and libc10 hold work too.
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libgomp.so.1", "/site-packages/torch/lib/libgomp-a34b3233.so.1",
                        "/opt/intel/lib/libiomp5.so", "/usr/lib/x86_64-linux-gnu/libpthreadpool.so.0", "/usr/lib/libtbb.so.12"})
    EXPECT_TRUE(is_pool_runtime_only_module(m)) << m;
  for (const char* m : {"/usr/lib/libopenblas.so.0", "/opt/intel/lib/libmkl_intel_thread.so.2", "/site-packages/torch/lib/libc10.so"})
    EXPECT_FALSE(is_pool_runtime_only_module(m)) << m;
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3.11", "/opt/app/libwork.so",
                        "/usr/lib/libblas.so.3", "/site-packages/torch/lib/libtorch_cpu.so"})
    EXPECT_FALSE(is_thread_pool_module(m)) << m;
}

TEST(PoolModules, TheCRuntimeIsKnownByItsFilesNotByPrefixesOfOthers) {
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc-2.31.so",
                        "/usr/lib/x86_64-linux-gnu/libpthread.so.0", "/lib/x86_64-linux-gnu/libpthread-2.31.so",
                        "/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/libdl.so.2",
                        "/usr/lib/x86_64-linux-gnu/librt.so.1", "/usr/lib/x86_64-linux-gnu/libm.so.6"})
    EXPECT_TRUE(is_c_runtime_module(m)) << m;
  // PyTorch's QNNPACK pool (whose threads were once taken for the C runtime's thread start, and
  // never for a pool's workers), and libraries whose names merely start like the runtime's.
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libpthreadpool.so.0", "/usr/lib/x86_64-linux-gnu/librtmp.so.1",
                        "/usr/lib/x86_64-linux-gnu/libdlib.so.19", "/usr/lib/libmkl_core.so"})
    EXPECT_FALSE(is_c_runtime_module(m)) << m;
}

}  // namespace
