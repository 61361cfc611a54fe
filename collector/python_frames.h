// Python frames in the collector: line numbers from CPython's line tables, and merging Python
// frames into the native stack where it runs the eval loop.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace mlprof::collector::python {

enum class TableFormat : uint8_t { kLnotab = 0, kLinetable310 = 1, kLocations311 = 2 };
inline constexpr uint32_t kBeforeStart = UINT32_MAX;

// The source line of the instruction at byte offset `offset` (kBeforeStart: the first line), or
// -1 when the table says the instruction has no line. Never reads outside `table`.
int32_t line_for_offset(TableFormat format, uint32_t firstlineno, std::string_view table, uint32_t offset);

// Merging. Input, innermost first:
//   native_is_eval: for each native frame, whether it lies in _PyEval_EvalFrameDefault (or its
//     .cold part): each such frame is one C-level invocation of the eval loop;
//   py_entry: for each Python frame, whether it is the outermost Python frame of its eval-loop
//     invocation (FrameFlags::kFrameEntry: every frame on <= 3.10; is_entry on 3.11; the frame
//     just inside a CSTACK shim on 3.12+).
// Python frames form groups, innermost first, each ending with an entry frame; group k replaces
// the k-th eval native frame (innermost first). Output: the merged order, innermost first.
// Returns false when the number of groups differs from the number of eval frames; `merged` then
// holds a best effort, counted as a merge failure by the caller: the native frames inside the
// innermost eval frame, then every Python frame, then the native frames outside the outermost eval
// frame (eval frames dropped); with no eval frame at all (no symbols), the Python frames alone.
struct FrameRef {
  bool python = false;
  uint32_t index = 0;  // into the native or the Python list
};
bool merge_stacks(const std::vector<bool>& native_is_eval, const std::vector<bool>& py_entry,
                  std::vector<FrameRef>* merged);

}  // namespace mlprof::collector::python
