// Line numbers from CPython's line tables and the merge of Python frames into the native stack.
// See python_frames.h and docs (cpython-and-cupti.md, "Line tables" and "Merging").
#include "collector/python_frames.h"

#include <cstddef>
#include <limits>

namespace mlprof::collector::python {
namespace {

// A line computed in 64 bits (hostile tables can walk far): anything that is not a valid int32
// line number is reported as "no line".
int32_t to_line(int64_t line) {
  if (line < 0 || line > std::numeric_limits<int32_t>::max()) return -1;
  return static_cast<int32_t>(line);
}

// <= 3.9 co_lnotab (Objects/codeobject.c PyCode_Addr2Line): pairs (u8 address delta, s8 line delta).
int32_t lnotab_line(int64_t first, std::string_view t, uint64_t target) {
  int64_t line = first;
  uint64_t addr = 0;
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    addr += static_cast<uint8_t>(t[i]);
    if (addr > target) break;
    line += static_cast<int8_t>(t[i + 1]);
  }
  return to_line(line);
}

// 3.10 co_linetable (PEP 626): pairs (u8 byte delta, s8 line delta, -128 = no line). Mirrors
// _PyCode_CheckLineNumber: the first range whose end passes the target gives the line; past the
// table there is no line.
int32_t linetable310_line(int64_t first, std::string_view t, uint64_t target) {
  int64_t line = first;
  uint64_t end = 0;
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    end += static_cast<uint8_t>(t[i]);
    const int8_t delta = static_cast<int8_t>(t[i + 1]);
    if (delta != -128) line += delta;
    if (end > target) return delta == -128 ? -1 : to_line(line);
  }
  return -1;
}

// Unsigned varint of the 3.11 location table: 6-bit chunks, least significant first, bit 6 = more.
// Stops at the end of the table; chunks past 64 bits are consumed but ignored.
uint64_t read_varint(std::string_view t, size_t* pos) {
  uint64_t value = 0;
  unsigned shift = 0;
  while (*pos < t.size()) {
    const uint8_t b = static_cast<uint8_t>(t[(*pos)++]);
    if (shift < 64) value |= static_cast<uint64_t>(b & 63) << shift;
    shift += 6;
    if (!(b & 64)) break;
  }
  return value;
}

// Signed varint, clamped to +-2^40 (real deltas fit in 32 bits) so that hostile tables cannot
// overflow the 64-bit line.
constexpr int64_t kMaxDelta = int64_t{1} << 40;
int64_t read_svarint(std::string_view t, size_t* pos) {
  const uint64_t u = read_varint(t, pos);
  const uint64_t magnitude = u >> 1;
  const int64_t m = magnitude > static_cast<uint64_t>(kMaxDelta) ? kMaxDelta : static_cast<int64_t>(magnitude);
  return (u & 1) ? -m : m;
}

// 3.11+ location table (Objects/locations.md, codeobject.c advance()): entries start at bytes with
// bit 7 set; like CPython, the next entry is the next such byte (the payload never has bit 7 set),
// which also resynchronises on hostile input.
int32_t locations311_line(int64_t first, std::string_view t, uint64_t target) {
  int64_t line = first;
  uint64_t end = 0;
  size_t pos = 0;
  while (pos < t.size() && !(static_cast<uint8_t>(t[pos]) & 0x80)) ++pos;
  while (pos < t.size()) {
    const uint8_t b = static_cast<uint8_t>(t[pos]);
    const unsigned code = (b >> 3) & 15;
    size_t payload = pos + 1;
    switch (code) {
      case 15: break;  // no location
      case 14:         // long form: line delta, then end line delta, column, end column
      case 13:         // no columns: line delta only
        line += read_svarint(t, &payload);
        if (line > 2 * kMaxDelta) line = 2 * kMaxDelta;  // stays far from overflow
        if (line < -2 * kMaxDelta) line = -2 * kMaxDelta;
        break;
      case 10:
      case 11:
      case 12: line += code - 10; break;  // one-line forms: 2 column bytes follow
      default: break;                     // short forms 0-9: same line, 1 column byte
    }
    end += static_cast<uint64_t>((b & 7) + 1) * 2;  // code units of 2 bytes
    if (end > target) return code == 15 ? -1 : to_line(line);
    ++pos;
    while (pos < t.size() && !(static_cast<uint8_t>(t[pos]) & 0x80)) ++pos;
  }
  return -1;
}

}  // namespace

int32_t line_for_offset(TableFormat format, uint32_t firstlineno, std::string_view table, uint32_t offset) {
  const int64_t first = firstlineno;
  if (offset == kBeforeStart) return to_line(first);
  switch (format) {
    case TableFormat::kLnotab: return lnotab_line(first, table, offset);
    case TableFormat::kLinetable310: return linetable310_line(first, table, offset);
    case TableFormat::kLocations311: return locations311_line(first, table, offset);
  }
  return -1;
}

bool merge_stacks(const std::vector<bool>& native_is_eval, const std::vector<bool>& py_entry,
                  std::vector<FrameRef>* merged) {
  merged->clear();
  const uint32_t n_native = static_cast<uint32_t>(native_is_eval.size());
  const uint32_t n_py = static_cast<uint32_t>(py_entry.size());

  // Groups of Python frames, innermost first, each ending with an entry frame. Trailing frames
  // after the last entry frame (a truncated or torn stack) still form a group of their own: they
  // ran in some eval-loop invocation, and counting them keeps a mismatch visible.
  std::vector<uint32_t> group_end;  // exclusive end index of each group
  for (uint32_t i = 0; i < n_py; ++i) {
    if (py_entry[i]) group_end.push_back(i + 1);
  }
  if (n_py > 0 && (group_end.empty() || group_end.back() != n_py)) group_end.push_back(n_py);

  uint32_t n_eval = 0;
  uint32_t first_eval = n_native, last_eval = 0;
  for (uint32_t i = 0; i < n_native; ++i) {
    if (!native_is_eval[i]) continue;
    if (n_eval == 0) first_eval = i;
    last_eval = i;
    ++n_eval;
  }

  if (n_eval == group_end.size()) {
    merged->reserve(n_native - n_eval + n_py);
    size_t group = 0;
    uint32_t py = 0;
    for (uint32_t i = 0; i < n_native; ++i) {
      if (!native_is_eval[i]) {
        merged->push_back({false, i});
        continue;
      }
      for (; py < group_end[group]; ++py) merged->push_back({true, py});
      ++group;
    }
    return true;
  }

  // Mismatch: best effort, counted as a merge failure by the caller.
  if (n_eval == 0) {  // no symbols for the eval loop: the Python stack alone
    merged->reserve(n_py);
    for (uint32_t p = 0; p < n_py; ++p) merged->push_back({true, p});
    return false;
  }
  merged->reserve(first_eval + n_py + (n_native - last_eval - 1));
  for (uint32_t i = 0; i < first_eval; ++i) merged->push_back({false, i});
  for (uint32_t p = 0; p < n_py; ++p) merged->push_back({true, p});
  for (uint32_t i = last_eval + 1; i < n_native; ++i) merged->push_back({false, i});
  return false;
}

}  // namespace mlprof::collector::python
