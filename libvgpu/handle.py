"""The one base of libvgpu's context-managed objects (Bo, BoList, Context,
Syncobj, VaRange, Device, LoadedKernel).

Each of them stands for something the caller must release, as libdrm's
``amdgpu_*_handle`` types do (amdgpu_bo_handle, amdgpu_va_handle,
amdgpu_device_handle...): a GEM handle, a BO list, a context, a syncobj, a VA
range of the user-space allocator, an open DRM file, a loaded kernel. They share
one protocol:

    with libvgpu.bo_alloc(dev, 4096) as bo:   # __enter__ returns the object
        ...                                   # __exit__ calls bo.free()

``free()`` is the release. Every subclass makes it idempotent (a second call,
or a call after the Device closed, does nothing), so ``with`` and an explicit
``free()`` may be mixed. The verbs libdrm uses (``BoList.destroy``,
``Syncobj.destroy``, ``Device.close``) stay as the same release.
"""

from __future__ import annotations

import abc
from typing import Callable, ClassVar, TypeVar, Union

#: One field of a repr: an attribute name shown as ``name=value``, or
#: ``(name, how)`` where ``how`` is a format spec (``"#x"``) or a callable that
#: turns the value into the text shown (``len``).
ReprField = Union[str, tuple[str, Union[str, Callable[[object], object]]]]

_T = TypeVar("_T", bound="Handle")


class Handle(abc.ABC):
    """An object the caller releases with :meth:`free` or a ``with`` block.

    Subclasses implement :meth:`free` and list what their repr shows in
    ``_repr_fields``: ``<ClassName field=value ...>``.
    """

    _repr_fields: ClassVar[tuple[ReprField, ...]] = ()

    @abc.abstractmethod
    def free(self) -> None:
        """Release what the object stands for. Idempotent."""

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc) -> None:
        # Never swallows the exception of the with-block (returns None).
        self.free()

    def __repr__(self) -> str:
        parts = [type(self).__name__]
        for field in self._repr_fields:
            name, how = (field, "") if isinstance(field, str) else field
            value = getattr(self, name)
            text = how(value) if callable(how) else format(value, how)
            parts.append(f"{name}={text}")
        return f"<{' '.join(parts)}>"
