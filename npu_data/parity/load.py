"""A user's transform named ``MODULE:NAME`` (``npu-data parity --transform``).

``MODULE`` is an importable module (the current folder comes first, as with ``python -m``)
or the path of a ``.py`` file (its folder first, as with ``python file.py``); importing it
runs its code. ``NAME`` (dotted for an attribute of an attribute) is a ``Transform``
subclass made with no arguments, a transform object, or a function of no arguments that
returns one. Every mistake is one :class:`~npu_data.errors.UserError` line naming the spec
and the fix.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import reprlib
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from npu_data.errors import UserError
from npu_data.transforms.base import Transform

__all__ = ["load_transform", "where"]


def load_transform(spec: str) -> Transform:
    """The transform ``spec`` (``MODULE:NAME``) names (module doc).

    Raises:
        UserError: a spec without ``:``, a module or file not found, one that raises while
            it is imported, a missing name, a class whose constructor needs arguments, a
            function that raises, or anything that is not an npu_data transform.
    """
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise _error(spec, "expected MODULE:NAME, e.g. my_transforms:RandomInvert or "
                           "path/to/file.py:RandomInvert")
    module = _import(spec, module_name)
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            raise _error(spec, f"{module_name} has no {name!r}{_defined(module)} — name a "
                               "Transform subclass, a transform object or a function "
                               "returning one")
        value = getattr(value, part)
    return _made(spec, value)


def _made(spec: str, value: Any) -> Transform:
    """``value`` as a transform: itself, a class made with no arguments, or a function's
    result."""
    if isinstance(value, Transform):
        return value
    if not callable(value):
        raise _not_a_transform(spec, value)
    if isinstance(value, type) and not issubclass(value, Transform):
        raise _not_a_transform(spec, value)
    needed = _required(value)
    if needed:
        what = "its constructor" if isinstance(value, type) else "it"
        raise _error(spec, f"{what} needs arguments ({', '.join(needed)}) — give them "
                           "defaults, or name a function of no arguments that returns the "
                           f"configured transform (def make(): return {_short(value)}(...))")
    try:
        made = value()
    except UserError as exc:
        raise _error(spec, f"{_short(value)}() refused: {exc}") from None
    except Exception as exc:  # the user's own code: one line, where it raised
        raise _error(spec, f"{_short(value)}() raised {where(exc)}") from None
    if not isinstance(made, Transform):
        raise _not_a_transform(spec, made, f"{_short(value)}() returned ")
    return made


def _import(spec: str, module_name: str) -> ModuleType:
    path = Path(module_name)
    if module_name.endswith(".py") or path.suffix == ".py":
        if not path.is_file():
            raise _error(spec, f"no file {module_name} — give the path of the .py file that "
                               "defines the transform, or MODULE:NAME for an importable module")
        return _run(spec, module_name, lambda: _from_file(path.resolve()))
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise _error(spec, f"{module_name!r} is neither a module name nor a .py file")
    importlib.invalidate_caches()  # a module written since the last import is found
    try:
        with _importable(Path.cwd()):
            found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:  # its parent package is missing
        found = None
    if found is None:
        raise _error(spec, f"no module named {module_name!r} — run from the folder that "
                           "holds it, add that folder to PYTHONPATH, or give the path of its "
                           ".py file")
    return _run(spec, module_name, lambda: importlib.import_module(module_name))


def _run(spec: str, module_name: str, load: Callable[[], ModuleType]) -> ModuleType:
    """``load()`` with the current folder importable; what the user's module raises while
    it is imported becomes one line."""
    try:
        with _importable(Path.cwd()):
            module = load()
    except UserError as exc:
        raise _error(spec, f"importing {module_name} refused: {exc}") from None
    except Exception as exc:  # a SyntaxError, a missing dependency, its own error
        raise _error(spec, f"importing {module_name} raised {where(exc)} — fix the module"
                     ) from None
    return module


def _from_file(path: Path) -> ModuleType:
    """The module of ``path``, its folder importable while it runs (its own imports)."""
    name = f"_npu_data_user_{path.stem}_{abs(hash(str(path))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a class's module up
    with _importable(path.parent):
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


@contextlib.contextmanager
def _importable(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` within the block (left out after if it was not)."""
    entry = str(folder)
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def where(exc: BaseException) -> str:
    """``Type: message (file:line)``, the line the innermost frame raised at (one line)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({exc.filename}:{exc.lineno})"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{text} ({frames[-1].filename}:{frames[-1].lineno})" if frames else text


def _required(value: Any) -> list[str]:
    """The parameters ``value()`` would miss (none when its signature cannot be read)."""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                   p.KEYWORD_ONLY)]


def _defined(module: ModuleType) -> str:
    """`` (it defines: A, B)``: the module's Transform subclasses and transform objects."""
    names = sorted(k for k, v in vars(module).items() if not k.startswith("_") and (
        isinstance(v, Transform) or isinstance(v, type) and issubclass(v, Transform)
        and v.__module__ == module.__name__))
    return f" (it defines {', '.join(names)})" if names else ""


def _short(value: Any) -> str:
    return str(getattr(value, "__qualname__", None) or type(value).__name__)


def _not_a_transform(spec: str, value: Any, prefix: str = "") -> UserError:
    kind = f"the class {value.__qualname__}" if isinstance(value, type) else \
        f"{reprlib.repr(value)} (of type {type(value).__name__})"
    return _error(spec, f"{prefix}{kind}, not an npu_data transform — subclass "
                        "npu_data.transforms.Transform (docs/architecture.md, \"Writing a "
                        "transform\")")


def _error(spec: str, what: str) -> UserError:
    return UserError(f"{{transform}} {spec}: {what}", option="transform")
