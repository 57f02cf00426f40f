"""Sharpness-Aware Minimization (Foret et al. 2021) as a wrapper around any torch optimizer.

Paper: P. Foret, A. Kleiner, H. Mobahi, B. Neyshabur, "Sharpness-Aware Minimization for
Efficiently Improving Generalization", ICLR 2021, https://arxiv.org/abs/2010.01412.
"""

# Long file: one optimizer class whose docstring is the whole protocol (closure, interval, grad
# scaler, non-finite steps, compile, DDP and FSDP2), with the small pieces only its step uses.

from __future__ import annotations

import contextlib
import numbers
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.amp.grad_scaler import OptState
from torch.optim import Optimizer

from functional._args import check_int, check_positive
from functional._numeric import (
    add_scaled_,
    foreach_total_norm,
    group_by_device_and_dtype,
    local_tensors,
)

__all__ = ["SAMOptimizer"]


class _GradientsView:
    """Stand-in optimizer handed to ``GradScaler.unscale_`` for the second (perturbed) pass.

    A ``GradScaler`` unscales each optimizer once per iteration; SAM produces two sets of scaled
    gradients per iteration, so the second set is unscaled through this view of the same
    parameters. Its inf/NaN check joins the scaler's bookkeeping, so ``scaler.update()`` backs
    off when either pass overflowed.
    """

    def __init__(self, sam: SAMOptimizer) -> None:
        self._sam = sam

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._sam.param_groups


class _Cycle:
    """Where the next step falls within the interval (0 .. interval-1), a plain Python object.

    Kept outside the optimizer's own attributes: dynamo treats optimizers specially and does
    not guard on their other Python attributes, so a compiled step would keep the first
    decision; on an ordinary object the value is guarded and each kind of step has its graph.
    """

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = 0


