"""Python AST -> typed IR (docs/umd-compiler.md 2-4).

Types: every value is i32, u32, f32 or bool (comparisons), 32 bits each; Ptr[T]
arguments are 64-bit device addresses.  Promotion, as C does it but with Python's
literals:
  - an operation with an f32 operand is f32 (the other is converted);
  - i32 with u32 is u32; an integer literal takes the type of the other operand;
  - `/` is always f32; `//` and `%` on integers truncate toward zero (C; equal to
    Python's flooring for non-negative operands), on floats they floor (Python);
  - bool in arithmetic is an integer 0/1; a number as a condition means `!= 0`;
  - a variable takes the type of its first assignment, except that an integer variable
    later assigned a float becomes f32 everywhere (`acc = 0; acc += x[i]`); other
    assignments are converted to the variable's type.
Geometry values (thread_idx.x, block_dim.y, ...) are i32.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math as pymath
import textwrap

import numpy as np

from umd import intrinsics as K
from umd.types import PtrType, ScalarType, bool_, f32, i32, u32

from . import ir
from .errors import KernelCompileError
from .ir import const
from .opt import fold

DIMS = ("x", "y", "z")
_PY_MATH = {getattr(pymath, n): n for n in ("exp", "log", "sqrt", "sin", "cos", "tanh",
                                            "fabs", "floor")}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor", ast.LShift: "shl", ast.RShift: "shr", ast.Pow: "pow"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
           ast.GtE: "ge"}
_CONSTRUCTS = {ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
               ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
               ast.Lambda: "a lambda", ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set",
               ast.Tuple: "a tuple", ast.JoinedStr: "an f-string", ast.Await: "await",
               ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Starred: "*unpacking",
               ast.NamedExpr: "an assignment expression (:=)", ast.Slice: "a slice",
               ast.With: "a with statement", ast.Try: "a try statement",
               ast.Raise: "raise", ast.Assert: "assert", ast.Import: "import",
               ast.ImportFrom: "import", ast.Global: "global", ast.Nonlocal: "nonlocal",
               ast.FunctionDef: "a nested function", ast.ClassDef: "a class",
               ast.Delete: "del", ast.AsyncFunctionDef: "an async function",
               ast.Match: "match"}


class _Widen(Exception):
    """A variable first typed as an integer is assigned a float: restart with it f32."""

    def __init__(self, name: str, type_: ScalarType) -> None:
        self.name, self.type = name, type_


class FunctionLowering:
    def __init__(self, pyfn, declared: dict[str, ScalarType]) -> None:
        self.pyfn = pyfn
        self.declared = dict(declared)
        try:
            source = textwrap.dedent(inspect.getsource(pyfn))
        except (OSError, TypeError) as e:
            raise KernelCompileError(f"cannot read the source of {pyfn!r}: {e}") from e
        self.source = source
        self.source_file = inspect.getsourcefile(pyfn) or "<unknown>"
        self.first_line = pyfn.__code__.co_firstlineno
        tree = ast.parse(source)
        self.node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                                ast.AsyncFunctionDef)))
        self.env = dict(builtins.__dict__)
        self.env.update(pyfn.__globals__)
        if pyfn.__closure__:
            for name, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__):
                try:
                    self.env[name] = cell.cell_contents
                except ValueError:
                    pass
        self.locals: dict[str, object] = {}
        self.counter = 0
        self.shared: list[ir.SharedArray] = []
        self.lds = 0
        self.block: list = []
        self.loop_depth = 0

    # -- helpers ---------------------------------------------------------------------
    def line(self, node) -> int:
        return getattr(node, "lineno", 1) + self.first_line - 1

    def error(self, node, msg: str) -> KernelCompileError:
        line = self.line(node)
        return KernelCompileError(f"{self.source_file}:{line}: {self.pyfn.__name__}: {msg}",
                                  line=line)

    def temp(self, t, name: str = "t") -> ir.Var:
        self.counter += 1
        return ir.Var(f"{name}{self.counter}", t, self.counter)

    def emit(self, op, dst, args, node, **kw) -> ir.Var | None:
        self.block.append(ir.Inst(op, dst, list(args), self.line(node), **kw))
        return dst

    def op(self, op, t, args, node, **kw) -> ir.Var:
        return self.emit(op, self.temp(t), args, node, **kw)

    # -- entry -----------------------------------------------------------------------
    def lower(self) -> ir.Function:
        fn = self.node
        if isinstance(fn, ast.AsyncFunctionDef):
            raise self.error(fn, "unsupported construct: an async function")
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.error(fn, "kernel arguments must be plain positional parameters "
                             "without defaults")
        args, offset = [], 0
        for p in a.args:
            if p.annotation is None:
                raise self.error(p, f"argument {p.arg!r} needs a type annotation "
                                 "(i32, u32, f32 or Ptr[...])")
            t = self.eval_annotation(p.annotation)
            kind, size = ("ptr", 8) if isinstance(t, PtrType) else (t.kind, 4)
            offset = -(-offset // size) * size
            spec = ir.ArgSpec(p.arg, kind, offset, size)
            offset += size
            v = ir.Var(p.arg, t, -len(args) - 1, local=True, arg=spec)
            args.append(v)
            self.locals[p.arg] = v
        for prefix in ("grid_dim", "block_dim"):
            for d in DIMS:
                name = f"__{prefix}_{d}"
                spec = ir.ArgSpec(name, "u32", offset, 4)
                offset += 4
                args.append(ir.Var(name, i32, -len(args) - 1, arg=spec))
        self.dim_args = {a.name: a for a in args}
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        self.block = []
        self.statements(body)
        return ir.Function(fn.name, args, self.block, self.shared, self.source_file,
                           self.first_line, lds_bytes=self.lds)

    def eval_annotation(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node = ast.parse(node.value, mode="eval").body
        try:
            t = eval(compile(ast.Expression(node), "<annotation>", "eval"), self.env)
        except Exception as e:
            raise self.error(node, f"cannot evaluate the annotation: {e}") from e
        if isinstance(t, PtrType) or (isinstance(t, ScalarType) and t != bool_):
            return t
        raise self.error(node, f"unsupported argument type {ast.unparse(node)!r} "
                         "(use i32, u32, f32 or Ptr[...])")

    # -- statements ------------------------------------------------------------------
    def statements(self, stmts) -> None:
        for st in stmts:
            self.statement(st)

    def sub_block(self, stmts) -> list:
        saved, self.block = self.block, []
        try:
            self.statements(stmts)
            return self.block
        finally:
            self.block = saved

    def statement(self, st) -> None:
        if isinstance(st, ast.Assign):
            value = self.expr(st.value)
            for target in st.targets:
                self.assign(target, value, st)
        elif isinstance(st, ast.AnnAssign):
            if not isinstance(st.target, ast.Name):
                raise self.error(st, "an annotated assignment needs a plain name")
            t = self.eval_annotation(st.annotation)
            if isinstance(t, PtrType):
                raise self.error(st, "local pointer variables are not supported")
            name = st.target.id
            if name not in self.locals:
                self.locals[name] = self.new_local(name, self.declared.get(name, t))
            if st.value is not None:
                self.assign(st.target, self.expr(st.value), st)
        elif isinstance(st, ast.AugAssign):
            op = _BINOPS.get(type(st.op))
            if isinstance(st.target, ast.Name):
                cur = self.expr(ast.Name(st.target.id, ast.Load(), lineno=st.lineno))
                self.assign(st.target, self.binop(op, cur, self.expr(st.value), st), st)
            elif isinstance(st.target, ast.Subscript):
                arr, idx = self.subscript(st.target)
                cur = self.op("load", arr.elem if isinstance(arr, ir.SharedArray)
                              else arr.type.elem, [idx], st, array=arr)
                val = self.binop(op, cur, self.expr(st.value), st)
                self.store(arr, idx, val, st)
            else:
                raise self.error(st, "unsupported assignment target")
        elif isinstance(st, ast.If):
            self.if_stmt(st)
        elif isinstance(st, ast.For):
            self.for_stmt(st)
        elif isinstance(st, ast.While):
            if st.orelse:
                raise self.error(st, "unsupported construct: while ... else")
            header = self.sub_block([])
            saved, self.block = self.block, header
            cond = self.condition(st.test)
            self.block = saved
            self.loop_depth += 1
            body = self.sub_block(st.body)
            self.loop_depth -= 1
            self.block.append(ir.Loop(header, cond, body, [], self.line(st)))
        elif isinstance(st, ast.Break):
            self.check_loop(st, "break")
            self.block.append(ir.Break(self.line(st)))
        elif isinstance(st, ast.Continue):
            self.check_loop(st, "continue")
            self.block.append(ir.Continue(self.line(st)))
        elif isinstance(st, ast.Return):
            if st.value is not None and not (isinstance(st.value, ast.Constant)
                                             and st.value.value is None):
                raise self.error(st, "a kernel cannot return a value (store it through a "
                                 "Ptr argument)")
            self.block.append(ir.Return(self.line(st)))
        elif isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return                                  # a docstring or a bare constant
            self.expr(st.value, discard=True)
        elif isinstance(st, ast.Pass):
            pass
        else:
            raise self.error(st, f"unsupported construct: {self.describe(st)}")

    def check_loop(self, st, what) -> None:
        if not self.loop_depth:
            raise self.error(st, f"'{what}' outside a loop")

    def describe(self, node) -> str:
        for cls, text in _CONSTRUCTS.items():
            if isinstance(node, cls):
                return text
        return type(node).__name__

    def if_stmt(self, st) -> None:
        cond = self.condition(st.test)
        then = self.sub_block(st.body)
        else_ = self.sub_block(st.orelse)
        self.block.append(ir.If(cond, then, else_, self.line(st)))

    def for_stmt(self, st) -> None:
        if st.orelse:
            raise self.error(st, "unsupported construct: for ... else")
        it = st.iter
        if not (isinstance(st.target, ast.Name) and isinstance(it, ast.Call)
                and self.resolve(it.func) is range and not it.keywords
                and 1 <= len(it.args) <= 3):
            raise self.error(st, "only 'for NAME in range(...)' loops are supported")
        bounds = [self.expr(a) for a in it.args]
        for a, b in zip(it.args, bounds):
            if not b.type.is_int:
                raise self.error(a, f"range() bounds must be integers, got {b.type!r}")
        if len(bounds) == 1:
            bounds = [ir.Const(0, i32)] + bounds
        start, end = bounds[0], bounds[1]
        step = bounds[2] if len(bounds) == 3 else ir.Const(1, i32)
        if not isinstance(step, ir.Const) or step.value == 0:
            raise self.error(it, "the step of range() must be a non-zero constant")
        t = self.unify(start, end)
        start, end = self.convert(start, t, st), self.convert(end, t, st)
        if isinstance(end, ir.Var) and end.local:        # evaluated once, like Python
            end = self.emit("mov", self.temp(t, "end"), [end], st)
        name = st.target.id
        assigned = any(isinstance(n, ast.Name) and n.id == name and
                       isinstance(n.ctx, ast.Store) for b in st.body for n in ast.walk(b))
        user = self.local_for(name, t, st)
        ctr = self.new_local(f"{name}.ctr", t) if assigned else user
        self.emit("mov", ctr, [start], st)
        header = []
        saved, self.block = self.block, header
        cond = self.op("lt" if step.value > 0 else "gt", bool_, [ctr, end], st)
        self.block = saved
        self.loop_depth += 1
        body_prefix = []
        if assigned:
            body_prefix.append(ir.Inst("mov", user, [ctr], self.line(st)))
        body = body_prefix + self.sub_block(st.body)
        self.loop_depth -= 1
        latch = [ir.Inst("add", ctr, [ctr, self.convert(step, t, st)], self.line(st))]
        self.block.append(ir.Loop(header, cond, body, latch, self.line(st)))

    # -- variables -------------------------------------------------------------------
    def new_local(self, name, t) -> ir.Var:
        self.counter += 1
        return ir.Var(name, t, self.counter, local=True)

    def local_for(self, name, t, node) -> ir.Var:
        v = self.locals.get(name)
        if v is None:
            v = self.locals[name] = self.new_local(name, self.declared.get(name, t))
        if not isinstance(v, ir.Var) or isinstance(v.type, PtrType):
            raise self.error(node, f"cannot assign to {name!r} (a pointer or shared array)")
        return v

    def assign(self, target, value, node) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, ir.SharedArray):
                if target.id in self.locals:
                    raise self.error(node, f"{target.id!r} is already defined")
                self.locals[target.id] = value
                return
            self.check_value(value, node)
            t = value.type
            v = self.local_for(target.id, t, node)
            if v.type.is_int and t == f32:
                raise _Widen(target.id, f32)
            self.emit("mov", v, [self.convert(value, v.type, node)], node)
        elif isinstance(target, ast.Subscript):
            arr, idx = self.subscript(target)
            self.store(arr, idx, value, node)
        else:
            raise self.error(node, f"unsupported assignment target: {self.describe(target)}")

    def check_value(self, value, node) -> None:
        if isinstance(value, ir.SharedArray) or isinstance(getattr(value, "type", None), PtrType):
            raise self.error(node, "pointers and shared arrays cannot be copied or "
                             "used in arithmetic")
        if not isinstance(value, (ir.Var, ir.Const, ir.Special)):
            raise self.error(node, "this expression has no value")

    def store(self, arr, idx, value, node) -> None:
        self.check_value(value, node)
        elem = arr.elem if isinstance(arr, ir.SharedArray) else arr.type.elem
        self.emit("store", None, [idx, self.convert(value, elem, node)], node, array=arr)

    def subscript(self, node):
        arr = self.expr(node.value)
        if not (isinstance(arr, ir.SharedArray) or
                (isinstance(arr, ir.Var) and isinstance(arr.type, PtrType))):
            raise self.error(node, f"{ast.unparse(node.value)!r} is not a Ptr argument or "
                             "a shared array")
        sl = node.slice
        if isinstance(sl, ast.Tuple):
            dims = getattr(arr, "shape", None)
            if dims is None or len(dims) != len(sl.elts):
                raise self.error(node, f"{len(sl.elts)} indices for a 1-D array")
            idx = None
            for k, e in enumerate(sl.elts):
                part = self.index(e)
                idx = part if idx is None else self.binop(
                    "add", self.binop("mul", idx, ir.Const(dims[k], i32), node), part, node)
            return arr, idx
        return arr, self.index(sl)

    def index(self, node):
        if isinstance(node, ast.Slice):
            raise self.error(node, "unsupported construct: a slice")
        idx = self.expr(node)
        self.check_value(idx, node)
        if not idx.type.is_int:
            raise self.error(node, f"an array index must be an integer, not {idx.type!r}")
        return idx

    # -- expressions -----------------------------------------------------------------
    def resolve(self, node):
        """The Python object a non-local Name / Attribute chain names, or None."""
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                return None
            return self.env.get(node.id, _MISSING)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is None or base is _MISSING or isinstance(base, K.Dim3Marker):
                return None
            return getattr(base, node.attr, _MISSING)
        return None

    def expr(self, node, discard: bool = False):
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return ir.Const(int(v), bool_)
            if isinstance(v, int):
                if -(1 << 31) <= v < (1 << 31):
                    return ir.Const(v, i32)
                if 0 <= v < (1 << 32):
                    return ir.Const(v, u32)
                raise self.error(node, f"integer constant {v} does not fit in 32 bits")
            if isinstance(v, float):
                return const(v, f32)
            raise self.error(node, f"unsupported constant {v!r}")
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                return self.locals[node.id]
            obj = self.env.get(node.id, _MISSING)
            return self.python_value(obj, node)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, (ast.Name, ast.Attribute)):
                base = self.resolve(node.value)
                if isinstance(base, K.Dim3Marker):
                    if node.attr not in DIMS:
                        raise self.error(node, f"{base!r} has no attribute {node.attr!r}")
                    if base.name in ("thread_idx", "block_idx"):
                        return ir.Special(f"{base.name}.{node.attr}", i32)
                    return self.dim_args[f"__{base.name}_{node.attr}"]
                if base is not None and base is not _MISSING:
                    return self.python_value(getattr(base, node.attr, _MISSING), node)
            raise self.error(node, f"unsupported attribute {ast.unparse(node)!r}")
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"unsupported operator {type(node.op).__name__}")
            return self.binop(op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            x = self.expr(node.operand)
            self.check_value(x, node)
            if isinstance(node.op, ast.UAdd):
                return x
            if isinstance(node.op, ast.USub):
                if x.type == bool_:
                    x = self.convert(x, i32, node)
                return self.fold_or_emit("neg", x.type, [x], node)
            if isinstance(node.op, ast.Not):
                return self.fold_or_emit("lnot", bool_, [self.truth(x, node)], node)
            if not x.type.is_int:
                raise self.error(node, "'~' needs an integer operand")
            return self.fold_or_emit("not", x.type, [x], node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node)
        if isinstance(node, ast.IfExp):
            cond = self.condition(node.test)
            saved = self.block
            self.block = []
            a = self.expr(node.body)
            then = self.block
            self.block = []
            b = self.expr(node.orelse)
            else_ = self.block
            self.block = saved
            self.check_value(a, node)
            self.check_value(b, node)
            t = self.unify(a, b)
            res = self.new_local(f"sel{self.counter}", t)
            saved, self.block = self.block, then
            self.emit("mov", res, [self.convert(a, t, node)], node)
            self.block = else_
            self.emit("mov", res, [self.convert(b, t, node)], node)
            self.block = saved
            self.block.append(ir.If(cond, then, else_, self.line(node)))
            return res
        if isinstance(node, ast.Subscript):
            arr, idx = self.subscript(node)
            elem = arr.elem if isinstance(arr, ir.SharedArray) else arr.type.elem
            return self.op("load", elem, [idx], node, array=arr)
        if isinstance(node, ast.Call):
            return self.call(node, discard)
        raise self.error(node, f"unsupported construct: {self.describe(node)}")

    def python_value(self, obj, node):
        if obj is _MISSING:
            raise self.error(node, f"name {ast.unparse(node)!r} is not defined")
        if isinstance(obj, bool):
            return ir.Const(int(obj), bool_)
        if isinstance(obj, (int, np.integer)):
            return self.expr(ast.copy_location(ast.Constant(int(obj)), node))
        if isinstance(obj, (float, np.floating)):
            return const(float(obj), f32)
        return _PyObject(obj)

    def truth(self, x, node):
        """x as a bool (numbers: x != 0)."""
        self.check_value(x, node)
        if x.type == bool_:
            return x
        return self.fold_or_emit("ne", bool_, [x, const(0, x.type)], node)

    def condition(self, node):
        return self.truth(self.expr(node), node)

    def compare(self, node):
        result, left = None, self.expr(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            name = _CMPOPS.get(type(op))
            if name is None:
                raise self.error(node, f"unsupported comparison {type(op).__name__}")
            right = self.expr(right_node)
            self.check_value(left, node)
            self.check_value(right, node)
            t = self.unify(left, right, allow_bool=True)
            c = self.fold_or_emit(name, bool_, [self.convert(left, t, node),
                                                self.convert(right, t, node)], node, cmp_type=t)
            result = c if result is None else self.fold_or_emit("and", bool_, [result, c], node)
            left = right
        return result

    def boolop(self, node):
        is_and = isinstance(node.op, ast.And)
        acc = self.condition(node.values[0])
        for value in node.values[1:]:
            risky = any(isinstance(n, (ast.Subscript, ast.Call)) for n in ast.walk(value))
            if not risky:
                acc = self.fold_or_emit("and" if is_and else "or", bool_,
                                        [acc, self.condition(value)], node)
                continue
            # Short-circuit: `i < n and x[i] > 0` must not load x[i] where i >= n.
            res = self.new_local(f"bool{self.counter}", bool_)
            self.emit("mov", res, [acc], node)
            saved, self.block = self.block, []
            self.emit("mov", res, [self.condition(value)], node)
            inner = self.block
            self.block = saved
            test = res if is_and else self.fold_or_emit("lnot", bool_, [res], node)
            self.block.append(ir.If(test, inner, [], self.line(node)))
            acc = res
        return acc

    def unify(self, a, b, allow_bool=False) -> ScalarType:
        ta, tb = a.type, b.type
        if ta == f32 or tb == f32:
            return f32
        if allow_bool and ta == bool_ and tb == bool_:
            return bool_
        ta = i32 if ta == bool_ else ta
        tb = i32 if tb == bool_ else tb
        if isinstance(a, ir.Const) and not isinstance(b, ir.Const):
            return tb
        if isinstance(b, ir.Const) and not isinstance(a, ir.Const):
            return ta
        return u32 if u32 in (ta, tb) else i32

    def convert(self, x, t, node):
        if x.type == t:
            return x
        if isinstance(x, ir.Const):
            v = x.value
            if t == f32:
                if x.type == u32 and v < 0:
                    v &= 0xFFFFFFFF
                return const(float(v), f32)
            if x.type == f32:
                if pymath.isnan(v):
                    return const(0, t)
                lo, hi = (-(1 << 31), (1 << 31) - 1) if t == i32 else (0, (1 << 32) - 1)
                return const(max(lo, min(hi, int(v))), t)
            return const(v, t)
        return self.op("cvt", t, [x], node)

    def fold_or_emit(self, op, t, args, node, cmp_type=None):
        if all(isinstance(a, ir.Const) for a in args):
            r = fold(op, t, args)
            if r is not None:
                return r
        return self.op(op, t, args, node)

    def binop(self, op, a, b, node):
        self.check_value(a, node)
        self.check_value(b, node)
        if op == "pow":
            if not (isinstance(b, ir.Const) and b.type.is_int and 0 <= b.value <= 8):
                raise self.error(node, "'**' needs a constant integer exponent 0..8 "
                                 "(use umd.math.exp/log otherwise)")
            result = const(1, a.type if a.type != bool_ else i32)
            for _ in range(b.value):
                result = self.binop("mul", result, a, node)
            return result
        if op in ("and", "or", "xor") and a.type == bool_ and b.type == bool_:
            return self.fold_or_emit(op, bool_, [a, b], node)
        if op == "div":
            t = f32
        else:
            t = self.unify(a, b)
        if op in ("and", "or", "xor", "shl", "shr") and t == f32:
            raise self.error(node, f"bitwise operator on a float ({op})")
        if op in ("shl", "shr"):
            t = a.type if a.type != bool_ else i32
            if isinstance(a, ir.Const) and not isinstance(b, ir.Const):
                t = i32
        a, b = self.convert(a, t, node), self.convert(b, t, node)
        if op == "floordiv":
            if t == f32:
                return self.fold_or_emit("floor", f32, [self.fold_or_emit("div", f32, [a, b],
                                                                          node)], node)
            op = "idiv"
        elif op == "mod":
            if t == f32:
                q = self.fold_or_emit("floor", f32, [self.fold_or_emit("div", f32, [a, b],
                                                                       node)], node)
                return self.fold_or_emit("sub", f32, [a, self.fold_or_emit(
                    "mul", f32, [q, b], node)], node)
            op = "rem"
        return self.fold_or_emit(op, t, [a, b], node)

    # -- calls -----------------------------------------------------------------------
    def call(self, node, discard):
        fn = self.resolve(node.func)
        name = ast.unparse(node.func)
        if fn is None or fn is _MISSING:
            raise self.error(node, f"call to unknown function {name!r}")
        if node.keywords:
            raise self.error(node, f"{name}(): keyword arguments are not supported")
        if fn is K.shared_array:
            return self.shared_array(node)
        args = [self.expr(a) for a in node.args]

        def nargs(n):
            if len(args) != n:
                raise self.error(node, f"{name}() takes {n} argument(s), got {len(args)}")

        if fn is K.syncthreads:
            nargs(0)
            self.emit("barrier", None, [], node)
            return None
        if fn in (K.atomic_add, K.atomic_max, K.atomic_cas):
            return self.atomic(fn, node, args, discard)
        if isinstance(fn, ScalarType) and fn != bool_:
            nargs(1)
            self.check_value(args[0], node)
            return self.convert(args[0] if args[0].type != bool_ else
                                self.convert(args[0], i32, node), fn, node)
        if fn is float or fn is int:
            nargs(1)
            self.check_value(args[0], node)
            return self.convert(args[0], f32 if fn is float else i32, node)
        if fn is min or fn is max or fn is abs:
            if fn is abs:
                nargs(1)
                x = args[0]
                self.check_value(x, node)
                if x.type == f32:
                    return self.fold_or_emit("fabs", f32, [x], node)
                neg = self.fold_or_emit("neg", x.type, [x], node)
                return self.fold_or_emit("max", x.type, [x, neg], node)
            if len(args) < 2:
                raise self.error(node, f"{name}() needs at least 2 arguments")
            acc = args[0]
            for b in args[1:]:
                self.check_value(acc, node)
                self.check_value(b, node)
                t = self.unify(acc, b)
                acc = self.fold_or_emit("min" if fn is min else "max", t,
                                        [self.convert(acc, t, node), self.convert(b, t, node)],
                                        node)
            return acc
        mname = None
        if isinstance(fn, K.Intrinsic) and fn.name.startswith("math."):
            mname = fn.name[5:]
        elif _hashable(fn) and fn in _PY_MATH:
            mname = _PY_MATH[fn]
        if mname:
            binary = mname in ("fmin", "fmax")
            nargs(2 if binary else 1)
            for a in args:
                self.check_value(a, node)
            xs = [self.convert(a, f32, node) for a in args]
            op = {"fmin": "min", "fmax": "max"}.get(mname, mname)
            return self.fold_or_emit(op, f32, xs, node)
        raise self.error(node, f"call to unsupported function {name!r}")

    def shared_array(self, node):
        if len(node.args) != 2:
            raise self.error(node, "shared_array(type, count) takes 2 arguments")
        t = self.resolve(node.args[0])
        if not isinstance(t, ScalarType) or t == bool_:
            raise self.error(node, "shared_array: the element type must be f32, i32 or u32")
        shape_node = node.args[1]
        dims = shape_node.elts if isinstance(shape_node, ast.Tuple) else [shape_node]
        shape = []
        for d in dims:
            c = self.expr(d)
            if not isinstance(c, ir.Const) or not c.type.is_int or c.value <= 0:
                raise self.error(node, "shared_array: the size must be a positive integer "
                                 "constant")
            shape.append(int(c.value))
        count = int(np.prod(shape))
        sa = ir.SharedArray(f"lds{len(self.shared)}", t, count, self.lds)
        sa.shape = shape
        self.lds += 4 * count
        if self.lds > 65536:
            raise self.error(node, f"shared arrays need {self.lds} bytes of LDS (at most 65536)")
        self.shared.append(sa)
        return sa

    def atomic(self, fn, node, args, discard):
        kind = fn.name.split("_")[1]
        n = 4 if kind == "cas" else 3
        if len(args) != n:
            raise self.error(node, f"{fn.qualname}() takes {n} arguments: array, index, "
                             + ("compare, value" if kind == "cas" else "value"))
        arr = args[0]
        if not (isinstance(arr, ir.SharedArray) or
                (isinstance(arr, ir.Var) and isinstance(arr.type, PtrType))):
            raise self.error(node, f"{fn.qualname}(): the first argument must be a Ptr "
                             "argument or a shared array")
        elem = arr.elem if isinstance(arr, ir.SharedArray) else arr.type.elem
        if kind == "cas" and isinstance(arr, ir.SharedArray):
            raise self.error(node, "umd.atomic_cas on a shared array is not supported "
                             "(the vISA has no LDS compare-and-swap)")
        idx = args[1]
        self.check_value(idx, node)
        if not idx.type.is_int:
            raise self.error(node, f"an array index must be an integer, not {idx.type!r}")
        vals = []
        for a in args[2:]:
            self.check_value(a, node)
            vals.append(self.convert(a, elem, node))
        dst = None if discard else self.temp(elem)
        self.emit("atomic", dst, [idx] + vals, node, array=arr, kind=kind)
        return dst


def _hashable(obj) -> bool:
    try:
        hash(obj)
        return True
    except TypeError:
        return False


class _Missing:
    pass


_MISSING = _Missing()


class _PyObject:
    """A Python object named in a kernel that is not a value (a module, a marker)."""

    def __init__(self, obj) -> None:
        self.obj = obj
        self.type = None


def lower(pyfn) -> ir.Function:
    """Lower a Python function to IR, re-running when a variable must become f32."""
    declared: dict[str, ScalarType] = {}
    for _ in range(64):
        try:
            return FunctionLowering(pyfn, declared).lower()
        except _Widen as w:
            declared[w.name] = w.type
    raise KernelCompileError(f"{pyfn.__name__}: variable types do not settle")
