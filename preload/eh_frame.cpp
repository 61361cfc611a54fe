// .eh_frame_hdr / .eh_frame parsing and CFA-program evaluation into sorted Row tables.
// NOT signal-safe (see eh_frame.h): runs in cfi_refresh_modules(), either inside dl_iterate_phdr's
// callback, so that the module cannot be unmapped while it is read, or on a copy of the bytes
// eh_frame_extent names, made there. Uses no malloc.
// References: LSB 5.0 "Exception Frames" (.eh_frame, .eh_frame_hdr, DW_EH_PE_*), DWARF 4 §6.4.
#include "preload/eh_frame.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace mlprof::preload::cfi {

// ---- MmapArray ------------------------------------------------------------------------------

MmapArray::~MmapArray() {
  if (data_) munmap(data_, cap_bytes_);
}

void* MmapArray::push() {
  if (failed_) return nullptr;
  if ((size_ + 1) * elem_size_ > cap_bytes_) {
    size_t want = cap_bytes_ ? cap_bytes_ * 2 : 64 * 1024;
    void* p = data_ ? mremap(data_, cap_bytes_, want, MREMAP_MAYMOVE)
                    : mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      failed_ = true;
      return nullptr;
    }
    data_ = p;
    cap_bytes_ = want;
  }
  void* slot = at(size_++);
  memset(slot, 0, elem_size_);
  return slot;
}

namespace {

// ---- bounded reader over module memory ---------------------------------------------------------

enum : uint8_t {
  DW_EH_PE_absptr = 0x00, DW_EH_PE_uleb128 = 0x01, DW_EH_PE_udata2 = 0x02, DW_EH_PE_udata4 = 0x03,
  DW_EH_PE_udata8 = 0x04, DW_EH_PE_sleb128 = 0x09, DW_EH_PE_sdata2 = 0x0a, DW_EH_PE_sdata4 = 0x0b,
  DW_EH_PE_sdata8 = 0x0c, DW_EH_PE_pcrel = 0x10, DW_EH_PE_textrel = 0x20, DW_EH_PE_datarel = 0x30,
  DW_EH_PE_funcrel = 0x40, DW_EH_PE_aligned = 0x50, DW_EH_PE_indirect = 0x80, DW_EH_PE_omit = 0xff,
};

// Positions are the module's own addresses; the bytes of address a are read at a + delta (0 when
// the module is read in place; the copy's offset when unwind_cfi.cpp parses a copy of them).
struct Reader {
  uintptr_t p, end;  // reads must stay in [p, end)
  uintptr_t lo;      // the segment start (for indirect reads)
  uintptr_t seg_end;
  intptr_t delta;
  bool ok = true;

  const uint8_t* at(uintptr_t a) const { return reinterpret_cast<const uint8_t*>(a + delta); }

