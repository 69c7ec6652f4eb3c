"""IR -> vISA assembly text (docs/umd-compiler.md 7, docs/isa.md 5).

Scalar values (Var.cls 's') use SALU instructions, vector values VALU ones, bools kept
as lane masks ('m', lane_masks.py) an SGPR a v_cmp writes and SALU ops combine.  Control
flow follows the canonical EXEC idioms of docs/isa.md 5:
  - an `if` on a scalar condition is an SCC branch; on a vector condition it is
    s_and_saveexec / s_andn2 (the else lanes) / restore, with s_cbranch_execz skips;
  - a uniform loop branches on SCC; a divergent loop ANDs its condition into EXEC each
    iteration and leaves when EXEC is 0;
  - break / continue / return in divergent code OR the current EXEC into the masks of
    the constructs they leave (`brk`, `out`) and clear EXEC; every restore of EXEC
    inside such a construct subtracts `out`, so those lanes stay off until the loop (or
    the kernel) ends.  In uniform code they are plain branches / s_endpgm;
  - a region (an inlined device function) is a construct its exits (`return`) leave the
    same way: a branch to its end when no vector construct opened since its start, else
    the lanes join its masks (and those of the loops in between) until its end, where
    EXEC is restored.
Control masks take SGPRs above the allocated ones, as a stack.
"""
from __future__ import annotations

import dataclasses

from umd.types import PtrType, bool_, f32, i32, u32

from . import ir
from .codegen_wide import Raw as _Raw
from .codegen_wide import WideCodeGen, is_wide
from .errors import KernelCompileError
from .regalloc import ALLOC_S, SCRATCH_S
from .uniformity import has_divergent_return

_VBIN = {"add": ("v_add_f32", "v_add_u32"), "sub": ("v_sub_f32", "v_sub_u32"),
         "mul": ("v_mul_f32", "v_mul_lo_u32"), "div": ("v_div_f32", None),
         "and": (None, "v_and_b32"), "or": (None, "v_or_b32"), "xor": (None, "v_xor_b32"),
         "shl": (None, "v_lshl_b32")}
_SBIN = {"add": "s_add_u32", "sub": "s_sub_u32", "mul": "s_mul_i32", "and": "s_and_b32",
         "or": "s_or_b32", "xor": "s_xor_b32", "shl": "s_lshl_b32"}
_VUNARY = {"floor": "v_floor_f32", "ceil": "v_ceil_f32", "trunc": "v_trunc_f32",
           "rndne": "v_rndne_f32", "exp": "v_exp_f32", "exp2": "v_exp2_f32", "log": "v_log_f32",
           "log2": "v_log2_f32", "sqrt": "v_sqrt_f32", "rsqrt": "v_rsqrt_f32", "sin": "v_sin_f32",
           "cos": "v_cos_f32", "tanh": "v_tanh_f32", "not": "v_not_b32"}
_SPECIAL_REG = {"thread_idx.x": "v0", "thread_idx.y": "v1", "thread_idx.z": "v2",
                "block_idx.x": "s16", "block_idx.y": "s17", "block_idx.z": "s18"}
_VOP3 = {"v_fma_f32", "v_mad_f32", "v_mad_u32", "v_cndmask_b32"}
# A uniform loop whose header (the statements before its test) is at most this many
# straight-line instructions is rotated: the header and test are emitted twice.
ROTATE_HEADER_MAX = 4


def _sfx(t) -> str:
    return {"f32": "f32", "i32": "i32"}.get(t.kind, "u32")


@dataclasses.dataclass
class _Ctx:
    kind: str                     # 'loop' | 'func' | 'region'
    masked: bool                  # break/continue/return/exit work through masks
    brk: str | None = None        # lanes that left for good (break, return)
    out: str | None = None        # lanes off until the loop's next iteration (+continue)
    iter: str | None = None       # EXEC at the start of this iteration
    top: str = ""
    cont: str = ""
    end: str = ""
    region: ir.Region | None = None
    depth: int = 0                # under_vector at a region's start


