// Where CPython 3.8–3.13 keep what preload/python.cpp reads: byte offsets of struct fields on
// x86-64, release builds with the GIL (no Py_DEBUG / Py_TRACE_REFS, no 3.13t).
//
// VERIFIED with offsetof() against the installed headers (pyenv 3.8.18, 3.9.18, 3.10.13, 3.11.7,
// 3.12.1, 3.13.0 and Debian's /usr/include/python3.11 for 3.11.2: identical to 3.11.7), compiled
// with -DPy_BUILD_CORE and the internal/ headers; the program is in docs/python.md. Patch
// releases of one minor version keep these layouts (CPython's ABI rule for the structs read here;
// 3.13 additionally publishes them in _Py_DebugOffsets, which python.cpp prefers).
#pragma once
#include <cstdint>

namespace mlprof::preload::python {

inline constexpr int32_t kNone = -1;  // the field does not exist in this version

struct Layout {
  uint32_t minor = 0;  // 8..13

  // _PyRuntimeState (the _PyRuntime symbol).
  int32_t rt_gil_tstate_current = kNone;  // gilstate.tstate_current (<= 3.11): the GIL holder
  int32_t rt_gc_collecting = kNone;       // 3.8: gc.collecting (int): a collection is running
  int32_t rt_main_thread = kNone;         // main_thread (unsigned long): the ident (pthread_self) of
                                          // the thread that initialised the runtime

  // PyThreadState.
  int32_t ts_interp = 16;
  int32_t ts_frame = 0;  // <= 3.10 `frame`; 3.11/3.12 `cframe` (a pointer); 3.13 `current_frame`
  int32_t cframe_current_frame = kNone;  // 3.11/3.12: _PyCFrame.current_frame
  int32_t cframe_previous = kNone;       // 3.11/3.12: _PyCFrame.previous

  // PyInterpreterState and its GIL (3.12+: per interpreter).
  int32_t interp_ceval_gil = kNone;  // ceval.gil: struct _gil_runtime_state*
  int32_t gil_last_holder = kNone;   // _gil_runtime_state.last_holder (PyThreadState*)
  int32_t gil_locked = kNone;        // _gil_runtime_state.locked (int)
  int32_t interp_gc_collecting = kNone;  // 3.9+: gc.collecting (int): a collection is running

  // Frames: PyFrameObject (<= 3.10) or _PyInterpreterFrame (3.11+).
  bool interpreter_frames = false;
  int32_t fr_back = 0;    // f_back / previous
  int32_t fr_code = 0;    // f_code / f_executable
  int32_t fr_instr = 0;   // f_lasti (int) / prev_instr / instr_ptr (pointer)
  bool lasti_in_units = false;  // 3.10: f_lasti counts 2-byte code units
  int32_t fr_is_entry = kNone;  // 3.11 is_entry (u8)
  int32_t fr_owner = kNone;     // 3.11+ owner (u8)
  uint8_t owner_max = 0;        // highest valid owner value
  int32_t owner_cstack = kNone; // 3.12+: FRAME_OWNED_BY_CSTACK (shim frames)

  // PyCodeObject.
  int32_t co_filename = 0, co_name = 0, co_qualname = kNone, co_firstlineno = 0, co_linetable = 0;
  int32_t co_code = kNone;           // <= 3.10: bytes object with the bytecode
  int32_t co_code_adaptive = kNone;  // 3.11+: inline bytecode; Py_SIZE(code) = code units
  int32_t co_firsttraceable = kNone; // 3.11+: _co_firsttraceable (int, code units): RESUME

