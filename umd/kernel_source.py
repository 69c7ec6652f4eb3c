"""Kernels umd writes itself (umd.reduce, umd.vectorize, umd.guvectorize): Python
source made for one element type and one user function, then compiled as any
@umd.jit kernel.

The compiler reads a kernel's source with `inspect` (umd/compiler/frontend.py), so
the generated text is registered in `linecache` under a file name of its own
(`<umd.reduce add f32 1a2b3c4d>`: the function, the types and a hash of the text,
so two texts never share a name); fault reports and VGPU_DEBUG=shaders show it too.
The disk cache keys it by that text and by the user's function's source, as it keys
any kernel.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import sys
import textwrap

import numpy as np

from .compiler.functions import DeviceFunction, JitFunction

#: numpy dtype name -> the kernel language's type name (docs/umd-compiler.md 2).
KERNEL_TYPES = {"float32": "f32", "float64": "f64", "int32": "i32", "uint32": "u32",
                "int64": "i64", "uint64": "u64", "uint8": "u8", "int8": "i8", "uint16": "u16",
                "int16": "i16", "bool": "b1"}
#: the element types a kernel computes in (the small ones are memory-only types).
SCALAR_TYPES = ("f32", "f64", "i32", "u32", "i64", "u64")


def kernel_type(dtype, what: str) -> str:
    """The kernel type name of numpy ``dtype``; TypeError naming ``what`` for a
    dtype kernels have no type for."""
    name = np.dtype(dtype).name
    if name not in KERNEL_TYPES:
        raise TypeError(f"{what}: no kernel type for {name} (kernels take "
                        f"{', '.join(KERNEL_TYPES)})")
    return KERNEL_TYPES[name]


def define(source: str, name: str, tag: str, namespace: dict):
    """Execute ``source`` (one ``def name``) in a copy of ``namespace`` with its text
    registered for `inspect`; returns the function."""
    source = textwrap.dedent(source)
    digest = hashlib.sha256(source.encode()).hexdigest()[:8]
    filename = f"<{tag} {digest}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    scope = dict(namespace)
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def device_function(fn, what: str) -> DeviceFunction:
    """``fn`` as a device function: a @umd.jit(device=True) one as it is, a plain
    function wrapped, a lambda rewritten as the ``def`` it stands for (the compiler
    reads ``def``s). A kernel is a TypeError."""
    if isinstance(fn, DeviceFunction):
        return fn
    if isinstance(fn, JitFunction):
        raise TypeError(f"{what} takes a function or a device function, not the kernel {fn!r}")
    if not inspect.isfunction(fn):
        raise TypeError(f"{what} takes a Python function, not {fn!r}")
    env = {}
    if fn.__closure__:
        env = {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)}
    if fn.__name__ == "<lambda>":
        fn = _lambda_as_def(fn, what)
    return DeviceFunction(fn, {"device": True}, env)


def _lambda_as_def(fn, what: str):
    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise TypeError(f"{what}: cannot read the source of {fn!r} ({e}); use a def") from None
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError:                         # a lambda inside a continued expression
        tree = ast.parse("(" + text.strip().rstrip(",") + ")")
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
               and len(n.args.args) == fn.__code__.co_argcount]
    if len(lambdas) != 1:
        raise TypeError(f"{what}: cannot tell {fn!r} from the other lambdas on its line; use a def")
    node = lambdas[0]
    source = f"def lambda_fn({ast.unparse(node.args)}):\n    return {ast.unparse(node.body)}\n"
    return define(source, "lambda_fn", f"umd lambda {fn.__code__.co_filename}:{fn.__code__.co_firstlineno}",
                  fn.__globals__)


def inline_expression(fn: DeviceFunction, args: list[str], taken: set[str]) -> str | None:
    """``fn(*args)`` as one expression when ``fn`` is ``return EXPR`` alone (a lambda, or
    a one-line def): EXPR with each parameter replaced by its argument (plain names, so
    nothing is evaluated twice). None when fn is anything else, or when EXPR names one
    of ``taken`` (the generated kernel's own variables) other than a parameter.

    Why: the compiler copies each argument into the inlined function's parameters and
    its result out (three v_mov per call of a two-argument function), which in a
    reduction's inner loop is most of the work; an expression has no parameters."""
    try:
        node = _parse_def(fn.fn)
    except (OSError, TypeError, SyntaxError):
        return None
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    a = node.args
    if (len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None
            or a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs
            or len(a.args) != len(args)):
        return None
    params = [p.arg for p in a.args]
    expr = body[0].value
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    if (names - set(params)) & (taken | set(args)) or any(
            isinstance(n, (ast.Lambda, ast.NamedExpr, ast.comprehension)) for n in ast.walk(expr)):
        return None
    mapping = dict(zip(params, args))

    class Rename(ast.NodeTransformer):
        def visit_Name(self, n):
            return ast.copy_location(ast.Name(mapping.get(n.id, n.id), n.ctx), n)
    return "(" + ast.unparse(Rename().visit(expr)) + ")"


def _parse_def(pyfn):
    lines, _ = inspect.getsourcelines(pyfn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef))


