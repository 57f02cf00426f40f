"""PIL augmentations for torchvision pipelines: AugMix, RandAugment and their primitives."""

__all__: list[str] = []
