"""`for` over arrays, enumerate() and zip(), as Numba's nopython mode iterates them,
rewritten on the function's syntax tree into the range() loop the frontend lowers.

    for TARGET in ITER:
        BODY

becomes

    __umd_seq<k>_<j> = ARRAY            # each array evaluated once, before the loop
    for __umd_it<k> in __umd_range(LENGTH):
        TARGET = ELEMENT
        BODY

where an array yields its elements along its first axis (a 1-D array its values, a 2-D
one its row views, as Numba's array iterator does), ``enumerate(I, start=0)`` yields
``(start + k, element of I)``, ``zip(I, J, ...)`` the tuple of the elements and stops
at the shortest. LENGTH is ``len()`` of the array (the ``min`` of zip's). A loop over
``range()`` or over another call's result, and a ``for ... else``, are left as they are
(the frontend lowers range() and reports the rest); ``range()`` inside enumerate/zip is
``Unsupported``.

The rewrite runs before the frontend counts each name's assignments, so the hidden
counter is one ``for`` target with a lower bound of 0: element reads need no
negative-index test. The builtins it calls are looked up under hidden names
(``NAMES``), so a kernel that shadows ``len`` or ``range`` does not change it.
"""
from __future__ import annotations

import ast
import builtins

NAMES = {"__umd_len": builtins.len, "__umd_min": builtins.min, "__umd_range": builtins.range}


class Unsupported(Exception):
    """An iteration the rewrite cannot express; ``node`` is where it is."""

    def __init__(self, node: ast.AST, msg: str) -> None:
        super().__init__(msg)
        self.node = node


def rewrite_loops(fdef: ast.FunctionDef, env: dict) -> None:
    """Rewrite, in place, every ``for`` of ``fdef`` that iterates something other than
    ``range()`` (``env`` says what ``range``, ``enumerate`` and ``zip`` name there)."""
    _Rewriter(env).visit(fdef)


def _call_of(node: ast.AST, env: dict, fn) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        env.get(node.func.id) is fn


def _name(ident: str, ctx=ast.Load) -> ast.Name:
    return ast.Name(id=ident, ctx=ctx())


def _call(fn: str, args: list) -> ast.Call:
    return ast.Call(func=_name(fn), args=args, keywords=[])


class _Rewriter(ast.NodeTransformer):
    def __init__(self, env: dict) -> None:
        self.env = env
        self.loops = 0

    def visit_For(self, node: ast.For):
        self.generic_visit(node)                    # inner loops first
        it = node.iter
        if node.orelse or isinstance(it, ast.Call) and not (
                _call_of(it, self.env, builtins.enumerate) or _call_of(it, self.env, builtins.zip)):
            return node                             # range(), or the frontend's error
        k = self.loops
        self.loops += 1
        counter = f"__umd_it{k}"
        hoisted: list[ast.stmt] = []
        lengths: list[ast.expr] = []
        element = self.element(node.iter, counter, k, hoisted, lengths)
        length = lengths[0] if len(lengths) == 1 else _call("__umd_min", lengths)
        target = ast.Assign(targets=[node.target], value=element)
        loop = ast.For(target=_name(counter, ast.Store), iter=_call("__umd_range", [length]),
                       body=[target, *node.body], orelse=[], type_comment=None)
        out = [*hoisted, loop]
        for n in (*out, target):                    # errors point at the `for` line
            ast.copy_location(n, node)
        return [ast.fix_missing_locations(n) for n in out]

    def element(self, it: ast.expr, counter: str, k: int, hoisted: list, lengths: list) -> ast.expr:
        """The expression of ``it``'s element number ``counter``; the arrays it reads go
        to ``hoisted`` (assigned once, before the loop), their lengths to ``lengths``."""
        if _call_of(it, self.env, builtins.enumerate):
            args = list(it.args)
            start = next((kw.value for kw in it.keywords if kw.arg == "start"), None)
            if len(args) == 2 and start is None:
                start = args.pop()
            if len(args) != 1 or any(kw.arg != "start" for kw in it.keywords):
                raise Unsupported(it, "enumerate() takes an iterable and an optional start")
            index: ast.expr = _name(counter)
            if start is not None:
                index = ast.BinOp(left=start, op=ast.Add(), right=index)
            inner = self.element(args[0], counter, k, hoisted, lengths)
            return ast.Tuple(elts=[index, inner], ctx=ast.Load())
        if _call_of(it, self.env, builtins.zip):
            if not it.args or it.keywords:
                raise Unsupported(it, "zip() takes one or more iterables (no keywords)")
            return ast.Tuple(elts=[self.element(a, counter, k, hoisted, lengths) for a in it.args],
                             ctx=ast.Load())
        if _call_of(it, self.env, builtins.range):
            raise Unsupported(it, "range() inside enumerate() or zip() is not supported: "
                                  "iterate the range and index the arrays")
        seq = f"__umd_seq{k}_{len(hoisted)}"
        hoisted.append(ast.Assign(targets=[_name(seq, ast.Store)], value=it))
        lengths.append(_call("__umd_len", [_name(seq)]))
        return ast.Subscript(value=_name(seq), slice=_name(counter), ctx=ast.Load())
