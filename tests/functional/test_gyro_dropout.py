"""Gyro dropout: the mask pattern, its scaling, the schedule of active subnetworks, resuming
from a state dict, compile, and the transform on real models."""

from __future__ import annotations

import hypothesis
import pytest
import torch
import torch._dynamo
import torchvision
from hypothesis import strategies as st
from torch import nn

import functional as F
import surgery
from functional import GyroDropoutLayer, apply_gyro_dropout
from tests.devicecheck import compile_counter, no_host_reads
from tests.functional._hf_models import hf_model
from tests.functional._model_checks import assert_idempotent, assert_no_effect


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_output_is_input_times_mask_over_keep_probability():
    layer = GyroDropoutLayer(iters_per_epoch=196, max_epoch=100, p=0.5, sigma=256, tau=16, seed=1)
    x = _x(64, 128)
    y = layer(x)
    mask = layer.dropout_mask
    assert mask.shape == x.shape and set(mask.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(y, x * mask * (1 / (1 - 0.5)))


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    batch=st.integers(1, 40),
    features=st.integers(1, 24),
    sigma=st.integers(1, 12),
    tau_fraction=st.floats(0, 1),
    p=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
    seed=st.integers(0, 2**40),
    step=st.integers(0, 50),
)
def test_each_group_of_samples_uses_one_of_tau_distinct_preselected_masks(
    batch, features, sigma, tau_fraction, p, seed, step
):
    """The law of the mask: sample i uses active mask floor(i·tau/B); the tau active masks of a
    step are distinct rows of the sigma preselected ones; kept units are scaled by 1/(1-p)."""
    tau = 1 + int(tau_fraction * (sigma - 1))
    layer = GyroDropoutLayer(3, 4, p=p, sigma=sigma, tau=tau, seed=seed)
    layer.training_step.fill_(step)
    x = torch.ones(batch, features)
    y = layer(x)
    active = layer.active_subnetworks(step)
    assert sorted(set(active.tolist())) == sorted(active.tolist()) and len(active) == tau
    assert all(0 <= i < sigma for i in active.tolist())
    preselected = layer.preselected_masks(features)
    groups = torch.arange(batch) * tau // batch
    assert torch.equal(layer.dropout_mask, preselected[active[groups]])
    assert torch.equal(y, layer.dropout_mask * (1 / (1 - p)))


def test_active_set_changes_only_at_cycle_boundaries():
    # iter_num = floor(iters_per_epoch * max_epoch / sigma) * tau = floor(20 / 8) * 2 = 4
    layer = GyroDropoutLayer(5, 4, p=0.5, sigma=8, tau=2, seed=3)
    assert layer.iter_num == 4
    seen = []
    for _ in range(12):
        layer(torch.ones(4, 32))
        seen.append(layer.dropout_mask.clone())
    for step in range(12):
        same_cycle = step % 4 != 0
        if same_cycle:
            assert torch.equal(seen[step], seen[step - 1])
    cycles = [tuple(layer.active_subnetworks(c * 4).tolist()) for c in range(3)]
    assert len(set(cycles)) == 3  # fresh draws (distinct here; a tie is possible in general)
    assert int(layer.training_step) == 12


def test_masks_keep_each_unit_with_probability_one_minus_p():
    layer = GyroDropoutLayer(100, 100, p=0.25, sigma=64, tau=8, seed=4)
    masks = layer.preselected_masks(4096)
    assert masks.shape == (64, 4096)
    assert abs(float(masks.mean()) - 0.75) < 0.01  # 262144 draws: 5 sigma is 0.0042
    assert (
        float(GyroDropoutLayer(1, 1, p=0.0, sigma=2, tau=1, seed=0).preselected_masks(9).min()) == 1
    )


def test_eval_mode_is_identity_and_does_not_advance():
    layer = GyroDropoutLayer(10, 10, seed=5).eval()
    x = _x(16, 8)
    assert layer(x) is x and int(layer.training_step) == 0


def test_sequences_share_the_sample_mask_over_positions_and_keep_dtype():
    layer = GyroDropoutLayer(10, 10, p=0.5, sigma=8, tau=2, seed=6)
    x = torch.ones(4, 5, 6, dtype=torch.bfloat16)
    y = layer(x)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert torch.equal(y, y[:, :1].expand_as(y))  # every position of a sample: one mask
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        layer(torch.ones(6))


def test_state_dict_round_trip_resumes_bit_for_bit():
    def fresh(seed: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(8, 32), GyroDropoutLayer(3, 4, p=0.5, sigma=4, tau=2, seed=seed)
        )

    run = fresh(7)
    for _ in range(5):
        run(_x(6, 8))
    state = run.state_dict()
    assert {"1.seed", "1.training_step"} <= set(state)
    resumed = fresh(99)
    resumed.load_state_dict(state)
    for step in range(8):
        x = _x(6, 8, seed=step)
        assert torch.equal(run(x), resumed(x))
    assert int(resumed[1].training_step) == 13