class _Scratch:
    """Scratch tensors for the copy of w, kept between steps, on a plain Python object.

    Reusing them spares the allocator a parameter-sized allocation and free per SAM step (on
    CPU, glibc returns such blocks to the OS and every step page-faults them back). They hold
    no state: any tensors of the right layout do, so they are matched by layout alone. (Not an
    attribute of the optimizer: dynamo before torch 2.9 cannot trace a ``setattr`` on an
    ``Optimizer`` subclass, measured on 2.6.0.)
    """

    __slots__ = ("buffers", "layout")

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.layout: list[tuple[Any, ...]] = []

    def like(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Tensors shaped, strided and placed like ``params``, reused when they already are.

        Under compile they are new each step: the graph plans its own memory, and a reuse
        decision would be guarded (a second graph after the first step).
        """
        if torch.compiler.is_compiling():
            return [torch.empty_like(p, requires_grad=False) for p in params]
        layout = [(p.shape, p.stride(), p.dtype, p.device) for p in params]
        if layout != self.layout:
            self.buffers = [torch.empty_like(p, requires_grad=False) for p in params]
            self.layout = layout
        return self.buffers


class SAMOptimizer(Optimizer):
    r"""Wrap ``base_optimizer`` so that each step minimises the sharpness-aware loss.

    SAM replaces the gradient at the weights :math:`w` by the gradient at the worst point of a
    small L2 ball around them, to first order:

    .. math::
        \hat\epsilon(w) = \rho\,\frac{g}{\lVert g\rVert_2 + \varepsilon},\qquad
        g = \nabla L(w),\qquad
        w \leftarrow \operatorname{base\_step}\bigl(w,\ \nabla L(w + \hat\epsilon(w))\bigr)

    where :math:`\lVert g\rVert_2` is the norm of the gradients of *all* parameters together
    (those whose ``.grad`` is None are neither counted nor perturbed).

    ``step(closure)`` needs a closure that zeroes the gradients, computes the loss, calls
    ``backward`` and returns the loss. Steps are numbered 1, 2, 3, ... (``global_step`` counts
    the calls made so far); step ``n`` is a *SAM step* when ``n % interval == 0``, so with
    ``interval=1`` every step is one and with ``interval=k`` steps ``k, 2k, 3k, ...`` are. On a
    SAM step the closure runs at :math:`w` and at :math:`w + \hat\epsilon(w)`; the weights are
    then restored bit for bit (from a saved copy, not by subtracting :math:`\hat\epsilon`) and
    the base optimizer steps from :math:`w` with the gradient of the second pass. Other steps
    run the closure once and step the base optimizer. ``step`` returns the closure's loss at
    :math:`w` (the first pass) in both cases. The norm and the copy of :math:`w` use
    ``torch._foreach_*`` kernels and the perturbation is one fused pass (``torch._fused_sgd_``
    with ``maximize=True`` and the device-side factor as its learning rate): a few launches per
    device and dtype, about 24 in all on ResNet-50, and 1.29x the bytes the step must move. The
    copy of :math:`w` lives in scratch buffers kept between steps (one parameter-sized copy, the
    extra memory SAM needs anyway).

    The wrapper shares the base optimizer's ``param_groups``, ``state`` and ``defaults`` (the
    same objects), so LR schedulers can drive either object, ``add_param_group`` adds to both,
    and ``state_dict()`` is the base optimizer's plus a ``"sam"`` entry (``global_step`` and the
    hyperparameters); ``load_state_dict`` restores both, and also accepts a plain state dict of
    the base optimizer (the ``"sam"`` entry is then left as it is). A SAM state dict loads into
    the bare base optimizer too (torch ignores the extra key).

    Non-finite gradients: if the gradient at :math:`w` has an inf or NaN, the perturbation is
    skipped (:math:`\hat\epsilon = 0`: the second pass runs at :math:`w` itself), so one
    bad entry does not spread NaN to every weight through :math:`0 \cdot \infty`; without a
    grad scaler the base optimizer then steps as it would have without SAM. This is decided on
    the device, with no host read and no extra pass over the gradients: the fused update
    receives "the norm is not finite" as its ``found_inf`` flag and then writes nothing.

    Mixed precision: with bfloat16 autocast no scaler is needed. For float16 with
    ``torch.amp.GradScaler`` pass ``grad_scaler=scaler``, call ``scaler.scale(loss).backward()``
    inside the closure, call ``opt.step(closure)`` (not ``scaler.step``, which refuses closures)
    and then ``scaler.update()``. Each pass's gradients are unscaled before they are used (the
    norm is taken on true gradients); if either pass has inf/NaN gradients the weights are
    restored and the base step is skipped, and ``scaler.update()`` then lowers the scale, as
    with ``scaler.step``. An overflow at :math:`w` leaves the model exactly as ``scaler.step``
    leaves it: the second pass still runs (at :math:`w`), but the buffers of every module
    whose forward it runs (BatchNorm statistics) are put back afterwards, selected on the device
    (a copy of those buffers per SAM step while a scaler is enabled). The inf/NaN flags stay
    on the device: a base optimizer with a fused step (``SGD``/``Adam``/``AdamW`` with
    ``fused=True``, which ``GradScaler`` also drives this way) receives them as ``found_inf``
    and skips on the device, with no synchronisation.
    Any other base optimizer needs to know on the host whether to step: that one read per step
    is inherent (``GradScaler.step`` makes the same read) and is the only one SAM makes.
    :math:`\rho\,g/(\lVert g\rVert+\varepsilon)` is formed in float32 and added to
    float16/bfloat16 weights with one rounding, so its length stays :math:`\rho` however large
    the gradient norm (a factor rounded to float16 would be subnormal beyond
    :math:`\lVert g\rVert \approx 820`); a perturbation below a weight's resolution still
    rounds away, as any update that small does.

    Gradient clipping: clip in a step pre-hook of the base optimizer,
    ``opt.base_optimizer.register_step_pre_hook(clip)``, where ``clip(*_)`` calls
    ``F.apply_gradient_clipping(params, 'norm', max_norm)`` and returns None. It runs right before each base step, on the gradients the update
    uses (those of the perturbed pass on a SAM step), after SAM has unscaled them: the
    threshold applies to true gradients, with or without a grad scaler, and a step skipped for
    inf/NaN does not run it (a fused base optimizer runs it and then skips on the device). Do
    not call ``scaler.unscale_`` in the closure: SAM unscales each pass itself, and says so
    with a ``RuntimeError``. (Clipping the first pass's gradients would not change the
    perturbation's direction for ``'norm'``: it is normalised.)

    Device and compile behaviour: without a grad scaler (or with a fused base optimizer) a
    step reads no tensor value on the host. The step counter is a 0-d CPU tensor, so the step
    traces under ``torch.compile(fullgraph=True)`` (with a closure that dynamo can trace)
    without specialising on the step number: ``interval=1`` compiles one graph; with
    ``interval > 1`` a SAM step and a plain step are two different programs (one or two
    forward/backward passes), so dynamo builds a few graphs (at most three: the first step,
    then one per kind) and then no more.

    Distributed data parallel: the closure's ``backward`` all-reduces the gradients, so the norm
    and :math:`\hat\epsilon` are computed from the averaged gradient and every rank applies the
    same perturbation and the same update: replicas stay identical. (The paper's per-device
    "m-sharpness" variant, which perturbs each replica with its local gradient, is not what this
    does.) Sharded parameters (FSDP2's ``fully_shard``, ``DTensor``) work the same way: the
    norm is that of the whole gradient (each rank's shard norm, summed over the ranks in one
    all-reduce), each rank perturbs, saves and restores its own shards in place, and the run
    equals one process on the whole batch.

    Args:
        base_optimizer: the optimizer that performs the update (SGD, AdamW, ...).
        rho: radius :math:`\rho` of the neighbourhood, > 0 (as the SAM seed states; for plain
            steps use the base optimizer, or a large ``interval``).
        epsilon: :math:`\varepsilon` added to the gradient norm, > 0.
        interval: every ``interval``-th step is a SAM step, >= 1.
        grad_scaler: optional ``torch.amp.GradScaler`` whose scaled gradients the closure
            produces (see above).

    Example:
        >>> import torch
        >>> from functional import SAMOptimizer
        >>> model = torch.nn.Linear(4, 1)
        >>> opt = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rho=0.05)
        >>> x, y = torch.randn(8, 4), torch.randn(8, 1)
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = torch.nn.functional.mse_loss(model(x), y)
        ...     loss.backward()
        ...     return loss
        >>> loss = opt.step(closure)
        >>> opt.global_step
        1
    """

    def __init__(
        self,
        base_optimizer: Optimizer,
        rho: float = 0.05,
        epsilon: float = 1e-12,
        interval: int = 1,
        *,
        grad_scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        if not isinstance(base_optimizer, Optimizer):
            raise TypeError(
                f"base_optimizer must be a torch.optim.Optimizer, got {type(base_optimizer).__name__}"
            )
        if isinstance(base_optimizer, SAMOptimizer):
            raise TypeError(
                "base_optimizer is already a SAMOptimizer; wrap the inner optimizer once"
            )
        if grad_scaler is not None and not isinstance(grad_scaler, torch.amp.GradScaler):
            raise TypeError(
                f"grad_scaler must be a torch.amp.GradScaler or None, got {type(grad_scaler).__name__}"
            )
        self.base_optimizer = base_optimizer
        self.rho = _check_rho(rho, "rho")
        self.epsilon = check_positive(epsilon, "epsilon")
        self.interval = check_int(interval, "interval", minimum=1)
        self.grad_scaler = grad_scaler
        # The step count lives in a tensor, updated in place, so a compiled step does not
        # specialise on it; the position within the interval is a small Python int.
        self._steps = torch.zeros((), dtype=torch.int64)
        self._cycle = _Cycle()
        self._second_pass = _GradientsView(self)
        self._scratch = _Scratch()
        # What torch.optim.Optimizer.__init__ sets up, minus the parameter bookkeeping, which
        # lives in the base optimizer (see the properties below).
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self._patch_step_function()
        self._warned_capturable_if_run_uncaptured = True

    # The parameter bookkeeping is the base optimizer's: the same objects, never copies, so
    # schedulers, checkpoints and surgery see one truth whichever object they are given.
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.base_optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.base_optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self.base_optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.base_optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.base_optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.base_optimizer.defaults = value

    @property
    def global_step(self) -> int:
        """The number of calls to :meth:`step` so far (read on the host: not in a hot loop)."""
        return int(self._steps)

    @global_step.setter
    def global_step(self, value: int) -> None:
        value = check_int(value, "global_step", minimum=0)
        self._steps = torch.full((), value, dtype=torch.int64)
        self._cycle.phase = value % self.interval

    def is_sam_step(self) -> bool:
        """Whether the next call to :meth:`step` is a SAM step (two passes)."""
        return self._cycle.phase == self.interval - 1

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group to the base optimizer (and so to this one)."""
        self.base_optimizer.add_param_group(param_group)

    def _sam_hyperparameters(self) -> dict[str, Any]:
        return {
            "global_step": self.global_step,
            "rho": self.rho,
            "epsilon": self.epsilon,
            "interval": self.interval,
        }

    def state_dict(self) -> dict[str, Any]:
        """The base optimizer's state dict plus ``"sam"``: ``global_step``, ``rho``, ``epsilon``,
        ``interval``."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        state = self.base_optimizer.state_dict()
        state["sam"] = self._sam_hyperparameters()
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            hooked = post_hook(self, state)
            if hooked is not None:
                state = hooked
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict made by :meth:`state_dict` (or by the bare base optimizer)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            hooked = pre_hook(self, state_dict)
            if hooked is not None:
                state_dict = hooked
        base_state = dict(state_dict)
        sam_state = base_state.pop("sam", None)
        if sam_state is not None:
            expected = set(self._sam_hyperparameters())
            if not isinstance(sam_state, dict) or set(sam_state) != expected:
                raise ValueError(
                    f"state_dict['sam'] must be a dict with keys {sorted(expected)}, got {sam_state!r}"
                )
            global_step = check_int(
                sam_state["global_step"], "state_dict['sam']['global_step']", minimum=0
            )
            rho = _check_rho(sam_state["rho"], "state_dict['sam']['rho']")
            epsilon = check_positive(sam_state["epsilon"], "state_dict['sam']['epsilon']")
            interval = check_int(sam_state["interval"], "state_dict['sam']['interval']", minimum=1)
        self.base_optimizer.load_state_dict(base_state)
        if sam_state is not None:
            self.rho, self.epsilon, self.interval = rho, epsilon, interval
            self.global_step = global_step
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

    def __getstate__(self) -> dict[str, Any]:
        # torch.optim.Optimizer pickles only defaults/state/param_groups, which here belong to
        # the base optimizer: keep the whole wrapper instead, minus the scratch buffers.
        state = self.__dict__.copy()
        state["_scratch"] = _Scratch()
        return state

    def __repr__(self) -> str:
        inner = repr(self.base_optimizer).replace("\n", "\n    ")
        return (
            f"{type(self).__name__}(rho={self.rho}, epsilon={self.epsilon}, "
            f"interval={self.interval},\n    base_optimizer={inner})"
        )

    def _unscale(self, owner: object) -> torch.Tensor | None:
        """Unscale the current gradients with the grad scaler; the inf/NaN flag (a device
        tensor, > 0 when some gradient is not finite), or None without an active scaler."""
        scaler = self.grad_scaler
        if scaler is None or not scaler.is_enabled():
            return None
        if scaler._per_optimizer_states[id(owner)]["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "scaler.unscale_() was already called on this SAMOptimizer in this step (in the "
                "closure?); SAM unscales each pass itself. To clip the true gradients, clip in "
                "a step pre-hook of the base optimizer, which runs after SAM has unscaled them: "
                "opt.base_optimizer.register_step_pre_hook(clip), where clip(*_) calls "
                "F.apply_gradient_clipping(model.parameters(), 'norm', 1.0) and returns None"
            )
        scaler.unscale_(owner)  # type: ignore[arg-type]
        # GradScaler keeps the inf/NaN flags it just computed per optimizer (keyed by id); this is
        # where GradScaler.step takes them from too.
        found = scaler._per_optimizer_states[id(owner)]["found_inf_per_device"]
        assert scaler._scale is not None  # unscale_ raised otherwise (scale() never called)
        flags = [v.to(scaler._scale.device, non_blocking=True) for v in found.values()]
        return torch.stack(flags).amax() if flags else None

    def _base_step(self, found_inf: torch.Tensor | None) -> None:
        """Step the base optimizer, skipping the step when ``found_inf`` is set."""
        base = self.base_optimizer
        if found_inf is None:
            base.step()
        elif getattr(base, "_step_supports_amp_scaling", False):
            # A fused step takes the flag and skips on the device (as GradScaler.step does).
            base.found_inf = found_inf  # type: ignore[attr-defined]
            base.grad_scale = None  # type: ignore[attr-defined]  # already unscaled
            try:
                base.step()
            finally:
                del base.found_inf, base.grad_scale  # type: ignore[attr-defined]
        elif not bool(found_inf):  # inherent host read (documented): whether to step at all
            base.step()

    def _gradients(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        params, grads = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise TypeError("SAMOptimizer does not support sparse gradients")
                    params.append(p)
                    grads.append(p.grad)
        return params, grads

    def _ascend(
        self, params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> tuple[dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]], torch.Tensor]:
        """Move the weights from w to w + e(w), saving w: the groups (params, grads, saved w) of
        local tensors, and a 0-d bool on the device, True when g is not finite and the weights
        were left at w."""
        norm = foreach_total_norm(grads)  # global over the shards of DTensor gradients
        skipped = ~norm.isfinite()
        # e(w) = g·ρ/(‖g‖+ε); the factor stays in float32 (float64 for float64 gradients).
        scale = torch.where(skipped, 0.0, self.rho / (norm + self.epsilon))
        local_params = local_tensors(params)
        saved = self._scratch.like(local_params)
        groups = group_by_device_and_dtype(local_params, local_tensors(grads), saved)
        for ps, gs, ws in groups.values():
            torch._foreach_copy_(ws, ps)
            add_scaled_(ps, gs, scale, skipped)
        return groups, skipped

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run one (SAM or plain) step; see the class docstring. Returns the loss at ``w``."""
        if closure is None or not callable(closure):
            raise TypeError(
                "SAMOptimizer.step requires closure: a callable that zeroes the gradients, "
                f"computes the loss, calls backward() and returns the loss; got {closure!r}"
            )
        cycle = self._cycle
        sam_step = cycle.phase == self.interval - 1
        with torch.enable_grad():
            loss = closure()
        self._steps.add_(1)
        cycle.phase = 0 if sam_step else cycle.phase + 1
        found_inf = self._unscale(self)
        if not sam_step:
            self._base_step(found_inf)
            return loss

        with torch.no_grad():
            params, grads = self._gradients()
            if not params:
                self._base_step(found_inf)
                return loss
            groups, skipped = self._ascend(params, grads)
        try:
            # With a grad scaler an overflow at w skips the step: the second pass must then leave
            # no trace either (BatchNorm statistics), as GradScaler.step leaves none. Without
            # one no context is entered: dynamo of torch 2.6 cannot trace a contextmanager.
            with torch.enable_grad():
                if found_inf is None:
                    closure()
                else:
                    with _buffer_updates_undone_if(skipped):
                        closure()
            second_inf = self._unscale(self._second_pass)
        finally:
            with torch.no_grad():
                for ps, _, ws in groups.values():
                    torch._foreach_copy_(ps, ws)  # bitwise restore of w
        if found_inf is not None and second_inf is not None:
            found_inf = torch.maximum(found_inf, second_inf)
        self._base_step(found_inf)
        return loss


@contextlib.contextmanager
def _buffer_updates_undone_if(flag: torch.Tensor) -> Iterator[None]:
    """Inside the block, every module whose forward runs has its buffers (BatchNorm statistics)
    saved on entry; on leaving, they are put back where ``flag`` (a 0-d bool on the device) is
    set, with no host read."""
    touched: list[tuple[torch.Tensor, torch.Tensor]] = []
    seen: set[int] = set()
    entered: set[int] = set()

    def save_buffers(module: torch.nn.Module, args: Any) -> None:
        # The first module called (the model, or its torch.compile wrapper, inside which no
        # hook fires) is saved whole; modules outside it when they run.
        if id(module) in entered:
            return
        entered.add(id(module))
        for buffer in module.buffers(recurse=not touched):
            if id(buffer) not in seen:
                seen.add(id(buffer))
                touched.append((buffer, buffer.detach().clone()))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(save_buffers)
    try:
        with warnings.catch_warnings():
            # torch.compile'd modules warn that global hooks fire once more on their wrapper:
            # this hook saves each buffer once.
            warnings.filterwarnings("ignore", message=".*global hooks on modules.*")
            yield
    finally:
        handle.remove()
        if touched:
            with torch.no_grad():
                kept = [torch.where(flag.to(b.device), saved, b) for b, saved in touched]
                torch._foreach_copy_([b for b, _ in touched], kept)


def _check_rho(rho: object, name: str) -> float:
    """The SAM seed's rule: rho must be greater than 0 (and finite)."""
    if isinstance(rho, numbers.Real) and not isinstance(rho, bool) and rho <= 0:
        raise ValueError(f"{name} must be greater than 0, got {rho}")
    return check_positive(rho, name)
