"""The core against nn.MultiheadAttention and timm's Attention, weights shared."""

import pytest
import torch
from timm.models.vision_transformer import Attention as TimmAttention
from torch import nn

from models.attention import KVCache, MultiHeadAttention

B, L, E, H = 3, 7, 32, 4
TOL = dict(atol=1e-5, rtol=1e-5)


def _pair(kdim=None, vdim=None, dropout=0.0):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, H, dropout=dropout, kdim=kdim, vdim=vdim, batch_first=True)
    ref.eval()
    for p in ref.parameters():  # non-zero biases so a dropped bias would show
        nn.init.normal_(p, std=0.2)
    core = MultiHeadAttention.from_torch(ref).eval()
    return ref, core


def _padding_mask():
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[0, -2:] = True
    mask[2, -4:] = True
    return mask


def _bool_mask():
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(L, L, generator=g) > 0.6
    mask.fill_diagonal_(False)  # every query keeps at least one key
    return mask


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(
    "masks",
    ["none", "padding", "causal", "bool", "float", "per_head", "padding+causal"],
)
def test_self_attention_matches_torch(masks, need_weights):
    ref, core = _pair()
    x = torch.randn(B, L, E)
    kwargs = {}
    if "padding" in masks:
        kwargs["key_padding_mask"] = _padding_mask()
    if "causal" in masks:
        kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(L)
    if masks == "bool":
        kwargs["attn_mask"] = _bool_mask()
    if masks == "float":
        kwargs["attn_mask"] = torch.randn(L, L)
    if masks == "per_head":
        kwargs["attn_mask"] = torch.randn(B * H, L, L)
    expected, expected_w = ref(x, x, x, need_weights=True, average_attn_weights=False, **kwargs)
    core_kwargs = dict(kwargs)
    if "causal" in masks:  # the core takes the flag alone, without a materialised mask
        core_kwargs.pop("attn_mask")
        core_kwargs["is_causal"] = True
    out, weights = core(x, need_weights=need_weights, **core_kwargs)
    torch.testing.assert_close(out, expected, **TOL)
    if need_weights:
        torch.testing.assert_close(weights, expected_w, **TOL)
    else:
        assert weights is None


def test_cross_attention_with_other_key_length_and_dims():
    ref, core = _pair(kdim=20, vdim=12)
    q, k, v = torch.randn(B, L, E), torch.randn(B, 11, 20), torch.randn(B, 11, 12)
    kpm = torch.zeros(B, 11, dtype=torch.bool)
    kpm[1, 5:] = True
    expected, _ = ref(q, k, v, key_padding_mask=kpm)
    out, _ = core(q, k, v, key_padding_mask=kpm)
    torch.testing.assert_close(out, expected, **TOL)


def test_cross_attention_same_dims():
    ref, core = _pair()
    q, mem = torch.randn(B, L, E), torch.randn(B, 13, E)
    expected, _ = ref(q, mem, mem)
    torch.testing.assert_close(core(q, mem)[0], expected, **TOL)


def test_gradients_match_torch():
    ref, core = _pair()
    x1 = torch.randn(B, L, E, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    kpm = _padding_mask()
    ref(x1, x1, x1, key_padding_mask=kpm)[0].square().sum().backward()
    core(x2, key_padding_mask=kpm)[0].square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, **TOL)
    torch.testing.assert_close(core.in_proj.weight.grad, ref.in_proj_weight.grad, **TOL)
    torch.testing.assert_close(core.out_proj.weight.grad, ref.out_proj.weight.grad, **TOL)


def test_to_torch_round_trip():
    _, core = _pair(kdim=20, vdim=12)
    back = core.to_torch().eval()
    q, k, v = torch.randn(B, L, E), torch.randn(B, 5, 20), torch.randn(B, 5, 12)
    torch.testing.assert_close(back(q, k, v)[0], core(q, k, v)[0], **TOL)


@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_timm_attention(is_causal):
    torch.manual_seed(0)
    timm_attn = TimmAttention(E, num_heads=H, qkv_bias=True).eval()
    core = MultiHeadAttention.from_timm(timm_attn).eval()
    x = torch.randn(B, L, E, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    expected = timm_attn(x, is_causal=is_causal)
    out = core(x2, is_causal=is_causal)[0]
    torch.testing.assert_close(out, expected, **TOL)
    expected.sum().backward()
    out.sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, **TOL)


def test_kv_cache_steps_equal_full_causal_pass():
    _, core = _pair()
    x = torch.randn(B, L, E)
    full, _ = core(x, is_causal=True)
    cache = KVCache()
    steps = [core(x[:, t : t + 1], is_causal=True, kv_cache=cache)[0] for t in range(L)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)
    assert cache.length == L


def test_static_cache_reuses_memory():
    _, core = _pair()
    q, mem = torch.randn(B, 2, E), torch.randn(B, 9, E)
    cache = KVCache(static=True)
    first, _ = core(q, mem, kv_cache=cache)
    # A second call with a different memory must still use the cached keys.
    second, _ = core(q, torch.zeros_like(mem), kv_cache=cache)
    torch.testing.assert_close(first, second, **TOL)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="must divide"):
        MultiHeadAttention(30, 4)


