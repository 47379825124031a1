"""Load a script of benchmarks/ as a module, so that tests can call its functions (the scripts are
not a package: each runs as `python benchmarks/NAME.py`, with benchmarks/ on sys.path, where their
shared modules, bench_args.py and ch14_setup.py, are found; here it is added the same way)."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(name: str, module_name: str | None = None):
    """benchmarks/``name``.py, imported as ``module_name`` (default: ``name``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(module_name or name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
