"""Compiler stages one by one: types, frontend errors, folding, DCE, uniformity,
register allocation, code generation, the kernel decorator and the disk cache."""
import inspect
import re
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from umd import intrinsics, types
from umd.compiler import ArgSpec, CompiledKernel, KernelCompileError, build, compile_kernel, ir
from umd.compiler import frontend, opt, regalloc, uniformity
from vgpu.asm import CodeObject, disassemble

from . import bad_kernels as B
from . import kernels as K

ROOT = Path(__file__).resolve().parents[2]


def _line_of(fn, tag):
    src, start = inspect.getsourcelines(fn)
    for k, text in enumerate(src):
        if f"LINE {tag}" in text:
            return start + k
    raise AssertionError(tag)


# -- markers ----------------------------------------------------------------------------
def test_markers_refuse_plain_python():
    with pytest.raises(RuntimeError, match="inside a @umd.kernel"):
        intrinsics.thread_idx.x
    with pytest.raises(RuntimeError, match="inside a @umd.kernel"):
        intrinsics.syncthreads()
    with pytest.raises(RuntimeError, match="inside a @umd.kernel"):
        intrinsics.math.exp(1.0)
    with pytest.raises(TypeError):
        types.f32(1.0)
    assert repr(types.Ptr[types.f32]) == "Ptr[f32]"
    with pytest.raises(TypeError):
        types.Ptr[int]


# -- frontend errors ----------------------------------------------------------------------
@pytest.mark.parametrize("name, what", [
    ("list_comp", "list comprehension"),
    ("unknown_call", "unknown function 'frobnicate'"),
    ("float_index", "index must be an integer, not f32"),
    ("returns_value", "cannot return a value"),
    ("not_range", "range() inside enumerate() or zip() is not supported"),
    ("no_annotation", "needs a type annotation"),
    ("string_const", "unsupported constant"),
    ("with_stmt", "with statement"),
    ("shared_cas", "atomic_cas on f32: supported on i32, u32"),
    ("misspelt_umd_name", "umd has no attribute 'syncthread'; did you mean umd.syncthreads?"),
    ("misspelt_attribute", "did you mean gpu.thread_idx?"),
    ("misspelt_builtin", "name 'rnage' is not defined; did you mean range?"),
    ("flat_ptr_2d_index", "declare it f32[:, :]"),
    ("row_of_2d", "1 index for a 2-D array"),
    ("constant_zero_step", "step of range() must not be zero"),
    ("grid_4", "umd.grid(ndim): ndim must be 1, 2 or 3"),
    ("unpack_mismatch", "cannot unpack 2 values into 3"),
    ("plain_python_call", "decorate it with @umd.jit(device=True)"),
])
def test_compile_errors_name_line_and_construct(name, what):
    fn = getattr(B, name)
    with pytest.raises(KernelCompileError) as e:
        build(fn)
    line = _line_of(fn, name)
    assert e.value.line == line
    assert f"bad_kernels.py:{line}:" in str(e.value)
    assert what in str(e.value)


def test_compile_errors_show_the_source_line_and_a_caret():
    with pytest.raises(KernelCompileError) as e:
        build(B.misspelt_attribute)
    lines = str(e.value).splitlines()
    src = next(text for text in inspect.getsource(B.misspelt_attribute).splitlines() if "LINE" in text)
    assert lines[1] == src                      # the line as it is in the file
    col = src.index("gpu.thread_id")
    assert lines[2] == " " * col + "^"


def test_register_pressure_is_a_clear_error():
    with pytest.raises(KernelCompileError, match="out of VGPRs.*no spilling"):
        build(B.pressure)


def test_compile_error_is_umd_error():
    import umd
    assert issubclass(KernelCompileError, umd.KernelCompileError)


# -- IR, folding, DCE -------------------------------------------------------------------------
def _ir(fn):
    f = frontend.lower(fn)
    opt.optimize(f)
    return f