  bool has(size_t n) {
    if (!ok || n > end - p) ok = false;
    return ok;
  }
  template <class T>
  T fixed() {
    if (!has(sizeof(T))) return T{};
    T v;
    memcpy(&v, at(p), sizeof(T));
    p += sizeof(T);
    return v;
  }
  uint8_t u8() { return fixed<uint8_t>(); }
  uint64_t uleb() {
    uint64_t v = 0;
    for (unsigned shift = 0; has(1); shift += 7) {
      uint8_t b = *at(p++);
      if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return 0;
  }
  int64_t sleb() {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    do {
      if (!has(1)) return 0;
      b = *at(p++);
      if (shift < 64) v |= int64_t(b & 0x7f) << shift;
      shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= -(int64_t(1) << shift);
    return v;
  }
  // A DW_EH_PE_* encoded pointer. `data_base` serves datarel (the .eh_frame_hdr start there).
  uint64_t encoded(uint8_t enc, uintptr_t text_base, uintptr_t data_base) {
    if (enc == DW_EH_PE_omit) return 0;
    uintptr_t field = p;
    uint64_t v = 0;
    switch (enc & 0x0f) {
      case DW_EH_PE_absptr: v = fixed<uint64_t>(); break;
      case DW_EH_PE_uleb128: v = uleb(); break;
      case DW_EH_PE_udata2: v = fixed<uint16_t>(); break;
      case DW_EH_PE_udata4: v = fixed<uint32_t>(); break;
      case DW_EH_PE_udata8: v = fixed<uint64_t>(); break;
      case DW_EH_PE_sleb128: v = uint64_t(sleb()); break;
      case DW_EH_PE_sdata2: v = uint64_t(int64_t(fixed<int16_t>())); break;
      case DW_EH_PE_sdata4: v = uint64_t(int64_t(fixed<int32_t>())); break;
      case DW_EH_PE_sdata8: v = uint64_t(fixed<int64_t>()); break;
      default: ok = false; return 0;
    }
    if (v == 0 && (enc & 0x70) != DW_EH_PE_pcrel) return 0;  // a null pointer stays null
    switch (enc & 0x70) {
      case 0: break;
      case DW_EH_PE_pcrel: v += field; break;
      case DW_EH_PE_textrel: v += text_base; break;
      case DW_EH_PE_datarel: v += data_base; break;
      default: ok = false; return 0;  // funcrel/aligned: never produced for x86-64 CFI
    }
    if (enc & DW_EH_PE_indirect) {  // a pointer to the pointer (personality routines via GOT)
      if (v < lo || v + 8 > seg_end || v + 8 < v) return 0;  // out of what we may read: ignore
      uint64_t target;
      memcpy(&target, at(v), 8);
      v = target;
    }
    return v;
  }
};

// Size of the fixed part of an encoding (for the pc_range field, which has no base).
constexpr uint8_t kRangeEncMask = 0x0f;

// ---- CIE -------------------------------------------------------------------------------------

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t ra_reg = 16;
  uint8_t fde_enc = DW_EH_PE_absptr;
  bool has_z = false;
  bool signal_frame = false;
  uintptr_t insns = 0, insns_end = 0;
};

// Reads the length field of a CIE/FDE at p; sets body/end. Returns false at the terminator.
bool entry_bounds(Reader& r, uintptr_t& body, uintptr_t& end) {
  uint64_t len = r.fixed<uint32_t>();
  if (len == 0xffffffffu) len = r.fixed<uint64_t>();
  if (!r.ok || len == 0 || len > r.end - r.p) return false;
  body = r.p;
  end = r.p + len;
  return true;
}

bool parse_cie(uintptr_t at, const EhFrameSource& src, Cie& cie) {
  cie = Cie{};  // the caller reuses one Cie for all CIEs of a module
  Reader r{at, src.hi, src.lo, src.hi, src.delta};
  uintptr_t body, end;
  if (at < src.lo || !entry_bounds(r, body, end)) return false;
  r.end = end;
  if (r.fixed<uint32_t>() != 0) return false;  // CIE id is 0 in .eh_frame
  uint8_t version = r.u8();
  if (version != 1 && version != 3 && version != 4) return false;
  const char* aug = reinterpret_cast<const char*>(r.at(r.p));
  size_t aug_len = strnlen(aug, r.end - r.p);
  if (aug_len == r.end - r.p) return false;
  r.p += aug_len + 1;
  if (version == 4) {  // address_size, segment_selector_size
    r.u8();
    r.u8();
  }
  cie.code_align = r.uleb();
  cie.data_align = r.sleb();
  cie.ra_reg = version == 1 ? r.u8() : r.uleb();
  uintptr_t aug_end = 0;
  for (size_t i = 0; i < aug_len && r.ok; ++i) {
    switch (aug[i]) {
      case 'z': {
        cie.has_z = true;
        uint64_t n = r.uleb();
        if (!r.has(0) || n > r.end - r.p) return false;
        aug_end = r.p + n;
        break;
      }
      case 'R': cie.fde_enc = r.u8(); break;
      case 'L': r.u8(); break;  // LSDA encoding: the FDE's augmentation data is skipped wholesale
      case 'P': {
        uint8_t enc = r.u8();
        r.encoded(enc & ~DW_EH_PE_indirect, src.text_base, 0);  // personality: skipped
        break;
      }
      case 'S': cie.signal_frame = true; break;
      case 'B': break;  // AArch64 BTI; harmless
      default:
        if (!cie.has_z) return false;  // unknown augmentation without 'z': cannot skip it
        r.p = aug_end;                 // with 'z' the rest can be skipped
        i = aug_len;
        break;
    }
  }
  if (aug_end) r.p = aug_end;
  if (!r.ok || cie.code_align == 0) return false;
  cie.insns = r.p;
  cie.insns_end = end;
  return true;
}

// ---- CFA program -------------------------------------------------------------------------------

enum RegRule : uint8_t { kRuleSame, kRuleOffset, kRuleValOffset, kRuleUndefined, kRuleOther };
enum CfaRule : uint8_t { kCfaRegOff, kCfaExprPlt, kCfaExprRbpDeref, kCfaExprOther };

struct State {
  uint8_t cfa_rule = kCfaRegOff;
  uint8_t rbp_rule = kRuleSame;
  uint8_t ra_rule = kRuleOffset;
  uint64_t cfa_reg = 7;
  int64_t cfa_off = 8;
  int64_t rbp_off = 0;
  int64_t ra_off = -8;
  int64_t plt_threshold = 0;
};

constexpr uint64_t kRegRbp = 6, kRegRsp = 7;
constexpr int kMaxRemembered = 8;

// Recognises the two DWARF expressions that matter on x86-64 (anything else is kCfaExprOther):
//  - the PLT's: DW_OP_breg7 N; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litK; DW_OP_ge;
//    DW_OP_lit3; DW_OP_shl; DW_OP_plus   (binutils elf_x86_64_eh_frame_*plt)
//  - stack realignment: DW_OP_breg6 N; DW_OP_deref   (GCC, e.g. main() with over-aligned locals)
void classify_cfa_expr(uintptr_t p, uint64_t len, intptr_t delta, State& s) {
  s.cfa_rule = kCfaExprOther;
  Reader r{p, p + len, p, p + len, delta};
  uint8_t op = r.u8();
  if (op == 0x77) {  // DW_OP_breg7
    int64_t n = r.sleb();
    size_t rest = r.end - r.p;
    const uint8_t* t = r.at(r.p);
    // breg16 0, lit15, and, litK, ge, lit3, shl, plus
    if (r.ok && rest == 9 && t[0] == 0x80 && t[1] == 0 && t[2] == 0x3f && t[3] == 0x1a &&
        t[4] >= 0x30 && t[4] <= 0x3f && t[5] == 0x2a && t[6] == 0x33 && t[7] == 0x24 && t[8] == 0x22) {
      s.cfa_rule = kCfaExprPlt;
      s.cfa_off = n;
      s.plt_threshold = t[4] - 0x30;
    }
  } else if (op == 0x76) {  // DW_OP_breg6
    int64_t n = r.sleb();
    if (r.ok && r.end - r.p == 1 && *r.at(r.p) == 0x06) {  // DW_OP_deref
      s.cfa_rule = kCfaExprRbpDeref;
      s.cfa_off = n;
    }
  }
}

Row make_row(uint64_t pc_off, const State& s) {
  Row row{};
  row.pc = uint32_t(pc_off);
  row.rbp_kind = kRbpSame;
  if (s.ra_rule == kRuleUndefined) {
    row.cfa_kind = kCfaOutermost;
    return row;
  }
  row.cfa_kind = kCfaStop;
  if (s.ra_rule != kRuleOffset || s.ra_off != -8) return row;
  if (s.cfa_off < INT32_MIN || s.cfa_off > INT32_MAX) return row;
  row.cfa_off = int32_t(s.cfa_off);
  switch (s.cfa_rule) {
    case kCfaRegOff:
      if (s.cfa_reg == kRegRsp) row.cfa_kind = kCfaRsp;
      else if (s.cfa_reg == kRegRbp) row.cfa_kind = kCfaRbp;
      else return row;  // CFA in another register (e.g. r10 during a realigning prologue)
      break;
    case kCfaExprPlt:
      row.cfa_kind = kCfaPlt;
      row.rbp_off = int16_t(s.plt_threshold);
      return row;  // the PLT never touches rbp
    case kCfaExprRbpDeref: row.cfa_kind = kCfaRbpDeref; break;
    default: return row;
  }
  switch (s.rbp_rule) {
    case kRuleSame: row.rbp_kind = kRbpSame; break;
    case kRuleOffset:
    case kRuleValOffset:
      if (s.rbp_off < INT16_MIN || s.rbp_off > INT16_MAX) {
        row.rbp_kind = kRbpUnknown;
      } else {
        row.rbp_kind = s.rbp_rule == kRuleOffset ? kRbpAtCfa : kRbpValCfa;
        row.rbp_off = int16_t(s.rbp_off);
      }
      break;
    default: row.rbp_kind = kRbpUnknown; break;
  }
  return row;
}

struct Program {
  const Cie& cie;
  const EhFrameSource& src;
  MmapArray& rows;
  uint64_t loc;        // absolute pc
  uint64_t fde_start;  // first row index of this FDE in `rows`
  State state;
  State initial;  // after the CIE's initial instructions (DW_CFA_restore)
  State stack[kMaxRemembered];
  int depth = 0;