#: built-ins the generated kernels call themselves
KERNEL_BUILTINS = ("range", "min", "max")


def kernel_globals(fn: DeviceFunction) -> dict:
    """The globals of a generated kernel that calls or inlines `fn`: the function's own
    names (function_namespace), then ``umd`` (the generated source spells the
    intrinsics ``umd.grid(1)`` as a user's kernel does), the types and ``fn``. The
    package is taken from sys.modules, where it is by the time a submodule runs: an
    ``import umd`` here would make the package and its helpers import each other."""
    package = sys.modules[__package__]
    return {**function_namespace(fn), "umd": package, "fn": fn,
            **{k: getattr(package.types, k) for k in package.types.__all__}}


def function_namespace(fn: DeviceFunction) -> dict:
    """The names the function's own expression sees (its globals, decorating frame and
    closure), for a kernel that inlines it; without a name of KERNEL_BUILTINS that it
    rebinds (see :func:`shadowed_builtins`)."""
    ns = dict(fn.fn.__globals__)
    ns.update(fn.env)
    if fn.fn.__closure__:
        for name, cell in zip(fn.fn.__code__.co_freevars, fn.fn.__closure__):
            try:
                ns[name] = cell.cell_contents
            except ValueError:
                pass
    for name in shadowed_builtins(fn):
        del ns[name]
    return ns


def shadowed_builtins(fn: DeviceFunction) -> set[str]:
    """The names of KERNEL_BUILTINS the function's module or closure rebinds: an
    expression naming one is not inlined (the kernel's own calls need the built-in)."""
    import builtins
    ns = {**fn.fn.__globals__, **fn.env}
    if fn.fn.__closure__:
        ns.update(zip(fn.fn.__code__.co_freevars, (c.cell_contents for c in fn.fn.__closure__)))
    return {n for n in KERNEL_BUILTINS if n in ns and ns[n] is not getattr(builtins, n)}


#: calls an expression may make and still be unrolled (they compile to one or two instructions)
_CHEAP_CALLS = {"min", "max", "abs"}


def cheap_expression(expr: str | None) -> bool:
    """Whether an inlined expression is cheap to unroll: arithmetic, compares and
    min/max/abs only. Anything that calls more (math.exp on float64 is 40-90
    instructions and their temporaries) is not unrolled: eight copies of it would run
    out of registers (the allocator does not spill)."""
    if expr is None:
        return False
    calls = [n for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Call)]
    return all(isinstance(c.func, ast.Name) and c.func.id in _CHEAP_CALLS for c in calls)


def offset_views(arr, step: int, count: int) -> list:
    """``count`` views of the 1-D ``arr`` that start 1, 2... ``step`` elements in, for a
    generated kernel's unrolled accesses (reduce, vectorize). A DeviceArray's are device
    addresses into its memory (the kernel's Ptr arguments): the launch packs a plain
    address for nothing, where each view array cost it an array's checks (together most
    of a small reduction's host time), and ``arr`` itself, passed beside them, carries
    the buffer to the launch. A numpy array's (the executors' tests) are views."""
    from .array import DeviceArray
    if isinstance(arr, DeviceArray):
        at, bytes_step = arr.ptr, step * arr.dtype.itemsize
        return [at + u * bytes_step for u in range(1, count + 1)]
    return [arr[u * step:] for u in range(1, count + 1)]