class CodeGen(WideCodeGen):
    def __init__(self, fn: ir.Function, sgpr_top: int) -> None:
        self.fn = fn
        self.out: list[str] = []
        self.lines: list[int] = []           # source line per instruction
        self.mask_base = sgpr_top + 1
        self.mask_next = self.mask_base
        self.mask_max = sgpr_top
        self.labels = 0
        self.ctx: list[_Ctx] = []
        self.under_vector = 0
        self.cur_line = fn.first_line
        self.uses: dict = {}
        for st in ir.walk(fn.body):
            refs = st.uses() if isinstance(st, ir.Inst) else (
                [st.cond] if isinstance(st, (ir.If, ir.Loop)) else [])
            for r in refs:
                if isinstance(r, ir.Var):
                    self.uses[r] = self.uses.get(r, 0) + 1

    # -- emission --------------------------------------------------------------------
    def ins(self, text: str) -> None:
        self.out.append("    " + text)
        self.lines.append(self.cur_line)

    def label(self, name: str) -> None:
        self.out.append(f"{name}:")

    def new_label(self, what: str) -> str:
        self.labels += 1
        return f".L{self.labels}_{what}"

    def push_mask(self) -> str:
        r = self.mask_next
        if r > 103:
            raise KernelCompileError(f"{self.fn.source_file}: {self.fn.name}: out of SGPRs "
                                     "for control-flow masks (nesting too deep)")
        self.mask_next += 1
        self.mask_max = max(self.mask_max, r)
        return f"s{r}"

    def pop_mask(self, n: int = 1) -> None:
        self.mask_next -= n

    # -- operands --------------------------------------------------------------------
    def reg(self, x) -> str:
        if isinstance(x, _Raw):
            return x.text
        if isinstance(x, ir.Special):
            return _SPECIAL_REG[x.name]
        if isinstance(x, ir.Part):
            return f"v{x.var.reg + x.k}"
        if isinstance(x, ir.Var):
            if isinstance(x.type, ir.VecType):
                return f"v[{x.reg}:{x.reg + x.type.n - 1}]"
            if isinstance(x.type, PtrType):
                return f"s[{x.reg}:{x.reg + 1}]"
            if x.type.wide:
                return f"v[{x.reg}:{x.reg + 1}]"
            return f"{'s' if x.cls == 'm' else x.cls}{x.reg}"
        bits = x.bits()
        if x.type == f32:
            return f"0x{bits:08x}"
        return str(bits) if bits < 0x10000 else f"0x{bits:08x}"

    def operands(self, mnemonic: str, args) -> list[str]:
        """Operand strings; literals the instruction cannot take go through scratch SGPRs
        (VOP3 has none, ALU formats at most one distinct value)."""
        out, lit, scratch = [], None, list(SCRATCH_S)
        for a in args:
            if isinstance(a, ir.Const):
                text = self.reg(a)
                if mnemonic in _VOP3 or (lit is not None and lit != text):
                    s = f"s{scratch.pop(0)}"
                    self.ins(f"s_mov_b32 {s}, {text}")
                    text = s
                else:
                    lit = text
                out.append(text)
            else:
                out.append(self.reg(a))
        return out

    def op(self, mnemonic: str, dst: str | None, *args) -> None:
        ops = self.operands(mnemonic, args)
        self.ins(f"{mnemonic} " + ", ".join(([dst] if dst else []) + ops))

    def to_vgpr(self, x, scratch: str) -> str:
        if isinstance(x, (ir.Var, ir.Special)) and (x.cls == "v"):
            return self.reg(x)
        self.ins(f"v_mov_b32 {scratch}, {self.reg(x)}")
        return scratch

    # -- entry -----------------------------------------------------------------------
    def generate(self) -> str:
        fn = self.fn
        self.label(".Lentry")
        self.cur_line = fn.first_line
        for a in fn.args:
            if a.reg is None:
                continue
            if not isinstance(a.type, PtrType) and a.type.wide:
                self.ins(f"s_load_dwordx2 s[2:3], s[0:1], {a.arg.offset}")
                self.ins(f"v_mov_b32 v{a.reg}, s2")
                self.ins(f"v_mov_b32 v{a.reg + 1}, s3")
            elif a.cls == "v":
                self.ins(f"s_load_dword s2, s[0:1], {a.arg.offset}")
                self.ins(f"v_mov_b32 {self.reg(a)}, s2")
        end = max((a.arg.offset + a.arg.size for a in fn.args), default=0)
        for reg, offset, n in _kernarg_loads([a for a in fn.args if a.reg is not None
                                              and a.cls == "s"], end):
            if n == 1:
                self.ins(f"s_load_dword s{reg}, s[0:1], {offset}")
            else:
                self.ins(f"s_load_dwordx{n} s[{reg}:{reg + n - 1}], s[0:1], {offset}")
        masked = has_divergent_return(fn.body)
        fctx = _Ctx("func", masked)
        if masked:
            fctx.brk = fctx.out = self.push_mask()
            self.ins(f"s_mov_b32 {fctx.brk}, 0")
        self.ctx.append(fctx)
        self.block(fn.body)
        self.ins("s_endpgm")
        return "\n".join(self.out) + "\n"

    # -- statements ------------------------------------------------------------------
    def block(self, block: list) -> None:
        i = 0
        while i < len(block):
            st = block[i]
            nxt = block[i + 1] if i + 1 < len(block) else None
            self.cur_line = getattr(st, "line", self.cur_line)
            if isinstance(st, ir.Inst):
                logic = self.fused_logic(st, nxt, block[i + 2] if i + 2 < len(block) else None)
                if logic is not None:
                    self.if_stmt(block[i + 2], fused=logic)
                    i += 3
                    continue
                if self.fusable(st) and isinstance(nxt, ir.If) and nxt.cond is st.dst:
                    self.if_stmt(nxt, fused=st)
                    i += 2
                    continue
                if self.fusable(st) and isinstance(nxt, ir.Inst) and nxt.op == "select" \
                        and nxt.args[0] is st.dst and nxt.dst is not None \
                        and (nxt.dst.cls == "v" or st.dst.cls == "s"):
                    self.select(nxt, fused=st)
                    i += 2
                    continue
                self.inst(st)
            elif isinstance(st, ir.If):
                self.if_stmt(st)
            elif isinstance(st, ir.Loop):
                self.loop(st)
            elif isinstance(st, ir.Break):
                self.escape("break")
            elif isinstance(st, ir.Continue):
                self.escape("continue")
            elif isinstance(st, ir.Return):
                self.escape("return")
            elif isinstance(st, ir.Region):
                self.region(st)
            elif isinstance(st, ir.Exit):
                self.exit(st)
            i += 1

    def fusable(self, st) -> bool:
        return st.op in ir.COMPARE and st.dst is not None and self.uses.get(st.dst) == 1

    def fused_logic(self, cmp, logic, nxt):
        """`c = cmp ...; t = and/or x, c; if t` on vector values: (logic, cmp, x), the
        condition built in VCC from lane masks (v_cmp, v_cmp_ne of x, s_and/s_or)
        instead of 0/1 values in VGPRs; None when the statements are not that."""
        if not (self.fusable(cmp) and cmp.dst.cls == "v" and isinstance(logic, ir.Inst)
                and logic.op in ("and", "or") and logic.dst is not None
                and logic.dst.cls == "v" and self.uses.get(logic.dst) == 1
                and isinstance(nxt, ir.If) and nxt.cond is logic.dst):
            return None
        a, b = logic.args
        other = b if a is cmp.dst else a if b is cmp.dst else None
        # bools only: `c & x` on an integer x tests x's low bit, not x != 0
        if not isinstance(other, ir.Var) or other is cmp.dst or other.type != bool_ \
                or logic.dst.type != bool_:
            return None
        return logic, cmp, other

    def compare(self, st, dst_mask: str | None) -> None:
        """Emit a compare: into SCC (dst_mask None and scalar) or into a lane mask."""
        t = st.args[0].type
        if t.wide:
            assert dst_mask is not None, "a 64-bit compare is a vector value"
            return self.wide_compare(st, dst_mask)
        if dst_mask is None:
            self.op(f"s_cmp_{st.op}_{_sfx(t)}", None, *st.args)
        else:
            self.op(f"v_cmp_{st.op}_{_sfx(t)}", dst_mask, *st.args)

    def scalar_cond(self, cond, fused) -> None:
        """SCC = cond (a scalar bool)."""
        if fused is not None:
            self.compare(fused, None)
        else:
            self.op("s_cmp_ne_u32", None, cond, ir.Const(0, u32))

    def vector_cond(self, cond, fused) -> str:
        """The lane mask of cond (lanes where the vector bool is true): VCC, or the
        SGPR of a lane-mask value (lane_masks.py), which needs no instruction."""
        if isinstance(fused, tuple):                    # fused_logic
            logic, cmp, other = fused
            if other.cls == "m":
                self.compare(cmp, "vcc")
                self.ins(f"s_{logic.op}_b32 vcc, vcc, {self.reg(other)}")
                return "vcc"
            m = self.push_mask()
            self.op("v_cmp_ne_u32", m, other, ir.Const(0, u32))
            self.compare(cmp, "vcc")
            self.ins(f"s_{logic.op}_b32 vcc, vcc, {m}")
            self.pop_mask()
        elif fused is not None:
            self.compare(fused, "vcc")
        elif isinstance(cond, ir.Var) and cond.cls == "m":
            return self.reg(cond)
        else:
            self.op("v_cmp_ne_u32", "vcc", cond, ir.Const(0, u32))
        return "vcc"

    def is_scalar_cond(self, cond, fused) -> bool:
        if isinstance(fused, tuple):
            return False
        if fused is not None:
            return fused.dst.cls == "s"
        return not (isinstance(cond, (ir.Var, ir.Special)) and cond.cls in ("v", "m"))

    def restore(self, saved: str) -> None:
        c = self.ctx[-1]
        if c.masked:
            self.ins(f"s_andn2_b32 exec, {saved}, {c.out}")
        else:
            self.ins(f"s_mov_b32 exec, {saved}")

    def if_stmt(self, st: ir.If, fused=None) -> None:
        line = st.line
        self.cur_line = line
        end = self.new_label("endif")
        if self.is_scalar_cond(st.cond, fused):
            els = self.new_label("else") if st.else_ else end
            self.scalar_cond(st.cond, fused)
            self.ins(f"s_cbranch_scc0 {els}")
            self.block(st.then)
            if st.else_:
                self.cur_line = line
                self.ins(f"s_branch {end}")
                self.label(els)
                self.block(st.else_)
            self.label(end)
            return
        mask = self.vector_cond(st.cond, fused)
        saved = self.push_mask()
        self.ins(f"s_and_saveexec_b32 {saved}, {mask}")
        if st.else_:
            els_mask = self.push_mask()
            self.ins(f"s_andn2_b32 {els_mask}, {saved}, {mask}")
        els = self.new_label("else") if st.else_ else end
        self.ins(f"s_cbranch_execz {els}")
        self.under_vector += 1
        self.block(st.then)
        if st.else_:
            self.cur_line = line
            self.label(els)
            self.restore(els_mask)
            self.ins(f"s_cbranch_execz {end}")
            self.block(st.else_)
        self.under_vector -= 1
        self.cur_line = line
        self.label(end)
        self.restore(saved)
        self.pop_mask(2 if st.else_ else 1)

    def loop(self, st: ir.Loop) -> None:
        line = st.line
        self.cur_line = line
        has_cont = any(isinstance(s, ir.Continue) for s in _own(st.body))
        c = _Ctx("loop", st.divergent, top=self.new_label("loop"),
                 cont=self.new_label("cont"), end=self.new_label("endloop"))
        fused = None
        header = st.header
        if header and isinstance(header[-1], ir.Inst) and header[-1].dst is st.cond \
                and self.fusable(header[-1]):
            fused, header = header[-1], header[:-1]
        if not st.divergent:
            rotate = not isinstance(st.cond, ir.Const) and len(header) <= ROTATE_HEADER_MAX \
                and all(isinstance(h, ir.Inst) for h in header)

            def test(branch: str) -> None:
                """The header, then `branch` on the loop's condition (none if constant)."""
                self.block(header)
                self.cur_line = line
                if not isinstance(st.cond, ir.Const):
                    self.scalar_cond(st.cond, fused)
                    self.ins(branch)

            if rotate:
                # Rotated (LLVM's loop rotation): the test once before the loop, then at
                # the bottom, so an iteration ends in one conditional branch instead of
                # an s_branch back to a test and its branch out.
                test(f"s_cbranch_scc0 {c.end}")
            self.label(c.top)
            if not rotate:
                test(f"s_cbranch_scc0 {c.end}")
            self.ctx.append(c)
            self.block(st.body)
            self.ctx.pop()
            self.label(c.cont)
            self.block(st.latch)
            self.cur_line = line
            if rotate:
                test(f"s_cbranch_scc1 {c.top}")
            else:
                self.ins(f"s_branch {c.top}")
            self.label(c.end)
            return
        saved = self.push_mask()
        self.ins(f"s_mov_b32 {saved}, exec")
        c.brk = c.out = self.push_mask()
        self.ins(f"s_mov_b32 {c.brk}, 0")
        n = 2
        if has_cont:
            c.out, c.iter = self.push_mask(), self.push_mask()
            self.ins(f"s_mov_b32 {c.out}, 0")
            n = 4
        self.label(c.top)
        self.under_vector += 1
        self.block(header)
        self.cur_line = line
        if not isinstance(st.cond, ir.Const):
            if self.is_scalar_cond(st.cond, fused):
                self.scalar_cond(st.cond, fused)
                self.ins(f"s_cbranch_scc0 {c.end}")
            else:
                mask = self.vector_cond(st.cond, fused)
                self.ins(f"s_and_b32 exec, exec, {mask}")
        self.ins(f"s_cbranch_execz {c.end}")
        if has_cont:
            self.ins(f"s_mov_b32 {c.iter}, exec")
        self.ctx.append(c)
        self.block(st.body)
        self.ctx.pop()
        self.cur_line = line
        self.label(c.cont)
        if has_cont:
            self.ins(f"s_andn2_b32 exec, {c.iter}, {c.brk}")
            self.ins(f"s_mov_b32 {c.out}, {c.brk}")
        self.block(st.latch)
        self.cur_line = line
        self.ins(f"s_branch {c.top}")
        self.under_vector -= 1
        self.label(c.end)
        self.restore(saved)
        self.pop_mask(n)

    def region(self, st: ir.Region) -> None:
        self.cur_line = st.line
        c = _Ctx("region", st.divergent, end=self.new_label("endregion"), region=st)
        if not st.divergent:
            c.depth = self.under_vector
            self.ctx.append(c)
            self.block(st.body)
            self.ctx.pop()
            self.label(c.end)
            return
        saved = self.push_mask()
        self.ins(f"s_mov_b32 {saved}, exec")
        c.brk = c.out = self.push_mask()
        self.ins(f"s_mov_b32 {c.brk}, 0")
        self.under_vector += 1
        c.depth = self.under_vector
        self.ctx.append(c)
        self.block(st.body)
        self.ctx.pop()
        self.under_vector -= 1
        self.cur_line = st.line
        self.label(c.end)
        self.restore(saved)
        self.pop_mask(2)

    def exit(self, st: ir.Exit) -> None:
        k = next(k for k in range(len(self.ctx) - 1, -1, -1) if self.ctx[k].region is st.region)
        c = self.ctx[k]
        if self.under_vector == c.depth:
            # no vector construct opened since the region's start: every active lane leaves
            self.ins(f"s_branch {c.end}")
            return
        for cc in self.ctx[k:]:
            assert cc.masked, "exit under a vector condition through an unmasked construct"
            self.ins(f"s_or_b32 {cc.brk}, {cc.brk}, exec")
            if cc.out != cc.brk:
                self.ins(f"s_or_b32 {cc.out}, {cc.out}, exec")
        self.ins("s_mov_b32 exec, 0")

    def escape(self, what: str) -> None:
        loop = next((c for c in reversed(self.ctx) if c.kind == "loop"), None)
        if what == "return":
            if not self.under_vector:
                self.ins("s_endpgm")
                return
            for c in self.ctx:
                assert c.masked, "return under a vector condition in an unmasked construct"
                self.ins(f"s_or_b32 {c.brk}, {c.brk}, exec")
                if c.out != c.brk:
                    self.ins(f"s_or_b32 {c.out}, {c.out}, exec")
            self.ins("s_mov_b32 exec, 0")
            return
        if not loop.masked:
            self.ins(f"s_branch {loop.end if what == 'break' else loop.cont}")
            return
        if what == "break":
            self.ins(f"s_or_b32 {loop.brk}, {loop.brk}, exec")
        if loop.out != loop.brk or what == "continue":
            self.ins(f"s_or_b32 {loop.out}, {loop.out}, exec")
        self.ins("s_mov_b32 exec, 0")

    # -- instructions ----------------------------------------------------------------
    def inst(self, st: ir.Inst) -> None:
        op, d, a = st.op, st.dst, st.args
        if op in ("load", "store", "atomic"):
            return self.memory(st)
        if op == "barrier":
            return self.ins("s_barrier")
        if op == "grid_barrier":            # umd.cg.this_grid().sync() (docs/isa.md 4.1)
            return self.ins("s_barrier_grid")
        if op == "trap":
            return self.ins(f"s_trap {int(a[0].value)}")
        if op == "select":
            return self.select(st)
        if op in ir.WAVE or op in ir.BITS:
            return self.wave_op(st)
        if op not in ir.COMPARE and (is_wide(d) or any(is_wide(x) for x in a)):
            return self.wide_inst(st)
        if d.cls == "m":
            return self.lane_mask(st)
        dst = self.reg(d)
        scalar = d.cls == "s"
        t = d.type
        if op in ir.COMPARE:
            if scalar:
                self.compare(st, None)
                self.ins(f"s_mov_b32 {dst}, scc")
            else:
                self.compare(st, "vcc")
                self.op("v_cndmask_b32", dst, ir.Const(0, u32), ir.Const(1, u32), _Raw("vcc"))
            return
        if op in ("mov", "bitcast") or (op == "cvt" and t != f32 and a[0].type != f32):
            return self.op("s_mov_b32" if scalar else "v_mov_b32", dst, a[0])
        if op == "cvt":
            src = a[0].type
            name = (f"v_cvt_f32_{'i32' if src == i32 else 'u32'}" if t == f32 else
                    f"v_cvt_{'i32' if t == i32 else 'u32'}_f32")
            return self.op(name, dst, a[0])
        if scalar:
            if op in _SBIN:
                return self.op(_SBIN[op], dst, *a)
            if op == "shr":
                return self.op("s_ashr_i32" if t == i32 else "s_lshr_b32", dst, *a)
            if op in ("min", "max"):
                return self.op(f"s_{op}_{'i32' if t == i32 else 'u32'}", dst, *a)
            if op == "neg":
                return self.op("s_sub_u32", dst, ir.Const(0, u32), a[0])
            if op == "not":
                return self.op("s_not_b32", dst, a[0])
            if op == "lnot":
                return self.op("s_xor_b32", dst, a[0], ir.Const(1, u32))
            raise AssertionError(f"no scalar form of {op}")
        isf = t == f32
        if op in _VBIN:
            name = _VBIN[op][0 if isf else 1]
            return self.op(name, dst, *a)
        if op == "shr":
            return self.op("v_ashr_i32" if t == i32 else "v_lshr_b32", dst, *a)
        if op in ("min", "max"):
            return self.op(f"v_{op}_{_sfx(t)}", dst, *a)
        if op in ("idiv", "rem"):
            return self.op(f"v_{'div' if op == 'idiv' else 'rem'}_{_sfx(t)}", dst, *a)
        if op == "neg":
            if isf:
                return self.op("v_xor_b32", dst, a[0], ir.Const(0x80000000, u32))
            return self.op("v_sub_u32", dst, ir.Const(0, u32), a[0])
        if op == "lnot":
            return self.op("v_xor_b32", dst, a[0], ir.Const(1, u32))
        if op == "fabs":
            return self.op("v_and_b32", dst, a[0], ir.Const(0x7FFFFFFF, u32))
        if op == "fma":
            return self.op("v_fma_f32", dst, *a)
        if op == "mad":
            return self.op("v_mad_f32" if isf else "v_mad_u32", dst, *a)
        if op in _VUNARY:
            return self.op(_VUNARY[op], dst, a[0])
        raise AssertionError(f"no vector form of {op}")

    def lane_mask(self, st: ir.Inst) -> None:
        """A bool kept as a lane mask (lane_masks.py): a compare writes it, and/or/lnot
        combine masks with SALU ops. Bits of lanes that are off may be anything: every
        use runs with a subset of the lanes on here."""
        dst = self.reg(st.dst)
        if st.op in ir.COMPARE:
            return self.compare(st, dst)
        if st.op == "lnot":
            return self.ins(f"s_not_b32 {dst}, {self.reg(st.args[0])}")
        self.ins(f"s_{st.op}_b32 {dst}, {self.reg(st.args[0])}, {self.reg(st.args[1])}")

    def wave_op(self, st: ir.Inst) -> None:
        """Lane ids, votes, shuffles and bit counts: vector results (uniformity.py)."""
        op, dst, a = st.op, self.reg(st.dst), st.args
        if op == "laneid":          # the active lanes below this one, counted in all ones
            return self.op("v_mbcnt_lo_u32_b32", dst, ir.Const(0xFFFFFFFF, u32), ir.Const(0, u32))
        if op == "activemask":
            return self.ins(f"v_mov_b32 {dst}, exec")
        if op == "ballot":          # a compare writes 0 for the inactive lanes
            self.op("v_cmp_ne_u32", "vcc", ir.Const(0, u32), a[0])
            return self.ins(f"v_mov_b32 {dst}, vcc")
        if op == "shfl":
            address = self.to_vgpr(a[0], "v3")
            if is_wide(st.dst):                 # a 64-bit value moves as its two halves
                for k, half in enumerate(self.halves(a[1])):
                    self.ins(f"ds_bpermute_b32 v{st.dst.reg + k}, {address}, {self.to_vgpr(half, 'v4')}")
                return None
            return self.ins(f"ds_bpermute_b32 {dst}, {address}, {self.to_vgpr(a[1], 'v4')}")
        if op == "popc":
            return self.op("v_bcnt_u32_b32", dst, a[0], ir.Const(0, u32))
        if op == "brev":
            return self.op("v_bfrev_b32", dst, a[0])
        if op == "ffs":             # -1 (no bit) + 1 = 0
            self.op("v_ffbl_b32", dst, a[0])
            return self.ins(f"v_add_u32 {dst}, {dst}, 1")
        self.op("v_ffbh_u32", dst, a[0])            # clz: -1 (no bit) becomes 32
        self.ins(f"v_min_u32 {dst}, {dst}, 32")

    def select(self, st: ir.Inst, fused=None) -> None:
        """dst = cond ? a : b: s_cselect_b32 on SCC, or v_cndmask_b32 on VCC."""
        cond, a, b = st.args
        if is_wide(st.dst):
            return self.wide_select(st, fused)
        dst = self.reg(st.dst)
        if st.dst.cls in ("s", "m"):        # 'm': one of two lane masks (lane_masks.py)
            self.scalar_cond(cond, fused)
            return self.op("s_cselect_b32", dst, a, b)
        mask = self.vector_cond(cond, fused)
        self.op("v_cndmask_b32", dst, b, a, _Raw(mask))

    def memory(self, st: ir.Inst) -> None:
        arr, idx = st.array, st.args[0]
        lds = isinstance(arr, ir.SharedArray)
        elem = arr.elem if lds else arr.type.elem
        size = elem.itemsize
        if st.scaled:                       # a byte offset already (compiler/addressing.py)
            addr = self.to_vgpr(idx, "v3")
        elif isinstance(idx, ir.Const):
            addr = "v3"
            self.ins(f"v_mov_b32 v3, {(idx.bits() * size) & 0xFFFFFFFF}")
        else:
            addr = "v3"
            self.ins(f"v_lshl_b32 v3, {self.reg(idx)}, {size.bit_length() - 1}")
        tail = f"{arr.offset + st.offset}" if lds else f"{self.reg(arr)}, 0"
        if elem.wide:                       # never scaled: v3 holds the byte offset
            return self.wide_memory(st, arr, lds, tail)
        if st.op == "load":
            op = "ds_read_b32" if lds else _LOADS.get(elem.kind, "global_load_dword")
            if isinstance(st.dst.type, ir.VecType) and st.dst.type.n == 2:     # lds_pairs.py
                o0, o1 = ((arr.offset + off) // 4 for off in (st.offset, st.offset1))
                self.ins(f"ds_read2_b32 {self.reg(st.dst)}, {addr} offset0:{o0} offset1:{o1}")
                return
            if isinstance(st.dst.type, ir.VecType):     # lds_quads.py
                op = "ds_read_b128"
            self.ins(f"{op} {self.reg(st.dst)}, {addr}, {tail}")
            return
        if st.op == "store":
            data = self.to_vgpr(st.args[1], "v4")
            op = "ds_write_b32" if lds else _STORES.get(elem.itemsize, "global_store_dword")
            self.ins(f"{op} {addr}, {data}, {tail}")
            return
        dst = self.reg(st.dst) if st.dst is not None else "off"
        if st.kind == "cas":
            cmp, val = st.args[1], st.args[2]
            if lds:         # GCN's ds_cmpst: the compare value first
                self.ins(f"v_mov_b32 v4, {self.reg(cmp)}")
                self.ins(f"v_mov_b32 v5, {self.reg(val)}")
                self.ins(f"ds_cmpst_rtn_b32 {dst}, {addr}, v[4:5], {tail}")
                return
            self.ins(f"v_mov_b32 v4, {self.reg(val)}")
            self.ins(f"v_mov_b32 v5, {self.reg(cmp)}")
            self.ins(f"global_atomic_cmpswap_b32 {dst}, {addr}, v[4:5], {tail}")
            return
        data = self.to_vgpr(st.args[1], "v4")
        kind = st.kind
        if kind == "xchg":
            sfx = "b32"
        else:
            sfx = "f32" if elem == f32 else ("u32" if kind in ("add", "sub") else _sfx(elem))
        if lds:
            name = "ds_wrxchg_rtn_b32" if kind == "xchg" else f"ds_{kind}_{sfx}"
            self.ins(f"{name} {dst}, {addr}, {data}, {tail}")
        else:
            self.ins(f"global_atomic_{kind}_{sfx} {dst}, {addr}, {data}, {tail}")


# 8- and 16-bit elements (shared and local arrays hold them widened, never these):
# loads sign- or zero-extend into the VGPR, stores write its low byte or short.
_LOADS = {"u8": "global_load_ubyte", "b1": "global_load_ubyte", "i8": "global_load_sbyte",
          "u16": "global_load_ushort", "i16": "global_load_sshort"}
_STORES = {1: "global_store_byte", 2: "global_store_short"}


def _kernarg_loads(args, kernarg_end: int) -> list[tuple[int, int, int]]:
    """(first SGPR, kernarg offset, dwords) of the prologue's scalar loads. Arguments
    at the same distance in the kernarg segment and in the SGPRs (regalloc.py keeps
    small gaps of unused arguments) share loads of up to 16 dwords. A gap is loaded
    over only when its SGPRs are allocatable ones (free at the prologue): never the
    workgroup ids or the scratch registers, even when an argument happens to sit at
    its kernarg distance past them. A run of a width with no load of its own (3, 5-7,
    9-15 dwords) is loaded by the next wider s_load when the extra dwords are still
    inside the kernarg segment (`kernarg_end`) and land in allocatable SGPRs that hold
    no argument (saxpy: n, a, x, y, block_dim.x, 7 dwords, in one x8); else it is cut
    into x16/x8/x4/x2/dword pieces that read nothing outside it."""
    runs: list[list[int]] = []             # [reg, offset, dwords]
    for a in sorted(args, key=lambda a: a.arg.offset):
        n = a.arg.size // 4
        last = runs[-1] if runs else None
        if last and a.reg - last[0] == (a.arg.offset - last[1]) // 4 >= last[2] \
                and (a.arg.offset - last[1]) % 4 == 0 and (a.arg.offset - last[1]) // 4 + n <= 16 \
                and all(r in ALLOC_S for r in range(last[0] + last[2], a.reg)):
            last[2] = (a.arg.offset - last[1]) // 4 + n
        else:
            runs.append([a.reg, a.arg.offset, n])
    held = {a.reg + k for a in args for k in range(a.arg.size // 4)}
    out = []
    for reg, offset, n in runs:
        wide = next(w for w in (1, 2, 4, 8, 16) if w >= n)
        if offset + 4 * wide <= kernarg_end and \
                all(r in ALLOC_S and r not in held for r in range(reg + n, reg + wide)):
            n = wide
        while n:
            k = next(w for w in (16, 8, 4, 2, 1) if w <= n)
            out.append((reg, offset, k))
            reg, offset, n = reg + k, offset + 4 * k, n - k
    return out



def _own(block):
    """Statements of a loop body that belong to it (not to nested loops)."""
    for st in block:
        yield st
        if isinstance(st, ir.If):
            yield from _own(st.then)
            yield from _own(st.else_)