def test_types_and_promotion():
    f = frontend.lower(K.casts)
    kinds = {st.op for st in ir.walk(f.body) if isinstance(st, ir.Inst)}
    assert "cvt" in kinds
    # acc = 0.0 then acc += products of f32: the variable is f32 throughout
    f = frontend.lower(K.matmul)
    acc = [st.dst for st in ir.walk(f.body) if isinstance(st, ir.Inst) and st.dst is not None
           and st.dst.name == "acc"]
    assert acc and all(v.type == types.f32 for v in acc)


def test_constant_folding_and_dce():
    fold = opt.fold
    C = ir.Const
    assert fold("add", types.i32, [C(2**31 - 1, types.i32), C(1, types.i32)]).value == -2**31
    assert fold("idiv", types.i32, [C(-7, types.i32), C(2, types.i32)]).value == -3
    assert fold("rem", types.i32, [C(-7, types.i32), C(2, types.i32)]).value == -1
    assert fold("idiv", types.u32, [C(5, types.u32), C(0, types.u32)]).value == 0xFFFFFFFF
    assert fold("mul", types.f32, [C(0.1, types.f32), C(3.0, types.f32)]).value == \
        float(np.float32(0.1) * np.float32(3.0))
    assert fold("lt", types.bool_, [C(1.0, types.f32), C(float("nan"), types.f32)]).value == 0
    # TILE (a module constant) and locals assigned constants fold away
    f = _ir(K.matmul)
    text = ir.format_function(f)
    assert "TILE" not in text
    # an unused computation and a branch on a constant disappear
    src = textwrap.dedent('''
        import umd.intrinsics as gpu
        from umd.types import Ptr, f32, i32
        def k(x: Ptr[f32]):
            i = gpu.thread_idx.x
            unused = i * 3 + 4
            debug = 0
            if debug:
                x[i] = 5.0
            x[i] = 2.0 * 4.0
    ''')
    f = _ir(_from_source(src, "k"))
    insts = [st for st in ir.walk(f.body)]
    assert not any(isinstance(s, ir.If) for s in insts)
    assert [s.op for s in insts if isinstance(s, ir.Inst)] == ["store"]
    assert insts[-1].args[1] == ir.Const(8.0, types.f32)


def _from_source(src, name, tmp=[]):
    import importlib.util
    import tempfile
    d = tempfile.mkdtemp()
    path = os.path.join(d, f"gen_{len(tmp)}.py")
    tmp.append(path)
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"gen_{len(tmp)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


# -- uniformity and registers ----------------------------------------------------------------
def test_uniformity():
    f = _ir(K.matmul)
    uniformity.analyze(f)
    by_name = {}
    for st in ir.walk(f.body):
        if isinstance(st, ir.Inst) and st.dst is not None:
            by_name.setdefault(st.dst.name, st.dst)
    assert "tx" not in by_name                    # copy-propagated thread_idx.x
    assert by_name["row"].cls == "v"
    assert by_name["k0"].cls == "s"               # a uniform loop counter
    loops = [st for st in ir.walk(f.body) if isinstance(st, ir.Loop)]
    assert loops and not any(lp.divergent for lp in loops)
    assert all(a.cls == "s" for a in f.args)
    f = _ir(K.loops)
    uniformity.analyze(f)
    assert all(lp.divergent for lp in ir.walk(f.body) if isinstance(lp, ir.Loop))


def test_register_allocation_shares_registers_and_respects_reserved():
    f = _ir(K.softmax_rows)
    uniformity.analyze(f)
    stop, vtop = regalloc.allocate(f)
    regs = {}
    for st in ir.walk(f.body):
        if isinstance(st, ir.Inst) and st.dst is not None:
            regs[st.dst] = (st.dst.cls, st.dst.reg)
    used = set(regs.values())
    assert len(used) < len(regs)                  # temporaries reuse registers
    for cls, r in used:
        assert r not in (regalloc.SCRATCH_S if cls == "s" else regalloc.SCRATCH_V)
        assert not (cls == "s" and r in (0, 1, 16, 17, 18)) and not (cls == "v" and r < 3)


