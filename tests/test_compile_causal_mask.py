"""A constant causal attention mask in a compiled graph becomes `is_causal=True`
(torch_fl/jit/causal_mask.py), with the default backend and backend="ral", on both devices.

- the mask check itself: exactly tril(ones(L, L)) (bool, or additive 0 / -inf / finfo.min),
  broadcast over batch and heads; a padding mask, another pattern, one wrong element, L != S
  are refused;
- compiled training of a hand-written block with an explicit tril mask and of a small
  transformers GPT-2 (its mask is built from shapes) against CPU eager: loss and gradients,
  with the rewrite counted in the joint graph (forward and backward attention both
  `is_causal`, no mask left);
- masks that must not be rewritten keep their mask and give CPU's values;
- `TORCH_FL_CAUSAL_MASK` is in inductor's cache key and turns the rewrite off.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_fl
import torch_fl.jit.compile_backend  # noqa: F401 (registers backend="ral")
from torch_fl.jit import causal_mask

DEVICES = ["ral:0", "ral:1"] if torch.ral.device_count() >= 2 else ["ral:0"]
LOSS_TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)  # reassociated sums in the fused attention's backward

L = 12  # sequence length of the hand-written block


@pytest.fixture(autouse=True)
def _no_compile_caches():
    """The tests observe the joint graph's pass, which a warm FX-graph or AOT cache skips."""
    import torch._inductor.config as iconfig

    with iconfig.patch(force_disable_caches=True):
        yield


# -- the check ----------------------------------------------------------------------------------


def _tril(n, m=None):
    return torch.ones(n, n if m is None else m, dtype=torch.bool).tril()


def _additive(keep, fill):
    return torch.zeros(keep.shape).masked_fill(~keep, fill)


@pytest.mark.parametrize(
    "mask",
    [
        _tril(L),
        _tril(L)[None, None].expand(3, 1, L, L),
        _tril(L)[None].expand(4, L, L).contiguous(),
        _additive(_tril(L), float("-inf")),
        _additive(_tril(L), torch.finfo(torch.float32).min)[None, None],
        _additive(_tril(L), float("-inf")).half(),
        torch.ones(1, 1, dtype=torch.bool),  # L == S == 1
    ],
    ids=["bool", "bool_broadcast", "bool_heads", "neg_inf", "finfo_min", "half", "one"],
)
def test_causal_patterns_are_recognised(mask):
    n = mask.shape[-1]
    assert causal_mask.is_causal_mask(mask, n, n)


def _one_wrong():
    m = _tril(L).clone()
    m[3, 7] = True
    return m


def _padded():
    m = _tril(L)[None, None].repeat(2, 1, 1, 1)
    m[1, ..., L - 3 :] = False  # the second sequence's last 3 keys are padding
    return m


def _mixed_fill():
    m = _additive(_tril(L), float("-inf"))
    m[L - 1, 0] = -1e4  # one hidden element by a finite bias
    return m


@pytest.mark.parametrize(
    "mask, n, m",
    [
        (_one_wrong(), L, L),
        (_padded(), L, L),
        (_tril(L).T.contiguous(), L, L),  # anti-causal
        (torch.ones(L, L, dtype=torch.bool), L, L),
        (_tril(L) & ~_tril(L).tril(-4), L, L),  # a sliding window
        (_tril(8, 12), 8, 12),  # L != S: tril(ones(L, S)), left alone
        (torch.ones(8, 12, dtype=torch.bool).tril(4), 8, 12),  # bottom-right aligned
        (_mixed_fill(), L, L),
        (_additive(_tril(L), float("-inf")) + 1.0, L, L),  # 1 on the visible part
        (_tril(L).to(torch.int32), L, L),
        (_tril(L)[:, :1], L, L),  # a broadcast column
    ],
    ids=[
        "one_wrong",
        "padding",
        "anti_causal",
        "all_visible",
        "sliding_window",
        "l_ne_s_top_left",
        "l_ne_s_bottom_right",
        "mixed_fill",
        "nonzero_visible",
        "int_mask",
        "column",
    ],
)
def test_other_masks_are_refused(mask, n, m):
    assert not causal_mask.is_causal_mask(mask, n, m)


# -- compiled training ----------------------------------------------------------------------


