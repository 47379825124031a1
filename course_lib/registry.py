"""The registry of model kinds: a name for every model class that can be stored and rebuilt.

A model module registers its class with ``@register_model("gpt", GPTConfig)``, and nothing
more: it does not import the checkpoint format. :mod:`course_lib.checkpoint` stores a model
as its kind's name plus its config, and rebuilds it through :func:`lookup`. This module
imports nothing from course_lib, so any module can register without an import cycle. The loaders
of published weights (``GPT.from_pretrained``: GPT-2, Llama, Mixtral...) register here the same way.
"""
from __future__ import annotations

MODELS: dict[str, type] = {}  # model kind -> model class (with a .config_class)


def register_model(name: str, config_class: type):
    """Class decorator: models of this class are stored as ``model_kind = name``. The class is
    built as ``cls(config_class.from_dict(d))`` and must keep its config in ``.config``. A class
    may add ``check_fits(config)``, which the checkpoint loader calls before building from a
    file's config (a GPT refuses sizes larger than the machine's memory there)."""
    def register(cls):
        if name in MODELS and MODELS[name] is not cls:
            raise ValueError(f"model kind {name!r} is already registered to "
                             f"{MODELS[name].__name__}")
        for method in ("to_dict", "from_dict"):
            if not callable(getattr(config_class, method, None)):
                raise TypeError(f"{config_class.__name__} needs a {method}() to be stored in "
                                "checkpoints")
        cls.model_kind, cls.config_class = name, config_class
        MODELS[name] = cls
        return cls
    return register


def lookup(kind: str) -> type:
    """The model class registered as ``kind``; a ValueError naming the known kinds otherwise."""
    if kind not in MODELS:
        raise ValueError(f"model kind {kind!r} is not registered (known: "
                         f"{', '.join(sorted(MODELS))})")
    return MODELS[kind]


def class_for_config(config) -> type:
    """The model class registered with ``config``'s class (a preset's config names its kind so)."""
    found = [cls for cls in MODELS.values() if cls.config_class is type(config)]
    if len(found) != 1:
        raise ValueError(f"{type(config).__name__} is registered with {len(found)} model kinds, "
                         "not one: build the model class by its kind name "
                         "(course_lib.registry.lookup)")
    return found[0]


def kind_of(model) -> str:
    """The name ``model``'s class is registered under; a ValueError when it is not registered
    (a subclass of a registered class is not: it must register itself)."""
    kind = getattr(type(model), "model_kind", None)
    if kind is None or MODELS.get(kind) is not type(model):
        raise ValueError(f"{type(model).__name__} is not a registered model kind "
                         f"({', '.join(sorted(MODELS))}): decorate its class with "
                         "@course_lib.registry.register_model(name, ConfigClass)")
    return kind


# Hugging Face model_type -> function(model_or_name, dropout) -> GPT; filled by course_lib.gpt2 and
# course_lib.llama and course_lib.hf_moe when they are imported (course_lib/__init__.py imports
# them); GPT.from_pretrained looks a model's type up here.
PRETRAINED_LOADERS: dict[str, object] = {}


def load_hub_model(name: str, class_name: str, what: str, instance: str):
    """The Hugging Face model ``name`` downloaded through ``transformers.<class_name>``, for a
    loader of ``what`` ("GPT-2", "a Llama"); ``instance`` names the class a reader can build
    offline and pass in instead. One clear error when transformers or the network is missing."""
    try:
        import transformers
    except ImportError as e:
        raise ImportError(f"loading {what} by name needs the `transformers` package: pip install "
                          f"transformers (or pass a {instance} you already have)") from e
    try:
        return getattr(transformers, class_name).from_pretrained(name)
    except OSError as e:
        raise OSError(f"could not download {name!r} from the Hugging Face Hub ({e}). It needs a "
                      f"network connection (Colab has one); offline, build a {instance} yourself "
                      "and pass it in.") from e


def register_pretrained(model_type: str):
    """Decorator: ``@register_pretrained("llama")`` makes ``GPT.from_pretrained`` hand models of
    that Hugging Face ``model_type`` to the decorated function."""
    def decorate(loader):
        PRETRAINED_LOADERS[model_type] = loader
        return loader
    return decorate