  // Records the current state at `loc`; a later state at the same loc replaces it.
  bool emit() {
    Row row = make_row(loc - src.bias, state);
    if (rows.size() > fde_start) {
      Row* last = static_cast<Row*>(rows.at(rows.size() - 1));
      if (last->pc == row.pc) {
        *last = row;
        return true;
      }
    }
    void* slot = rows.push();
    if (!slot) return false;
    memcpy(slot, &row, sizeof row);
    return true;
  }

  void set_reg(uint64_t reg, uint8_t rule, int64_t off) {
    if (reg == kRegRbp) {
      state.rbp_rule = rule;
      state.rbp_off = off;
    } else if (reg == cie.ra_reg) {
      state.ra_rule = rule;
      state.ra_off = off;
    }
  }
  void restore_reg(uint64_t reg) {
    if (reg == kRegRbp) {
      state.rbp_rule = initial.rbp_rule;
      state.rbp_off = initial.rbp_off;
    } else if (reg == cie.ra_reg) {
      state.ra_rule = initial.ra_rule;
      state.ra_off = initial.ra_off;
    }
  }

  // Runs [p, end). With `emit_rows` false (the CIE's initial instructions) no rows are made.
  // Returns false on an opcode we cannot decode: the caller ends the FDE with a stop row.
  bool run(uintptr_t p, uintptr_t end, uint64_t pc_end, bool emit_rows) {
    Reader r{p, end, src.lo, src.hi, src.delta};
    const int64_t da = cie.data_align;
    const uint64_t ca = cie.code_align;
    auto advance = [&](uint64_t delta) {
      if (emit_rows && !emit()) return false;
      loc += delta * ca;
      return loc <= pc_end;  // rows beyond the FDE's range are meaningless
    };
    while (r.ok && r.p < r.end) {
      uint8_t op = r.u8();
      uint8_t low = op & 0x3f;
      switch (op & 0xc0) {
        case 0x40: if (!advance(low)) return true; continue;                    // advance_loc
        case 0x80: set_reg(low, kRuleOffset, int64_t(r.uleb()) * da); continue;  // offset
        case 0xc0: restore_reg(low); continue;                                  // restore
        default: break;
      }
      switch (op) {
        case 0x00: break;  // nop
        case 0x01: {       // set_loc
          uint64_t to = r.encoded(cie.fde_enc, src.text_base, 0);
          if (to < loc) return false;
          if (emit_rows && !emit()) return false;
          loc = to;
          if (loc > pc_end) return true;
          break;
        }
        case 0x02: if (!advance(r.u8())) return true; break;
        case 0x03: if (!advance(r.fixed<uint16_t>())) return true; break;
        case 0x04: if (!advance(r.fixed<uint32_t>())) return true; break;
        case 0x05: { uint64_t reg = r.uleb(); set_reg(reg, kRuleOffset, int64_t(r.uleb()) * da); break; }
        case 0x06: restore_reg(r.uleb()); break;
        case 0x07: set_reg(r.uleb(), kRuleUndefined, 0); break;
        case 0x08: set_reg(r.uleb(), kRuleSame, 0); break;
        case 0x09: { uint64_t reg = r.uleb(); r.uleb(); set_reg(reg, kRuleOther, 0); break; }  // register
        case 0x0a:  // remember_state
          if (depth == kMaxRemembered) return false;
          stack[depth++] = state;
          break;
        case 0x0b:  // restore_state: GCC restores the CFA too; keep that behaviour
          if (depth == 0) return false;
          state = stack[--depth];
          break;
        case 0x0c: state.cfa_rule = kCfaRegOff; state.cfa_reg = r.uleb(); state.cfa_off = int64_t(r.uleb()); break;
        case 0x0d: state.cfa_rule = kCfaRegOff; state.cfa_reg = r.uleb(); break;
        case 0x0e: state.cfa_off = int64_t(r.uleb()); break;
        case 0x0f: {  // def_cfa_expression
          uint64_t n = r.uleb();
          if (!r.has(n)) return false;
          classify_cfa_expr(r.p, n, src.delta, state);
          r.p += n;
          break;
        }
        case 0x10:    // expression
        case 0x16: {  // val_expression
          uint64_t reg = r.uleb();
          uint64_t n = r.uleb();
          if (!r.has(n)) return false;
          r.p += n;
          set_reg(reg, kRuleOther, 0);
          break;
        }
        case 0x11: { uint64_t reg = r.uleb(); set_reg(reg, kRuleOffset, r.sleb() * da); break; }
        case 0x12: state.cfa_rule = kCfaRegOff; state.cfa_reg = r.uleb(); state.cfa_off = r.sleb() * da; break;
        case 0x13: state.cfa_off = r.sleb() * da; break;
        case 0x14: { uint64_t reg = r.uleb(); set_reg(reg, kRuleValOffset, int64_t(r.uleb()) * da); break; }
        case 0x15: { uint64_t reg = r.uleb(); set_reg(reg, kRuleValOffset, r.sleb() * da); break; }
        case 0x2e: r.uleb(); break;  // GNU_args_size: only matters for landing pads
        case 0x2f: { uint64_t reg = r.uleb(); set_reg(reg, kRuleOffset, -int64_t(r.uleb()) * da); break; }
        default: return false;
      }
    }
    return r.ok;
  }
};

bool parse_fde(uintptr_t fde, const EhFrameSource& src, MmapArray& rows, ParseStats& st,
               uintptr_t& cached_cie_at, Cie& cached_cie) {
  Reader r{fde, src.hi, src.lo, src.hi, src.delta};
  uintptr_t body, end;
  if (fde < src.lo || !entry_bounds(r, body, end)) return false;
  r.end = end;
  uintptr_t id_field = r.p;
  uint32_t cie_ptr = r.fixed<uint32_t>();
  if (!r.ok || cie_ptr == 0 || cie_ptr > id_field) return false;  // 0 would be a CIE
  uintptr_t cie_at = id_field - cie_ptr;
  if (cie_at != cached_cie_at) {
    if (!parse_cie(cie_at, src, cached_cie)) return false;
    cached_cie_at = cie_at;
  }
  const Cie& cie = cached_cie;
  uint64_t pc_begin = r.encoded(cie.fde_enc, src.text_base, 0);
  uint64_t pc_range = r.encoded(cie.fde_enc & kRangeEncMask, 0, 0);
  if (cie.has_z) {
    uint64_t n = r.uleb();
    if (!r.has(n)) return false;
    r.p += n;
  }
  if (!r.ok || pc_begin < src.bias || pc_range == 0) return false;
  uint64_t pc_end = pc_begin + pc_range;
  if (pc_end - src.bias > 0xffffffffu || pc_end < pc_begin) return false;

  Program prog{cie, src, rows, pc_begin, rows.size(), State{}, State{}, {}, 0};
  // x86-64 CIEs say "def_cfa rsp+8; offset r16 at cfa-8"; the defaults above match that.
  if (!prog.run(cie.insns, cie.insns_end, pc_end, false)) return false;
  prog.initial = prog.state;
  prog.depth = 0;
  bool complete = prog.run(r.p, end, pc_end, true);
  if (!complete) {
    prog.state.ra_rule = kRuleOther;  // everything from here on: stop
    ++st.bad_fdes;
  }
  if (prog.loc < pc_end && !prog.emit()) return false;
  if (cie.signal_frame) {  // a signal trampoline (__restore_rt): its caller is not a call site
    for (size_t i = prog.fde_start; i < rows.size(); ++i) static_cast<Row*>(rows.at(i))->cfa_kind = kCfaStop;
  }
  Row* tail = static_cast<Row*>(rows.push());
  if (!tail) return false;
  tail->pc = uint32_t(pc_end - src.bias);
  tail->cfa_kind = kCfaNone;
  if (complete) ++st.fdes;
  return true;
}

}  // namespace

size_t sort_and_compact(Row* rows, size_t n) {
  std::sort(rows, rows + n, [](const Row& a, const Row& b) {
    if (a.pc != b.pc) return a.pc < b.pc;
    return a.cfa_kind == kCfaNone && b.cfa_kind != kCfaNone;  // the end marker sorts first...
  });
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out > 0 && rows[out - 1].pc == rows[i].pc) {  // ...so the real row replaces it
      rows[out - 1] = rows[i];
    } else {
      rows[out++] = rows[i];
    }
    if (out > 1) {  // drop a row that repeats its predecessor
      const Row& a = rows[out - 2];
      const Row& b = rows[out - 1];
      if (a.cfa_kind == b.cfa_kind && a.cfa_off == b.cfa_off && a.rbp_kind == b.rbp_kind &&
          a.rbp_off == b.rbp_off)
        --out;
    }
  }
  return out;
}