class _Block(torch.nn.Module):
    """One attention block whose causal mask is built in forward from its length."""

    def __init__(self, d=16, heads=2, kind="bool"):
        super().__init__()
        self.qkv, self.out, self.heads, self.kind = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), heads, kind

    def mask(self, n, s, device):
        i = torch.arange(n, device=device)[:, None]
        j = torch.arange(s, device=device)[None, :]
        keep = j <= i
        if self.kind == "bool":
            return keep
        if self.kind == "additive":
            return torch.zeros(n, s, device=device).masked_fill(~keep, float("-inf"))
        if self.kind == "one_wrong":
            return keep | ((i == 3) & (j == 7))
        if self.kind == "padding":  # batch 1's last 3 keys are padding
            b = torch.arange(2, device=device)[:, None, None, None]
            return keep & ~((b == 1) & (j >= s - 3))
        if self.kind == "window":
            return keep & (j > i - 4)
        raise ValueError(self.kind)

    def forward(self, x, kv=None):
        B, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        if kv is not None:  # L != S: keys and values from a longer context
            _, k, v = self.qkv(kv).split(d, dim=-1)
        split = lambda t: t.reshape(B, t.shape[1], self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        mask = self.mask(q.shape[-2], k.shape[-2], x.device)
        if kv is not None:  # bottom-right aligned, as a model with a cache builds it
            i = torch.arange(q.shape[-2], device=x.device)[:, None]
            mask = torch.arange(k.shape[-2], device=x.device)[None, :] <= i + (k.shape[-2] - q.shape[-2])
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, n, d))


class _LM(torch.nn.Module):
    """A language model trained on its own input (labels = ids)."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids):
        return self.m(input_ids=ids, labels=ids)


def _gpt2():
    import transformers

    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=64,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    torch.manual_seed(0)
    return _LM(transformers.GPT2LMHeadModel(cfg).train())


class _Calls:
    """The attention calls on ral tensors of each graph the pass sees, after it ran."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        causal_mask.OBSERVERS.append(self._see)
        return self

    def __exit__(self, *exc):
        causal_mask.OBSERVERS.remove(self._see)

    def _see(self, graph):
        self.calls += causal_mask.attention_calls(graph)


def _train(model, args, device, style, backend):
    """(loss, {name: grad on CPU}, attention calls seen) of one compiled training step."""
    torch._dynamo.reset()
    with _Calls() as seen:
        if style == "to":
            model = model.to(device)
            f = torch.compile(model, backend=backend)
            out = f(*[a.to(device) for a in args])
            loss = out.loss if hasattr(out, "loss") else out.pow(2).mean()
            loss.backward()
        else:
            with torch_fl.ral_mode(device):
                f = torch.compile(model, backend=backend)
                out = f(*args)
                loss = out.loss if hasattr(out, "loss") else out.pow(2).mean()
                loss.backward()
                assert loss.device == torch.device(device)
    grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
    return loss.detach().cpu(), grads, seen.calls


