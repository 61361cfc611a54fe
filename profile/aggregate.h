// Per-function and per-line aggregates (Profile::functions, Profile::lines) computed from
// Profile::stack_values. The report reads these tables; the collector calls compute_aggregates()
// once before writing the profile.
#pragma once
#include "profile/model.h"

namespace mlprof::profile {

// Replaces p.functions and p.lines with aggregates of p.stack_values, one value per metric:
//  - A function is identified by the strings (function name, module, file) of a frame; a line by
//    (file, line) strings, only for frames with a non-empty file and line > 0. Identity is by
//    string content, so duplicate strings in p.strings do not split an entry.
//  - self: the row's values go to the function and line of the stack's leaf frame (frames[0];
//    with inlining that is the innermost inlined frame), and also to those of the innermost
//    Python frame (FrameKind::kPython) when it is not the leaf: a Python line's self time is the
//    time it is the innermost Python line, whatever native code runs on its behalf. Self values
//    therefore add up to the total within native frames and within Python frames, not across.
//  - total: the row's values go once to every distinct function and every distinct line on the
//    stack, even when a function recurses or a line appears several times.
//  - FunctionStat::first_line is the smallest line > 0 seen in any frame of the function, 0 if
//    none; LineStat::function is the function name of the first frame seen at that line.
//  - Entries appear in order of first appearance (rows in order, frames leaf first), so the
//    result is deterministic. Empty stacks, and rows whose stack index is out of range, add
//    nothing; rows with fewer values than metrics count the missing ones as 0.
void compute_aggregates(Profile& p);

}  // namespace mlprof::profile
