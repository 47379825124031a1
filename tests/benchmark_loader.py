"""Load a script of benchmarks/ as a module, so that tests can call its functions (the scripts are
not a package: each runs as `python benchmarks/NAME.py`)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str, module_name: str | None = None):
    """benchmarks/``name``.py, imported as ``module_name`` (default: ``name``)."""
    spec = importlib.util.spec_from_file_location(module_name or name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