// The fixed part of .eh_frame_hdr (version 1): the encodings and .eh_frame's address. Leaves r at
// the FDE count (when there is a table). False when the header is unusable.
struct EhFrameHdr {
  uint64_t eh_frame = 0;
  uint8_t fde_count_enc = DW_EH_PE_omit, table_enc = DW_EH_PE_omit;
  bool has_table() const { return fde_count_enc != DW_EH_PE_omit && table_enc != DW_EH_PE_omit; }
};

bool read_hdr(const EhFrameSource& src, Reader& r, EhFrameHdr* h) {
  if (src.eh_frame_hdr < src.lo || src.eh_frame_hdr >= src.hi) return false;
  uint8_t version = r.u8();
  uint8_t eh_frame_ptr_enc = r.u8();
  h->fde_count_enc = r.u8();
  h->table_enc = r.u8();
  if (!r.ok || version != 1) return false;
  h->eh_frame = r.encoded(eh_frame_ptr_enc, src.text_base, src.eh_frame_hdr);
  return true;
}

bool eh_frame_extent(const EhFrameSource& src, uintptr_t* start, uintptr_t* end) {
  Reader r{src.eh_frame_hdr, src.hi, src.lo, src.hi, src.delta};
  EhFrameHdr h;
  if (!read_hdr(src, r, &h) || !h.has_table()) return false;
  const uint64_t eh_frame = h.eh_frame;
  uint64_t count = r.encoded(h.fde_count_enc, src.text_base, src.eh_frame_hdr);
  if (!r.ok || eh_frame < src.lo || eh_frame >= src.hi) return false;
  uint64_t last_fde = 0;
  for (uint64_t i = 0; i < count && r.ok; ++i) {
    r.encoded(h.table_enc, src.text_base, src.eh_frame_hdr);
    uint64_t fde = r.encoded(h.table_enc, src.text_base, src.eh_frame_hdr);
    if (r.ok && fde < src.hi && fde > last_fde) last_fde = fde;
  }
  if (!r.ok) return false;
  uintptr_t lo = std::min<uintptr_t>(src.eh_frame_hdr, eh_frame), hi = std::max<uintptr_t>(r.p, eh_frame);
  if (last_fde >= eh_frame) {
    Reader w{uintptr_t(last_fde), src.hi, src.lo, src.hi, src.delta};
    uintptr_t body, fde_end;
    if (entry_bounds(w, body, fde_end)) hi = std::max(hi, fde_end);
  }
  *start = lo;
  *end = hi;
  return true;
}

