"""The package as users get it (issue 22, item 1): build the sdist and the wheel, check what
they hold, install the wheel into a fresh virtual environment outside the tree, and train with
it from another directory.

The new environment reuses the torch, torchvision, Pillow and NumPy already installed (a
``.pth`` file naming this interpreter's site-packages, written after the install, so pip sees
nothing of this environment and the tree itself is never importable); nothing is downloaded.
"""

from __future__ import annotations

import email
import email.message
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("surgery", "functional", "augment")

# What a checkout may hold besides its sources; none of it goes into a release.
LEFTOVERS = (
    ".git",
    ".venv",
    ".venv-compat",
    ".peers",
    "*.egg-info",
    "build",
    "dist",
    "__pycache__",
    "*_cache",
)
LEFTOVERS += (".hypothesis", "demo_out", "_build", "out")


def _tree_modules() -> set[str]:
    """Every ``.py`` file of the three packages in the tree, as wheel paths."""
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def _subpackages() -> set[str]:
    """The subpackage folders of the tree (``functional/alibi``, ...), found, not listed."""
    return {
        init.parent.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
        if init.parent != ROOT / package
    }


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    run = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"{args}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    """The sdist and the wheel, built as a release would: the wheel from the sdist.

    Built from a copy of the tree without its build leftovers: a stale ``*.egg-info`` lists
    files that the package discovery would miss (and the build writes one).
    """
    source = tmp_path_factory.mktemp("source") / "project"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFTOVERS))
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        cwd=out,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def _metadata(wheel: Path) -> email.message.Message:
    archive = zipfile.ZipFile(wheel)
    (name,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    return email.message_from_string(archive.read(name).decode())


@pytest.mark.slow
def test_wheel_holds_every_subpackage_and_nothing_else(dists):
    _, wheel = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    subpackages = _subpackages()
    assert {"functional/alibi", "functional/blurpool", "functional/ema"} <= subpackages
    assert "functional/stochastic_depth" in subpackages
    missing = _tree_modules() - names
    assert not missing, f"modules missing from the wheel: {sorted(missing)}"
    for package in PACKAGES:
        assert f"{package}/py.typed" in names
    tops = {name.split("/", 1)[0] for name in names}
    (dist_info,) = tops - set(PACKAGES)
    assert dist_info.endswith(".dist-info"), tops  # no tests/, benchmarks/, docs/
    assert f"{dist_info}/licenses/LICENSE" in names
    license_text = zipfile.ZipFile(wheel).read(f"{dist_info}/licenses/LICENSE").decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


@pytest.mark.slow
def test_wheel_metadata_reads_well_on_a_package_index(dists):
    _, wheel = dists
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Requires-Python"] == ">=3.10"
    requires = metadata.get_all("Requires-Dist")
    assert "torch>=2.6" in requires and "torchvision>=0.21" in requires
    assert any(c.startswith("Topic ::") for c in metadata.get_all("Classifier"))
    assert metadata["Keywords"]
    description = metadata.get_payload()
    assert metadata["Description-Content-Type"].startswith("text/markdown")
    assert "```python" in description
    # An index page has no neighbouring files: no relative links, no ../shared.
    links = re.findall(r"\]\(([^)]*)\)", description)
    assert all(link.startswith("https://") for link in links), links
    assert "../" not in description and "shared/" not in description


@pytest.mark.slow
def test_sdist_is_the_whole_project(dists):
    sdist, _ = dists
    names = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
    for name in ("LICENSE", "pyproject.toml", "README.pypi.md", "README.md", "Makefile"):
        assert name in names
    assert {"tests/test_wheel.py", "benchmarks/__main__.py"} <= names
    assert _tree_modules() <= names
    assert not any("__pycache__" in name for name in names)


# Runs in the fresh environment, from a directory outside the tree. Exercises each package as a
# user would: a model transform, a batch op, EMA, and an augmentation in a 2-worker DataLoader.
TRAINING_SCRIPT = textwrap.dedent(
    """
    import copy
    import runpy
    import sys
    from pathlib import Path

    import torch
    from torch import nn
    from torchvision import transforms

    import augment
    import functional as F
    import surgery

    PREFIX = Path(sys.prefix).resolve()
    for package in (augment, F, surgery):
        assert PREFIX in Path(package.__file__).resolve().parents, package.__file__


    class Images(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(0)
            self.images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
            self.transform = transforms.Compose(
                [transforms.ToPILImage(), augment.AugMix(severity=3), transforms.PILToTensor()]
            )

        def __len__(self):
            return len(self.images)

        def __getitem__(self, i):
            return self.transform(self.images[i]), i % 4


    def check_worker(_worker_id):
        assert PREFIX in Path(augment.__file__).resolve().parents


    if __name__ == "__main__":
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 4),
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        model = F.apply_blurpool(model, optimizers=opt)
        assert isinstance(model[2], F.BlurConv2d), model
        ema = copy.deepcopy(model)
        loader = torch.utils.data.DataLoader(
            Images(32), batch_size=8, num_workers=2, worker_init_fn=check_worker
        )
        generator = torch.Generator().manual_seed(0)
        steps = 0
        for x, y in loader:
            assert x.dtype == torch.uint8 and x.shape == (8, 3, 32, 32)
            lam = F.gen_interpolation_lambda(0.2, generator=generator)
            x, y_mix, _ = F.mixup_batch(x.float() / 255, y, lam, n_classes=4, generator=generator)
            loss = nn.functional.cross_entropy(model(x), y_mix)
            opt.zero_grad()
            loss.backward()
            opt.step()
            F.compute_ema(model, ema, smoothing=F.ema_smoothing(half_life=2))
            assert torch.isfinite(loss)
            steps += 1
        assert steps == 4
        with F.use_ema_weights(model, ema):
            model.eval()
            assert model(x).shape == (8, 4)
        print("trained", steps, "steps")
        runpy.run_path("quickstart.py")  # the package index's quickstart, on the installed wheel
    """
)


def _python_blocks(markdown: str) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL))


@pytest.mark.slow
def test_installed_wheel_trains_outside_the_tree(dists, tmp_path):
    _, wheel = dists
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    # pip of this environment installs into the new one (which sees nothing else yet).
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    _run(
        [*pip, "install", "--no-deps", "--no-index", "-q", str(wheel)],
        cwd=tmp_path,
    )
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp_path
    )
    reused = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib.stdout.strip()) / "reuse_installed_torch.pth").write_text(
        "\n".join(reused) + "\n"
    )

    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "train.py").write_text(TRAINING_SCRIPT)
    (work / "quickstart.py").write_text(_python_blocks(_metadata(wheel).get_payload()))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    trained = _run([str(python), "train.py"], cwd=work, env=env)
    assert "trained 4 steps" in trained.stdout


def test_the_two_readmes_share_one_quickstart():
    """README.md (the repository's front page) and README.pypi.md (the package index's page,
    run above against the installed wheel) show the same quickstart; neither points at files a
    reader of it lacks."""
    front = (ROOT / "README.md").read_text()
    index = (ROOT / "README.pypi.md").read_text()
    assert _python_blocks(index) and _python_blocks(index) in _python_blocks(front)
    for text in (front, index):
        assert "../" not in text and "shared/" not in text


def _pins(release: str) -> dict[str, str]:
    text = (ROOT / ".ci" / "compat" / f"torch-{release}.txt").read_text()
    return dict(line.strip().split("==") for line in text.splitlines() if "==" in line)


def test_the_supported_torch_range_is_stated_once():
    """pyproject.toml's floors are the compatibility lane's oldest pins; README.md,
    README.pypi.md and docs/getting_started.md state that range, up to the lane's newest."""
    lanes = re.search(r"COMPAT_TORCH \?= (.+)", (ROOT / "Makefile").read_text())
    assert lanes is not None
    oldest, newest = (_pins(r) for r in lanes.group(1).split())
    requires = re.search(r"dependencies = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S)
    assert requires is not None
    for name in ("torch", "torchvision"):
        floor = ".".join(oldest[name].split(".")[:2])
        assert f'"{name}>={floor}"' in requires.group(1), (name, floor)
    top = lambda pins, name: ".".join(pins[name].split(".")[:2])  # noqa: E731
    stated = (
        f"torch {top(oldest, 'torch')} to {top(newest, 'torch')} with torchvision "
        f"{top(oldest, 'torchvision')} to {top(newest, 'torchvision')}"
    )
    for doc in ("README.md", "README.pypi.md", "docs/getting_started.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert stated in text, f"{doc} must say {stated!r}"
