"""Model-surgery cost: a ghost-batchnorm-style policy with an optimizer, ours vs Composer's.

The policy swaps every BatchNorm2d for a subclass with freshly allocated parameters (copied
values), so both engines must remove the old parameters from the optimizer and add the new ones.
Timed: the surgery call alone (model and optimizer are rebuilt, untimed, before every call).
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

import surgery
from benchmarks._harness import Table, main_for, peer, ratio, time_interleaved


class GhostLikeBatchNorm2d(nn.BatchNorm2d):
    """Stands in for a ghost batch norm: same maths, new parameter objects."""


def ghost_like(module: nn.Module, index: int) -> nn.Module | None:
    if isinstance(module, GhostLikeBatchNorm2d):
        return None
    new = GhostLikeBatchNorm2d(module.num_features, eps=module.eps, momentum=module.momentum)
    new.load_state_dict(module.state_dict())
    return new


def synthetic(blocks: int) -> nn.Module:
    return nn.Sequential(
        *[
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            for _ in range(blocks)
        ]
    )


def run(*, quick: bool = False, device: str = "cpu") -> list[Table]:
    composer_surgery = None
    if peer("composer") is not None:
        from composer.utils import module_surgery as composer_surgery
    cases = {
        "torchvision resnet152": lambda: torchvision.models.resnet152(),
        "synthetic, 2,000 conv-bn blocks": lambda: synthetic(2000),
    }
    if quick:
        cases = {
            "torchvision resnet18": lambda: torchvision.models.resnet18(),
            "synthetic, 100 blocks": lambda: synthetic(100),
        }
    table = Table(
        "Surgery: BatchNorm2d -> new module, SGD optimizer kept consistent",
        ["model", "modules replaced", "ours (ms)", "Composer (ms)", "Composer / ours"],
    )
    if composer_surgery is None:
        table.notes.append("Composer not installed (`make peers`): its column is empty")
    for label, build in cases.items():

        def setup(build=build):
            model = build().to(device)
            return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        candidates = {
            "ours": lambda mo: surgery.replace_module_classes(
                mo[0], {nn.BatchNorm2d: ghost_like}, optimizers=mo[1]
            )
        }
        if composer_surgery is not None:
            candidates["composer"] = lambda mo: composer_surgery.replace_module_classes(
                mo[0], {nn.BatchNorm2d: ghost_like}, optimizers=mo[1]
            )
        repeats = 3 if quick else 5
        times = time_interleaved(
            candidates, repeats=repeats, warmup=0 if quick else 1, setup=setup, device=device
        )
        n = surgery.count_module_instances(build(), nn.BatchNorm2d)
        composer_time = times.get("composer")
        table.add(
            label,
            n,
            times["ours"] * 1e3,
            None if composer_time is None else composer_time * 1e3,
            ratio(composer_time, times["ours"]),
        )
    table.notes.append(
        "Targets: no slower than Composer on resnet152, >= 2x faster on the 2,000-block model."
    )
    return [table]


if __name__ == "__main__":
    main_for(run, __doc__)
