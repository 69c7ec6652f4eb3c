"""Python AST -> typed IR (docs/umd-compiler.md 2-4).

Types: every value is i32, u32, f32 or bool (comparisons), 32 bits each, or i64, u64,
f64 (64 bits, a register pair); array arguments (Ptr[T], T[:], T[:, :], T[:, :, :]) are
64-bit device addresses whose shapes, when the kernel asks for them, come as hidden
kernel arguments.  Promotion (docs/umd-compiler.md 2.1), Numba's for the 64-bit types:
  - an operation with an f64 operand is f64; an f32 with an i64 or u64 is f64;
  - otherwise an operation with an f32 operand is f32 (the other is converted);
  - i32 or u32 with i64 is i64; u32 or u64 with u64 is u64; u64 with a signed integer
    is f64 (NumPy's rule, which Numba follows); i32 with u32 is u32;
  - an integer literal takes the type of the other operand; a float literal is f32 in an
    f32 (or 32-bit integer) expression and keeps its double in an f64 one;
  - `/` is f64 when an operand is 64-bit, else f32; `//` and `%` floor as Python (and
    Numba) do, on integers and floats; an integer `x // 0` and `x % 0` are 0 (Numba's
    NumPy error model);
  - bool in arithmetic is an integer 0/1; a number as a condition means `!= 0`;
  - a variable takes the type of its first assignment, widened when a later assignment
    needs more (`acc = 0; acc += x[i]` with x f32 makes acc f32 everywhere, with x f64
    f64; `s = 0; s += m[i]` with m i64 makes s i64); other assignments are converted to
    the variable's type.
Geometry values (thread_idx.x, block_dim.y, umd.grid(1), ...) are i32.

Besides values there are compile-time things: tuples (`umd.grid(2)`, `x.shape`,
`(a, b)`; unpacked, indexed with constants, passed around), arrays (arguments,
shared arrays, local arrays: bound by name, never copied), and Python objects (modules,
intrinsics, device functions).  A device function is inlined: its body is lowered in a
scope of its own into an IR Region, and its `return`s are Exits of that region.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import difflib
import inspect
import linecache
import math as pymath
import textwrap

import numpy as np

from umd import intrinsics as K
from umd.types import PtrType, ScalarType, b1, bool_, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

from . import ir, iteration, linking, prints, wraparound
from .errors import KernelCompileError
from .functions import DeviceFunction, JitFunction
from .ir import const
from .opt import fold

DIMS = ("x", "y", "z")
MAX_LOCAL_ELEMENTS = 64           # local arrays live in VGPRs (docs/umd-compiler.md 3)
MAX_INLINE_DEPTH = 32
TRAP_RANGE_STEP = 1               # s_trap code: range() with a zero step
_PY_MATH = {getattr(pymath, n): r for n, r in (
    ("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"), ("sin", "sin"), ("cos", "cos"),
    ("tanh", "tanh"), ("fabs", "fabs"), ("floor", "ifloor"), ("ceil", "iceil"),
    ("trunc", "itrunc"), ("pow", "pow"), ("log2", "log2"), ("log10", "log10"),
    ("exp2", "exp2"), ("copysign", "copysign"), ("isnan", "isnan"), ("isinf", "isinf"),
    ("isfinite", "isfinite"), ("tan", "tan"), ("atan", "atan"), ("atan2", "atan2"),
    ("asin", "asin"), ("acos", "acos"), ("sinh", "sinh"), ("cosh", "cosh"), ("asinh", "asinh"),
    ("acosh", "acosh"), ("atanh", "atanh"), ("hypot", "hypot"), ("expm1", "expm1"),
    ("log1p", "log1p"), ("radians", "radians"), ("degrees", "degrees"), ("erf", "erf"),
    ("erfc", "erfc"), ("gamma", "gamma"), ("lgamma", "lgamma"), ("fmod", "fmod"),
    ("frexp", "frexp"), ("ldexp", "ldexp")) + (("cbrt", "cbrt"),) * hasattr(pymath, "cbrt")}
# NumPy's ufuncs on scalars, as Numba CUDA lowers them in kernels: the math function of
# the same meaning (np.floor/ceil/trunc keep the float type, as NumPy's do)
_NP_MATH = {getattr(np, n): r for n, r in (
    ("sqrt", "sqrt"), ("exp", "exp"), ("exp2", "exp2"), ("expm1", "expm1"), ("log", "log"),
    ("log2", "log2"), ("log10", "log10"), ("log1p", "log1p"), ("sin", "sin"), ("cos", "cos"),
    ("tan", "tan"), ("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
    ("arctan2", "atan2"), ("sinh", "sinh"), ("cosh", "cosh"), ("tanh", "tanh"),
    ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh"), ("hypot", "hypot"),
    ("floor", "floor"), ("ceil", "ceil"), ("trunc", "trunc"), ("fabs", "fabs"),
    ("power", "pow"), ("copysign", "copysign"), ("fmod", "fmod"), ("cbrt", "cbrt"),
    ("isnan", "isnan"), ("isinf", "isinf"), ("isfinite", "isfinite"), ("fmin", "fmin"),
    ("fmax", "fmax"), ("radians", "radians"), ("degrees", "degrees"), ("deg2rad", "radians"),
    ("rad2deg", "degrees"))}
# NumPy's arithmetic ufuncs, on scalars and (with an output array) on whole arrays
_NP_ARITH = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.divide: "div",
             np.true_divide: "div"}
_UFUNC_BINARY = ("fmin", "fmax", "pow", "copysign", "atan2", "hypot", "fmod", "ldexp")
_NUMPY_CASTS = {np.float32: f32, np.int32: i32, np.uint32: u32, np.float64: f64, np.int64: i64,
                np.uint64: u64, np.uint8: u8, np.int8: i8, np.uint16: u16, np.int16: i16,
                np.bool_: b1}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor", ast.LShift: "shl", ast.RShift: "shr", ast.Pow: "pow"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
           ast.GtE: "ge"}
_CONSTRUCTS = {ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
               ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
               ast.Lambda: "a lambda", ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set",
               ast.JoinedStr: "an f-string", ast.Await: "await",
               ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Starred: "*unpacking",
               ast.NamedExpr: "an assignment expression (:=)", ast.Slice: "a slice",
               ast.With: "a with statement", ast.Try: "a try statement",
               ast.Raise: "raise", ast.Assert: "assert", ast.Import: "import",
               ast.ImportFrom: "import", ast.Global: "global", ast.Nonlocal: "nonlocal",
               ast.FunctionDef: "a nested function", ast.ClassDef: "a class",
               ast.Delete: "del", ast.AsyncFunctionDef: "an async function",
               ast.Match: "match"}
_ALL = (i32, u32, f32, i64, u64, f64)
ATOMIC_TYPES = {"add": _ALL, "sub": _ALL, "min": _ALL, "max": _ALL, "nanmin": _ALL, "nanmax": _ALL,
                "exch": _ALL, "cas": (i32, u32, i64, u64),
                "compare_and_swap": (i32, u32, i64, u64), "and_": (i32, u32, i64, u64),
                "or_": (i32, u32, i64, u64), "xor": (i32, u32, i64, u64), "inc": (u32, u64),
                "dec": (u32, u64)}
# The atomics the vISA has no instruction for: compare-and-swap loops in libdevice.py,
# as CUDA compilers build the ones their hardware lacks.
_CAS_LOOP_ATOMICS = {"and_": 0, "or_": 1, "xor": 2, "inc": 3, "dec": 4}   # libdevice.atomic_update
WAVE_SIZE = K.warpsize            # lanes per wave (vgpu.isa.WAVE_SIZE)
DYNAMIC_SHARED_ARG = "__dynamic_shared_bytes"   # hidden u32: the launch's dynamic LDS bytes
_ISA_ATOMIC = {"add": "add", "sub": "add", "min": "min", "max": "max", "nanmin": "min",
               "nanmax": "max", "exch": "xchg", "cas": "cas", "compare_and_swap": "cas"}


class _Widen(Exception):
    """A variable is assigned a value of a wider type (an integer a float, f32 an f64,
    a 32-bit integer a 64-bit one): restart with the variable of that type."""

    def __init__(self, name: str, type_: ScalarType) -> None:
        self.name, self.type = name, type_


class _Unbounded(Exception):
    """A variable assumed non-negative (every assignment so far was) is assigned a
    value that may be negative: restart with it known unbounded (wraparound.py)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _widened(current: ScalarType, value) -> ScalarType | None:
    """The type a variable of type `current` must become to hold `value`, or None.

    Widening is what Numba's type unification does for a variable assigned values of
    several types: an integer variable given a float, an f32 one given an f64, a 32-bit
    integer one given a 64-bit integer (signedness as unify's rules)."""
    new = value.type
    if isinstance(value, ir.Const) and not new.is_float and current.is_int:
        return None                     # an integer literal takes the variable's type
    if current.is_int and new.is_float:
        return f64 if current.wide or new.wide else new
    if current == f32 and new.wide:
        return f64
    if current.is_int and new.wide and not current.wide:
        if current == bool_:
            return new
        return u64 if new == u64 and not current.signed else i64 if new.signed or current.signed \
            else u64
    return None


# -- compile-time values ------------------------------------------------------------------
class _Tuple:
    """A tuple known at compile time: its items are values, arrays or tuples."""

    def __init__(self, items) -> None:
        self.items = list(items)
        self.type = None

    def __repr__(self) -> str:
        return f"tuple{tuple(self.items)!r}"


@dataclasses.dataclass(eq=False)
class LocalArray:
    """`umd.local.array`: one local variable (a VGPR) per element."""

    name: str
    elem: ScalarType
    shape: list
    vars: list
    storage: ScalarType | None = None   # a small type (u8...) its elem (i32, bool) holds
    type = None


class _View:
    """`a[i]` of a 2-D or 3-D array (Numba's row view), known at compile time: the
    array and the leading indices; indexing it indexes the array (`a[i][j]` is
    `a[i, j]`), and it has the remaining dimensions' shape.

    A slice `a[lo:hi]` of a 1-D array or row is one too, with `start` (the element of
    dimension len(prefix) where it begins) and `length` (its one extent): `v[j]` is
    `a[..., start + j]`. Both are values in registers or constants."""

    def __init__(self, arr, prefix: list, start=None, length=None) -> None:
        self.arr, self.prefix = arr, prefix
        self.start, self.length = start, length

    @property
    def name(self) -> str:
        return getattr(self.arr, "name", "a shared array")

    @property
    def elem(self) -> ScalarType:
        return _elem(self.arr)


class _GridGroup:
    """`umd.cg.this_grid()` (Numba's cuda.cg.this_grid()), known at compile time: the
    whole grid; `.sync()` is the grid barrier, `.size` its threads, `.thread_rank()`
    this thread's rank in it."""

    type = None


class _Choice:
    """An array name bound to different arrays at run time (`src = x` in one branch,
    `src = y` in the other; `a, b = b, a` in a loop): the arrays it may name (`keys`,
    see _array_key, in a fixed order) and a local i32 `sel`, the position of the one
    it names now. Every candidate has the same element type and dimensions (Numba
    unifies an array variable's types, and refuses different ones); an access
    branches on `sel` to the candidate's own load or store."""

    def __init__(self, name: str, keys: list, sel, elem, storage, ndim: int, flat: bool) -> None:
        self.name, self.keys, self.sel = name, keys, sel
        self.elem, self.storage, self.ndim, self.flat = elem, storage, ndim, flat
        self.type = None


class _Rebind(Exception):
    """An array name is bound to another array: restart with it a _Choice over `keys`."""

    def __init__(self, name: str, keys: list) -> None:
        self.name, self.keys = name, keys


def _array_key(arr) -> str:
    """What names an array across restarts of the lowering (a _Choice's candidates)."""
    if isinstance(arr, ir.Var):
        return f"var:{arr.name}"
    if isinstance(arr, ir.SharedArray):
        return f"lds:{arr.name}"
    return f"local:{arr.name}"


class _Missing:
    pass


_MISSING = _Missing()


class _PyObject:
    """A Python object named in a kernel that is not a value (a module, a marker)."""

    def __init__(self, obj) -> None:
        self.obj = obj
        self.type = None


def _hashable(obj) -> bool:
    try:
        hash(obj)
        return True
    except TypeError:
        return False


def _is_array(v) -> bool:
    return isinstance(v, (ir.SharedArray, LocalArray, _View, _Choice)) or (
        isinstance(v, ir.Var) and isinstance(v.type, PtrType))


def _is_cffi_from_buffer(fn) -> bool:
    """Whether fn is `ffi.from_buffer` of a cffi.FFI object (without importing cffi)."""
    owner = getattr(fn, "__self__", None)
    return getattr(fn, "__name__", None) == "from_buffer" and type(owner).__module__ == "cffi.api"


def _elem(arr) -> ScalarType:
    return arr.type.elem if isinstance(arr, ir.Var) else arr.elem


def _storage(arr) -> ScalarType:
    """The element type an array holds: a shared or local array of a small type keeps
    its elements widened (elem is then i32 or bool), `storage` names the small type."""
    if isinstance(arr, _View):
        return _storage(arr.arr)
    return arr.type.elem if isinstance(arr, ir.Var) else arr.storage or arr.elem


def _float_literal(x) -> bool:
    return isinstance(x, ir.Const) and x.exact is not None


_LITERAL_OPS = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
                "div": lambda x, y: x / y}


def _literal_arithmetic(op, a, b):
    """`1.0 / 3.0`, `math.pi * 0.5`, `2 * 0.1`: arithmetic on a float literal and a
    literal is folded in double precision, as Python (and Numba) fold it, and stays a
    float literal (f32 or the exact double, whichever its use needs); None otherwise."""
    if op not in _LITERAL_OPS or not (_float_literal(a) or _float_literal(b)):
        return None
    vals = []
    for c in (a, b):
        if _float_literal(c):
            vals.append(c.exact)
        elif isinstance(c, ir.Const) and c.type.is_int and c.type != bool_:
            vals.append(int(c.value))
        else:
            return None
    try:
        return ir.float_literal(float(_LITERAL_OPS[op](*vals)))
    except (ZeroDivisionError, OverflowError):
        return None


def _suggest(name: str, candidates) -> str | None:
    pool = [c for c in candidates if isinstance(c, str) and not c.startswith("_")]
    match = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return match[0] if match else None


