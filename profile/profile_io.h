// The profile file (".mlprof"): a versioned, sectioned, checksummed binary encoding of
// profile::Profile. docs/profile-format.md is the normative byte-level specification; keep the
// two in step (bump kFormatMinor when appending fields or sections, kFormatMajor when an old
// reader could no longer read the file correctly).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "profile/model.h"
#include "profile/result.h"

namespace mlprof::profile {

inline constexpr uint16_t kFormatMajor = 1, kFormatMinor = 4;  // 1.1: memory and leak sections; 1.2: serving, gpu;
                                                               // 1.3: serving window_copy_bytes, status -1;
                                                               // 1.4: serving sites' retained_samples, window CPU

// The first 8 bytes of every profile file. Distinct from the wire stream magic "MLPW".
inline constexpr uint8_t kFileMagic[8] = {'M', 'L', 'P', 'R', 'O', 'F', 0x00, 0x1a};
// magic (8) + u16 major + u16 minor + u64 total file size, all little-endian.
inline constexpr size_t kFileHeaderSize = 20;

// Section tags (varint). 0 is the end section (trailer); unknown tags are skipped by readers.
namespace section {
inline constexpr uint64_t kEnd = 0, kRunInfo = 1, kStrings = 2, kMetrics = 3, kFrames = 4,
                          kStacks = 5, kProcesses = 6, kThreads = 7, kStackValues = 8,
                          kSamples = 9, kFunctions = 10, kLines = 11, kWarnings = 12,
                          kMemory = 13, kLeaks = 14,  // since 1.1
                          kServing = 15, kGpu = 16,   // since 1.2 (written when present)
                          kModules = 17;              // since 1.2
}

// Encodes the profile as a complete file image (current version). Never fails and never reads
// out of bounds, even for an inconsistent Profile; such a profile just fails to decode.
std::vector<uint8_t> encode_profile(const Profile&);

// Decodes and validates a file image. Sets version_major/minor to the file's version. Errors are
// complete sentences that start with name_for_errors (normally the path) and say what to do.
Result<Profile> decode_profile(const uint8_t* data, size_t size, const std::string& name_for_errors);

// Checks every index (string, frame, stack, process, thread) against its table, strings[0] == "",
// and that per-metric vectors have one value per metric. The message names the section/table.
Status validate_profile(const Profile&);

// Validates, encodes and writes atomically: path.tmp.<pid>, then rename over path (no fsync; see
// the .cpp). On failure the temporary file is removed and `path` is left untouched.
Status write_profile(const Profile&, const std::string& path);

// Writes `n` bytes to `path` in place (created or truncated): "" when it worked, else why it
// failed ("PATH: strerror"). write_profile's temporary file, and the reports mlprof writes.
std::string write_file(const std::string& path, const void* data, size_t n);

// Reads and decodes the file at path; errors name the path.
Result<Profile> read_profile(const std::string& path);

}  // namespace mlprof::profile