def test_compiled_kernel_contract():
    c = build(K.saxpy)
    assert isinstance(c, CompiledKernel) and c.name == "saxpy"
    names = [a.name for a in c.args]
    assert names == ["n", "a", "x", "y", "__block_dim_x", "__block_dim_y", "__block_dim_z",
                     "__grid_dim_x", "__grid_dim_y", "__grid_dim_z"]
    assert c.args[2] == ArgSpec("x", "ptr", 8, 8, dtype="f32", ndim=0)    # Ptr[f32]: flat, any ndim
    assert all(a.kind == "u32" for a in c.args[4:])
    assert c.kernarg_size == 48
    obj = CodeObject.unpack(c.code_object)
    assert obj.name == "saxpy" and obj.kernarg_size == 48
    assert len(obj.code) // 8 == len(c.line_table)
    lines = set(c.line_table.values())
    src, start = inspect.getsourcelines(K.saxpy)           # from its decorator line
    first = start + next(i for i, text in enumerate(src) if text.lstrip().startswith("def "))
    assert {first + 1, first + 2, first + 3} <= lines
    assert "v_cmp_lt_i32" in disassemble(obj.code)
    # block_idx.x * block_dim.x + thread_idx.x: one v_mad_u32 whose factors stay scalar
    # (s16 = workgroup id x), added to the local id (v0)
    assert re.search(r"v_mad_u32 v\d+, s16, s\d+, v0\n", c.asm_text), c.asm_text


def test_kernel_defined_inside_a_function_with_local_imports(tmp_path, monkeypatch):
    # annotations come from fn.__annotations__, already evaluated where the kernel was
    # defined: names imported inside this function are neither globals nor closure cells
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    import umd as u
    from umd import Ptr as P, f32 as F32, i32 as I32

    @u.jit
    def scale(n: I32, x: P[F32]):
        i = u.grid(1)
        acc: F32 = 0.0          # a local annotation: resolved where the kernel was defined
        if i < n:
            acc += 2.0 * x[i]
            x[i] = acc

    x = np.arange(40, dtype=np.float32)
    from .refrun import run
    run(scale.compile(), 1, 64, 40, x)
    np.testing.assert_array_equal(x, 2 * np.arange(40, dtype=np.float32))


_STRING_ANNOTATIONS = '''
from __future__ import annotations
import umd

def make():
    from umd import f32, i32

    @umd.jit
    def k(n: i32, x: f32[:]):
        i = umd.grid(1)
        if i < n:
            x[i] = x[i] + 1.0
    return k
'''


def test_string_annotations_of_a_nested_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    k = _from_source(_STRING_ANNOTATIONS, "make")()
    x = np.zeros(5, np.float32)
    from .refrun import run
    run(k.compile(), 1, 32, 5, x)
    np.testing.assert_array_equal(x, 1)


def test_kernel_options_are_checked():
    import umd
    with pytest.raises(TypeError, match="unknown option 'optimise'"):
        umd.kernel(optimise=1)
    with pytest.raises(TypeError, match="opt= takes True or False"):   # Numba's opt: a bool
        umd.kernel(opt=1)
    with pytest.raises(TypeError, match="signature"):
        umd.jit("void(float32[:])")
    assert umd.jit is umd.kernel
    d = umd.jit(device=True)(K.saxpy)
    assert isinstance(d, umd.DeviceFunction) and d.options == {"device": True}
    # from the host it runs as Python (issue 25); its body's exception propagates
    with pytest.raises(RuntimeError, match="only meaningful inside a @umd.kernel"):
        d(1, 2.0, None, None)
    k = umd.jit(device=False)(K.saxpy)
    assert isinstance(k, umd.Kernel)


def test_kernel_decorator_lazily_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    import umd
    k = umd.kernel(K.saxpy)
    assert k._compiled is None
    launcher = k[4, (64, 1)]
    assert launcher.grid == 4 and launcher.block == (64, 1) and launcher.stream is None
    with pytest.raises(TypeError, match=r"saxpy\[grid, block\]"):
        k(1, 2.0, None, None)
    assert k.compile().name == "saxpy"


