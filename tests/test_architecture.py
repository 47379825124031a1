"""The shape of course_lib, read from its source (nothing is imported): no import cycle, small
modules, short functions wherever arguments are parsed (argparse in the command line and the tools
only), the layers drawn in CONTRIBUTING.md, and every environment
variable the code reads documented there.

Imports are found with ``ast`` everywhere in a module, in functions too (a lazy import is still an
import: it can form a cycle that only shows when that function runs).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "course_lib"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
MAX_MODULE_LINES = 450  # the developers' guide: small flat modules, one idea each
MAX_CLI_FUNCTION_LINES = 45  # a command reads as one screen: parse, build the run, report


def module_name(path: Path) -> str:
    """course_lib/tools/book.py -> "tools.book"; course_lib/__init__.py -> "__init__"."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str) -> str | None:
    """The module of ours that a dotted name below course_lib means: the module itself, or the
    package's __init__ (``course_lib.tools`` -> ``tools.__init__``); None if it is not ours."""
    if name == "course_lib":
        return "__init__"
    if not name.startswith("course_lib."):
        return None
    rest = name[len("course_lib."):]
    if rest in MODULES:
        return rest
    if f"{rest}.__init__" in MODULES:
        return f"{rest}.__init__"
    return None


def imports_in(source: str, package: str) -> set[str]:
    """Every module of ours that ``source`` (a module of the package ``package``, such as
    ``"course_lib.tools"``) imports, anywhere in its body: in functions too, and under
    ``if TYPE_CHECKING:`` (an import for type hints alone is still a dependency: the module knows
    the other's names)."""
    tree = ast.parse(source)
    parts = package.split(".")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {resolve(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from .x` is the package itself, each further dot one package up
                parent = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module]
                                                                           if node.module else []))
            else:
                parent = node.module or ""
            for alias in node.names:  # `from X import name`: the submodule X.name if there is one
                found.add(resolve(f"{parent}.{alias.name}") or resolve(parent))
    found.discard(None)
    return found


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = ".".join(["course_lib", *path.relative_to(PACKAGE).parent.parts])
    return imports_in(path.read_text(), package) - {module}


GRAPH = {module: imports_of(module) for module in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, in a fixed order)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each group of modules that import each other (directly or through others)."""
    reach = {m: reachable(graph, m) for m in graph}
    groups = {frozenset([m, *(n for n in reach[m] if m in reach[n])]) for m in graph}
    return [find_cycle({m: graph[m] & group for m in group}) for group in sorted(groups, key=sorted)
            if len(group) > 1]


def test_the_import_reader_sees_lazy_and_relative_imports():
    """The reader itself: a function-level import, a ``TYPE_CHECKING`` import and ``from . import
    name`` of a submodule are edges too; other packages' modules are not."""
    source = ("from typing import TYPE_CHECKING\nimport torch\nfrom . import data, rope\nfrom .. "
              "import utils\nif TYPE_CHECKING:\n    from ..cli import main\n"
              "def f():\n    from .numerics import REFERENCE\n    import course_lib.model as m\n")
    # a TYPE_CHECKING import counts: `from ..cli import main` makes tools depend on cli (a package)
    assert imports_in(source, "course_lib.tools") == {"tools.numerics", "tools.__init__", "utils",
                                                      "model", "cli.__init__"}
    # no course_lib.numerics; `..` leaves it
    assert imports_in(source, "course_lib") == {"data", "rope", "model"}
    assert {"gpt2", "llama", "_signals"} <= GRAPH["__init__"]  # `from . import gpt2, llama`
    # `from ..data import` in a function
    assert {"data", "model", "tokenizers"} <= GRAPH["tools.numerics"]
    assert "tools.numerics" in GRAPH["tools.chapters"]  # `from .numerics import` in a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    two = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
    assert import_cycles(two) == [["a", "b", "a"], ["c", "d", "c"]]


def test_no_import_cycle_in_course_lib():
    cycles = [" -> ".join(cycle) for cycle in import_cycles(GRAPH)]
    assert not cycles, (f"import cycles (lazy imports count): {'; '.join(cycles)}: move what both "
                        "need into a lower module (see the layers in CONTRIBUTING.md)")


def test_no_module_over_450_lines():
    too_long = {name: n for name, path in MODULES.items() if not name.startswith("exercises.")
                and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_long, (f"modules over {MAX_MODULE_LINES} lines: {too_long}: split each by job "
                          "(one idea per module)")


ARGUMENT_CALLS = {"add_argument", "add_parser", "add_subparsers", "parse_args", "parse_known_args",
                  "ArgumentParser"}


def parses_arguments(node: ast.FunctionDef) -> bool:
    """A function that builds or reads command-line arguments: it takes the parsed ``args``, or
    calls argparse (``add_argument``, ``add_parser``, ``parse_args``...)."""
    if "args" in [a.arg for a in node.args.args + node.args.kwonlyargs]:
        return True
    return any(isinstance(n, ast.Call)
               and (getattr(n.func, "attr", None) or getattr(n.func, "id", None))
               in ARGUMENT_CALLS for n in ast.walk(node))


def argument_functions() -> dict[str, int]:
    """``module.function`` -> lines, for every function of course_lib that parses arguments."""
    found = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parses_arguments(node):
                found[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_the_reader_finds_functions_that_parse_arguments():
    tree = ast.parse("def cmd(args):\n    pass\ndef add(sub):\n    sub.add_parser('x')\ndef "
                     "other(x):\n    return x\n")
    assert [parses_arguments(f) for f in tree.body] == [True, True, False]
    found = argument_functions()
    assert {"cli.common.cmd_run", "cli.__init__.build_parser",
            "tools.assignments.add_parser"} <= set(found)


def test_no_function_that_parses_arguments_is_over_45_lines():
    """Wherever it lives (a command outside cli.py escaped the rule once)."""
    too_long = {name: n for name, n in argument_functions().items() if n > MAX_CLI_FUNCTION_LINES}
    assert not too_long, (f"functions that parse arguments over {MAX_CLI_FUNCTION_LINES} lines: "
                          f"{too_long}: a command parses, hands its work to the library "
                          "(course_lib.runs), and reports")


def test_argparse_is_used_only_by_the_cli_and_the_tools():
    users = [name for name, path in MODULES.items() if "argparse" in {
        a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import)
        for a in n.names}
        | {n.module for n in ast.walk(ast.parse(path.read_text()))
           if isinstance(n, ast.ImportFrom)}]
    outside = [m for m in users if m != "__main__" and not m.startswith(("tools.", "cli."))]
    assert not outside, (f"argparse outside course_lib/cli/ and course_lib/tools/: {outside}: "
                         "commands go into course_lib/cli/")


# --- the layers of CONTRIBUTING.md ------------------------------------------------------------


LAYER_LINE = re.compile(r"^(\d+) [\w ,]+:\s+(\S.*)$")
BESIDE_LINE = re.compile(r"^beside:\s+(\S.*)$")


def layer_picture(text: str) -> tuple[dict[str, int], list[str]]:
    """(module -> layer number, patterns of the modules beside the layers) from the fenced block
    that follows the heading "## Architecture" of CONTRIBUTING.md; ``tools.*`` stands for every
    module below course_lib/tools."""
    section = text.split("\n## Architecture", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    layers, beside = {}, []
    for line in block.splitlines():
        if m := LAYER_LINE.match(line.strip()):
            for name in m.group(2).split():
                assert name not in layers, f"{name} is in two layers of the picture"
                layers[name] = int(m.group(1))
        elif m := BESIDE_LINE.match(line.strip()):
            beside += m.group(1).split()
        elif line.strip():
            pytest.fail(f"CONTRIBUTING.md's layer picture has a line it cannot read: {line!r}")
    return layers, beside


def is_beside(module: str, patterns: list[str]) -> bool:
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)


@pytest.fixture(scope="module")
def picture():
    return layer_picture(CONTRIBUTING.read_text())


def test_the_layer_picture_names_every_module_and_only_modules(picture):
    layers, beside = picture
    missing = [m for m in MODULES if m not in layers and not is_beside(m, beside)]
    unknown = [m for m in layers if m not in MODULES]
    empty = [p for p in beside if not any(is_beside(m, [p]) for m in MODULES)]
    assert not missing, f"modules missing from the layer picture in CONTRIBUTING.md: {missing}"
    assert (not unknown
            and not empty), f"the layer picture names modules that do not exist: {unknown + empty}"


def test_every_import_goes_down_the_layers(picture):
    """A module imports from its own layer or a lower one; the modules beside the layers (tools,
    exercises) may import any layer, and no layer imports them."""
    layers, beside = picture
    wrong = []
    for module, targets in GRAPH.items():
        for target in sorted(targets):
            if is_beside(target, beside) and not is_beside(module, beside):
                wrong.append(f"{module} -> {target} (beside the layers: no layer imports it)")
            elif module in layers and target in layers and layers[target] > layers[module]:
                wrong.append(f"{module} (layer {layers[module]}) -> {target} (layer "
                             f"{layers[target]})")
    assert not wrong, "imports that go up the layers of CONTRIBUTING.md:\n" + "\n".join(wrong)


# --- environment variables ----------------------------------------------------------------------

READS = [  # a name read with os.environ.get, os.getenv, os.environ[...] or `... in os.environ`
    re.compile(r"""environ\.get\(\s*["']([A-Z][A-Z0-9_]*)["']"""),
    re.compile(r"""getenv\(\s*["']([A-Z][A-Z0-9_]*)["']"""),
    re.compile(r"""environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]"""),
    re.compile(r"""["']([A-Z][A-Z0-9_]*)["']\s+in\s+os\.environ"""),
]
READ_THROUGH_A_NAME = re.compile(r"""environ\.get\(\s*([A-Z][A-Z0-9_]*)\s*[,)]""")
SYSTEM = {"PATH", "PYTHONPATH"}  # the operating system's and Python's own


def environment_reads(path: Path) -> set[str]:
    """The environment variables a file reads, by literal name or through a module constant."""
    text = path.read_text()
    names = {m for pattern in READS for m in pattern.findall(text)}
    for constant in READ_THROUGH_A_NAME.findall(text):
        value = re.search(rf"""^{constant}\s*=\s*["']([A-Z][A-Z0-9_]*)["']""", text, re.M)
        assert value, (f"{path.name} reads the variable named by {constant}, which is not a string "
                       "constant there")
        names.add(value.group(1))
    return names


def test_every_environment_variable_read_is_documented_in_contributing():
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "book" / "conftest.py"]
    read = {name: sorted(str(f.relative_to(ROOT)) for f in files if name in environment_reads(f))
            for name in set().union(*(environment_reads(f) for f in files)) - SYSTEM}
    # the reader finds both forms
    assert "COURSE_LIB_TEST_PAUSE_AT" in read and "COURSE_LIB_SOURCE" in read
    documented = CONTRIBUTING.read_text().split("\n## Environment variables",
                                                1)[1].split("\n## ", 1)[0]
    undocumented = {name: where for name, where in read.items() if f"`{name}" not in documented}
    assert not undocumented, ("environment variables read but not documented in CONTRIBUTING.md's "
                              f"'Environment variables': {undocumented}")


# --- the module table of CONTRIBUTING.md ------------------------------------------------------

MODULE_TABLE_HEADING = "The modules of course_lib"


def module_table(text: str) -> list[str]:
    """The names in the first column of the table under "## The modules of course_lib" in
    CONTRIBUTING.md (a cell may name several: `` `moe`, `hf_moe` ``), in order, repeats kept."""
    section = text.split(f"\n## {MODULE_TABLE_HEADING}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows and rows[0].replace(" ", "") == "|module|holds|", (
        f"no '| module | holds |' table: {rows[:1]}"
    )
    return [name for row in rows[2:] for name in re.findall(r"`([\w.]+/?)`", row.split("|")[1])]


def package_contents() -> set[str]:
    """What the table must name: every module of course_lib/ but its __init__ and __main__, every
    package folder (``tools``, ``exercises``) by its name, every data folder with a trailing
    ``/``."""
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    folders = {p for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    return modules | {p.name if (p / "__init__.py").exists() else f"{p.name}/" for p in folders}


def test_the_module_table_names_every_module_and_folder_and_nothing_else():
    named = module_table(CONTRIBUTING.read_text())
    twice = sorted({n for n in named if named.count(n) > 1})
    expected = package_contents()
    assert {"tools", "exercises", "corpora/", "weights/"} <= expected  # the reader sees both kinds
    missing, unknown = sorted(expected - set(named)), sorted(set(named) - expected)
    assert not missing, (f"add these to the table of CONTRIBUTING.md's '{MODULE_TABLE_HEADING}': "
                         f"{missing}")
    assert not unknown, (f"the table of CONTRIBUTING.md's '{MODULE_TABLE_HEADING}' names what does "
                         f"not exist: {unknown}")
    assert not twice, f"named twice in CONTRIBUTING.md's module table: {twice}"


def test_the_package_docstring_points_at_the_module_table_and_names_only_real_modules():
    """course_lib/__init__.py's docstring sends the reader to the table instead of keeping a list
    of its own that falls behind; any module it does name exists."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    assert "CONTRIBUTING.md" in doc and f'"{MODULE_TABLE_HEADING}"' in " ".join(doc.split())
    assert f"\n## {MODULE_TABLE_HEADING}\n" in CONTRIBUTING.read_text()
    for name in re.findall(r"``course_lib\.([\w.]+)``", doc):
        assert resolve(f"course_lib.{name}"), ("course_lib/__init__.py's docstring names "
                                               f"course_lib.{name}, which does not exist")
