"""Peephole clean-up of the generated assembly (docs/umd-compiler.md 1.1), run on the
codegen's lines after register allocation, at optimization level 2.

Two rewrites, both about EXEC, and both what LLVM's AMDGPU back end does
(SIPreEmitPeephole):

- **Short exec skips go.** ``s_cbranch_execz L`` jumps over a block when no lane is
  on. When the block up to ``L`` is short (``SKIP_MAX`` instructions) and every
  instruction in it does nothing with EXEC zero (vector ALU writing only VGPRs, global
  and LDS accesses, which touch no lane that is off), running it with no lane on
  leaves the same state as jumping over it, and costs less than the branch in the
  usual case where some lane is on (saxpy's ``if i < n`` is false only in the last
  wave). Anything that writes an SGPR, VCC or SCC, reads memory as a scalar, waits
  at a barrier or branches keeps the skip.
- **EXEC restores right before ``s_endpgm`` go.** The wave ends there: nothing reads
  the mask again.

Each rewrite only removes instructions; the source-line table (one entry per
instruction) loses the same entries.
"""
from __future__ import annotations

SKIP_MAX = 12   # LLVM's amdgpu-skip-threshold default

# Vector instructions that write an SGPR mask or VCC (their result with EXEC zero is
# zero, not "unchanged"), or read or write a lane regardless of EXEC.
_UNSAFE_VECTOR = ("v_cmp_", "v_readfirstlane", "v_readlane", "v_writelane", "v_add_co_",
                  "v_addc_co_", "v_sub_co_", "v_subb_co_")
_SAFE_PREFIXES = ("v_", "global_", "ds_")


def _mnemonic(text: str) -> str:
    return text.split(None, 1)[0]


def _is_label(text: str) -> bool:
    return text.endswith(":") and not text.startswith("    ")


def _exec_safe(mnemonic: str) -> bool:
    """True if the instruction has no effect when no lane is on."""
    return mnemonic.startswith(_SAFE_PREFIXES) and not mnemonic.startswith(_UNSAFE_VECTOR)


def tidy(out: list[str], lines: list[int]) -> tuple[list[str], list[int]]:
    """(assembly lines, source line per instruction) with the rewrites above applied."""
    items: list[tuple[str, int | None]] = []      # (text, source line or None for a label)
    k = 0
    for text in out:
        if _is_label(text):
            items.append((text, None))
        else:
            items.append((text, lines[k]))
            k += 1
    drop: set[int] = set()
    for i, (text, _) in enumerate(items):
        if _is_label(text):
            continue
        words = text.split()
        if words[0] == "s_cbranch_execz" and _short_safe_skip(items, i, words[1]):
            drop.add(i)
        elif words[0] == "s_endpgm":
            j = i - 1
            while j >= 0 and not _is_label(items[j][0]) and _writes_exec(items[j][0]):
                drop.add(j)
                j -= 1
    kept = [it for i, it in enumerate(items) if i not in drop]
    return [t for t, _ in kept], [line for t, line in kept if line is not None]


def _short_safe_skip(items, i: int, target: str) -> bool:
    """The instructions from items[i+1] to the label `target` (no other label between)
    are at most SKIP_MAX and each exec-safe."""
    n = 0
    for text, _ in items[i + 1:]:
        if _is_label(text):
            return text[:-1] == target
        n += 1
        if n > SKIP_MAX or not _exec_safe(_mnemonic(text.strip())):
            return False
    return False


def _writes_exec(text: str) -> bool:
    """A scalar instruction whose only effect is a new EXEC (s_mov / s_andn2 / ...
    exec, ...): dead right before s_endpgm. The saveexec forms also write an SGPR."""
    words = text.replace(",", " ").split()
    return words[0].startswith("s_") and "saveexec" not in words[0] and len(words) > 1 \
        and words[1] == "exec"
