"""What the compiler produces: a CompiledKernel, the contract with umd.launch
(docs/umd.md, "Contract with the compiler"), and its JSON form in the disk cache
(umd/compiler/cache.py)."""
from __future__ import annotations

import dataclasses

from .ir import ArgSpec


@dataclasses.dataclass
class CompiledKernel:
    """What umd.launch needs: the code object, the kernarg layout, the line table."""

    name: str
    code_object: bytes                     # a .vco image
    args: list[ArgSpec]                    # user arguments, then __block_dim_*, __grid_dim_*
    kernarg_size: int
    line_table: dict[int, int] = dataclasses.field(default_factory=dict)  # PC -> source line
    source_file: str = ""
    ir_text: str = ""
    asm_text: str = ""
    sgprs: int = 0
    vgprs: int = 0
    lds_bytes: int = 0
    traps: dict[int, str] = dataclasses.field(default_factory=dict)    # s_trap code -> what it means
    # umd.const.array_like data: hidden argument -> (dtype name, shape, bytes as hex)
    consts: dict[str, tuple] = dataclasses.field(default_factory=dict)
    # print() sites, in order: format id k + 1 is prints[k] (compiler/prints.py)
    prints: list[list] = dataclasses.field(default_factory=list)
    # the kernel syncs its grid (umd.cg.this_grid().sync()): a cooperative launch, at
    # most max_cooperative_blocks workgroups (docs/umd.md, "Cooperative launches")
    cooperative: bool = False
    # it declares umd.shared.array(0, T): its dynamic shared memory starts at lds_bytes
    dynamic_shared: bool = False
    # device arrays named as globals: hidden argument __global_<k> -> [module, function,
    # expression], looked up at each launch (umd.launch.captured_arrays)
    captured: dict[str, list] = dataclasses.field(default_factory=dict)

    def const_arrays(self) -> dict:
        """{hidden argument: numpy array} of the kernel's constant arrays."""
        import numpy as np
        from umd.types import NUMPY_NAMES
        return {k: np.frombuffer(bytes.fromhex(raw), NUMPY_NAMES[dt]).reshape(shape)
                for k, (dt, shape, raw) in self.consts.items()}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["code_object"]
        d["line_table"] = {str(k): v for k, v in self.line_table.items()}
        d["traps"] = {str(k): v for k, v in self.traps.items()}
        return d

    @classmethod
    def from_json(cls, d: dict, code_object: bytes) -> CompiledKernel:
        d = dict(d)
        d["args"] = [ArgSpec(**a) for a in d["args"]]
        d["line_table"] = {int(k): v for k, v in d["line_table"].items()}
        d["traps"] = {int(k): v for k, v in d.get("traps", {}).items()}
        d["consts"] = {k: tuple(v) for k, v in d.get("consts", {}).items()}
        return cls(code_object=code_object, **d)
