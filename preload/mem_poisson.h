// Memory profiling: Poisson sampling by bytes (the approach of tcmalloc's and heapprof's samplers).
//
// Allocated bytes are a line; sample points fall on it as a Poisson process with mean spacing T
// (MLPROF_MEM_INTERVAL). An allocation of s bytes is sampled when at least one point falls in
// its s bytes, which happens with probability p(s) = 1 - exp(-s/T), independently of every other
// allocation; its weight s / p(s) makes the sum of the sampled weights an unbiased estimate of
// the bytes allocated (and, over any subset of allocations - a stack, the live ones at a time -
// of that subset's bytes). Large allocations are almost always sampled with weight ~ s.
//
// Implementation: a per-thread countdown C = floor(X) + 1, X ~ Exp(T) the bytes before the next
// point; an allocation subtracts s and is sampled when C drops to zero or below (C <= s, i.e.
// floor(X) < s, i.e. the real-valued point lies inside the allocation: the probability is exactly
// p(s), with no rounding bias even for 1-byte allocations), then C is drawn again (the
// exponential is memoryless, so what was left over does not matter). A zero-initialised
// countdown (a new thread) therefore takes the slow path at once, which draws it. The hook's
// fast path is one subtraction and one compare on a thread-local; everything else here runs for
// sampled allocations only. T == 1 is exact mode: every allocation is sampled with weight s (the
// countdown is kept at 0, so even malloc(0) takes the slow path).
//
// The same scheme, with its own countdown and interval (MLPROF_COPY_INTERVAL), samples
// memcpy/memmove volume; exact mode does not apply to it.
//
// No libm: the preload links libc only, so log and expm1 are computed here (|rel. error| < 1e-12).
// Not signal context, except draw_countdown (skip_due, for the sampling handler's own copies):
// nothing here allocates or locks.
#pragma once
#include <cstdint>

namespace mlprof::preload::mem {

double fast_log(double x);    // x > 0, normal
double fast_expm1(double x);  // any x; exp(x) - 1 without cancellation near 0

// xorshift64*: the state must be non-zero.
uint64_t next_random(uint64_t* state);
// A non-zero seed from the clock, an address and the thread id.
uint64_t fresh_seed(uint32_t tid);

// floor(Exp(interval)) + 1 drawn from *rng; 0 in exact mode (interval 1).
int64_t draw_countdown(uint64_t* rng, uint64_t interval);

// The probability-weighted size: size / (1 - exp(-size/interval)), rounded; size itself in
// exact mode. At least 1 for size > 0.
uint64_t sample_weight(uint64_t size, uint64_t interval);

// Allocation sizes as the countdown sees them (malloc(SIZE_MAX) fails before it is counted, but
// an mmap of a huge range may succeed): never negative when converted.
inline int64_t counted(uint64_t size) {
  return size > (uint64_t{1} << 62) ? int64_t{1} << 62 : static_cast<int64_t>(size);
}

// The slow path, taken when `*countdown` dropped to zero or below after subtracting `size` (or
// was never drawn: *seeded false). Returns true when the allocation is sampled, with its weight; redraws
// the countdown as needed. *rng must be seeded (non-zero).
bool decide(int64_t* countdown, bool* seeded, uint64_t* rng, uint64_t size, uint64_t interval, uint64_t* weight);

}  // namespace mlprof::preload::mem