def _dtype_of(obj) -> ScalarType | None:
    """The kernel type of a type marker, a numpy type or dtype, or a dtype name."""
    if isinstance(obj, ScalarType):
        return obj if obj != bool_ else None
    try:
        dt = np.dtype(obj)
    except TypeError:
        return None
    return {"float32": f32, "int32": i32, "uint32": u32, "float64": f64, "int64": i64,
            "uint64": u64, "uint8": u8, "int8": i8, "uint16": u16, "int16": i16,
            "bool": b1}.get(dt.name, _MISSING)


# -- sources --------------------------------------------------------------------------------
@dataclasses.dataclass
class _Source:
    node: ast.FunctionDef
    file: str
    first_line: int               # file line of the source's first line
    lines: list                   # the dedented source lines (for columns)
    indent: int                   # columns textwrap.dedent removed


def _source_of(pyfn) -> _Source:
    try:
        lines, first = inspect.getsourcelines(pyfn)
    except (OSError, TypeError) as e:
        raise KernelCompileError(f"cannot read the source of {pyfn!r}: {e}") from e
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first_text = next((ln for ln in lines if ln.strip()), "")
    first_ded = next((ln for ln in dedented.splitlines() if ln.strip()), "")
    indent = (len(first_text) - len(first_text.lstrip())) - (len(first_ded) - len(first_ded.lstrip()))
    tree = ast.parse(dedented)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    file = inspect.getsourcefile(pyfn) or "<unknown>"
    return _Source(node, file, pyfn.__code__.co_firstlineno, dedented.splitlines(), indent)