# -- cache -----------------------------------------------------------------------------------
_CACHE_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import umd
from tests.umd import kernels as K
k = umd.kernel(K.softmax_rows)
k.compile()
umd.kernel(K.saxpy).compile()
"""


def test_disk_cache_second_process_compiles_nothing(tmp_path):
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path / "cache"), VGPU_DEBUG="cache")
    script = _CACHE_SCRIPT.format(root=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, cwd=ROOT, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = runs[0].stderr, runs[1].stderr
    assert first.count("compiled ") == 2 and first.count("miss ") == 2
    assert second.count("compiled ") == 0 and second.count("hit ") == 2, second
    assert len(list((tmp_path / "cache").glob("*.vco"))) == 2


def test_cache_key_covers_source_options_and_constants(tmp_path, monkeypatch):
    from umd.compiler import cache
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    k1 = cache.cache_key(K.saxpy, {}, 1)
    assert k1 == cache.cache_key(K.saxpy, {}, 1)
    assert k1 != cache.cache_key(K.saxpy, {"x": 1}, 1)
    assert k1 != cache.cache_key(K.saxpy, {}, 2)
    assert k1 != cache.cache_key(K.vector_add, {}, 1)
    km = cache.cache_key(K.matmul, {}, 1)
    monkeypatch.setitem(K.matmul.__globals__, "TILE", 4)   # samples/umd_matmul.py's constant
    assert km != cache.cache_key(K.matmul, {}, 1)
    a = compile_kernel(K.saxpy)
    b = compile_kernel(K.saxpy)
    assert a.code_object == b.code_object and a.line_table == b.line_table
    # a different compiler (its sources' digest) at the same COMPILER_VERSION: new key
    monkeypatch.setattr(cache, "_COMPILER_DIGEST", "another compiler")
    assert k1 != cache.cache_key(K.saxpy, {}, 1)


def test_shaders_debug_dumps_ir_and_asm(tmp_path):
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path), VGPU_DEBUG="shaders")
    script = ("import sys; sys.path.insert(0, %r)\nimport umd\n"
              "from tests.umd import kernels as K\numd.kernel(K.saxpy).compile()\n" % str(ROOT))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "kernel saxpy IR" in r.stderr and "global_store_dword" in r.stderr


def test_numba_jit_options_and_fastmath_contraction():
    # Numba's @cuda.jit options are accepted (before: fastmath, cache, lineinfo, debug,
    # opt, max_registers and inline were "unknown option" errors); fastmath contracts
    # a * b + c into v_fma_f32 (Numba/NVVM contract only under fastmath), else never
    # (without it, the unfused v_mad_f32, which rounds the product first)
    import umd
    from umd import f32

    def axpy(a: f32, x: umd.f32[:], y: umd.f32[:]):
        i = umd.grid(1)
        if i < x.size:
            y[i] = a * x[i] + y[i]

    plain = umd.jit(cache=True, lineinfo=True, debug=False, opt=True, max_registers=64,
                    inline="always")(axpy).compile()
    fast = umd.jit(fastmath=True)(axpy).compile()
    assert "v_fma_f32" not in plain.asm_text and "v_mad_f32" in plain.asm_text
    assert "v_fma_f32" in fast.asm_text and "v_mul_f32" not in fast.asm_text
    assert "v_mad_f32" not in fast.asm_text
    x = np.linspace(-3, 3, 50, dtype=np.float32) / 7
    y0 = np.linspace(1, 2, 50, dtype=np.float32) / 3
    from .refrun import run
    y_plain, y_fast = y0.copy(), y0.copy()
    run(plain, 2, 32, np.float32(1 / 3), x, y_plain)
    run(fast, 2, 32, np.float32(1 / 3), x, y_fast)
    np.testing.assert_array_equal(y_plain, np.float32(1 / 3) * x + y0)      # rounded twice
    exact = (np.float64(np.float32(1 / 3)) * x.astype(np.float64) + y0).astype(np.float32)
    np.testing.assert_array_equal(y_fast, exact)             # the product not rounded to f32
    assert (y_fast != y_plain).any()
