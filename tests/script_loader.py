"""The repository's scripts (``bench/``, a bundle's ``run.py``) imported by path in tests."""

import importlib.util
from pathlib import Path
from types import ModuleType

#: the benchmark scripts' folder
BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_script(path, name: str) -> ModuleType:
    """The Python file at ``path`` executed as a new module called ``name`` (not put in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
