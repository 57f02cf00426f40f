"""A generic module-replacement engine for PyTorch models.

Policies map ``nn.Module`` classes to replacement functions; :func:`replace_module_classes`
applies them in one walk over the model, keeping devices, dtypes, hooks and optimizer state
consistent. :func:`replace_modules` does the same for given module instances. The engine knows nothing about any particular algorithm.

Apply surgery to the bare model, before wrapping it in ``DistributedDataParallel``, sharding it
with ``fully_shard`` or compiling it with ``torch.compile``.
"""

from surgery._types import NoEffectWarning, OptimizerArg, ReplacementFunction, as_optimizer_list
from surgery.checkpoint import fill_missing_entries, remap_state_dict
from surgery.optim import update_params_in_optimizer
from surgery.replace import count_module_instances, replace_module_classes, replace_modules
from surgery.wrappers import WRAPPER_PREFIXES, check_unwrapped, unwrap_model

__all__ = [
    "WRAPPER_PREFIXES",
    "NoEffectWarning",
    "OptimizerArg",
    "ReplacementFunction",
    "as_optimizer_list",
    "check_unwrapped",
    "count_module_instances",
    "fill_missing_entries",
    "remap_state_dict",
    "replace_module_classes",
    "replace_modules",
    "unwrap_model",
    "update_params_in_optimizer",
]
