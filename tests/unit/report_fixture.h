// What the report and export tests share: the hand-built profile of test_report_fixture.cpp (its
// ground truth is described there) and the size of the large-profile tests.
#pragma once
#include <cstdint>
#include <string>

#include "profile/model.h"

namespace mlprof::report_test {

profile::Profile make_report_profile();

// The index of s in p.strings, appended when it is not there yet.
uint32_t intern(profile::Profile& p, const std::string& s);

// The large-profile tests: a million samples in the normal build; a tenth with sanitizers, whose
// code runs ~10x slower (the figure that matters is the normal build's).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr uint32_t kBig = 100'000;
#else
inline constexpr uint32_t kBig = 1'000'000;
#endif

}  // namespace mlprof::report_test