def test_a_checkpoint_of_the_plain_dropout_model_loads_through_remap_state_dict():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout())
    checkpoint = model.state_dict()
    apply_gyro_dropout(model, 10, 10, generator=torch.Generator().manual_seed(0))
    seed = int(model[1].seed)
    model.load_state_dict(surgery.remap_state_dict(checkpoint, model))
    assert int(model[1].seed) == seed and int(model[1].training_step) == 0


@pytest.mark.slow
def test_compiled_training_is_one_graph_equal_to_eager_and_reads_nothing_on_the_host():
    def build() -> nn.Module:
        torch.manual_seed(0)
        return apply_gyro_dropout(
            nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(), nn.Linear(32, 3)),
            1, 6, p=0.5, sigma=8, tau=2, generator=torch.Generator().manual_seed(8),
        )  # fmt: skip

    def step(model, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    torch._dynamo.reset()
    compiled_model, eager_model = build(), build()
    fn, counter = compile_counter(compiled_model)
    for i in range(6):  # crosses cycle boundaries (iter_num 2)
        x = _x(4, 16, seed=i)
        with no_host_reads():
            expected = step(eager_model, x)
        torch.testing.assert_close(step(fn, x), expected, rtol=1e-6, atol=1e-7)
        for a, b in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-7)
    assert counter.frame_count == 1
    assert int(compiled_model[2].training_step) == 6


def test_arguments_are_checked():
    with pytest.raises(ValueError, match=r"p must be in \[0.0, 1.0\)"):
        GyroDropoutLayer(10, 10, p=1.0)
    with pytest.raises(ValueError, match="tau must be <= sigma"):
        GyroDropoutLayer(10, 10, sigma=4, tau=5)
    with pytest.raises(ValueError, match="iters_per_epoch must be >= 1"):
        apply_gyro_dropout(nn.Dropout(), 0, 10)
    with pytest.raises(TypeError, match="sigma must be an int"):
        apply_gyro_dropout(nn.Dropout(), 10, 10, sigma=2.5)
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        apply_gyro_dropout(nn.Dropout(), 10, 10, generator=3)


def test_apply_on_a_vision_transformer_replaces_every_dropout_and_keeps_eval_output():
    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        dropout=0.1, num_classes=5,
    )  # fmt: skip
    dropouts = {n for n, m in vit.named_modules() if type(m) is nn.Dropout}
    params = [id(p) for p in vit.parameters()]
    x = _x(4, 3, 32, 32)
    vit.eval()
    before = vit(x)
    opt = torch.optim.SGD(vit.parameters(), lr=0.1)
    assert apply_gyro_dropout(vit, 10, 2, 0.5, 8, 2, optimizers=opt) is vit
    gyro = {n for n, m in vit.named_modules() if isinstance(m, GyroDropoutLayer)}
    assert gyro == dropouts and len(gyro) >= 4
    assert [id(p) for p in vit.parameters()] == params
    torch.testing.assert_close(vit(x), before, rtol=0, atol=0)
    vit.train()
    vit(x).sum().backward()
    assert all(int(vit.get_submodule(n).training_step) == 1 for n in gyro)
    assert_idempotent(vit, lambda m: apply_gyro_dropout(m, 10, 2), "gyro dropout already")


def test_apply_on_bert_and_seeds_from_the_generator():
    a, b = hf_model("bert"), hf_model("bert")
    apply_gyro_dropout(a, 10, 2, generator=torch.Generator().manual_seed(0))
    apply_gyro_dropout(b, 10, 2, generator=torch.Generator().manual_seed(0))
    seeds = [int(m.seed) for m in a.modules() if isinstance(m, GyroDropoutLayer)]
    assert seeds == [int(m.seed) for m in b.modules() if isinstance(m, GyroDropoutLayer)]
    assert len(set(seeds)) == len(seeds) > 1  # each layer its own stream
    ids = torch.randint(0, 40, (4, 8), generator=torch.Generator().manual_seed(1))
    a.train()
    assert a(input_ids=ids).logits.shape == (4, 8, 40)


def test_no_dropout_warns_and_other_dropouts_stay():
    assert_no_effect(lambda: apply_gyro_dropout(nn.Linear(2, 2), 10, 10), "no nn.Dropout")
    model = nn.Sequential(nn.Dropout2d(), nn.Dropout(), nn.AlphaDropout())
    apply_gyro_dropout(model, 10, 10)
    assert [type(m) for m in model] == [nn.Dropout2d, GyroDropoutLayer, nn.AlphaDropout]
    assert F.GyroDropoutLayer is GyroDropoutLayer
