"""Side-by-side benchmarks against Composer, timm, kornia and torchvision. Run ``python -m benchmarks``."""
