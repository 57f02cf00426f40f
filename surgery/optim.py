"""Keep optimizers consistent when model surgery swaps parameters.

The rule, applied to every optimizer independently:

* a parameter object that is still in use keeps its place, its param group and its state
  (momentum buffers, Adam moments, step counts);
* a parameter that was removed leaves its group and its state is dropped;
* a brand-new parameter joins the param group of the parameters it replaces (so it gets the same
  learning rate, weight decay, ...) at the position where the replaced module's parameters were,
  so the flattened parameter order -- and with it ``optimizer.state_dict()`` -- stays stable;
* an optimizer that held none of the replaced parameters is left untouched.

Everything is done with dictionaries keyed by ``id()``, in one pass over each optimizer: the cost
is linear in the number of parameters, whatever the number of replacements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from surgery._types import OptimizerArg, as_optimizer_list

__all__ = ["update_params_in_optimizer"]

_Pair = tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]


def update_params_in_optimizer(
    old_params: Iterable[torch.Tensor],
    new_params: Iterable[torch.Tensor],
    optimizers: OptimizerArg,
) -> None:
    """Replace ``old_params`` by ``new_params`` in every optimizer that holds some of them.

    Parameters present in both lists survive with their state; parameters only in ``old_params``
    leave the optimizer together with their state; parameters only in ``new_params`` join the
    param group that held the first of ``old_params``, at that parameter's position.

    Args:
        old_params: the parameters being replaced.
        new_params: the parameters that take their place (may include some of ``old_params``).
        optimizers: one optimizer, a sequence of optimizers, or ``None`` (nothing to do).

    Raises:
        TypeError: arguments of the wrong type.
        ValueError: new parameters but no old ones (they would have no group to join), or a
            new parameter that is not a leaf tensor.

    Example:
        >>> import torch
        >>> old, new = torch.nn.Linear(2, 2), torch.nn.Linear(2, 3)
        >>> opt = torch.optim.SGD(old.parameters(), lr=0.1)
        >>> update_params_in_optimizer(old.parameters(), new.parameters(), opt)
        >>> [p.shape[0] for p in opt.param_groups[0]["params"]]
        [3, 3]
    """
    old = _check_params(old_params, "old_params")
    new = _check_params(new_params, "new_params")
    opts = as_optimizer_list(optimizers)
    if not old and new:
        raise ValueError(
            f"old_params is empty, so the {len(new)} new parameter(s) have no param group to "
            "join; add them with optimizer.add_param_group({'params': [...]}) instead"
        )
    new_ids = {id(p) for p in new}
    removed = {id(p) for p in old if id(p) not in new_ids}
    for opt in opts:
        rebuild_param_groups(opt, [(old, new)], removed)


def _check_params(params: Iterable[torch.Tensor], argument: str) -> list[torch.Tensor]:
    if isinstance(params, torch.Tensor):
        raise TypeError(f"{argument} must be an iterable of parameters, got a single Tensor")
    try:
        result = list(params)
    except TypeError:
        raise TypeError(
            f"{argument} must be an iterable of parameters, got {type(params).__name__}"
        ) from None
    for i, p in enumerate(result):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{argument}[{i}] must be a torch.Tensor, got {type(p).__name__}")
    return result


def rebuild_param_groups(
    optimizer: torch.optim.Optimizer, pairs: Sequence[_Pair], removed: set[int]
) -> None:
    """Apply a batch of ``(old_params, new_params)`` replacements to one optimizer in one pass.

    ``removed`` holds the ``id()`` of every parameter that no longer exists in the model. An
    optimizer that held none of the replaced parameters is left untouched. Param group lists are
    edited in place, so optimizers that keep a reference to them (LBFGS) stay valid.
    """
    held = {id(p): gi for gi, group in enumerate(optimizer.param_groups) for p in group["params"]}
    owners, replaced_ids = _owning_pairs(pairs, held)
    if not owners:
        return
    rebuild = _Rebuild(pairs, owners, held, replaced_ids)
    for gi, group in enumerate(optimizer.param_groups):
        group["params"][:] = rebuild.group(gi, group["params"], removed, optimizer.state)


def _owning_pairs(
    pairs: Sequence[_Pair], held: dict[int, int]
) -> tuple[dict[int, list[int]], set[int]]:
    """Map each held replaced parameter's ``id()`` to the pairs that replace it; all replaced ids."""
    owners: dict[int, list[int]] = {}
    replaced_ids: set[int] = set()
    for k, (old, _new) in enumerate(pairs):
        for p in old:
            replaced_ids.add(id(p))
            if id(p) in held:
                owners.setdefault(id(p), []).append(k)
    return owners, replaced_ids


class _Rebuild:
    """One pass over an optimizer's param groups, in order.

    A pair's new parameters are emitted where the first of its old parameters that the
    optimizer holds is met; every parameter is emitted at most once.
    """

    def __init__(
        self,
        pairs: Sequence[_Pair],
        owners: dict[int, list[int]],
        held: dict[int, int],
        replaced_ids: set[int],
    ) -> None:
        self.pairs = pairs
        self.owners = owners
        self.held = held
        self.replaced_ids = replaced_ids
        self.emitted: set[int] = set()
        self.triggered: set[int] = set()

    def group(
        self, gi: int, params: list[torch.Tensor], removed: set[int], state: dict[torch.Tensor, Any]
    ) -> list[torch.Tensor]:
        """The new parameter list of group ``gi``; drops the state of removed parameters."""
        rebuilt: list[torch.Tensor] = []
        for p in params:
            for k in self.owners.get(id(p), ()):
                if k not in self.triggered:
                    self.triggered.add(k)
                    self._emit_new(self.pairs[k][1], gi, rebuilt)
            pid = id(p)
            if pid in removed:
                state.pop(p, None)
            elif pid not in self.emitted:
                self.emitted.add(pid)
                rebuilt.append(p)
        return rebuilt

    def _emit_new(self, new: Sequence[torch.Tensor], gi: int, rebuilt: list[torch.Tensor]) -> None:
        for q in new:
            if self._joins_group(id(q), gi):
                if not q.is_leaf:
                    raise ValueError(
                        "a replacement parameter is not a leaf tensor and cannot be "
                        f"optimized (shape {tuple(q.shape)}); build it as an nn.Parameter"
                    )
                self.emitted.add(id(q))
                rebuilt.append(q)

    def _joins_group(self, qid: int, gi: int) -> bool:
        if qid in self.emitted:
            return False
        if qid in self.held:
            return self.held[qid] == gi  # a survivor that lives in another group stays there
        return qid not in self.replaced_ids  # a survivor this optimizer never held stays out