  // PyObject / PyVarObject / bytes / str.
  int32_t ob_type = 8, ob_size = 16;
  int32_t bytes_sval = 32;
  int32_t str_length = 16, str_state = 32;
  int32_t str_ascii_data = 48;    // sizeof(PyASCIIObject)
  int32_t str_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
};

// 3.8 and 3.9: PyFrameObject with f_lasti in bytes.
inline constexpr Layout kLayout38 = [] {
  Layout l;
  l.minor = 8;
  l.rt_gil_tstate_current = 1368;
  l.rt_gc_collecting = 544;
  l.rt_main_thread = 72;
  l.ts_frame = 24;
  l.fr_back = 24; l.fr_code = 32; l.fr_instr = 104;
  l.co_filename = 104; l.co_name = 112; l.co_firstlineno = 40; l.co_linetable = 120;  // co_lnotab
  l.co_code = 48;
  return l;
}();

inline constexpr Layout kLayout39 = [] {
  Layout l = kLayout38;
  l.minor = 9;
  l.rt_gil_tstate_current = 568;  // _PyRuntimeState lost its 800-byte inline `ceval` in 3.9
  l.rt_gc_collecting = kNone;     // the collector's state moved into PyInterpreterState
  l.interp_gc_collecting = 816;
  return l;
}();

// 3.10: f_lasti in code units (PEP 626), -1 before the first instruction.
inline constexpr Layout kLayout310 = [] {
  Layout l = kLayout39;
  l.minor = 10;
  l.fr_instr = 96;
  l.lasti_in_units = true;
  return l;  // co_linetable at 120 (where co_lnotab was)
}();

// 3.11: _PyInterpreterFrame reached through tstate->cframe->current_frame.
inline constexpr Layout kLayout311 = [] {
  Layout l;
  l.minor = 11;
  l.rt_gil_tstate_current = 576;
  l.rt_main_thread = 80;
  l.interp_gc_collecting = 848;
  l.ts_frame = 56; l.cframe_current_frame = 8; l.cframe_previous = 16;
  l.interpreter_frames = true;
  l.fr_back = 48; l.fr_code = 32; l.fr_instr = 56; l.fr_is_entry = 68; l.fr_owner = 69;
  l.owner_max = 2;
  l.co_filename = 112; l.co_name = 120; l.co_qualname = 128; l.co_firstlineno = 72;
  l.co_linetable = 136; l.co_code_adaptive = 184; l.co_firsttraceable = 168;
  return l;
}();

// 3.12: no is_entry; C-level entries push a CSTACK shim frame; per-interpreter GIL.
inline constexpr Layout kLayout312 = [] {
  Layout l;
  l.minor = 12;
  l.rt_main_thread = 64;
  l.ts_frame = 56; l.cframe_current_frame = 0; l.cframe_previous = 8;
  l.interp_ceval_gil = 384; l.gil_last_holder = 8; l.gil_locked = 16;
  l.interp_gc_collecting = 312;
  l.interpreter_frames = true;
  l.fr_back = 8; l.fr_code = 0; l.fr_instr = 56; l.fr_owner = 70;
  l.owner_max = 3; l.owner_cstack = 3;
  l.co_filename = 112; l.co_name = 120; l.co_qualname = 128; l.co_firstlineno = 68;
  l.co_linetable = 136; l.co_code_adaptive = 192; l.co_firsttraceable = 176;
  l.str_ascii_data = 40; l.str_compact_data = 56;  // wstr fields removed
  return l;
}();

// 3.13: tstate->current_frame; instr_ptr points at the CURRENT instruction (not the previous).
// Used when _Py_DebugOffsets is absent or for the fields it does not carry
// (_co_firsttraceable, the CSTACK owner value).
inline constexpr Layout kLayout313 = [] {
  Layout l = kLayout312;
  l.minor = 13;
  l.rt_main_thread = 656;  // after the _Py_DebugOffsets that open _PyRuntimeState
  l.ts_frame = 72; l.cframe_current_frame = kNone; l.cframe_previous = kNone;
  l.interp_ceval_gil = 16; l.gil_last_holder = 8; l.gil_locked = 16;
  l.interp_gc_collecting = 7600;
  l.fr_code = 0;  // f_executable: a code object, or None for shims
  l.co_code_adaptive = 200; l.co_firsttraceable = 184;
  return l;
}();

}  // namespace mlprof::preload::python
