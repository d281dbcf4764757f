"""TVM's schedule primitives without their Python argument checks, while a template schedules.

Every ``s_tir.Schedule`` primitive is wrapped by TVM's ``type_checked``, which binds each call's
arguments to the signature and checks them against its type hints in Python; a template makes
thousands of such calls per model, and the checks are a tenth of its compile time. The templates'
calls are tested, and a wrong argument still fails in the primitive itself (an FFI error the
guarded pipeline hands on like any other). ``TVM_FUSION_HW_CHECK_SCHEDULE_TYPES=1`` keeps the
checks, for writing a template.

The primitives are swapped on the class for as long as any :func:`unchecked_schedule_calls`
block runs (in any thread), then restored; the unchecked functions compute the same.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
from typing import Callable, Dict, Iterator, TypeVar

from tvm import s_tir

_lock = threading.Lock()
_active = 0
_checked: Dict[str, object] = {}  # name -> TVM's checked function, found by the first block
_F = TypeVar("_F", bound=Callable)


def _type_checked_primitives() -> Dict[str, object]:
    """The class's functions that TVM's ``type_checked`` wraps, by name."""
    return {name: value for name, value in vars(s_tir.Schedule).items()
            if inspect.isfunction(value) and hasattr(value, "__wrapped__")
            and value.__code__.co_filename.endswith("_type_checker.py")}


def checks_kept() -> bool:
    """Whether the environment asks to keep TVM's argument checks."""
    return os.environ.get("TVM_FUSION_HW_CHECK_SCHEDULE_TYPES", "") == "1"


@contextlib.contextmanager
def unchecked_schedule_calls() -> Iterator[None]:
    """Run the block with ``s_tir.Schedule``'s primitives unwrapped (nested and concurrent blocks
    share one swap)."""
    global _active  # pylint: disable=global-statement
    if checks_kept():
        yield
        return
    with _lock:
        if _active == 0:
            if not _checked:
                _checked.update(_type_checked_primitives())
            for name, wrapper in _checked.items():
                setattr(s_tir.Schedule, name, wrapper.__wrapped__)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for name, wrapper in _checked.items():
                    setattr(s_tir.Schedule, name, wrapper)


def without_schedule_checks(function: _F) -> _F:
    """``function`` run inside :func:`unchecked_schedule_calls`."""
    @functools.wraps(function)
    def unchecked(*args, **kwargs):
        with unchecked_schedule_calls():
            return function(*args, **kwargs)
    return unchecked  # type: ignore[return-value]
