"""Adapt the library's docstrings to Sphinx without changing what they say.

- ``Shape:`` sections (the torch.nn convention) become a titled section whose entries are
  literal text, so ``(*, d_in)`` is not read as RST emphasis.
- ``*args, **kwargs:`` entries of an ``Args:`` section are escaped for RST.
- Public data (a dict of augmentation sets, a registry, a tuple of prefixes, type aliases) has
  the docstring of its type (``dict``'s, say) unless told otherwise: these get one sentence
  that says what they hold.
"""

from __future__ import annotations

import re
from typing import Any

DATA_DOCS = {
    "augment.augmentation_sets": (
        "The augmentation sets by name: ``'all'``, ``'safe'`` and ``'original'`` and their long "
        "names (``'augmentations_all'``, ``'augmentations_corruption_safe'``, "
        "``'augmentations_original'``), each a list of ``(img, level) -> img`` operations. "
        "See :mod:`augment.primitives` for what each set holds and the level scaling."
    ),
    "functional.STOCHASTIC_BLOCKS": (
        "The registry of blocks :func:`apply_stochastic_depth` can convert, by "
        "``target_layer_name`` (``'ResNetBottleneck'``, ``'ResNetBasicBlock'`` and those added "
        "with :func:`register_stochastic_block`); read it as a read-only mapping."
    ),
    "surgery.WRAPPER_PREFIXES": (
        "The state-dict key prefixes that wrappers add (``'module.'`` for DDP, ``'_orig_mod.'`` "
        "for ``torch.compile``), which :func:`unwrap_model` and :func:`remap_state_dict` look "
        "through."
    ),
    "surgery.OptimizerArg": (
        "What ``optimizers=`` accepts everywhere: ``None``, one ``torch.optim.Optimizer`` or a "
        "sequence of them."
    ),
    "surgery.ReplacementFunction": (
        "A policy: called with a matching module and its running index, returns a replacement "
        "module, or ``None`` to leave the module to the next policy."
    ),
}

_SECTION = re.compile(r"^(\s*)(\w[\w ]*):\s*$")
_ENTRY = re.compile(r"^(\s*- [\w ]+:\s*)(.+)$")
_VARARGS = re.compile(r"^(\s*)\*args, \*\*kwargs:")


def _literal_shapes(lines: list[str]) -> None:
    inside: str | None = None
    for i, line in enumerate(lines):
        section = _SECTION.match(line)
        if section is not None:
            inside = section.group(1) if section.group(2) == "Shape" else None
            continue
        if inside is None or not line.strip():
            continue
        if len(line) - len(line.lstrip()) <= len(inside):
            inside = None
            continue
        entry = _ENTRY.match(line)
        if entry is not None and "`" not in entry.group(2):
            lines[i] = f"{entry.group(1)}``{entry.group(2).rstrip()}``"


def process_docstring(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Sphinx's ``autodoc-process-docstring`` hook (runs before napoleon's)."""
    if name in DATA_DOCS:
        lines[:] = [DATA_DOCS[name]]
        return
    _literal_shapes(lines)
    for i, line in enumerate(lines):
        lines[i] = _VARARGS.sub(r"\1\\*args, \\*\\*kwargs:", line)


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", process_docstring, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
