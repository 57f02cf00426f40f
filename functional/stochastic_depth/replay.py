"""Which forward an activation-checkpointing recompute repeats, so that a stochastic block
replays that forward's decisions; and the refusal of checkpointed blocks under ``torch.compile``.

``torch.utils.checkpoint`` runs a region's forward again inside the backward pass. A block
called several times before one backward (two augmented views, R-Drop) must replay, in each
recompute, the draws of the forward that the recompute repeats, not those of its last one. The
region of a forward and of its recompute is named by one object that torch creates per
checkpoint call:

- reentrant checkpointing: the region's autograd node (``CheckpointFunction``'s context). The
  forward runs inside ``CheckpointFunction.forward``, where it is the local ``ctx``; the
  recompute runs inside that node's backward, where it is the current autograd node.
- non-reentrant checkpointing: the region's ``_CheckpointFrame``. The forward runs under the
  saved-tensor hooks that hold it (``frame``); the recompute runs inside their ``unpack_hook``,
  where it is the local ``frame``.

These are torch internals read defensively: when one is not found (another checkpoint
implementation), :func:`forward_region` or :func:`recompute_region` returns ``None`` and the
block falls back to replaying its last forward, which is right for one forward per backward.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch

__all__ = ["check_not_compiled_checkpoint", "forward_region", "recompute_region", "recomputing"]

_MAX_DEPTH = 64  # frames searched above a block's forward for the checkpoint's


def recomputing() -> bool:
    """Whether this forward runs inside a backward pass: activation checkpointing recomputing
    a checkpointed forward (reentrant or not); never true for an ordinary forward."""
    return torch._C._current_graph_task_id() != -1


def _reentrant_forward_code() -> Any:
    function = getattr(torch.utils.checkpoint, "CheckpointFunction", None)
    return getattr(getattr(function, "forward", None), "__code__", None)


def _enclosing_local(code_name: str, local: str, code: Any = None) -> Any:
    """The local ``local`` of the nearest enclosing frame of torch's checkpoint module whose
    function is ``code`` (or, without ``code``, is named ``code_name``); ``None`` if none."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return None
        f_code = frame.f_code
        if (
            (f_code is code)
            if code is not None
            else (
                f_code.co_name == code_name
                and frame.f_globals.get("__name__") == "torch.utils.checkpoint"
            )
        ):
            return frame.f_locals.get(local)
        frame = frame.f_back
    return None


def _non_reentrant_frame_from_stack() -> object | None:
    """The ``_CheckpointFrame`` of the non-reentrant ``checkpoint`` call this forward runs in,
    read from the suspended generator that ``checkpoint`` holds (``gen``, whose frame names it
    ``new_frame``): the way to it on a torch without ``_top_saved_tensors_default_hooks``
    (2.6 has none)."""
    code = getattr(torch.utils.checkpoint.checkpoint, "__wrapped__", None)
    gen = _enclosing_local("checkpoint", "gen", getattr(code, "__code__", None))
    frame = getattr(gen, "gi_frame", None)
    return None if frame is None else frame.f_locals.get("new_frame")


def forward_region() -> object | None:
    """The checkpoint region this ordinary forward runs in, or ``None`` (not checkpointed)."""
    top_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top_hooks is None:
        region = _non_reentrant_frame_from_stack()
        if region is not None:
            return region
        hooks = None
    else:
        hooks = top_hooks(False)
    if hooks is not None:  # non-reentrant: the hooks' closure holds the region's frame
        pack = hooks[0]
        code = getattr(pack, "__code__", None)
        cells = getattr(pack, "__closure__", None)
        if code is not None and cells and "frame" in code.co_freevars:
            if getattr(pack, "__module__", None) == "torch.utils.checkpoint":
                return cells[code.co_freevars.index("frame")].cell_contents
        return None
    if torch.is_grad_enabled():
        return None  # neither kind of checkpoint: a plain forward
    code = _reentrant_forward_code()
    return None if code is None else _enclosing_local("forward", "ctx", code)


def recompute_region() -> object | None:
    """The checkpoint region this recompute repeats, or ``None`` (not found)."""
    node = torch._C._current_autograd_node()
    if getattr(node, "_forward_cls", None) is getattr(
        torch.utils.checkpoint, "CheckpointFunction", None
    ):
        return node  # reentrant: the region's node runs its backward
    return _enclosing_local("unpack_hook", "frame")


def _in_traced_checkpoint() -> bool:
    """Whether dynamo is tracing the body of ``torch.utils.checkpoint`` just now."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tracer: Any = InstructionTranslator.current_tx().output.current_tracer
    except Exception:  # not tracing with dynamo, or its internals moved: nothing to refuse
        return False
    while tracer is not None:
        if getattr(tracer, "description", None) == "torch.utils.checkpoint.checkpoint":
            return True
        # Older dynamo (torch 2.6) gives a subgraph's tracer no description at all: a block
        # traced in any nested subgraph there is refused (checkpoint is the one such region a
        # training forward meets; the message names it).
        if not hasattr(tracer, "description") and getattr(tracer, "parent", None) is not None:
            return True
        tracer = getattr(tracer, "parent", None)
    return False


@torch.compiler.assume_constant_result
def check_not_compiled_checkpoint(block_name: str) -> bool:
    """Refuse, while ``torch.compile`` traces, a training forward of a stochastic block (of
    class ``block_name``) inside an activation-checkpointed region; returns ``True``.

    The compiled recompute of such a region reads the block's draw counter after the forward
    has advanced it (torch saves the counter buffer for the backward and then updates it in
    place), so it recomputes other decisions than the forward made and the gradients are
    wrong. Dynamo runs this function while tracing (``assume_constant_result``), so the error
    stops the compilation (a ``raise`` in traced code would only make dynamo fall back to
    eager for the outer frame and compile the blocks alone, inside the eager checkpoint).
    """
    if _in_traced_checkpoint():
        raise RuntimeError(
            f"stochastic depth cannot run inside torch.utils.checkpoint under torch.compile: "
            f"the compiled recompute of the checkpointed {block_name} would draw other drop "
            "decisions than its forward (wrong gradients). Either keep the checkpointed region "
            "eager, e.g. region = torch.compiler.disable(region) (eager recomputes replay the "
            "forward's decisions), or compile without checkpointing the stochastic blocks "
            "(e.g. model.set_grad_checkpointing(False) on a timm model)"
        )
    return True