bool parse_eh_frame(const EhFrameSource& src, MmapArray& rows, ParseStats* stats) {
  ParseStats st;
  Reader r{src.eh_frame_hdr, src.hi, src.lo, src.hi, src.delta};
  EhFrameHdr h;
  if (!read_hdr(src, r, &h)) return false;
  const uint64_t eh_frame = h.eh_frame;
  uintptr_t cie_at = 0;
  Cie cie;
  size_t first = rows.size();
  if (h.has_table()) {
    // The binary-search table lists every FDE: (initial location, FDE address) pairs.
    uint64_t count = r.encoded(h.fde_count_enc, src.text_base, src.eh_frame_hdr);
    for (uint64_t i = 0; i < count && r.ok; ++i) {
      if ((i & 1023) == 0 && src.cancel && src.cancel->load(std::memory_order_relaxed)) return false;
      r.encoded(h.table_enc, src.text_base, src.eh_frame_hdr);
      uint64_t fde = r.encoded(h.table_enc, src.text_base, src.eh_frame_hdr);
      if (!r.ok) break;
      if (!parse_fde(fde, src, rows, st, cie_at, cie)) ++st.bad_fdes;
      if (rows.failed()) return false;
    }
  } else if (eh_frame) {
    // No table: walk .eh_frame up to its zero terminator (crtend.o), within the segment.
    Reader w{uintptr_t(eh_frame), src.hi, src.lo, src.hi, src.delta};
    while (w.ok && w.p < w.end) {
      uintptr_t at = w.p, body, end;
      if (!entry_bounds(w, body, end)) break;
      uint32_t id = w.fixed<uint32_t>();
      if (id != 0 && !parse_fde(at, src, rows, st, cie_at, cie)) ++st.bad_fdes;
      if (rows.failed()) return false;
      w.p = end;
    }
  } else {
    return false;
  }
  size_t n = sort_and_compact(static_cast<Row*>(rows.at(first)), rows.size() - first);
  while (rows.size() > first + n) rows.pop();
  if (stats) *stats = st;
  return true;
}

}  // namespace mlprof::preload::cfi