def _reference(model, args):
    out = model(*args)
    loss = out.loss if hasattr(out, "loss") else out.pow(2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def _case(name):
    if name == "gpt2":
        ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
        return _gpt2(), (ids,)
    torch.manual_seed(0)
    kind = name.removeprefix("block_")
    return _Block(kind=kind), (torch.randn(2, L, 16),)


def _check(name, device, style, backend):
    model, args = _case(name)
    want_loss, want_grads = _reference(copy.deepcopy(model), args)
    loss, grads, calls = _train(copy.deepcopy(model), args, device, style, backend)
    torch.testing.assert_close(loss, want_loss, **LOSS_TOL)
    for n, g in want_grads.items():
        torch.testing.assert_close(grads[n], g, **GRAD_TOL, msg=lambda m, n=n: f"{n}: {m}")
    return calls


def _all_causal(calls):
    names = {c[0] for c in calls}
    fwd = "aten::_scaled_dot_product_fused_attention_overrideable"
    assert fwd in names and fwd + "_backward" in names, calls  # the joint graph: both directions
    assert all(causal and not has_mask for _, causal, has_mask in calls), calls


# The default run: every device, style and backend once, across the two models.
CI = [
    ("gpt2", "ral:1", "to", "inductor"),
    ("block_bool", "ral:0", "ral_mode", "ral"),
    ("block_additive", "ral:1", "ral_mode", "ral"),
    ("block_bool", "ral:0", "to", "inductor"),
]
SWEEP = [
    (name, dev, style, backend)
    for name in ("gpt2", "block_bool", "block_additive")
    for dev in DEVICES
    for style in ("to", "ral_mode")
    for backend in ("inductor", "ral")
]


def _params(cases):
    return [c for c in cases if c[1] in DEVICES]


@pytest.mark.parametrize("name, device, style, backend", _params(CI))
def test_causal_training_is_rewritten_and_matches_cpu(name, device, style, backend):
    _all_causal(_check(name, device, style, backend))


@pytest.mark.slow
@pytest.mark.parametrize("name, device, style, backend", _params([c for c in SWEEP if c not in CI]))
def test_causal_training_sweep(name, device, style, backend):
    _all_causal(_check(name, device, style, backend))


@pytest.mark.parametrize(
    "kind, backend",
    [("one_wrong", "ral"), ("padding", "ral"), ("window", "inductor"), ("l_ne_s", "ral")],
)
def test_other_masks_stay_and_match_cpu(kind, backend):
    """A mask that is not exactly causal keeps its mask (and is_causal=False) and gives CPU's values."""
    device = DEVICES[-1]
    torch.manual_seed(0)
    if kind == "l_ne_s":
        model, args = _Block(kind="bool"), (torch.randn(2, 8, 16), torch.randn(2, L, 16))
    else:
        model, args = _Block(kind=kind), (torch.randn(2, L, 16),)
    want_loss, want_grads = _reference(copy.deepcopy(model), args)
    loss, grads, calls = _train(copy.deepcopy(model), args, device, "to", backend)
    torch.testing.assert_close(loss, want_loss, **LOSS_TOL)
    for n, g in want_grads.items():
        torch.testing.assert_close(grads[n], g, **GRAD_TOL, msg=lambda m, n=n: f"{n}: {m}")
    assert calls and all(has_mask and not causal for _, causal, has_mask in calls), calls


def test_switch_off_keeps_the_mask_and_changes_the_cache_key(monkeypatch):
    from torch_fl.jit import inductor_key

    on = inductor_key.digest()
    monkeypatch.setenv("TORCH_FL_CAUSAL_MASK", "0")
    assert inductor_key.components()["causal_mask"] is False
    assert inductor_key.digest() != on
    model, args = _Block(kind="bool"), (torch.randn(2, L, 16),)
    _, _, calls = _train(model, args, DEVICES[-1], "to", "ral")
    assert calls and all(has_mask and not causal for _, causal, has_mask in calls), calls


def test_inductor_runs_the_pass_keyed_by_torch_fl():
    """The pass is inductor's joint-graph pre-pass once a ral graph was compiled, and its
    uuid is torch_fl's cache key component (so the FX-graph cache sees the switch)."""
    import torch._inductor.config as iconfig

    from torch_fl.jit import inductor_device, inductor_key

    inductor_device.register()
    installed = iconfig.joint_custom_pre_pass
    installed = installed if isinstance(installed, (list, tuple)) else [installed]
    ours = [p for p in installed if type(p).__name__ == "RalCausalMaskPass"]
    assert len(ours) == 1 and ours[0].uuid() == inductor_key.digest()


@pytest.mark.parametrize("backend", ["inductor", "ral"])
def test_inference_graph_is_rewritten(backend):
    """Without autograd there is no joint graph: the forward-only graph gets the rewrite too."""
    device = DEVICES[-1]
    torch.manual_seed(0)
    model, x = _Block(kind="bool").eval(), torch.randn(2, L, 16)
    with torch.no_grad():
        want = model(x)
        m = copy.deepcopy(model).to(device)
        torch._dynamo.reset()
        with _Calls() as seen:
            got = torch.compile(m, backend=backend)(x.to(device))
    torch.testing.assert_close(got.cpu(), want, **LOSS_TOL)
    assert seen.calls and all(causal and not has_mask for _, causal, has_mask in seen.calls), seen.calls


def test_a_users_joint_pass_is_kept():
    """Installing ours next to a user's own joint pass keeps the user's (first, as set)."""
    import torch._inductor.config as iconfig
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from torch_fl.jit import inductor_joint

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            return "user"

    user = UserPass()
    # the config's own patch: pytest's monkeypatch undoes by deleting, which hides the entry
    with iconfig.patch(joint_custom_pre_pass=user):
        inductor_joint.install()
        installed = iconfig.joint_custom_pre_pass
    installed = installed if isinstance(installed, (list, tuple)) else [installed]
    assert installed[0] is user
    if hasattr(torch._inductor.custom_graph_pass, "get_custom_graph_passes"):  # torch runs a list
        assert [type(p).__name__ for p in installed] == ["UserPass", "RalCausalMaskPass"]