def test_dropout_only_in_training():
    _, core = _pair(dropout=0.5)
    x = torch.randn(B, L, E)
    core.eval()
    torch.testing.assert_close(core(x)[0], core(x)[0])
    core.train()
    torch.manual_seed(0)
    a = core(x)[0]
    torch.manual_seed(1)
    assert not torch.allclose(a, core(x)[0])


# ---------------------------------------------------------------- the bfloat16 paths
CPU = torch.device("cpu")
# bfloat16 keeps 8 bits of mantissa: one rounding is 2^-8 relative, and a projection, two
# attention matmuls and an output projection compound a few of them
BF16_TOL = dict(atol=3e-2, rtol=3e-2)


def _mask_kwargs(masks):
    kwargs = {}
    if "padding" in masks:
        kwargs["key_padding_mask"] = _padding_mask()
    if "causal" in masks:
        kwargs["is_causal"] = True
    if masks == "bool":
        kwargs["attn_mask"] = _bool_mask()
    if masks == "per_head":
        kwargs["attn_mask"] = torch.randn(B * H, L, L)
    return kwargs


@pytest.mark.parametrize("path", ["sdpa", "matmul"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "bool", "per_head", "padding+causal"])
def test_bf16_paths_match_the_float32_reference(path, masks):
    from models.attention import use_attention_path

    _, core = _pair()
    x = torch.randn(B, L, E, requires_grad=True)
    kwargs = _mask_kwargs(masks)
    expected = core(x, **kwargs)[0]
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    with use_attention_path(path, CPU, torch.bfloat16), torch.autocast("cpu", dtype=torch.bfloat16):
        out = core(x, **kwargs)[0]
    assert out.dtype == torch.bfloat16
    (grad,) = torch.autograd.grad(out.float().sum(), x)
    torch.testing.assert_close(out.float(), expected, **BF16_TOL)
    torch.testing.assert_close(grad, expected_grad, **BF16_TOL)
    if "padding" in masks:  # a padded key gets no weight: moving it moves nothing
        x2 = x.detach().clone()
        x2[0, -1] += 5.0
        with use_attention_path(path, CPU, torch.bfloat16), torch.autocast("cpu", dtype=torch.bfloat16):
            moved = core(x2, **kwargs)[0]
        torch.testing.assert_close(moved[0, :-2], out[0, :-2].detach(), atol=0, rtol=0)


def test_float32_matmul_path_matches_sdpa_to_float32_precision():
    from models.attention import use_attention_path

    _, core = _pair()
    x = torch.randn(B, L, E)
    kwargs = _mask_kwargs("padding+causal")
    with use_attention_path("matmul", CPU, torch.float32):
        fast = core(x, **kwargs)[0]
    torch.testing.assert_close(fast, core(x, **kwargs)[0], **TOL)


def test_path_choice_follows_the_faster_measurement(monkeypatch):
    import models.attention as attention

    asked = []

    def timings(fast):
        def measure(device, dtype, head_dim, training):
            asked.append((dtype, head_dim, training))
            return {"sdpa": 2.0, "matmul": 1.0} if fast == "matmul" else {"sdpa": 1.0, "matmul": 2.0}
        return measure

    monkeypatch.setattr(attention, "_chosen", {})
    monkeypatch.setattr(attention, "measure_paths", timings("matmul"))
    assert attention.attention_path(CPU, torch.bfloat16, 32, training=True) == "matmul"
    assert attention.attention_path(CPU, torch.float32, 32, training=True) == "sdpa"  # never timed
    monkeypatch.setattr(attention, "measure_paths", timings("sdpa"))
    assert attention.attention_path(CPU, torch.bfloat16, 32, training=False) == "sdpa"  # inference
    assert attention.attention_path(CPU, torch.bfloat16, 16, training=True) == "sdpa"  # another width
    assert attention.attention_path(CPU, torch.bfloat16, 32, training=True) == "matmul"  # kept
    assert attention.attention_path(torch.device("cuda"), torch.bfloat16, 32) == "sdpa"
    assert asked == [(torch.bfloat16, 32, True), (torch.bfloat16, 32, False), (torch.bfloat16, 16, True)]
    with torch.no_grad():  # by default, training is whether autograd is on
        assert attention.attention_path(CPU, torch.bfloat16, 32) == "sdpa"
    with attention.use_attention_path("matmul", CPU, torch.bfloat16):  # pinned: both modes
        assert attention.attention_path(CPU, torch.bfloat16, 32, training=False) == "matmul"
    assert attention.attention_path(CPU, torch.bfloat16, 32, training=False) == "sdpa"


def test_measured_paths_time_both():
    from models.attention import measure_paths

    for training in (True, False):
        timings = measure_paths(CPU, torch.bfloat16, batch=2, heads=2, seq_len=16, head_dim=8,
                                training=training, rounds=1)
        assert set(timings) == {"sdpa", "matmul"} and all(0 < t < 10 for t in timings.values())


def test_unknown_path_is_refused():
    from models.attention import use_attention_path

    pinned = use_attention_path("flash", CPU, torch.bfloat16)
    with pytest.raises(ValueError, match="unknown attention path"), pinned:
        pass

