"""models/dropout.py: torch's dropout in float32, the packed-bit mask in a low precision."""

import pytest
import torch
import torch.nn.functional as F

from models.dropout import Dropout, dropout, packed_mask_applies


def test_float32_is_torch_dropout_bit_for_bit():
    x = torch.randn(64, 100)
    torch.manual_seed(3)
    expected = F.dropout(x, 0.3, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.3, True), expected)
    assert not packed_mask_applies(x)


def test_low_precision_and_cpu_autocast_take_the_packed_mask():
    assert packed_mask_applies(torch.ones(2, dtype=torch.bfloat16))
    with torch.autocast("cpu", torch.bfloat16):
        assert packed_mask_applies(torch.ones(2))  # a float32 input inside a bf16 forward
    assert not packed_mask_applies(torch.ones(2, dtype=torch.int64))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_packed_mask_drops_at_rate_p_and_keeps_the_expectation(p):
    x = torch.ones(1 << 20, dtype=torch.bfloat16)
    torch.manual_seed(0)
    y = dropout(x, p, True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 0.003
    scale = 65536 / (65536 - round(p * 65536))
    kept = y[y != 0]
    assert torch.equal(kept, torch.full_like(kept, scale))  # one rounding of 1 * scale
    assert abs(y.float().mean().item() - 1.0) < 0.01


def test_packed_mask_is_seeded_and_fresh_per_call():
    x = torch.ones(4096, dtype=torch.bfloat16)
    torch.manual_seed(7)
    first, second = dropout(x, 0.5, True), dropout(x, 0.5, True)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.5, True), first)
    assert not torch.equal(first, second)


def test_packed_mask_gradient_is_the_mask():
    x = torch.randn(1000, dtype=torch.bfloat16, requires_grad=True)
    y = dropout(x, 0.25, True)
    y.float().sum().backward()
    kept = y != 0
    assert torch.all(x.grad[~kept] == 0)
    expected = torch.tensor(65536 / (65536 - 16384), dtype=torch.bfloat16)
    assert torch.all(x.grad[kept] == expected)


def test_edges_and_the_module():
    x = torch.randn(3, 5, dtype=torch.bfloat16)
    assert torch.equal(dropout(x, 0.5, False), x)
    assert torch.equal(dropout(x, 0.0, True), x)
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))
    layer = Dropout(0.5).eval()
    assert torch.equal(layer(x), x)
    layer.train()
    dropped = (layer(torch.ones(10_000, dtype=torch.bfloat16)) == 0).float().mean().item()
    assert dropped == pytest.approx(0.5, abs=0.03)
