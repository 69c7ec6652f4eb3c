"""The kernel compiler: a typed Python subset -> vISA code objects (docs/umd-compiler.md).

    compiled = compile_kernel(pyfn, options)   # -> CompiledKernel, through the disk cache

Pipeline: frontend (AST -> typed IR) -> opt (constant folding/propagation, dead code)
-> unroll (small constant loops) -> uniformity (scalar vs vector registers) ->
addressing (byte offsets, LDS constant offsets) -> cse / licm (shared and loop-invariant
work) -> reassociate (an add's invariant terms together, then licm again) -> cse ->
induction (loop addresses stepped in the latch) ->
sinking (one store after an if/else) -> contract (mad; fma under fastmath) -> opt
(again, and move coalescing) -> lds_quads (ds_read_b128 of four shared reads) ->
lds_pairs (ds_read2_b32 of two) -> lane_masks (vector bools kept in SGPR lane masks) ->
regalloc (linear scan) -> codegen (vISA assembly) -> peephole (exec skips and restores
that do nothing) -> vgpu.asm.assemble -> .vco.
"""
from __future__ import annotations

from vgpu import asm

from . import (addressing, cache, codegen, contract, cse, frontend, induction, ir, lane_masks,
               lds_pairs, lds_quads, licm, opt, peephole, reassociate, regalloc, sinking, uniformity, unroll)
from .compiled import CompiledKernel
from .debug import debug_enabled, debug_log
from .errors import KernelCompileError
from .ir import ArgSpec

COMPILER_VERSION = 12


def _unwrap(obj, env):
    """The Python function and the decorating frame's names of a function or a
    @umd.jit object."""
    if getattr(obj, "options", {}).get("device"):
        raise KernelCompileError(f"{obj.fn.__name__} is a device function (@umd.jit(device=True)): "
                                 "it is compiled into the kernels that call it, not on its own")
    return getattr(obj, "fn", obj), env if env is not None else getattr(obj, "env", None)


def optimize(fn: ir.Function, level: int = 2, fastmath: bool = False) -> None:
    """The IR passes in order (docs/umd-compiler.md 1); leaves fn analysed for
    uniformity, ready for register allocation.  Level 1 is folding and dead code
    only (the tests compare what the other passes do against it); ``fastmath``
    (the kernel option) contracts multiplies and adds into fmas."""
    opt.optimize(fn)
    if level < 2:
        uniformity.analyze(fn)
        return
    if unroll.unroll_loops(fn):
        opt.optimize(fn)
    uniformity.analyze(fn)
    addressing.lower_addresses(fn)
    cse.eliminate_common_subexpressions(fn)
    licm.hoist_loop_invariants(fn)
    if reassociate.reassociate_loop_adds(fn):
        licm.hoist_loop_invariants(fn)
    cse.eliminate_common_subexpressions(fn)
    if induction.reduce_loop_addresses(fn):
        uniformity.analyze(fn)
    sinking.sink_stores(fn)
    if fastmath:
        contract.contract_fma(fn)
    contract.contract_mad(fn)
    opt.optimize(fn)
    opt.coalesce_moves(fn)
    uniformity.analyze(fn)
    lds_quads.merge_lds_quads(fn)
    lds_pairs.merge_lds_pairs(fn)
    lane_masks.assign_lane_masks(fn)


def build(pyfn, options: dict | None = None, env: dict | None = None, *,
          level: int = 2) -> CompiledKernel:
    """Run the whole pipeline (no cache). ``pyfn`` is a function or a @umd.jit kernel;
    ``env`` the names of the frame that defined it (umd.kernel passes them); ``level``
    that of :func:`optimize`."""
    pyfn, env = _unwrap(pyfn, env)
    fn = frontend.lower(pyfn, env, tuple((options or {}).get("link") or ()))
    optimize(fn, level, fastmath=bool((options or {}).get("fastmath")))
    stop, _ = regalloc.allocate(fn)
    gen = codegen.CodeGen(fn, stop)
    body = gen.generate()
    if level >= 2:
        gen.out, gen.lines = peephole.tidy(gen.out, gen.lines)
        body = "\n".join(gen.out) + "\n"
    ir_text = ir.format_function(fn)
    header = [f".kernel {fn.name}"]
    for a in fn.args:
        header.append(f".arg {a.arg.name} {a.arg.kind}")
    if fn.lds_bytes:
        header.append(f".lds {fn.lds_bytes}")
    text = "\n".join(header) + "\n" + body
    try:
        obj = asm.assemble(text, f"{fn.name}.s")
    except asm.AsmError as e:                     # a compiler bug, not a user error
        raise KernelCompileError(f"{fn.source_file}: {fn.name}: internal error: the "
                                 f"generated assembly does not assemble: {e}\n{text}") from e
    specs = [a.arg for a in fn.args]
    assert [(s.name, s.offset) for s in specs] == [(a.name, a.offset) for a in obj.args]
    return CompiledKernel(fn.name, obj.pack(), specs, obj.kernarg_size,
                          {8 * k: line for k, line in enumerate(gen.lines)},
                          fn.source_file, ir_text, text, obj.sgprs, obj.vgprs, obj.lds_bytes,
                          dict(getattr(fn, "traps", {})),
                          {k: (dt, list(shape), raw.hex())
                           for k, (dt, shape, raw) in getattr(fn, "consts", {}).items()},
                          list(getattr(fn, "prints", [])), bool(getattr(fn, "cooperative", False)),
                          bool(getattr(fn, "dynamic_shared", False)),
                          {k: list(v) for k, v in getattr(fn, "captured", {}).items()})


def compile_kernel(pyfn, options: dict | None = None, env: dict | None = None) -> CompiledKernel:
    """Compile `pyfn` (a @umd.kernel's function, or the kernel) through the on-disk cache."""
    options = dict(options or {})
    pyfn, env = _unwrap(pyfn, env)
    key = cache.cache_key(pyfn, options, COMPILER_VERSION, env)
    compiled = cache.load(key, pyfn.__name__)
    if compiled is None:
        compiled = build(pyfn, options, env)
        debug_log("cache", f"compiled {compiled.name} ({len(compiled.code_object)} bytes, "
                           f"key {key[:16]})")
        cache.store(key, compiled)
    if debug_enabled("shaders"):
        debug_log("shaders", f"kernel {compiled.name} IR:\n{compiled.ir_text}"
                             f"kernel {compiled.name} vISA:\n{compiled.asm_text}")
    return compiled


__all__ = ["compile_kernel", "build", "CompiledKernel", "ArgSpec", "KernelCompileError",
           "COMPILER_VERSION"]
