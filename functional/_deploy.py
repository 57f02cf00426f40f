"""Deployment of transformed models: what the layers of the model transforms say to
``torch.jit.script``.

``torch.export.export`` traces every transformed model in evaluation mode, with the outputs of
eager mode (tested for every transform in ``tests/functional/test_deployment.py``). TorchScript
cannot compile most of the layers the transforms add (custom autograd functions, Python-side
state, autocast queries, parametrizations), and failed deep inside its compiler with messages
such as "Unknown type annotation". Those layers mix in :class:`NotScriptable`: TorchScript calls
``__prepare_scriptable__`` on every submodule before it compiles anything, so scripting such a
model stops at once with a ``TypeError`` that names the layer and the way out.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["NotScriptable"]


class NotScriptable:
    """Mixin of a layer that ``torch.jit.script`` cannot compile: scripting a model holding one
    raises a ``TypeError`` naming ``torch.export.export`` (and ``script_hint``, a class's own
    way out) instead of failing inside TorchScript's compiler."""

    script_hint: ClassVar[str] = ""

    def __prepare_scriptable__(self) -> object:  # never returns: a subclass may
        hint = f"; or {self.script_hint}" if self.script_hint else ""
        raise TypeError(
            f"torch.jit.script cannot compile {type(self).__name__}, a layer of this library's "
            "model transforms. Export the model instead: torch.export.export(model.eval(), "
            f"example_inputs) traces it with the outputs of eager mode{hint}"
        )