def _environment(pyfn, extra: dict | None) -> dict:
    """Names a kernel or device function sees: builtins, its globals, the names of the
    frame that decorated it, its closure (innermost last)."""
    env = dict(builtins.__dict__)
    env.update(pyfn.__globals__)
    env.update(extra or {})
    if pyfn.__closure__:
        for name, cell in zip(pyfn.__code__.co_freevars, pyfn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:
                pass
    return env


@dataclasses.dataclass
class Scope:
    """One function being lowered: the kernel, or a device function inlined into it."""

    pyfn: object
    name: str
    src: _Source
    env: dict
    prefix: str = ""                        # of the IR names of its variables
    locals: dict = dataclasses.field(default_factory=dict)
    loop_depth: int = 0
    region: ir.Region | None = None         # a device function: its returns exit this
    result: object = None                   # its return value (a Var or a _Tuple of Vars)
    ret_type: ScalarType | None = None      # `-> T`
    call_line: int | None = None            # the kernel line its IR is attributed to
    caller: "Scope | None" = None
    annotations: dict = dataclasses.field(default_factory=dict)
    stores: dict = dataclasses.field(default_factory=dict)   # name -> times assigned


class FunctionLowering:
    def __init__(self, pyfn, declared: dict[str, ScalarType], extra_env: dict | None = None,
                 unbounded: set | None = None, rebound: dict | None = None,
                 links: tuple = ()) -> None:
        self.pyfn = pyfn
        self.links = tuple(links)               # the kernel's link= (umd.declare_device)
        self.declared = dict(declared)
        self.rebound = dict(rebound or {})      # array names bound to several arrays -> keys
        self.unbounded = set(unbounded or ())   # variables that may be negative (wraparound)
        self.extra_env = extra_env
        src = _source_of(pyfn)
        self.scope = Scope(pyfn, src.node.name, src, _environment(pyfn, extra_env))
        self.scope.annotations = self.annotations(pyfn, self.scope)
        self.rewrite_loops(src.node)
        self.scope.stores = wraparound.store_counts(src.node)
        self.source_file = src.file
        self.first_line = src.first_line
        self.counter = 0
        self.shared: list[ir.SharedArray] = []
        self.lds = 0
        self.dynamic: list[ir.SharedArray] = []  # shared.array(0, T): the launch's dynamic LDS
        self.cooperative = False                # the kernel syncs its grid (umd.cg)
        self.block: list = []
        self.args: list[ir.Var] = []
        self.hidden: dict[str, ir.Var] = {}
        self.consts: dict[str, tuple] = {}     # __const_<k> -> (dtype name, shape, bytes)
        self.captured: dict[str, list] = {}    # __global_<k> -> [module, function, expression]
        self.karg_offset = 0
        self.inline_stack: list = []
        self.inlines = 0
        self.locals_made = 0
        self.local_arrays: dict[str, LocalArray] = {}
        self.traps: dict[int, str] = {}
        self.prints: list[prints.Format] = []   # the print() sites (compiler/prints.py)
        self.bounds: dict[int, int] = {}       # Var.id -> a lower bound (wraparound.py)

    # -- helpers ---------------------------------------------------------------------
    @property
    def locals(self) -> dict:
        return self.scope.locals

    def line(self, node) -> int:
        if self.scope.call_line is not None:
            return self.scope.call_line
        return getattr(node, "lineno", 1) + self.scope.src.first_line - 1

    def rewrite_loops(self, fdef) -> None:
        """`for` over arrays, enumerate() and zip() as range() loops (iteration.py)."""
        self.scope.env.update(iteration.NAMES)
        try:
            iteration.rewrite_loops(fdef, self.scope.env)
        except iteration.Unsupported as e:
            raise self.error(e.node, str(e)) from None

    def error(self, node, msg: str) -> KernelCompileError:
        sc = self.scope
        line = getattr(node, "lineno", 1) + sc.src.first_line - 1
        out = f"{sc.src.file}:{line}: {sc.name}: {msg}"
        text = linecache.getline(sc.src.file, line).rstrip("\n")
        if text:
            col = getattr(node, "col_offset", None)
            out += f"\n{text}"
            if col is not None and 0 < getattr(node, "lineno", 0) <= len(sc.src.lines):
                ded = sc.src.lines[node.lineno - 1]
                col = len(ded.encode()[:col].decode(errors="replace")) + sc.src.indent
                out += "\n" + " " * col + "^"
        s = sc
        while s.caller is not None:
            out += f"\n  in device function {s.name}, inlined at {s.caller.src.file}:{s.call_line}"
            s = s.caller
        return KernelCompileError(out, line=line)

    def temp(self, t, name: str = "t") -> ir.Var:
        self.counter += 1
        return ir.Var(f"{name}{self.counter}", t, self.counter)

    def emit(self, op, dst, args, node, **kw) -> ir.Var | None:
        self.block.append(ir.Inst(op, dst, list(args), self.line(node), **kw))
        return dst

    def op(self, op, t, args, node, **kw) -> ir.Var:
        return self.emit(op, self.temp(t), args, node, **kw)

    def annotations(self, pyfn, scope) -> dict:
        """fn.__annotations__, already evaluated where the function was defined; a
        string (PEP 563) is evaluated against the function's names."""
        out = {}
        for name, ann in getattr(pyfn, "__annotations__", {}).items():
            if isinstance(ann, str):
                try:
                    ann = eval(compile(ast.parse(ann, mode="eval"), "<annotation>", "eval"), scope.env)
                except Exception as e:
                    node = self.param_node(scope, name)
                    raise self.error(node, f"cannot evaluate the annotation {ann!r}: {e}") from e
            out[name] = ann
        return out

    @staticmethod
    def param_node(scope, name):
        for p in scope.src.node.args.args:
            if p.arg == name:
                return p.annotation or p
        return scope.src.node

    def arg_type(self, scope, p):
        """The type an argument's annotation names (None: not annotated)."""
        if p.arg not in scope.annotations:
            return None
        t = scope.annotations[p.arg]
        if isinstance(t, PtrType) or (isinstance(t, ScalarType) and t != bool_):
            return t
        raise self.error(p.annotation or p, f"unsupported argument type {t!r} (use i32, u32, f32, "
                         "i64, u64, f64, u8, i8, u16, i16, b1, Ptr[T] or T[:], T[:, :], T[:, :, :])")

    # -- entry -----------------------------------------------------------------------
    def lower(self) -> ir.Function:
        fn = self.scope.src.node
        if isinstance(fn, ast.AsyncFunctionDef):
            raise self.error(fn, "unsupported construct: an async function")
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.error(fn, "kernel arguments must be plain positional parameters "
                             "without defaults")
        offset = 0
        for p in a.args:
            t = self.arg_type(self.scope, p)
            if t is None:
                raise self.error(p, f"argument {p.arg!r} needs a type annotation "
                                 "(i32, u32, f32, Ptr[T] or an array type such as f32[:])")
            if isinstance(t, PtrType):
                kind, size, dtype, ndim = "ptr", 8, t.elem.kind, t.ndim
            else:
                # An 8/16-bit or bool scalar takes a 32-bit slot, its value widened there
                # by the launch (ScalarType.narrow), and is an i32 in the kernel as a
                # loaded element of its type is (a b1 a bool, tested != 0).
                kind, size, dtype, ndim = t.kind, 4 if t.small else t.itemsize, "", 0
            offset = -(-offset // size) * size
            spec = ir.ArgSpec(p.arg, kind, offset, size, dtype, ndim)
            offset += size
            v = ir.Var(p.arg, i32 if isinstance(t, ScalarType) and t.small else t,
                       -len(self.args) - 1, local=True, arg=spec)
            self.args.append(v)
            self.locals[p.arg] = v
        # block_dim before grid_dim: the one nearly every kernel reads (umd.grid, the
        # index idiom) then sits next to the user arguments, so the prologue's one
        # s_load_dwordx8 reaches it (saxpy: n, a, x, y, block_dim.x in offsets 0..27).
        for prefix in ("block_dim", "grid_dim"):
            for d in DIMS:
                name = f"__{prefix}_{d}"
                spec = ir.ArgSpec(name, "u32", offset, 4)
                offset += 4
                self.args.append(ir.Var(name, i32, -len(self.args) - 1, arg=spec))
        self.karg_offset = offset
        self.dim_args = {v.name: v for v in self.args}
        self.block = []
        for p, v in zip(a.args, list(self.args)):
            if v.arg.kind == "b1":          # a bool argument: its 0/1 slot tested != 0
                self.locals[p.arg] = self.op("ne", bool_, [v, ir.Const(0, i32)], p)
        self.statements(self.body_of(fn))
        if self.dynamic:
            # The dynamic region starts after the static arrays (CUDA's extern
            # __shared__ layout), 16-byte aligned; every shared.array(0, T) is it.
            self.lds = -(-self.lds // 16) * 16
            for sa in self.dynamic:
                sa.offset = self.lds
        func = ir.Function(fn.name, self.args, self.block, self.shared, self.source_file,
                           self.first_line, lds_bytes=self.lds)
        func.cooperative = self.cooperative
        func.dynamic_shared = bool(self.dynamic)
        func.traps = dict(self.traps)
        func.consts = dict(self.consts)
        func.captured = dict(self.captured)
        func.prints = list(self.prints)
        return func

    @staticmethod
    def body_of(fn):
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        return body

    def shape_arg(self, arr: ir.Var, k: int) -> ir.Var:
        """The hidden kernel argument `__shape_<arg>_<k>` (a flat Ptr's only one: its size)."""
        name = f"__shape_{arr.arg.name}_{k}"
        v = self.hidden.get(name)
        if v is None:
            spec = ir.ArgSpec(name, "u32", self.karg_offset, 4)
            self.karg_offset += 4
            v = ir.Var(name, i32, -len(self.args) - 1, arg=spec)
            self.args.append(v)
            self.hidden[name] = v
        return v

    def eval_annotation(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node = ast.parse(node.value, mode="eval").body
        try:
            t = eval(compile(ast.Expression(node), "<annotation>", "eval"), self.scope.env)
        except Exception as e:
            raise self.error(node, f"cannot evaluate the annotation: {e}") from e
        if isinstance(t, PtrType) or (isinstance(t, ScalarType) and t != bool_):
            return t
        raise self.error(node, f"unsupported type {ast.unparse(node)!r} "
                         "(use i32, u32, f32, i64, u64 or f64)")

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
                key = self.scope.prefix + name
                self.locals[name] = self.new_local(key, self.declared.get(key, t))
            if st.value is not None:
                self.assign(st.target, self.expr(st.value), st)
        elif isinstance(st, ast.AugAssign):
            op = _BINOPS.get(type(st.op))
            if isinstance(st.target, ast.Name):
                cur = self.expr(ast.Name(st.target.id, ast.Load(), lineno=st.lineno,
                                         col_offset=st.col_offset))
                self.assign(st.target, self.binop(op, cur, self.expr(st.value), st), st)
            elif isinstance(st.target, ast.Subscript):
                arr, idx = self.subscript(st.target)
                if arr is None:
                    raise self.not_assignable(st, idx)
                cur = self.load(arr, idx, st)
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
            self.scope.loop_depth += 1
            body = self.sub_block(st.body)
            self.scope.loop_depth -= 1
            self.block.append(ir.Loop(header, cond, body, [], self.line(st)))
        elif isinstance(st, ast.Break):
            self.check_loop(st, "break")
            self.block.append(ir.Break(self.line(st)))
        elif isinstance(st, ast.Continue):
            self.check_loop(st, "continue")
            self.block.append(ir.Continue(self.line(st)))
        elif isinstance(st, ast.Return):
            self.return_stmt(st)
        elif isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return                                  # a docstring or a bare constant
            self.expr(st.value, discard=True)
        elif isinstance(st, ast.Pass):
            pass
        else:
            raise self.error(st, f"unsupported construct: {self.describe(st)}")

    def return_stmt(self, st) -> None:
        sc = self.scope
        none = st.value is None or (isinstance(st.value, ast.Constant) and st.value.value is None)
        if sc.region is None:
            if not none:
                raise self.error(st, "a kernel cannot return a value (store it through an "
                                 "array argument)")
            self.block.append(ir.Return(self.line(st)))
            return
        if not none:
            value = self.expr(st.value)
            if isinstance(value, _Tuple):
                flat = self.tuple_values(value, st)
                if sc.result is None:
                    sc.result = _Tuple([self.local_for(f"return.{k}", v.type, st)
                                        for k, v in enumerate(flat)])
                if not isinstance(sc.result, _Tuple) or len(sc.result.items) != len(flat):
                    raise self.error(st, "every return of a device function must give the same "
                                     "kind of value")
                for var, v in zip(sc.result.items, flat):
                    self.assign_var(var, v, st)
            else:
                if _is_array(value):
                    raise self.error(st, "a device function cannot return an array")
                self.check_value(value, st)
                if sc.result is None:
                    sc.result = self.local_for("return", sc.ret_type or value.type, st)
                if isinstance(sc.result, _Tuple):
                    raise self.error(st, "every return of a device function must give the same "
                                     "kind of value")
                self.assign_var(sc.result, value, st)
        self.block.append(ir.Exit(sc.region, self.line(st)))

    def tuple_values(self, tup: _Tuple, node) -> list:
        out = []
        for v in tup.items:
            if isinstance(v, _Tuple) or _is_array(v):
                raise self.error(node, "a tuple returned by a device function holds numbers only")
            self.check_value(v, node)
            out.append(v)
        return out

    def check_loop(self, st, what) -> None:
        if not self.scope.loop_depth:
            raise self.error(st, f"'{what}' outside a loop")

    def describe(self, node) -> str:
        for cls, text in _CONSTRUCTS.items():
            if isinstance(node, cls):
                return text
        return type(node).__name__

    def if_stmt(self, st) -> None:
        cond = self.condition(st.test)
        saved = self.guard(st.test, st.body)
        then = self.sub_block(st.body)
        self.unguard(saved)
        else_ = self.sub_block(st.orelse)
        self.block.append(ir.If(cond, then, else_, self.line(st)))

    def guard(self, test, body) -> dict:
        """Give the variables an `if` test bounds below (wraparound.guarded_names) those
        bounds for its true branch; returns what unguard() puts back."""
        saved = {}
        stored = {n.id for b in body for n in ast.walk(b)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for name, lb in wraparound.guarded_names(test).items():
            v = self.locals.get(name)
            if isinstance(v, ir.Var) and v.type.is_int and name not in stored and \
                    self.scope.stores.get(name) == 1:
                saved[v.id] = self.bounds.get(v.id)
                self.bounds[v.id] = max(lb, self.bounds.get(v.id, lb))
        return saved

    def unguard(self, saved: dict) -> None:
        for vid, lb in saved.items():               # the guard holds in the branch only
            if lb is None:
                self.bounds.pop(vid, None)
            else:
                self.bounds[vid] = lb

    def for_stmt(self, st) -> None:
        if st.orelse:
            raise self.error(st, "unsupported construct: for ... else")
        it = st.iter
        if isinstance(it, ast.Call) and self.resolve(it.func) is _MISSING:
            raise self.missing(it.func)
        if not (isinstance(st.target, ast.Name) and isinstance(it, ast.Call)
                and self.resolve(it.func) is range and not it.keywords
                and 1 <= len(it.args) <= 3):
            raise self.error(st, "only 'for NAME in range(...)' loops are supported")
        bounds = [self.expr(a) for a in it.args]
        for a, b in zip(it.args, bounds):
            self.check_value(b, a)
            if not b.type.is_int:
                raise self.error(a, f"range() bounds must be integers, got {b.type!r}")
        if len(bounds) == 1:
            bounds = [ir.Const(0, i32)] + bounds
        start, end = bounds[0], bounds[1]
        step = bounds[2] if len(bounds) == 3 else ir.Const(1, i32)
        if isinstance(step, ir.Const) and step.value == 0:
            raise self.error(it, "the step of range() must not be zero")
        t = self.unify(start, end)
        start, end = self.convert(start, t, st), self.convert(end, t, st)
        if isinstance(end, ir.Var) and end.local:        # evaluated once, like Python
            end = self.emit("mov", self.temp(t, "end"), [end], st)
        positive = None
        step_lb = self.lower_bound(step)
        if isinstance(step, ir.Const):
            upward = (ir.wrap32(step.value, i32) if step.type != u32 else step.value) > 0
            step = self.convert(step, t, st)
        else:
            # Python's range(): a step of either sign; zero stops the kernel (s_trap)
            sstep = self.convert(step if step.type != bool_ else self.convert(step, i32, st), i32, st)
            sstep = self.emit("mov", self.temp(i32, "step"), [sstep], st)
            self.traps[TRAP_RANGE_STEP] = "range() step is zero"
            zero = self.op("eq", bool_, [sstep, ir.Const(0, i32)], st)
            trap = [ir.Inst("trap", None, [ir.Const(TRAP_RANGE_STEP, u32)], self.line(it))]
            self.block.append(ir.If(zero, trap, [], self.line(it)))
            positive = self.op("gt", bool_, [sstep, ir.Const(0, i32)], st)
            step = self.convert(sstep, t, st)
        name = st.target.id
        assigned = any(isinstance(n, ast.Name) and n.id == name and
                       isinstance(n.ctx, ast.Store) for b in st.body for n in ast.walk(b))
        user = self.local_for(name, t, st)
        ctr = self.new_local(f"{self.scope.prefix}{name}.ctr", t) if assigned else user
        self.emit("mov", ctr, [start], st)
        counts_up = upward if positive is None else step_lb is not None and step_lb >= 0
        start_lb = self.lower_bound(start) if counts_up else None   # it only grows (0 traps)
        self.bound_assignment(user, start_lb)
        if user.id in self.bounds:
            self.bounds[ctr.id] = self.bounds[user.id]
        header = []
        saved, self.block = self.block, header
        if positive is None:
            cond = self.op("lt" if upward else "gt", bool_, [ctr, end], st)
        else:
            up = self.op("lt", bool_, [ctr, end], st)
            down = self.op("gt", bool_, [ctr, end], st)
            cond = self.op("select", bool_, [positive, up, down], st)
        self.block = saved
        self.scope.loop_depth += 1
        body_prefix = []
        if assigned:
            body_prefix.append(ir.Inst("mov", user, [ctr], self.line(st)))
        body = body_prefix + self.sub_block(st.body)
        self.scope.loop_depth -= 1
        latch = [ir.Inst("add", ctr, [ctr, step], self.line(st))]
        self.block.append(ir.Loop(header, cond, body, latch, self.line(st)))

    # -- variables -------------------------------------------------------------------
    def new_local(self, name, t) -> ir.Var:
        self.counter += 1
        return ir.Var(name, t, self.counter, local=True)

    def local_for(self, name, t, node) -> ir.Var:
        v = self.locals.get(name)
        if v is None:
            key = self.scope.prefix + name
            v = self.locals[name] = self.new_local(key, self.declared.get(key, t))
        if not isinstance(v, ir.Var) or isinstance(v.type, PtrType):
            raise self.error(node, f"cannot assign a number to {name!r} (an array or a tuple)")
        return v

    def assign_var(self, v: ir.Var, value, node) -> None:
        """v = value, converted to v's type (an integer variable given a float widens)."""
        self.check_value(value, node)
        wider = _widened(v.type, value)
        if wider is not None:
            raise _Widen(v.name, wider)
        value = self.convert(value, v.type, node)
        self.emit("mov", v, [value], node)
        self.bound_assignment(v, self.lower_bound(value))

    def bound_assignment(self, v: ir.Var, lb: int | None) -> None:
        """A variable assigned once has its value's bound; one assigned several times
        is assumed >= 0 until an assignment may be negative, which restarts the
        lowering with it unbounded (an induction over its assignments: wraparound.py)."""
        if not v.type.is_int or not v.type.signed:
            return
        if self.scope.stores.get(v.name[len(self.scope.prefix):]) == 1:
            if lb is not None:
                self.bounds[v.id] = lb
        elif v.name not in self.unbounded:
            if lb is None or lb < 0:
                raise _Unbounded(v.name)
            self.bounds[v.id] = 0

    def snapshot(self, value, node):
        """A value that later assignments to a local variable do not change."""
        if isinstance(value, ir.Var) and value.local and not isinstance(value.type, PtrType):
            copy = self.emit("mov", self.temp(value.type), [value], node)
            if value.id in self.bounds:
                self.bounds[copy.id] = self.bounds[value.id]
            return copy
        if isinstance(value, _Tuple):
            return _Tuple([self.snapshot(v, node) for v in value.items])
        if isinstance(value, _Choice):
            sel = self.emit("mov", self.temp(i32), [value.sel], node)
            return _Choice(value.name, value.keys, sel, value.elem, value.storage, value.ndim,
                           value.flat)
        return value

    def assign(self, target, value, node) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, _Tuple):
                raise self.error(node, f"cannot unpack {self.what(value)} (only tuples unpack)")
            if len(value.items) != len(target.elts):
                raise self.error(node, f"cannot unpack {len(value.items)} values into "
                                 f"{len(target.elts)}")
            items = [self.snapshot(v, node) for v in value.items]      # a, b = b, a
            for t, v in zip(target.elts, items):
                self.assign(t, v, node)
        elif isinstance(target, ast.Name):
            name = target.id
            old = self.locals.get(name)
            if isinstance(value, _GridGroup):
                self.locals[name] = value
                return
            if _is_array(value):
                self.bind_array(name, old, value, node)
                return
            if isinstance(value, _Tuple):
                if old is not None and not (isinstance(old, _Tuple) and len(old.items) == len(value.items)):
                    raise self.error(node, f"{name!r} is already defined as something else than "
                                     f"a tuple of {len(value.items)}")
                if old is None:
                    old = _Tuple([None] * len(value.items))
                items = []
                for k, (cur, v) in enumerate(zip(old.items, value.items)):
                    if isinstance(v, _Tuple) or _is_array(v):
                        items.append(v)
                        continue
                    self.check_value(v, node)
                    if not isinstance(cur, ir.Var):
                        key = f"{self.scope.prefix}{name}.{k}"
                        cur = self.new_local(key, self.declared.get(key, v.type))
                    self.assign_var(cur, v, node)
                    items.append(cur)
                self.locals[name] = _Tuple(items)
                return
            self.check_value(value, node)
            self.assign_var(self.local_for(name, value.type, node), value, node)
        elif isinstance(target, ast.Subscript):
            arr, idx = self.subscript(target)
            if arr is None:
                raise self.not_assignable(node, idx)
            self.store(arr, idx, value, node)
        else:
            raise self.error(node, f"unsupported assignment target: {self.describe(target)}")

    # -- array names bound to several arrays (_Choice) --------------------------------
    def bind_array(self, name: str, old, value, node) -> None:
        """name = value, an array: bound by name when it is the name's only array; a
        name given several arrays is a _Choice over them (a restart makes it one from
        its first binding on), every one of the same type."""
        if isinstance(value, _View):
            if old is not None and old is not value:
                raise self.error(node, f"{name!r} is already defined (a row view is bound once)")
            self.locals[name] = value
            return
        key = self.scope.prefix + name
        if old is not None and _is_array(old) and old is not value:
            self.same_array_type(name, old, value, node)
        if key not in self.rebound:
            if old is None or old is value:
                self.locals[name] = self.snapshot(value, node) if isinstance(value, _Choice) else value
                return
            if not _is_array(old):
                raise self.error(node, f"{name!r} is already defined as {self.what(old)}; an "
                                 "array cannot be assigned to it")
            raise _Rebind(key, self.candidate_keys(old, node) + [
                k for k in self.candidate_keys(value, node) if k not in self.candidate_keys(old, node)])
        keys = self.rebound[key]
        new = [k for k in self.candidate_keys(value, node) if k not in keys]
        if new:
            raise _Rebind(key, keys + new)
        ch = old if isinstance(old, _Choice) else None
        if ch is None:
            if old is not None:
                raise self.error(node, f"{name!r} is already defined as {self.what(old)}")
            flat = isinstance(value, _Choice) and value.flat or \
                isinstance(value, ir.Var) and not value.type.ndim
            ch = _Choice(name, keys, self.new_local(f"{key}.array", i32), _elem(value),
                         _storage(value), self.ndim_of(value), flat)
            self.locals[name] = ch
        self.assign_var(ch.sel, self.position_in(keys, value, node), node)

    def candidate_keys(self, arr, node) -> list:
        if isinstance(arr, _Choice):
            return list(arr.keys)
        if isinstance(arr, _View):
            raise self.error(node, "a row view cannot be rebound; index the array instead")
        return [_array_key(arr)]

    def position_in(self, keys: list, value, node):
        """The position in `keys` of the array `value` names (a select over a choice's)."""
        if not isinstance(value, _Choice):
            return ir.Const(keys.index(_array_key(value)), i32)
        res = ir.Const(keys.index(value.keys[0]), i32)
        for j, k in enumerate(value.keys[1:], 1):
            hit = self.op("eq", bool_, [value.sel, ir.Const(j, i32)], node)
            res = self.op("select", i32, [hit, ir.Const(keys.index(k), i32), res], node)
        return res

    def same_array_type(self, name: str, old, value, node) -> None:
        def describe(a):
            kind = ("a shared array" if isinstance(a, ir.SharedArray) else
                    "a local array" if isinstance(a, LocalArray) else "an array")
            flat = isinstance(a, _Choice) and a.flat or isinstance(a, ir.Var) and not a.type.ndim
            dims = f"Ptr[{_storage(a)!r}]" if flat else f"{_storage(a)!r}[{', '.join([':'] * self.ndim_of(a))}]"
            return f"{kind} {dims}"
        if describe(old).split()[-1] != describe(value).split()[-1]:
            raise self.error(node, f"{name!r} is bound to {describe(old)} and to {describe(value)}: "
                             "every binding of an array name must have the same type (element type "
                             "and dimensions), as in Numba")

    def candidate(self, key: str, node):
        """The array of a _Choice's key, in this lowering."""
        kind, _, name = key.partition(":")
        found = (next((a for a in self.args if a.name == name), None) if kind == "var" else
                 next((a for a in self.shared if a.name == name), None) if kind == "lds" else
                 self.local_arrays.get(name))
        if found is None:
            raise self.error(node, f"an array this name may be bound to ({name}) is declared after "
                             "this use; declare it before")
        return found

    def choose(self, ch: _Choice, node, each) -> None:
        """each(candidate) lowered under `ch.sel == k` for every candidate k."""
        saved = self.block
        chain = None
        for k in reversed(range(len(ch.keys))):
            self.block = []
            each(self.candidate(ch.keys[k], node))
            body = self.block
            if chain is None:
                chain = body
            else:
                self.block = []
                hit = self.op("eq", bool_, [ch.sel, ir.Const(k, i32)], node)
                self.block.append(ir.If(hit, body, chain, self.line(node)))
                chain = self.block
        self.block = saved
        self.block.extend(chain)

    def not_assignable(self, node, item) -> KernelCompileError:
        if isinstance(item, _View):
            n, nd = len(item.prefix), self.ndim_of(item.arr)
            return self.error(node, f"{n} {'index' if n == 1 else 'indices'} for a {nd}-D array "
                              f"{self.array_name(item.arr)!r}: a row cannot be assigned as a whole "
                              "(index every dimension)")
        return self.error(node, "a tuple item cannot be assigned")

    def what(self, value) -> str:
        if _is_array(value):
            return "an array"
        if isinstance(value, _Tuple):
            return f"a tuple of {len(value.items)}"
        if isinstance(value, _PyObject):
            return repr(value.obj)
        return "a number"

    def check_value(self, value, node) -> None:
        if _is_array(value):
            raise self.error(node, "arrays cannot be copied or used in arithmetic")
        if isinstance(value, _Tuple):
            raise self.error(node, "a tuple cannot be used as a number (unpack or index it)")
        if not isinstance(value, (ir.Var, ir.Const, ir.Special)):
            raise self.error(node, "this expression has no value")

    # -- arrays ----------------------------------------------------------------------
    def ndim_of(self, arr) -> int:
        if isinstance(arr, _View):
            return self.ndim_of(arr.arr) - len(arr.prefix)
        if isinstance(arr, _Choice):
            return arr.ndim
        if isinstance(arr, ir.Var):
            return arr.type.ndim or 1
        return len(arr.shape)

    def shape_of(self, arr, k: int):
        if isinstance(arr, _View):
            if arr.start is not None:           # a slice: 1-D
                return arr.length
            return self.shape_of(arr.arr, len(arr.prefix) + k)
        if isinstance(arr, _Choice):        # the extent of the array it names now
            node = ast.Constant(0)
            res = self.shape_of(self.candidate(arr.keys[0], node), k)
            for j, key in enumerate(arr.keys[1:], 1):
                hit = self.op("eq", bool_, [arr.sel, ir.Const(j, i32)], None)
                res = self.op("select", i32, [hit, self.shape_of(self.candidate(key, node), k), res],
                              None)
            return res
        if isinstance(arr, ir.Var) and arr.name in self.consts:    # a constant array's own
            return ir.Const(self.consts[arr.name][1][k], i32)
        if isinstance(arr, ir.Var):
            return self.shape_arg(arr, k)
        if getattr(arr, "dynamic", False):
            return arr.extent
        return ir.Const(arr.shape[k], i32)

    def dynamic_extent(self, t, node):
        """Elements of a dynamic shared array of t: the launch's dynamic shared bytes
        (hidden argument __dynamic_shared_bytes) over the element size, as Numba's."""
        v = self.hidden.get(DYNAMIC_SHARED_ARG)
        if v is None:
            spec = ir.ArgSpec(DYNAMIC_SHARED_ARG, "u32", self.karg_offset, 4)
            self.karg_offset += 4
            v = ir.Var(DYNAMIC_SHARED_ARG, i32, -len(self.args) - 1, arg=spec)
            self.args.append(v)
            self.hidden[DYNAMIC_SHARED_ARG] = v
        return self.binop("floordiv", v, ir.Const(t.itemsize, i32), node)

    def array_name(self, arr) -> str:
        return arr.name if isinstance(arr, (ir.Var, LocalArray, _View, _Choice)) else "a shared array"

    def flat_index(self, arr, indices: list, node):
        """The element number of arr[indices] (row-major)."""
        nd = self.ndim_of(arr)
        if (isinstance(arr, ir.Var) and not arr.type.ndim or isinstance(arr, _Choice) and arr.flat) \
                and len(indices) > 1:
            raise self.error(node, f"{arr.name!r} is {arr.type!r}, a flat pointer: declare it "
                             f"{arr.type.elem!r}[{', '.join([':'] * len(indices))}] to index it with "
                             f"{len(indices)} indices")
        if len(indices) != nd:
            n = len(indices)
            raise self.error(node, f"{n} {'index' if n == 1 else 'indices'} for a {nd}-D array "
                             f"{self.array_name(arr)!r} (index every dimension; slices are "
                             "of 1-D arrays and rows)")
        idx = None
        for k, part in enumerate(indices):
            self.check_value(part, node)
            if not part.type.is_int:
                raise self.error(node, f"an array index must be an integer, not {part.type!r}")
            if part.type == bool_ or part.type.wide:     # extents are i32: so are element numbers
                part = self.convert(part, i32, node)
            part = self.wrap_index(arr, k, part, node)
            if idx is None:
                idx = part
            else:
                idx = self.binop("add", self.binop("mul", idx, self.shape_of(arr, k), node),
                                 part, node)
        return idx

    def wrap_index(self, arr, k: int, part, node):
        """Numba's wraparound: a negative index counts from the end of dimension k
        (wraparound.py); nothing to do for one that cannot be negative, nor on a
        `Ptr[T]` (umd's C pointer, which may be a bare device address of no known size)."""
        lb = self.lower_bound(part)
        if lb is not None and lb >= 0 or isinstance(arr, ir.Var) and not arr.type.ndim \
                or isinstance(arr, _Choice) and arr.flat:
            return part
        extent = self.shape_of(arr, k)
        if isinstance(part, ir.Const):
            return self.binop("add", part, extent, node)
        negative = self.fold_or_emit("lt", bool_, [part, ir.Const(0, part.type)], node)
        shift = self.fold_or_emit("select", i32, [negative, extent, ir.Const(0, i32)], node)
        return self.fold_or_emit("add", i32, [part, shift], node)

    def subscript(self, node):
        """(array, element number) of an indexing expression, or (None, item) for a tuple."""
        base = self.expr(node.value)
        sl = node.slice
        if isinstance(sl, ast.Slice):
            return None, self.slice_view(base, sl, node)
        if isinstance(sl, ast.Tuple) and any(isinstance(e, ast.Slice) for e in sl.elts):
            raise self.error(node, "unsupported construct: a slice in a tuple index: slices are of "
                             "1-D arrays and rows (a[i][lo:hi]); index with an offset instead "
                             "(a[i, lo + j])")
        if isinstance(base, _Tuple):
            k = self.expr(sl)
            self.check_value(k, node)
            if not k.type.is_int:
                raise self.error(node, f"a tuple index must be an integer, not {k.type!r}")
            if isinstance(k, ir.Const):
                if not -len(base.items) <= k.value < len(base.items):
                    raise self.error(node, f"tuple index {k.value} out of range")
                return None, base.items[k.value]
            # a variable index (x.shape[d]): a select over the items, numbers only
            for v in base.items:
                self.check_value(v, node)
            t = base.items[0].type
            for v in base.items[1:]:
                t = self.unify(ir.Var("", t, 0), v)
            res = self.convert(base.items[0], t, node)
            for j, v in enumerate(base.items[1:], 1):
                hit = self.op("eq", bool_, [k, ir.Const(j, k.type)], node)
                res = self.op("select", t, [hit, self.convert(v, t, node), res], node)
            return None, res
        if not _is_array(base):
            raise self.error(node, f"{ast.unparse(node.value)!r} is not an array (an array "
                             "argument, a shared or a local array) or a tuple")
        idx = self.expr(sl)
        parts = idx.items if isinstance(idx, _Tuple) else [idx]
        if not parts and isinstance(base, ir.Var) and not base.type.ndim:
            parts = [ir.Const(0, i32)]          # r[()]: a 0-d array's element, given as Ptr[T]
        if isinstance(base, _View):
            base, parts = self.view_parts(base, parts, node)
        nd = self.ndim_of(base)
        if len(parts) < nd and not (isinstance(base, ir.Var) and not base.type.ndim
                                    or isinstance(base, _Choice) and base.flat):
            for part in parts:                      # a row view: a[i] of a 2-D array
                self.check_value(part, node)
                if not part.type.is_int:
                    raise self.error(node, f"an array index must be an integer, not {part.type!r}")
            return None, _View(base, parts)
        return base, self.flat_index(base, parts, node)

    def view_parts(self, view, parts: list, node):
        """(array, indices) of view[parts]: the row's leading indices, then for a slice
        its start plus the index (a negative one counts from the slice's end)."""
        if view.start is None or not parts:
            return view.arr, view.prefix + parts
        first = parts[0]
        self.check_value(first, node)
        if not first.type.is_int:
            raise self.error(node, f"an array index must be an integer, not {first.type!r}")
        if first.type == bool_ or first.type.wide:
            first = self.convert(first, i32, node)
        first = self.wrap_index(view, 0, first, node)
        return view.arr, view.prefix + [self.binop("add", view.start, first, node)] + parts[1:]

    def slice_view(self, base, sl, node):
        """`a[lo:hi]` of a 1-D array or row (Numba's basic slicing): a _View of its
        elements lo..hi-1, the bounds as Python's (negative ones count from the end,
        both clamped to the extent), step 1. Other slices are compile errors that say
        what to write instead."""
        instead = "index with an offset instead (a[lo + i])"
        if not _is_array(base):
            raise self.error(node, f"{ast.unparse(node.value)!r} is not an array, so it cannot be sliced")
        if isinstance(base, (_Choice, LocalArray)) or isinstance(base, ir.Var) and not base.type.ndim:
            raise self.error(node, f"unsupported construct: a slice of {self.what_sliced(base)}; "
                             f"slices are of 1-D array arguments, shared arrays and rows: {instead}")
        nd = self.ndim_of(base)
        if nd != 1:
            raise self.error(node, f"unsupported construct: a slice of a {nd}-D array: slices are of "
                             f"1-D arrays and rows (a[i][lo:hi]); {instead}")
        if sl.step is not None:
            step = self.expr(sl.step)
            if not (isinstance(step, ir.Const) and step.value == 1):
                raise self.error(node, f"unsupported construct: a slice with a step; {instead}, "
                                 "multiplied (a[lo + step * i])")
        extent = self.shape_of(base, 0)
        lo = self.slice_bound(sl.lower, ir.Const(0, i32), extent, node)
        hi = self.slice_bound(sl.upper, extent, extent, node)
        length = self.fold_or_emit("max", i32, [self.binop("sub", hi, lo, node), ir.Const(0, i32)], node)
        if isinstance(base, _View):
            start = lo if base.start is None else self.binop("add", base.start, lo, node)
            return _View(base.arr, base.prefix, start, length)
        return _View(base, [], lo, length)

    def what_sliced(self, base) -> str:
        if isinstance(base, _Choice):
            return f"{base.name!r}, a name bound to several arrays"
        if isinstance(base, LocalArray):
            return f"the local array {base.name!r} (it lives in registers)"
        return f"{base.name!r}, a flat pointer of no known length"

    def slice_bound(self, expr, default, extent, node):
        """A slice bound as Python computes it: a negative one counts from the end,
        then it is clamped to [0, extent]."""
        if expr is None:
            return default
        v = self.expr(expr)
        self.check_value(v, node)
        if not v.type.is_int:
            raise self.error(node, f"a slice bound must be an integer, not {v.type!r}")
        if v.type != i32:
            v = self.convert(v, i32, node)
        negative = self.fold_or_emit("lt", bool_, [v, ir.Const(0, i32)], node)
        v = self.fold_or_emit("select", i32, [negative, self.binop("add", v, extent, node), v], node)
        v = self.fold_or_emit("max", i32, [v, ir.Const(0, i32)], node)
        return self.fold_or_emit("min", i32, [v, extent], node)

    def load(self, arr, idx, node):
        if isinstance(arr, _Choice):
            res = self.new_local(f"{arr.name}.elem{self.counter}",
                                 bool_ if _storage(arr) == b1 else _elem(arr).register)
            self.choose(arr, node, lambda a: self.emit("mov", res, [self.load(a, idx, node)], node))
            return res
        if isinstance(arr, LocalArray):
            if isinstance(idx, ir.Const):
                return self.emit("mov", self.temp(arr.elem), [self.local_element(arr, idx, node)], node)
            res = self.emit("mov", self.temp(arr.elem), [arr.vars[0]], node)
            for k in range(1, len(arr.vars)):
                hit = self.op("eq", bool_, [idx, ir.Const(k, idx.type)], node)
                res = self.op("select", arr.elem, [hit, arr.vars[k], res], node)
            return res
        elem = _elem(arr)
        if elem == b1:              # a byte other than 0 is True, as numpy's view(bool) has it
            return self.op("ne", bool_, [self.op("load", i32, [idx], node, array=arr),
                                         ir.Const(0, i32)], node)
        return self.op("load", elem.register, [idx], node, array=arr)

    def store(self, arr, idx, value, node) -> None:
        if isinstance(arr, _Choice):
            self.check_value(value, node)
            self.choose(arr, node, lambda a: self.store(a, idx, value, node))
            return
        if isinstance(arr, ir.Var) and arr.name in self.consts:
            raise self.error(node, "a constant array (umd.const.array_like, or a global numpy "
                             "array, which kernels capture as a constant as Numba does) is read-only: "
                             "pass the array as an argument, or make it a device array "
                             "(umd.to_device) to write to it")
        self.check_value(value, node)
        if _storage(arr).small:     # memory truncates a global store; registers need the wrap
            value = self.narrow(value, _storage(arr), node, wrap=not isinstance(arr, ir.Var))
        else:
            value = self.convert(value, _elem(arr), node)
        if isinstance(arr, LocalArray):
            if isinstance(idx, ir.Const):
                self.emit("mov", self.local_element(arr, idx, node), [value], node)
                return
            for k, var in enumerate(arr.vars):
                hit = self.op("eq", bool_, [idx, ir.Const(k, idx.type)], node)
                self.emit("select", var, [hit, value, var], node)
            return
        self.emit("store", None, [idx, value], node, array=arr)

    def narrow(self, x, t, node, wrap: bool = True):
        """x stored into (or cast to) the small type t, held in t.register: a bool for b1
        (x != 0); else x converted to int32 (a float truncated toward zero) and, with
        `wrap`, wrapped to t's width (sign- or zero-extended again), as Numba's stores
        and casts wrap. Without `wrap` the caller's byte/short store truncates."""
        if t == b1:
            return self.truth(x, node)
        x = self.convert(x if x.type != bool_ else self.convert(x, i32, node), i32, node)
        if not wrap:
            return x
        bits = 8 * t.itemsize
        if not t.signed:
            return self.fold_or_emit("and", i32, [x, ir.Const((1 << bits) - 1, i32)], node)
        up = self.fold_or_emit("shl", i32, [x, ir.Const(32 - bits, i32)], node)
        return self.fold_or_emit("shr", i32, [up, ir.Const(32 - bits, i32)], node)

    def local_element(self, arr, idx, node):
        k = ir.wrap32(idx.value, i32) if idx.type != u32 else idx.value
        if not 0 <= k < len(arr.vars):
            raise self.error(node, f"index {k} is out of the local array's {len(arr.vars)} elements")
        return arr.vars[k]

    def array_attribute(self, arr, attr, node):
        nd = self.ndim_of(arr)
        if attr == "shape":
            return _Tuple([self.shape_of(arr, k) for k in range(nd)])
        if attr == "ndim":
            return ir.Const(nd, i32)
        if attr == "size":
            size = self.shape_of(arr, 0)
            for k in range(1, nd):
                size = self.binop("mul", size, self.shape_of(arr, k), node)
            return size
        raise self.error(node, f"arrays have .shape, .size and .ndim here, not .{attr}")

    # -- names -----------------------------------------------------------------------
    def resolve(self, node):
        """The Python object a non-local Name / Attribute chain names, or None (a local
        value), or _MISSING."""
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                return None
            return self.scope.env.get(node.id, _MISSING)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is None or base is _MISSING or isinstance(base, K.Dim3Marker):
                return None if base is not _MISSING else _MISSING
            return getattr(base, node.attr, _MISSING)
        return None

    def missing(self, node) -> KernelCompileError:
        """The error for a name or attribute that does not exist, with a suggestion."""
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is _MISSING:
                return self.missing(node.value)
            spelt = ast.unparse(node.value)
            msg = f"{spelt} has no attribute {node.attr!r}"
            hint = _suggest(node.attr, dir(base))
            return self.error(node, msg + (f"; did you mean {spelt}.{hint}?" if hint else ""))
        if isinstance(node, ast.Name):
            hint = _suggest(node.id, list(self.locals) + list(self.scope.env))
            return self.error(node, f"name {node.id!r} is not defined"
                              + (f"; did you mean {hint}?" if hint else ""))
        return self.error(node, f"{ast.unparse(node)!r} is not defined")

    # -- expressions -----------------------------------------------------------------
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
                if -(1 << 63) <= v < (1 << 63):
                    return ir.Const(v, i64)
                if 0 <= v < (1 << 64):
                    return ir.Const(v, u64)
                raise self.error(node, f"integer constant {v} does not fit in 64 bits")
            if isinstance(v, float):
                return ir.float_literal(v)
            raise self.error(node, f"unsupported constant {v!r}")
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                return self.locals[node.id]
            obj = self.scope.env.get(node.id, _MISSING)
            if obj is _MISSING:
                raise self.missing(node)
            return self.python_value(obj, node)
        if isinstance(node, ast.Tuple):
            return _Tuple([self.expr(e) for e in node.elts])
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, (ast.Name, ast.Attribute)):
                base = self.resolve(node.value)
                if isinstance(base, K.Dim3Marker):
                    if node.attr not in DIMS:
                        raise self.error(node, f"{base!r} has no attribute {node.attr!r}")
                    if base.name in ("thread_idx", "block_idx"):
                        return ir.Special(f"{base.name}.{node.attr}", i32)
                    return self.dim_args[f"__{base.name}_{node.attr}"]
                if base is _MISSING:
                    raise self.missing(node.value)
                if base is not None:
                    obj = getattr(base, node.attr, _MISSING)
                    if obj is _MISSING:
                        raise self.missing(node)
                    return self.python_value(obj, node)
            value = self.expr(node.value)
            if _is_array(value):
                return self.array_attribute(value, node.attr, node)
            if isinstance(value, _GridGroup):
                return self.grid_group(node.attr, node, call=False)
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
                if _float_literal(x):           # -0.1 is still a literal: its double kept
                    return ir.float_literal(-x.exact)
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
            return self.if_exp(node)
        if isinstance(node, ast.Subscript):
            arr, idx = self.subscript(node)
            if arr is None:
                return idx
            return self.load(arr, idx, node)
        if isinstance(node, ast.Call):
            return self.call(node, discard)
        raise self.error(node, f"unsupported construct: {self.describe(node)}")

    def if_exp(self, node):
        cond = self.condition(node.test)
        pure = not any(isinstance(n, (ast.Subscript, ast.Call)) for side in (node.body, node.orelse)
                       for n in ast.walk(side))
        if pure:                        # both sides are arithmetic: a select
            a, b = self.expr(node.body), self.expr(node.orelse)
            self.check_value(a, node)
            self.check_value(b, node)
            t = self.unify(a, b)
            return self.fold_or_emit("select", t, [cond, self.convert(a, t, node),
                                                   self.convert(b, t, node)], node)
        saved = self.block
        self.block = []
        guarded = self.guard(node.test, [node.body])
        a = self.expr(node.body)
        self.unguard(guarded)
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

    def python_value(self, obj, node):
        if obj is K.laneid:
            return self.laneid(node)
        if isinstance(obj, (bool, np.bool_)):
            return ir.Const(int(obj), bool_)
        if isinstance(obj, (int, np.integer)):
            return self.expr(ast.copy_location(ast.Constant(int(obj)), node))
        if isinstance(obj, np.float64):
            return const(float(obj), f64)
        if isinstance(obj, (float, np.floating)):
            return ir.float_literal(float(obj))
        if isinstance(obj, tuple) and all(isinstance(v, (bool, int, float, np.number, tuple)) for v in obj):
            return _Tuple([self.python_value(v, node) for v in obj])
        if isinstance(obj, np.ndarray):     # Numba freezes a global array as a constant
            return self.frozen_array(obj, node, f"the global array {ast.unparse(node)}")
        if hasattr(obj, "__cuda_array_interface__") and hasattr(obj, "dtype"):
            return self.captured_array(obj, node)
        return _PyObject(obj)

    def captured_array(self, obj, node):
        """A device array named as a global (or closure variable): used in place, as
        Numba captures device arrays by reference. It becomes a hidden pointer argument
        __global_<k> that the launch fills with the array the name holds then (its
        shapes as any argument's); reads and writes go to its memory."""
        expr = ast.unparse(node)
        t = _dtype_of(np.dtype(obj.dtype))
        shape = tuple(obj.shape)
        contiguous = getattr(obj, "is_c_contiguous", lambda: True)()
        if t in (None, _MISSING) or not 1 <= len(shape) <= 3 or not contiguous:
            raise self.error(node, f"the device array {expr}: a C-contiguous 1-3 dimensional array "
                             "of a kernel type (f32, i32, u32, f64, i64, u64, u8, i8, u16, i16, b1), "
                             f"not {np.dtype(obj.dtype)} {shape}")
        where = [getattr(self.scope.pyfn, "__module__", ""), self.scope.pyfn.__name__, expr]
        for name, known in self.captured.items():
            if known == where:
                return self.hidden[name]
        name = f"__global_{len(self.captured)}"
        self.karg_offset = -(-self.karg_offset // 8) * 8
        spec = ir.ArgSpec(name, "ptr", self.karg_offset, 8, t.kind, len(shape))
        self.karg_offset += 8
        v = ir.Var(name, PtrType(t, len(shape)), -len(self.args) - 1, arg=spec)
        self.args.append(v)
        self.hidden[name] = v
        self.captured[name] = where
        return v

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
                                                self.convert(right, t, node)], node)
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
        """The type an operation on a and b computes in (the module docstring's rules)."""
        ta, tb = a.type, b.type
        if f64 in (ta, tb):
            return f64
        if f32 in (ta, tb):
            return f64 if (tb if ta == f32 else ta).wide else f32
        if allow_bool and ta == bool_ and tb == bool_:
            return bool_
        ta = i32 if ta == bool_ else ta
        tb = i32 if tb == bool_ else tb
        # a literal takes the other operand's type, unless it needs 64 bits and the
        # other has 32 (`n < 5_000_000_000` compares in i64, not in a wrapped i32)
        if isinstance(a, ir.Const) and not isinstance(b, ir.Const) and not (ta.wide and not tb.wide):
            return tb
        if isinstance(b, ir.Const) and not isinstance(a, ir.Const) and not (tb.wide and not ta.wide):
            return ta
        if ta.wide or tb.wide:
            if u64 in (ta, tb):
                return f64 if ta.signed or tb.signed else u64
            return i64
        return u32 if u32 in (ta, tb) else i32

    def convert(self, x, t, node):
        if x.type == t:
            return x
        if isinstance(x, ir.Const):
            v = x.value
            if t.is_float and x.type.is_float:
                return const(x.exact if x.exact is not None and t == f64 else v, t)
            if t.is_float:
                if not x.type.signed and v < 0:
                    v &= (1 << 8 * x.type.itemsize) - 1
                r = fold("cvt", t, [ir.Const(v, x.type)])     # i64 -> f32 rounds once
                return r if r is not None else const(float(v), t)
            if x.type.is_float:
                if pymath.isnan(v):
                    return const(0, t)
                bits = 8 * t.itemsize
                lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if t.signed else (0, (1 << bits) - 1)
                if pymath.isinf(v):
                    return const(hi if v > 0 else lo, t)
                return const(max(lo, min(hi, int(v))), t)
            return const(v, t)
        return self.op("cvt", t, [x], node)

    def fold_or_emit(self, op, t, args, node):
        if all(isinstance(a, ir.Const) for a in args):
            r = fold(op, t, args)
            if r is not None:
                return r
        return self.op(op, t, args, node)

    def binop(self, op, a, b, node):
        self.check_value(a, node)
        self.check_value(b, node)
        literal = _literal_arithmetic(op, a, b)
        if literal is not None:
            return literal
        if op == "pow":
            return self.power(a, b, node)
        if op in ("and", "or", "xor") and a.type == bool_ and b.type == bool_:
            return self.fold_or_emit(op, bool_, [a, b], node)
        if op == "div":
            t = f64 if f64 in (a.type, b.type) or a.type.wide or b.type.wide else f32
        else:
            t = self.unify(a, b)
        if op in ("and", "or", "xor", "shl", "shr") and t.is_float:
            raise self.error(node, f"bitwise operator on a float ({op})")
        if op in ("shl", "shr"):
            t = a.type if a.type != bool_ else i32
            if isinstance(a, ir.Const) and not isinstance(b, ir.Const) and not a.type.wide:
                t = i32         # (an explicit int64(1) << n stays 64-bit)
        a, b = self.convert(a, t, node), self.convert(b, t, node)
        if op in ("floordiv", "mod"):
            if t.is_float:
                q = self.fold_or_emit("floor", t, [self.fold_or_emit("div", t, [a, b], node)], node)
                if op == "floordiv":
                    return q
                return self.fold_or_emit("sub", t, [a, self.fold_or_emit("mul", t, [q, b], node)],
                                         node)
            return self.bounded(op, self.int_floordiv(op, t, a, b, node), a, b)
        return self.bounded(op, self.fold_or_emit(op, t, [a, b], node), a, b)

    def lower_bound(self, v) -> int | None:
        """A lower bound of an integer value, None if unknown (wraparound.py)."""
        if isinstance(v, ir.Const):
            return v.value if v.type.is_int else None
        if not v.type.is_int:
            return None
        if isinstance(v, ir.Special) or v.type == bool_ or not v.type.signed:
            return 0
        if v.arg is not None and v.name.startswith("__"):      # dimensions and extents
            return 0
        return self.bounds.get(v.id)

    def bounded(self, op, result, a, b):
        """`result` (= op(a, b)), its lower bound recorded."""
        if isinstance(result, ir.Var) and result.type.is_int:
            lb = wraparound.lower_bound(op, self.lower_bound(a), self.lower_bound(b),
                                        isinstance(b, ir.Const))
            if lb is not None:
                self.bounds[result.id] = lb
        return result

    def int_floordiv(self, op, t, a, b, node):
        """Python's (and Numba's) integer // and %: the quotient floors, the remainder
        has the divisor's sign; x // 0 == x % 0 == 0 (Numba's NumPy error model)."""
        if isinstance(a, ir.Const) and isinstance(b, ir.Const):
            x, y = a.value, b.value
            if not t.signed:
                x, y = x & (1 << 8 * t.itemsize) - 1, y & (1 << 8 * t.itemsize) - 1
            if y == 0:
                return const(0, t)
            return const(x // y if op == "floordiv" else x % y, t)
        if isinstance(b, ir.Const):
            y = b.value if t.signed else b.value & (1 << 8 * t.itemsize) - 1
            if y == 0:
                return const(0, t)
            if y == 1:
                return a if op == "floordiv" else const(0, t)
            if y > 0 and y & (y - 1) == 0:          # a power of two: shift and mask floor
                k = y.bit_length() - 1
                if op == "floordiv":
                    return self.fold_or_emit("shr", t, [a, const(k, t)], node)
                return self.fold_or_emit("and", t, [a, const(y - 1, t)], node)
        if not t.signed:
            r = self.op("idiv" if op == "floordiv" else "rem", t, [a, b], node)
            if isinstance(b, ir.Const):
                return r
            zero = self.op("eq", bool_, [b, const(0, t)], node)
            return self.op("select", t, [zero, const(0, t), r], node)
        q = self.op("idiv", t, [a, b], node)
        r = self.op("rem", t, [a, b], node)
        # C truncates: when the remainder is not 0 and its sign differs from the divisor's,
        # floor is one less and the remainder one divisor more
        if isinstance(b, ir.Const):
            fix = self.op("lt" if b.value > 0 else "gt", bool_, [r, const(0, t)], node)
        else:
            nonzero = self.op("ne", bool_, [r, const(0, t)], node)
            signs = self.op("xor", t, [r, b], node)
            differ = self.op("lt", bool_, [signs, const(0, t)], node)
            fix = self.op("and", bool_, [nonzero, differ], node)
        if op == "floordiv":
            out = self.op("sub", t, [q, self.convert(fix, t, node)], node)
        else:
            out = self.op("select", t, [fix, self.op("add", t, [r, b], node), r], node)
        if isinstance(b, ir.Const):
            return out
        zero = self.op("eq", bool_, [b, const(0, t)], node)
        return self.op("select", t, [zero, const(0, t), out], node)

    def power(self, a, b, node):
        """`a ** b` with Numba's rules: an integer exponent multiplies (by squaring, 1 / r
        for a negative one on floats); a float exponent is powf."""
        if a.type == bool_:
            a = self.convert(a, i32, node)
        if b.type == bool_:
            b = self.convert(b, i32, node)
        if b.type.is_int and isinstance(b, ir.Const):
            e = b.value if b.type.signed or b.type.wide else ir.wrap32(b.value, u32)
            if e >= 0 or a.type.is_float:
                result, val, n = None, a, abs(e)
                while n:
                    if n & 1:
                        result = val if result is None else self.binop("mul", result, val, node)
                    n >>= 1
                    if n:
                        val = self.binop("mul", val, val, node)
                if result is None:
                    result = const(1, a.type)
                if e < 0:
                    result = self.binop("div", const(1.0, a.type), result, node)
                return result
        # 64-bit operands take the 64-bit library routines (libdevice.py); the result
        # has the promoted type, as in Numba.
        t = self.unify(a, b)
        wide = a.type.wide or b.type.wide
        if b.type.is_int:
            if a.type.is_float:
                ft, it = (f64, i64) if a.type.wide else (f32, i32)
                return self.library("fpowi64" if a.type.wide else "fpowi",
                                    [self.convert(a, ft, node), self.convert(b, it, node)], node)
            it = i64 if wide else i32
            r = self.library("ipow64" if wide else "ipow",
                             [self.convert(a, it, node), self.convert(b, it, node)], node)
            return self.convert(r, t, node)
        if wide:
            return self.library("pow64", [self.convert(a, f64, node), self.convert(b, f64, node)],
                                node)
        return self.library("powf", [self.convert(a, f32, node), self.convert(b, f32, node)], node)

    def library(self, name, args, node):
        from . import libdevice
        return self.inline(getattr(libdevice, name), node, args, {}, {}, name)

    # -- calls -----------------------------------------------------------------------
    def call(self, node, discard):
        if isinstance(node.func, ast.Attribute) and self.is_grid_group(node.func.value):
            if node.args or node.keywords:
                raise self.error(node, f"{ast.unparse(node.func)}() takes no arguments")
            return self.grid_group(node.func.attr, node, call=True)
        fn = self.resolve(node.func)
        name = ast.unparse(node.func)
        if fn is _MISSING and isinstance(node.func, ast.Name):
            hint = _suggest(node.func.id, list(self.locals) + list(self.scope.env))
            raise self.error(node, f"call to unknown function {name!r}"
                             + (f"; did you mean {hint}?" if hint else ""))
        if fn is _MISSING:
            raise self.missing(node.func)
        if fn is None:
            raise self.error(node, f"{name!r} is not a function")
        if isinstance(fn, K.Intrinsic) and fn.name in ("shared_array", "shared.array", "local.array"):
            return self.array_decl(fn, node)
        if isinstance(fn, K.Intrinsic) and fn.name == "const.array_like":
            return self.const_array(node)
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, "unsupported construct: *unpacking")
        if isinstance(fn, linking.DeclaredDevice):
            return self.declared_call(fn, node)
        if isinstance(fn, DeviceFunction):
            args = [self.expr(a) for a in node.args]
            kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
            if None in kwargs:
                raise self.error(node, "unsupported construct: **unpacking")
            return self.inline(fn.fn, node, args, kwargs, fn.env, fn.fn.__name__)
        if isinstance(fn, JitFunction):
            raise self.error(node, f"{name} is a kernel: kernels cannot call kernels; make it a "
                             "device function (@umd.jit(device=True)) to call it")
        if fn is print:
            return self.print_call(node)
        if node.keywords:
            raise self.error(node, f"{name}(): keyword arguments are not supported")
        args = [self.expr(a) for a in node.args]

        def nargs(*n):
            if len(args) not in n:
                raise self.error(node, f"{name}() takes {' or '.join(map(str, n))} argument(s), "
                                 f"got {len(args)}")

        def values():
            for a in args:
                self.check_value(a, node)

        if isinstance(fn, K.Intrinsic):
            return self.intrinsic(fn, name, node, args, nargs, values, discard)
        if _is_cffi_from_buffer(fn):
            # Numba's FFI: cffi's ffi.from_buffer(arr) is arr's data pointer, for a
            # function declared with a CPointer(T) parameter; an array is that already
            nargs(1)
            if not (isinstance(args[0], ir.Var) and isinstance(args[0].type, PtrType)):
                raise self.error(node, f"{name}(): the argument must be an array argument of the kernel")
            return args[0]
        if isinstance(fn, ScalarType) and fn != bool_ or (_hashable(fn) and fn in _NUMPY_CASTS):
            nargs(1)
            values()
            t = fn if isinstance(fn, ScalarType) else _NUMPY_CASTS[fn]
            if t.small:
                return self.narrow(args[0], t, node)
            x = args[0] if args[0].type != bool_ else self.convert(args[0], i32, node)
            return self.convert(x, t, node)
        if isinstance(fn, type) and issubclass(fn, np.generic):
            raise self.error(node, f"{name}: {np.dtype(fn).name} is not a kernel type (np.float32, "
                             "np.int32, np.uint32, np.float64, np.int64, np.uint64, np.uint8, np.int8, np.uint16, "
                             "np.int16, np.bool_ are)")
        if fn is float or fn is int:
            nargs(1)
            values()
            return self.convert(args[0], f32 if fn is float else i32, node)
        if fn is bool:
            nargs(1)
            return self.truth(args[0], node)
        if fn is len:
            nargs(1)
            if isinstance(args[0], _Tuple):
                return ir.Const(len(args[0].items), i32)
            if _is_array(args[0]):
                return self.shape_of(args[0], 0)
            raise self.error(node, "len() of an array or a tuple")
        if fn is pow:
            nargs(2)
            return self.binop("pow", args[0], args[1], node)
        if fn is divmod:
            nargs(2)
            return _Tuple([self.binop("floordiv", args[0], args[1], node),
                           self.binop("mod", args[0], args[1], node)])
        if fn is round:
            nargs(1)
            values()
            x = args[0]
            if not x.type.is_float:
                return x
            return self.convert(self.fold_or_emit("rndne", x.type, [x], node),
                                i64 if x.type.wide else i32, node)
        if fn is np.abs or fn is np.absolute:     # NumPy's abs: Python's on a scalar
            fn = abs
        if fn is min or fn is max or fn is abs:
            values()
            if fn is abs:
                nargs(1)
                x = args[0]
                if x.type.is_float:
                    return self.fold_or_emit("fabs", x.type, [x], node)
                if x.type == bool_:
                    x = self.convert(x, i32, node)
                if not x.type.signed:
                    return x
                neg = self.fold_or_emit("neg", x.type, [x], node)
                return self.fold_or_emit("max", x.type, [x, neg], node)
            if len(args) < 2:
                raise self.error(node, f"{name}() needs at least 2 arguments")
            acc = args[0]
            for b in args[1:]:
                t = self.unify(acc, b)
                acc = self.fold_or_emit("min" if fn is min else "max", t,
                                        [self.convert(acc, t, node), self.convert(b, t, node)],
                                        node)
            return acc
        if _hashable(fn) and fn in _PY_MATH:
            return self.math(_PY_MATH[fn], name, node, args, nargs, values)
        if _hashable(fn) and (fn in _NP_MATH or fn in _NP_ARITH) and any(_is_array(a) for a in args):
            return self.array_ufunc(fn, name, node, args)
        if _hashable(fn) and fn in _NP_MATH:
            return self.math(_NP_MATH[fn], name, node, args, nargs, values)
        if _hashable(fn) and fn in _NP_ARITH:
            nargs(2)
            return self.binop(_NP_ARITH[fn], args[0], args[1], node)
        if fn is range:
            raise self.error(node, "range() is only for 'for NAME in range(...)' loops")
        if inspect.isfunction(fn) and fn.__module__ == f"{__package__}.libdevice":
            return self.inline(fn, node, args, {}, {}, fn.__name__)
        if inspect.isfunction(fn):
            raise self.error(node, f"call to plain Python function {name!r}: decorate it with "
                             "@umd.jit(device=True) to call it from a kernel")
        raise self.error(node, f"call to unsupported function {name!r}")

    def declared_call(self, decl, node):
        """A call of a umd.declare_device function: its implementation from the link
        files (linking.py) inlined, the arguments converted to the declared types."""
        if node.keywords:
            raise self.error(node, f"{decl.name}(): a declared device function takes positional "
                             "arguments")
        try:
            impl = linking.implementation(decl, self.links, self.source_file)
        except linking.LinkError as e:
            raise self.error(node, str(e)) from None
        if impl is None:
            links = list(decl.link + self.links)
            raise self.error(node, f"{decl.name} is declared with umd.declare_device({decl.name!r}, "
                             f"{decl.sig!r}) but no implementation is linked: "
                             + (f"none of link={links} defines it" if links else
                                "the kernel has no link= files (@umd.jit(link=['file.py']))")
                             + f"; define @umd.jit(device=True) def {decl.name}(...) in a linked "
                             ".py file")
        if len(node.args) != len(decl.args):
            raise self.error(node, f"{decl.name}() takes {len(decl.args)} arguments ({decl.sig}), "
                             f"got {len(node.args)}")
        args = []
        for k, (a, t) in enumerate(zip(node.args, decl.args)):
            v = self.expr(a)
            if isinstance(t, PtrType) and t.ndim == 0:     # CPointer(T): a 1-D array's data
                if not (isinstance(v, ir.Var) and isinstance(v.type, PtrType) and v.type.elem == t.elem
                        and v.type.ndim <= 1):
                    raise self.error(a, f"{decl.name}(): argument {k + 1} is CPointer({t.elem!r}) "
                                     f"({decl.sig}), given {self.what(v)}: pass a 1-D {t.elem!r} array "
                                     "argument (or ffi.from_buffer of one)")
            elif isinstance(t, PtrType):
                if not _is_array(v) or _storage(v) != t.elem or self.ndim_of(v) != t.ndim:
                    raise self.error(a, f"{decl.name}(): argument {k + 1} is {t!r} ({decl.sig}), "
                                     f"given {self.what(v)}")
            else:
                self.check_value(v, a)
                v = self.convert(v, t, a) if not t.small else self.narrow(v, t, a)
            args.append(v)
        res = self.inline(impl.fn, node, args, {}, impl.env, decl.name)
        if decl.ret is None:
            return None
        if res is None:
            raise self.error(node, f"{decl.name} is declared to return {decl.ret!r} ({decl.sig}); "
                             "its implementation returns nothing")
        self.check_value(res, node)
        return self.convert(res, decl.ret, node)

    def is_grid_group(self, node) -> bool:
        """Whether `node` is a grid group: a name bound to one, or cg.this_grid()."""
        if isinstance(node, ast.Name):
            return isinstance(self.locals.get(node.id), _GridGroup)
        return isinstance(node, ast.Call) and self.resolve(node.func) is K.cg.this_grid

    def grid_group(self, attr: str, node, call: bool):
        """g.sync(), g.size (or g.size(), g.num_threads()), g.thread_rank() of the grid
        group (CUDA's grid_group; Numba's GridGroup has sync())."""
        if attr == "sync" and call:
            self.cooperative = True
            self.emit("grid_barrier", None, [], node)
            return None
        if attr in ("size", "num_threads") and (call or attr == "size"):
            size = None
            for d in DIMS:
                v = self.binop("mul", self.dim_args[f"__block_dim_{d}"],
                               self.dim_args[f"__grid_dim_{d}"], node)
                size = v if size is None else self.binop("mul", size, v, node)
            return size
        if attr == "thread_rank" and call:
            block = self.binop("add", ir.Special("block_idx.x", i32), self.binop(
                "mul", self.dim_args["__grid_dim_x"], self.binop(
                    "add", ir.Special("block_idx.y", i32), self.binop(
                        "mul", self.dim_args["__grid_dim_y"], ir.Special("block_idx.z", i32), node),
                    node), node), node)
            bx, by = self.dim_args["__block_dim_x"], self.dim_args["__block_dim_y"]
            t = self.binop("add", ir.Special("thread_idx.x", i32), self.binop(
                "mul", bx, self.binop("add", ir.Special("thread_idx.y", i32), self.binop(
                    "mul", by, ir.Special("thread_idx.z", i32), node), node), node), node)
            per_block = self.binop("mul", self.binop("mul", bx, by, node),
                                   self.dim_args["__block_dim_z"], node)
            return self.binop("add", self.binop("mul", block, per_block, node), t, node)
        raise self.error(node, f"a grid group (umd.cg.this_grid()) has .sync(), .size and "
                         f".thread_rank(), not .{attr}{'()' if call else ''}")

    def array_ufunc(self, fn, name, node, args):
        """A NumPy ufunc on whole arrays with its output array last (`np.sin(x, out)`,
        `np.add(a, b, out)`), as Numba's kernels run it: every thread that calls it
        computes every element, a loop over the output's elements in C order; an input
        is an array of the output's shape or a number. Returns the output array."""
        binary = fn in _NP_ARITH or _NP_MATH[fn] in _UFUNC_BINARY
        nin = 2 if binary else 1
        if len(args) != nin + 1 or not _is_array(args[-1]):
            raise self.error(node, f"{name}() on arrays in a kernel takes {nin} input(s) and the "
                             "output array last, as in Numba (a kernel cannot allocate the result)")
        out, ins = args[-1], args[:-1]
        for a in args:
            if isinstance(a, (_View, _Choice)):
                raise self.error(node, f"{name}(): a row view or a rebound array name is not "
                                 "supported here; pass the array itself")
            if isinstance(a, _Tuple):
                raise self.error(node, f"{name}(): a tuple is not an array here")
            if _is_array(a) and self.ndim_of(a) != self.ndim_of(out):
                raise self.error(node, f"{name}(): {self.array_name(a)!r} has {self.ndim_of(a)} "
                                 f"dimensions, the output {self.ndim_of(out)} (no broadcasting of "
                                 "arrays here)")
        for a in ins:
            if not _is_array(a):
                self.check_value(a, node)
        size = self.array_attribute(out, "size", node)
        k = self.new_local(f"{self.scope.prefix}{name}.k{self.counter}", i32)
        self.emit("mov", k, [ir.Const(0, i32)], node)
        self.bounds[k.id] = 0
        header, saved = [], self.block
        self.block = header
        cond = self.op("lt", bool_, [k, size], node)
        self.block = []
        vals = [self.load(a, k, node) if _is_array(a) else a for a in ins]
        if fn in _NP_ARITH:
            res = self.binop(_NP_ARITH[fn], vals[0], vals[1], node)
        else:
            res = self.math(_NP_MATH[fn], name, node, vals, lambda *n: None, lambda: None)
        self.store(out, k, res, node)
        body, self.block = self.block, saved
        latch = [ir.Inst("add", k, [k, ir.Const(1, i32)], self.line(node))]
        self.block.append(ir.Loop(header, cond, body, latch, self.line(node)))
        return out

    def print_call(self, node):
        """print(...) as Numba's (compiler/prints.py): string constants, integers and
        floats, space-separated; one record appended to the launch's print buffer."""
        if node.keywords:
            raise self.error(node, "print(): keyword arguments (sep=, end=, file=) are not "
                             "supported, as in Numba")
        fmt, words = [], []
        for a in node.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                fmt.append(["s", a.value])
                continue
            if isinstance(a, ast.Starred):
                raise self.error(a, "unsupported construct: *unpacking")
            v = self.expr(a)
            if isinstance(v, _PyObject) and isinstance(v.obj, str):
                fmt.append(["s", v.obj])
                continue
            self.check_value(v, a)
            if v.type.is_float:
                kind, bits = "f", self.fold_or_emit("bitcast", u64, [self.convert(v, f64, a)], a)
            else:
                kind = "b" if v.type == bool_ else "d" if v.type.signed else "u"
                wide = self.convert(v, i64 if v.type.signed else u64, a)
                bits = self.convert(wide, u64, a)
            fmt.append([kind, ""])
            words.append(self.convert(bits, u32, node))
            words.append(self.convert(self.binop("shr", bits, ir.Const(32, u32), node), u32, node))
        self.prints.append(fmt)
        buf = self.print_buffer()
        first = self.library("print_reserve", [buf, ir.Const(prints.record_bytes(fmt), u32)], node)
        saved, self.block = self.block, []
        self.emit("store", None, [first, ir.Const(len(self.prints), u32)], node, array=buf)
        for k, w in enumerate(words, 1):
            idx = self.fold_or_emit("add", i32, [first, ir.Const(k, i32)], node)
            self.emit("store", None, [idx, w], node, array=buf)
        stores, self.block = self.block, saved
        fits = self.fold_or_emit("ge", bool_, [first, ir.Const(0, i32)], node)
        self.block.append(ir.If(fits, stores, [], self.line(node)))
        return None

    def print_buffer(self) -> ir.Var:
        """The hidden argument `__print_buf`: the launch's print buffer, seen as u32s."""
        v = self.hidden.get(prints.ARG_NAME)
        if v is None:
            self.karg_offset = -(-self.karg_offset // 8) * 8
            spec = ir.ArgSpec(prints.ARG_NAME, "ptr", self.karg_offset, 8, "u32", 0)
            self.karg_offset += 8
            v = ir.Var(prints.ARG_NAME, PtrType(u32), -len(self.args) - 1, arg=spec)
            self.args.append(v)
            self.hidden[prints.ARG_NAME] = v
        return v

    def intrinsic(self, fn, name, node, args, nargs, values, discard):
        op = fn.name
        if op == "cg.this_grid":
            nargs(0)
            return _GridGroup()
        if op == "syncthreads":
            nargs(0)
            self.emit("barrier", None, [], node)
            return None
        if op in ("syncthreads_count", "syncthreads_and", "syncthreads_or"):
            nargs(1)
            values()
            n = self.library("block_count", [self.truth(args[0], node)], node)
            if op == "syncthreads_count":
                return n
            if op == "syncthreads_or":
                return self.convert(self.fold_or_emit("ne", bool_, [n, ir.Const(0, i32)], node), i32, node)
            size = self.binop("mul", self.binop("mul", self.dim_args["__block_dim_x"],
                                                self.dim_args["__block_dim_y"], node),
                              self.dim_args["__block_dim_z"], node)
            return self.convert(self.binop("eq", n, size, node), i32, node)
        if op in ("threadfence", "threadfence_block", "threadfence_system"):
            # The engines perform each access in program order and at once (no store
            # buffer; the L2 model, when on, is one cache shared by every CU): the
            # fences order nothing more, as on a sequentially consistent machine.
            nargs(0)
            return None
        if op in ("grid", "gridsize"):
            nargs(1)
            nd = args[0]
            if not (isinstance(nd, ir.Const) and nd.type.is_int and 1 <= nd.value <= 3):
                raise self.error(node, f"umd.{op}(ndim): ndim must be 1, 2 or 3 (a constant)")
            out = []
            for d in DIMS[:nd.value]:
                if op == "grid":
                    v = self.binop("add", self.binop("mul", ir.Special(f"block_idx.{d}", i32),
                                                     self.dim_args[f"__block_dim_{d}"], node),
                                   ir.Special(f"thread_idx.{d}", i32), node)
                else:
                    v = self.binop("mul", self.dim_args[f"__block_dim_{d}"],
                                   self.dim_args[f"__grid_dim_{d}"], node)
                out.append(v)
            return out[0] if len(out) == 1 else _Tuple(out)
        if op.startswith("atomic."):
            return self.atomic(op[7:], fn.qualname, node, args, discard)
        if op in ("bits", "bits64"):
            nargs(1)
            values()
            ft, it = (f64, u64) if op == "bits64" else (f32, u32)
            return self.fold_or_emit("bitcast", it, [self.convert(args[0], ft, node)], node)
        if op in ("from_bits", "from_bits64"):
            nargs(1)
            values()
            ft, it = (f64, u64) if op == "from_bits64" else (f32, u32)
            x = args[0] if args[0].type != bool_ else self.convert(args[0], it, node)
            return self.fold_or_emit("bitcast", ft, [self.convert(x, it, node)], node)
        if op == "selp":            # Numba's cuda.selp(pred, a, b)
            nargs(3)
            values()
            t = self.unify(args[1], args[2])
            return self.fold_or_emit("select", t, [self.truth(args[0], node),
                                                   self.convert(args[1], t, node),
                                                   self.convert(args[2], t, node)], node)
        if op.startswith("math."):
            return self.math(op[5:], name, node, args, nargs, values)
        if op.startswith("warp."):
            return self.warp(op[5:], node, args, nargs, values)
        if op.startswith("bit."):
            nargs(1)
            values()
            x = args[0]
            if not x.type.is_int or x.type.wide:
                raise self.error(node, f"{name}() needs an integer (i32 or u32), not {x.type!r}")
            return self.op(op[4:], x.type if op == "bit.brev" else i32, [x], node)
        raise self.error(node, f"call to unsupported function {name!r}")

    def warp(self, kind, node, args, nargs, values):
        """The warp intrinsics over one wave (docs/umd-compiler.md 3.9).  The mask of
        the _sync forms selects the lanes ballot/any/all count; the wave runs in
        lockstep, so nothing waits for it and syncwarp is nothing."""
        if kind == "syncwarp":
            nargs(0, 1)
            values()
            return None
        if kind == "activemask":
            nargs(0)
            return self.op("activemask", u32, [], node)
        if kind == "lanemask_lt":
            nargs(0)
            below = self.binop("shl", const(1, u32), self.convert(self.laneid(node), u32, node), node)
            return self.binop("sub", below, const(1, u32), node)
        if kind in ("match_any_sync", "match_all_sync"):
            # compared as bits, 32 or 64 of them, as CUDA's __match_*_sync
            nargs(2)
            values()
            v = args[1]
            if v.type.is_float:
                v = self.fold_or_emit("bitcast", u64 if v.type.wide else u32, [v], node)
            elif v.type == bool_:
                v = self.convert(v, i32, node)
            mask = self.convert(args[0], u32, node)
            if kind == "match_any_sync":
                return self.library("match_any", [mask, v], node)
            return _Tuple(list(self.library("match_all", [mask, v], node).items))
        if kind in ("ballot_sync", "any_sync", "all_sync"):
            nargs(2)
            values()
            mask = self.convert(args[0], u32, node)
            voted = self.binop("and", self.op("ballot", u32, [self.truth(args[1], node)], node),
                               mask, node)
            if kind == "ballot_sync":
                return voted
            if kind == "any_sync":
                return self.fold_or_emit("ne", bool_, [voted, const(0, u32)], node)
            active = self.binop("and", self.op("activemask", u32, [], node), mask, node)
            return self.fold_or_emit("eq", bool_, [voted, active], node)
        nargs(3)
        values()
        value = args[1] if args[1].type != bool_ else self.convert(args[1], i32, node)
        other = self.convert(args[2], i32, node)
        if kind == "shfl_sync":         # the lane number modulo warpsize, as CUDA's
            src = self.binop("and", other, const(WAVE_SIZE - 1, i32), node)
        else:
            # up/down/xor: a source lane outside the wave gives the caller's own value.
            lane = self.laneid(node)
            op = {"shfl_up_sync": "sub", "shfl_down_sync": "add", "shfl_xor_sync": "xor"}[kind]
            src = self.binop(op, lane, other, node)
            inside = self.fold_or_emit("lt", bool_, [self.convert(src, u32, node),
                                                     const(WAVE_SIZE, u32)], node)
            src = self.fold_or_emit("select", i32, [inside, src, lane], node)
        address = self.binop("shl", src, const(2, i32), node)
        return self.op("shfl", value.type, [address, value], node)

    def laneid(self, node):
        return self.op("laneid", i32, [], node)

    def math(self, mname, name, node, args, nargs, values):
        """umd.math.X and Python's math.X (the `i` forms return integers, as Python's
        math.floor/ceil/trunc do)."""
        binary = mname in ("fmin", "fmax", "pow", "copysign", "atan2", "hypot", "fmod", "ldexp")
        nargs(3 if mname == "fma" else 2 if binary else 1)
        values()
        if mname in ("frexp", "ldexp"):
            return self.frexp_ldexp(mname, node, args)
        if mname in ("isnan", "isinf", "isfinite"):
            x = args[0]
            if not x.type.is_float:
                return ir.Const(int(mname == "isfinite"), bool_)
            if mname == "isnan":
                return self.fold_or_emit("ne", bool_, [x, x], node)
            ax = self.fold_or_emit("fabs", x.type, [x], node)
            return self.fold_or_emit("eq" if mname == "isinf" else "lt", bool_,
                                     [ax, const(pymath.inf, x.type)], node)
        if mname in ("ifloor", "iceil", "itrunc"):
            x = args[0]
            if not x.type.is_float:
                return x if x.type != bool_ else self.convert(x, i32, node)
            # Numba: math.floor of a float64 is an int64; of a float32 here an i32
            return self.convert(self.fold_or_emit(mname[1:], x.type, [x], node),
                                i64 if x.type.wide else i32, node)
        if mname in ("radians", "degrees"):
            x = args[0] if args[0].type.is_float else self.convert(args[0], f64, node)
            k = pymath.pi / 180.0 if mname == "radians" else 180.0 / pymath.pi
            return self.fold_or_emit("mul", x.type, [x, const(k, x.type)], node)
        if any(a.type.wide for a in args):
            return self.math_f64(mname, node, args)
        if mname in self._VIA_F64:
            # float32 in, float32 out, computed by the float64 routine and rounded once
            # more: within about half an f32 ulp of the exact value
            r = self.library(self._F64_LIBRARY[mname], [self.convert(a, f64, node) for a in args],
                             node)
            return self.convert(r, f32, node)
        xs = [self.convert(a, f32, node) for a in args]
        if mname == "pow":
            return self.library("powf", xs, node)
        if mname == "copysign":
            mag = self.fold_or_emit("and", u32, [self.fold_or_emit("bitcast", u32, [xs[0]], node),
                                                 const(0x7FFFFFFF, u32)], node)
            sign = self.fold_or_emit("and", u32, [self.fold_or_emit("bitcast", u32, [xs[1]], node),
                                                  const(0x80000000, u32)], node)
            return self.fold_or_emit("bitcast", f32, [self.fold_or_emit("or", u32, [mag, sign], node)],
                                     node)
        if mname == "log10":
            l2 = self.fold_or_emit("log2", f32, xs, node)
            return self.fold_or_emit("mul", f32, [l2, const(pymath.log10(2.0), f32)], node)
        op = {"fmin": "min", "fmax": "max"}.get(mname, mname)
        return self.fold_or_emit(op, f32, xs, node)

    # float64 operations the vISA has (docs/isa.md 4.8); the transcendentals are the
    # library's float64 routines (libdevice.py), as in ROCm's device library.
    _F64_NATIVE = {"sqrt", "floor", "ceil", "trunc", "rndne", "fabs", "fmin", "fmax", "fma"}
    _F64_LIBRARY = {"exp": "exp64", "exp2": "exp2_64", "log": "log64", "log2": "log2_64",
                    "log10": "log10_64", "sin": "sin64", "cos": "cos64", "tanh": "tanh64",
                    "pow": "pow64", "tan": "tan64", "atan": "atan64", "atan2": "atan2_64",
                    "asin": "asin64", "acos": "acos64", "sinh": "sinh64", "cosh": "cosh64",
                    "asinh": "asinh64", "acosh": "acosh64", "atanh": "atanh64",
                    "hypot": "hypot64", "expm1": "expm1_64", "log1p": "log1p64", "erf": "erf64",
                    "erfc": "erfc64", "gamma": "gamma64", "lgamma": "lgamma64", "fmod": "fmod64",
                    "cbrt": "cbrt64"}
    # the functions the vISA has no float32 instruction for
    _VIA_F64 = {"tan", "atan", "atan2", "asin", "acos", "sinh", "cosh", "asinh", "acosh",
                "atanh", "hypot", "expm1", "log1p", "erf", "erfc", "gamma", "lgamma", "fmod",
                "cbrt"}

    def frexp_ldexp(self, mname, node, args):
        """math.frexp(x) -> (m, e) and math.ldexp(x, e), on f32 and f64 (an integer x
        as f64, as Python's): the float64 routines, whose f32 results are exact."""
        x = args[0]
        t = x.type if x.type.is_float else f64
        x64 = self.convert(x, f64, node)
        if mname == "ldexp":
            if not args[1].type.is_int:
                raise self.error(node, f"math.ldexp(x, i): i must be an integer, not {args[1].type!r}")
            e = args[1]
            if e.type.wide:             # clamp before the 32-bit routine sees it
                e = self.fold_or_emit("min", e.type, [e, ir.Const(1 << 20, e.type)], node)
                if e.type.signed:
                    e = self.fold_or_emit("max", e.type, [e, ir.Const(-(1 << 20), e.type)], node)
            r = self.library("ldexp64", [x64, self.convert(e, i32, node)], node)
            return self.convert(r, t, node)
        m, e = self.library("frexp64", [x64], node).items
        return _Tuple([self.convert(m, t, node), e])

    def math_f64(self, mname, node, args):
        """A math function with a 64-bit operand: the result is f64."""
        xs = [self.convert(a, f64, node) for a in args]
        if mname in self._F64_NATIVE:
            op = {"fmin": "min", "fmax": "max"}.get(mname, mname)
            return self.fold_or_emit(op, f64, xs, node)
        if mname == "copysign":
            mag = self.fold_or_emit("and", u64, [self.fold_or_emit("bitcast", u64, [xs[0]], node),
                                                 const(0x7FFFFFFFFFFFFFFF, u64)], node)
            sign = self.fold_or_emit("and", u64, [self.fold_or_emit("bitcast", u64, [xs[1]], node),
                                                  const(1 << 63, u64)], node)
            return self.fold_or_emit("bitcast", f64, [self.fold_or_emit("or", u64, [mag, sign], node)],
                                     node)
        if mname == "rsqrt":
            return self.fold_or_emit("div", f64, [const(1.0, f64),
                                                  self.fold_or_emit("sqrt", f64, xs, node)], node)
        if mname not in self._F64_LIBRARY:
            raise self.error(node, f"math.{mname} has no float64 version")
        return self.library(self._F64_LIBRARY[mname], xs, node)

    def const_array(self, node):
        """umd.const.array_like(ARR) (Numba's cuda.const.array_like): ARR, a numpy
        array the kernel's module or closure defines, frozen into the kernel when it is
        compiled, as CUDA's constant memory. It becomes a hidden pointer argument,
        __const_<k>, to a read-only copy umd.launch uploads once per device; indexing
        it is a load, with its shape known at compile time."""
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, "umd.const.array_like() takes one numpy array")
        obj = self.resolve(node.args[0])
        if not isinstance(obj, np.ndarray):
            raise self.error(node, "umd.const.array_like() takes a numpy array defined outside "
                             f"the kernel (a global or closure variable), not {ast.unparse(node.args[0])}")
        return self.frozen_array(obj, node, "umd.const.array_like()")

    def frozen_array(self, obj: np.ndarray, node, what: str):
        """The hidden argument of a numpy array frozen into the kernel (const_array)."""
        t = _dtype_of(obj.dtype)
        if t in (None, _MISSING) or not 1 <= obj.ndim <= 3 or obj.size == 0:
            raise self.error(node, f"{what}: a 1-3 dimensional, non-empty array of "
                             f"a kernel type (f32, i32, u32, f64, i64, u64, u8, i8, u16, i16, b1), not {obj.dtype} "
                             f"{obj.shape}")
        data = np.ascontiguousarray(obj).tobytes()
        for name, (dt, shape, raw) in self.consts.items():      # the same array twice: one copy
            if dt == t.kind and shape == obj.shape and raw == data:
                return self.hidden[name]
        name = f"__const_{len(self.consts)}"
        self.karg_offset = -(-self.karg_offset // 8) * 8
        spec = ir.ArgSpec(name, "ptr", self.karg_offset, 8, t.kind, obj.ndim)
        self.karg_offset += 8
        v = ir.Var(name, PtrType(t, obj.ndim), -len(self.args) - 1, arg=spec)
        self.args.append(v)
        self.hidden[name] = v
        self.consts[name] = (t.kind, tuple(obj.shape), data)
        return v

    def array_decl(self, fn, node):
        """shared_array(dtype, shape), shared.array(shape, dtype), local.array(shape, dtype);
        each also with keywords shape= and dtype=."""
        order = ("dtype", "shape") if fn.name == "shared_array" else ("shape", "dtype")
        if len(node.args) > 2:
            raise self.error(node, f"{fn.qualname}() takes shape and dtype")
        given = dict(zip(order, node.args))
        for k in node.keywords:
            if k.arg not in order or k.arg in given:
                raise self.error(node, f"{fn.qualname}(): unexpected argument {k.arg!r}")
            given[k.arg] = k.value
        if set(given) != set(order):
            raise self.error(node, f"{fn.qualname}() needs a shape and a dtype")
        obj = self.resolve(given["dtype"])
        t = _dtype_of(obj) if obj not in (None, _MISSING) else None
        if t is None or t is _MISSING:
            raise self.error(node, f"{fn.qualname}: the dtype must be f32, i32, u32, f64, i64, u64, u8, i8, u16, i16 or b1 "
                             f"(or np.float32, np.float64...), not {ast.unparse(given['dtype'])}")
        shape = self.expr(given["shape"])
        dims = shape.items if isinstance(shape, _Tuple) else [shape]
        if fn.name != "local.array" and len(dims) == 1 and isinstance(dims[0], ir.Const) \
                and dims[0].type.is_int and dims[0].value == 0:
            return self.dynamic_shared(fn, t, node)
        if not dims or not all(isinstance(d, ir.Const) and d.type.is_int and d.value > 0 for d in dims):
            raise self.error(node, f"{fn.qualname}: the shape must be positive integer constants")
        shape = [int(d.value) for d in dims]
        count = int(np.prod(shape))
        if fn.name == "local.array":
            if count > MAX_LOCAL_ELEMENTS:
                raise self.error(node, f"a local array of {count} elements: local arrays live in "
                                 f"registers here, at most {MAX_LOCAL_ELEMENTS} elements")
            self.locals_made += 1
            base = f"{self.scope.prefix}local{self.locals_made}"
            r = t.register
            arr = LocalArray(base, r, shape, [self.new_local(f"{base}[{k}]", r) for k in range(count)], t)
            self.local_arrays[base] = arr
            for v in arr.vars:                          # zeroed (Numba leaves them undefined)
                self.emit("mov", v, [const(0, r)], node)
            return arr
        storage, t = t, t.register          # small elements: one LDS word each, widened
        self.lds = -(-self.lds // t.itemsize) * t.itemsize         # aligned for its element
        sa = ir.SharedArray(f"lds{len(self.shared)}", t, count, self.lds, storage)
        sa.shape = shape
        self.lds += t.itemsize * count
        if self.lds > 65536:
            raise self.error(node, f"shared arrays need {self.lds} bytes of LDS (at most 65536)")
        self.shared.append(sa)
        return sa

    def dynamic_shared(self, fn, t, node):
        """`shared.array(0, T)`: CUDA's `extern __shared__` array, sized by the launch's
        fourth element (`k[grid, block, stream, sharedmem]`, bytes); every one of a
        kernel is the same region, as in CUDA (docs/umd-compiler.md 3.2)."""
        if t.small:
            raise self.error(node, f"{fn.qualname}(0, {t!r}): a dynamic shared array of {t!r} is "
                             "not supported (small elements take a 32-bit LDS word each here); "
                             "use an i32 or u32 array")
        sa = ir.SharedArray(f"dyn{len(self.dynamic)}", t, 0, 0)
        sa.shape = [None]
        sa.dynamic = True
        sa.extent = self.dynamic_extent(t, node)
        self.shared.append(sa)
        self.dynamic.append(sa)
        return sa

    def atomic(self, kind, qualname, node, args, discard):
        if kind not in ATOMIC_TYPES:
            raise self.error(node, f"{qualname} is not supported")
        cas = kind in ("cas", "compare_and_swap")
        n = 3 if kind == "compare_and_swap" else 4 if cas else 3
        what = ("array, old, value" if kind == "compare_and_swap" else
                "array, index, old, value" if cas else "array, index, value")
        if len(args) != n:
            raise self.error(node, f"{qualname}() takes {n} arguments: {what}")
        arr = args[0]
        if isinstance(arr, _View) and kind != "compare_and_swap":      # a row: index the array
            index = args[1]
            base, parts = self.view_parts(arr, index.items if isinstance(index, _Tuple) else [index], node)
            arr, args = base, [base, _Tuple(parts)] + list(args[2:])
        if not (isinstance(arr, ir.SharedArray) or (isinstance(arr, ir.Var) and isinstance(arr.type, PtrType))):
            raise self.error(node, f"{qualname}(): the first argument must be an array argument or a "
                             "shared array")
        if isinstance(arr, ir.Var) and arr.name in self.consts:
            raise self.error(node, "a constant array (umd.const.array_like, or a global numpy "
                             "array, which kernels capture as a constant as Numba does) is read-only: "
                             "pass the array as an argument, or make it a device array "
                             "(umd.to_device) to write to it")
        elem = _elem(arr)
        if _storage(arr).small:
            raise self.error(node, f"{qualname} on {_storage(arr)!r}: the vISA, as CUDA, has no 8- or "
                             "16-bit atomics; use an i32 or u32 array")
        if elem not in ATOMIC_TYPES[kind]:
            raise self.error(node, f"{qualname} on {elem!r}: supported on "
                             + ", ".join(repr(t) for t in ATOMIC_TYPES[kind]) + " arrays (as in Numba)")
        lds = isinstance(arr, ir.SharedArray)
        if lds and elem.wide:
            raise self.error(node, f"{qualname} on a shared array of {elem!r}: the vISA has no 64-bit "
                             "LDS atomics; use a global array")
        if kind in _CAS_LOOP_ATOMICS:
            self.check_value(args[2], node)
            value = self.convert(args[2], elem, node)
            return self.library("atomic_update", [arr, args[1], value,
                                                  ir.Const(_CAS_LOOP_ATOMICS[kind], i32)], node)
        if kind == "compare_and_swap":
            idx, vals = ir.Const(0, i32), args[1:]
        else:
            index = args[1]
            parts = index.items if isinstance(index, _Tuple) else [index]
            idx, vals = self.flat_index(arr, parts, node), args[2:]
        converted = []
        for a in vals:
            self.check_value(a, node)
            converted.append(self.convert(a, elem, node))
        isa_kind = _ISA_ATOMIC[kind]
        if kind == "sub" and lds and elem != f32:
            isa_kind = "sub"                            # ds_sub_u32 (global: add of -value)
        elif kind == "sub":
            converted = [self.fold_or_emit("neg", elem, converted, node)]
        dst = None if discard else self.temp(elem)
        self.emit("atomic", dst, [idx] + converted, node, array=arr, kind=isa_kind)
        return dst

    # -- device functions --------------------------------------------------------------
    def inline(self, pyfn, node, args, kwargs, env_extra, name):
        """Lower a device function's body into a Region where it is called; its value
        is the variable its returns assign."""
        if pyfn in self.inline_stack:
            raise self.error(node, f"recursive device function {name!r}: device functions are "
                             "inlined (there is no call stack), so they cannot call themselves")
        if len(self.inline_stack) >= MAX_INLINE_DEPTH:
            raise self.error(node, f"device functions nested more than {MAX_INLINE_DEPTH} deep")
        src = _source_of(pyfn)
        fdef = src.node
        p = fdef.args
        if p.vararg or p.kwarg or p.kwonlyargs or p.posonlyargs:
            raise self.error(node, f"device function {name}: only plain positional parameters "
                             "(with defaults) are supported")
        names = [a.arg for a in p.args]
        if len(args) > len(names):
            raise self.error(node, f"{name}() takes {len(names)} arguments, got {len(args)}")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in bound:
                raise self.error(node, f"{name}(): unexpected argument {k!r}")
            bound[k] = v
        defaults = pyfn.__defaults__ or ()
        for k, d in zip(names[len(names) - len(defaults):], defaults):
            if k not in bound:
                bound[k] = self.python_value(d, node)
        missing = [k for k in names if k not in bound]
        if missing:
            raise self.error(node, f"{name}() missing arguments {missing}")
        self.inlines += 1
        prefix = f"{fdef.name}#{self.inlines}."
        line = self.line(node)
        region = ir.Region([], line, name=prefix[:-1])
        scope = Scope(pyfn, fdef.name, src, _environment(pyfn, env_extra), prefix=prefix,
                      region=region, call_line=line, caller=self.scope)
        caller, self.scope = self.scope, scope
        saved, self.block = self.block, region.body
        self.inline_stack.append(pyfn)
        try:
            scope.annotations = self.annotations(pyfn, scope)
            self.rewrite_loops(fdef)
            scope.stores = wraparound.store_counts(fdef)
            ret = scope.annotations.get("return")
            if ret is not None:
                if not isinstance(ret, ScalarType) or ret == bool_:
                    raise self.error(fdef, f"device function {name}: the return annotation must be "
                                     "i32, u32 or f32")
                scope.ret_type = ret
            for a in p.args:
                self.bind_parameter(a, bound[a.arg], node)
            self.statements(self.body_of(fdef))
        finally:
            self.inline_stack.pop()
            self.block = saved
            self.scope = caller
        self.block.append(region)
        return scope.result

    def bind_parameter(self, p, value, node) -> None:
        t = self.arg_type(self.scope, p)
        if isinstance(value, _GridGroup):          # a grid group passed to a device function
            self.locals[p.arg] = value
            return
        if _is_array(value):
            if t is not None and not (isinstance(t, PtrType) and t.elem == _elem(value)):
                raise self.error(p, f"parameter {p.arg!r} is {t!r}, given an array of "
                                 f"{_elem(value)!r}")
            self.locals[p.arg] = value
            return
        if isinstance(value, _Tuple):
            if t is not None:
                raise self.error(p, f"parameter {p.arg!r} is {t!r}, given a tuple")
            self.locals[p.arg] = value
            return
        if isinstance(t, PtrType):
            raise self.error(p, f"parameter {p.arg!r} is {t!r}, given a number")
        self.check_value(value, p)
        var = self.local_for(p.arg, t or value.type, p)
        self.assign_var(var, value, p)


def lower(pyfn, extra_env: dict | None = None, links: tuple = ()) -> ir.Function:
    """Lower a Python function to IR, re-running when a variable must widen (an
    integer to f32...) or may be negative after all (wraparound.py)."""
    declared: dict[str, ScalarType] = {}
    unbounded: set[str] = set()
    rebound: dict[str, list] = {}
    for _ in range(256):
        try:
            return FunctionLowering(pyfn, declared, extra_env, unbounded, rebound, links).lower()
        except _Widen as w:
            declared[w.name] = w.type
        except _Unbounded as u:
            unbounded.add(u.name)
        except _Rebind as r:
            rebound[r.name] = r.keys
    raise KernelCompileError(f"{pyfn.__name__}: variable types do not settle")
