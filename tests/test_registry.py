"""course_lib.registry: model kinds register without importing the checkpoint format, and the
checkpoint format finds them by name."""
import ast
from pathlib import Path

import pytest
import torch.nn as nn

from course_lib import registry
from course_lib.bigram import BigramLanguageModel
from course_lib.model import GPT, GPTConfig
from course_lib.seq2seq import Seq2Seq

ROOT = Path(__file__).resolve().parents[1]


def test_every_model_kind_is_registered_under_its_name():
    from course_lib.lora_gpt import LoRAGPT

    for kind, cls in [("gpt", GPT), ("bigram", BigramLanguageModel), ("seq2seq", Seq2Seq),
                      ("gpt-lora", LoRAGPT)]:
        assert registry.lookup(kind) is cls and cls.model_kind == kind
        assert registry.MODELS[kind] is cls


def test_unknown_kinds_and_unregistered_classes_are_clear_errors():
    with pytest.raises(ValueError, match=r"model kind 'alien' is not registered \(known: .*gpt"):
        registry.lookup("alien")

    class Subclass(GPT):  # inherits GPT's kind, but is not GPT: it must register itself
        pass

    with pytest.raises(ValueError, match="Subclass is not a registered model kind"):
        registry.kind_of(Subclass(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1,
                                            n_embd=4)))
    assert registry.kind_of(GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1,
                                          n_embd=4))) == "gpt"


def test_register_model_checks_the_config_class_and_refuses_a_taken_name():
    class NoDict:
        pass

    with pytest.raises(TypeError, match="NoDict needs a to_dict"):
        registry.register_model("no-dict", NoDict)(nn.Linear)
    with pytest.raises(ValueError, match="'gpt' is already registered to GPT"):
        registry.register_model("gpt", GPTConfig)(nn.Linear)
    assert "no-dict" not in registry.MODELS


@pytest.mark.parametrize("module", ["model", "bigram", "seq2seq", "lora_gpt"])
def test_model_modules_register_without_importing_the_checkpoint_format_to_do_it(module):
    """At module level, model, bigram and seq2seq import nothing from checkpoint; lora_gpt imports
    it for what it does (a LoRA checkpoint loads its base), not to register."""
    tree = ast.parse((ROOT / "course_lib" / f"{module}.py").read_text())
    top = [node for node in tree.body if isinstance(node, ast.ImportFrom)]
    names = {(node.module, alias.name) for node in top for alias in node.names}
    assert ("registry", "register_model") in names
    assert not any(mod == "checkpoint" and name == "register_model" for mod, name in names)
    if module != "lora_gpt":
        assert not any(mod == "checkpoint" for mod, _ in names)


def test_the_registry_imports_no_course_lib_module():
    """So that any module can register without an import cycle."""
    tree = ast.parse((ROOT / "course_lib" / "registry.py").read_text())
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
    absolute = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert relative == [] and not any(name.startswith("course_lib") for name in absolute)


def kinds_defined_in_the_source() -> set[str]:
    """Every name given to ``@register_model("name", ...)`` in course_lib's source (read, not
    imported)."""
    kinds = set()
    for path in (ROOT / "course_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_model"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                kinds.add(node.args[0].value)
    return kinds


def test_every_kind_defined_in_the_source_is_registered_after_a_bare_import():
    """In a fresh process (the tests have imported every module already, so they cannot see a kind
    that registers only when some other import happens to load its module)."""
    import json
    import os
    import subprocess
    import sys

    code = "import json, course_lib, course_lib.registry as r; print(json.dumps(sorted(r.MODELS)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    defined = kinds_defined_in_the_source()
    assert {"gpt", "bigram", "seq2seq", "gpt-lora"} <= defined
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) == defined
