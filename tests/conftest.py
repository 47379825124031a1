
import matplotlib
import pytest
import torch
from hypothesis import HealthCheck, settings

from course_lib.tools.numerics import apply_reference_environment

# Every process the tests start (pytest-xdist's workers, CLI subprocesses, notebook kernels)
# computes in the reference numeric environment, the one place that sets these variables: the same
# numbers on every host, and OpenMP threads that sleep instead of spinning on shared cores.
apply_reference_environment()

matplotlib.use("Agg")

# Deterministic property tests: the same examples on every run and machine.
settings.register_profile("course", derandomize=True, deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("course")


def pytest_addoption(parser):
    parser.addoption("--screenshots", action="store_true",
                     help="test_website: save a full-page screenshot of each page to "
                          "_build/screenshots/")


def pytest_collection_modifyitems(config, items):
    """The long files first: the chapters (nbval), then the files with a test marked slow, then
    the rest, each file's tests in their own order. With several test processes (pytest-xdist
    with --dist loadfile and --no-loadscope-reorder, as `make test` runs it), the quick files
    then fill the gaps at the end instead of a long one starting last."""
    def file_of(item):
        return item.nodeid.split("::", 1)[0]

    rank = {}
    for item in items:
        path = file_of(item)
        here = 0 if path.endswith(".ipynb") else 1 if item.get_closest_marker("slow") else 2
        rank[path] = min(rank.get(path, 2), here)
    items.sort(key=lambda item: rank[file_of(item)])  # stable: keeps the order within a file
    if not torch.cuda.is_available():  # the CUDA lane's tests (make gpu-test): one line each here
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False): "
                                       "make gpu-test on a GPU machine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture
def one_thread():
    """Tiny models on a shared machine: one thread is faster (no waiting on a busy second core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_config():
    from course_lib.model import GPTConfig

    return GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)


@pytest.fixture
def tiny_model(tiny_config):
    """The one tiny GPT of the tests: ``tiny_model(seed=0, **changes)`` builds a freshly
    initialised GPT of ``tiny_config`` with ``changes`` applied (e.g. vocab_size=12)."""
    from dataclasses import replace

    from course_lib.model import GPT

    def make(seed: int = 0, **changes):
        torch.manual_seed(seed)
        return GPT(replace(tiny_config, **changes))

    return make


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

