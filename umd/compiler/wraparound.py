"""Negative array indices wrap around, as in Numba (its default: wraparound on,
boundscheck off): `a[-1]` is the last element, `a[i, -1]` the last column, for
constant and run-time indices alike (docs/umd-compiler.md 3.2).

An index the frontend can show is non-negative needs no test; any other becomes
`i + (shape if i < 0 else 0)` (a compare, a select and an add, folded away for a
constant).  The proof is a lower bound carried by each value the frontend makes:

- a constant is its own bound; thread and block ids, the launch's dimensions and the
  arrays' extents (the hidden arguments) are >= 0; a bool is >= 0;
- `a + b`, `a - c` (c a constant), `a * b` (both >= 0), `min`, `max`, and `//`, `%`,
  `>>`, `&` of values >= 0 follow the usual interval rules; `a % c` with a constant
  c > 0 is >= 0 whatever a is (Python's modulo takes the divisor's sign);
- a variable the function assigns once has the bound of that value (a device
  function's parameter, assigned by the call only, that of its argument); a `for`
  counter counting up (a constant positive step, or a variable one that is >= 0 as
  `umd.gridsize(1)` is; zero traps) starts at its `start`'s bound;
- a variable assigned several times is >= 0 when every assignment assigns a value
  >= 0, assuming it of the variables read (an induction over the assignments: the
  frontend assumes it, and restarts with the variable unbounded at the first
  assignment that may be negative): `s //= 2`, `offset *= 2`, `pout, pin = pin, pout`;
- inside `if v >= c:` (also `v > c`, `c <= v < n`, and conjuncts of `and`), a
  variable assigned once, not in that branch, is >= c (the histogram's
  `if 0 <= b < nbins:`).

The rules assume the index arithmetic does not overflow 32 bits (a grid of fewer than
2^31 threads, extents below 2^31, as docs/umd-compiler.md 3.4 already requires of
range counters): an index that wraps past 2^31 to a negative number is not wrapped
back.
"""
from __future__ import annotations

import ast
from collections import Counter

_MONOTONE = {"add", "mul", "min", "max", "floordiv", "mod", "shr", "and"}


def store_counts(fdef: ast.AST) -> Counter:
    """How many times each name of a function is assigned: its parameters once, each
    `=`, `+=`, annotated assignment, tuple target and `for` target once more."""
    counts = Counter(a.arg for a in fdef.args.args)
    for n in ast.walk(fdef):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            counts[n.id] += 1
    return counts


def lower_bound(op: str, a: int | None, b: int | None, b_const: bool) -> int | None:
    """A lower bound of `op(x, y)` given those of x (`a`) and y (`b`), None if unknown;
    `b_const` says y is a constant (so `x - y` is bounded)."""
    if op == "mod" and b_const and b is not None and b > 0:
        return 0                                # Python's %: the divisor's sign
    if op == "sub":
        return a - b if a is not None and b is not None and b_const else None
    if op == "and" and (a is not None and a >= 0 or b is not None and b >= 0):
        return 0                                # the sign bit is clear in one operand
    if op not in _MONOTONE or a is None:
        return None
    if op == "max":
        return a if b is None else max(a, b)
    if b is None:
        return 0 if op == "and" and a >= 0 else None
    if op == "add":
        return a + b
    if op == "min":
        return min(a, b)
    if a < 0 or b < 0:
        return None
    return a * b if op == "mul" else 0


def guarded_names(test: ast.AST) -> dict[str, int]:
    """The lower bounds an `if` condition gives its true branch: {name: c} for each
    conjunct `name >= c`, `name > c - 1`, `c <= name`, `c - 1 < name` (c an integer
    constant, chained comparisons included)."""
    out: dict[str, int] = {}
    conjuncts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) \
        else [test]
    for c in conjuncts:
        if not isinstance(c, ast.Compare):
            continue
        terms = [c.left] + list(c.comparators)
        for left, op, right in zip(terms, c.ops, terms[1:]):
            for name, const, strict in ((left, right, isinstance(op, ast.Gt)),
                                        (right, left, isinstance(op, ast.Lt))):
                if not (isinstance(name, ast.Name) and isinstance(const, ast.Constant)
                        and type(const.value) is int):
                    continue
                if (name is left and isinstance(op, (ast.GtE, ast.Gt))) or \
                        (name is right and isinstance(op, (ast.LtE, ast.Lt))):
                    lb = const.value + (1 if strict else 0)
                    out[name.id] = max(out.get(name.id, lb), lb)
    return out
