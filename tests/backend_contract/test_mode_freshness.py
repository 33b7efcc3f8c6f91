"""Nothing stale under ral_mode: every way a CPU tensor can change between two ops is seen
by the next device op (the upload cache's invalidation rule, torch_fl/mode.py). A hypothesis
property test runs random programs of writes and reads under the mode on ral:0 and ral:1
and compares every value read with the same program run without the mode."""

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _thread(fn):
    th = threading.Thread(target=fn)
    th.start()
    th.join()


# Writes to the state {"p": Parameter, "w": plain tensor, "n": from_numpy tensor, "a": its array}.
# Each takes (state, delta). None of them is what the mode sees as a write to the same tensor
# object except where noted: that is the point.
WRITES = {
    "data_add": lambda s, d: s["p"].data.add_(d),  # word_language_model's manual SGD
    "data_assign": lambda s, d: setattr(s["p"], "data", s["p"].data + d),
    "data_copy": lambda s, d: s["w"].data.copy_(s["w"] + d),
    "set_": lambda s, d: s["w"].set_((s["w"] + d).cpu()),
    "no_grad_inplace": lambda s, d: _no_grad(lambda: s["p"].add_(d)),
    "view_setitem": lambda s, d: _no_grad(lambda: s["p"].view(-1).__setitem__(0, d)),
    "detach_mul": lambda s, d: s["w"].detach().mul_(d),
    "numpy_view_here": lambda s, d: np.add(s["w"].numpy(), d, out=s["w"].numpy()),
    "numpy_borrowed": lambda s, d: np.add(s["a"], d, out=s["a"]),  # array made before the block
    "thread_copy": lambda s, d: _thread(lambda: _no_grad(lambda: s["p"].copy_(s["p"] + d))),
    "thread_data": lambda s, d: _thread(lambda: s["w"].copy_(s["w"] * d)),
    "out_arg": lambda s, d: torch.add(s["w"], d, out=s["w"]),
    "mask_setitem": lambda s, d: s["w"].__setitem__(s["w"] > 0, d),
    "data_slice_fill": lambda s, d: s["p"].data[2:4].fill_(d),
    "copy_from_device_value": lambda s, d: s["w"].copy_(s["p"].detach() * d),  # a device value under the mode
    # running statistics: batch norm in training updates them on their twins (copied home late)
    "bn_running_stats": lambda s, d: torch.nn.functional.batch_norm(
        torch.stack([s["w"], s["w"] * d + 1]), s["rm"], s["rv"], training=True, momentum=0.25
    ),
    "stats_mul": lambda s, d: s["rm"].mul_(d),
    "stats_data_fill": lambda s, d: s["rv"].data.fill_(abs(d)),
    "storage_alias": lambda s, d: (
        torch.empty(0, dtype=s["w"].dtype, device="cpu")
        .set_(s["w"].untyped_storage(), 0, s["w"].shape, s["w"].stride())
        .sub_(d)
    ),
}


def _no_grad(fn):
    with torch.no_grad():
        return fn()


# Reads: device ops under the mode (CPU ops without it); each returns a CPU tensor.
READS = {
    "mul_sum": lambda s: (s["p"] * s["w"]).sum(),
    "matmul": lambda s: s["w"] @ s["p"].reshape(-1, 1),
    "linear_grad": lambda s: torch.nn.functional.linear(s["n"].reshape(1, -1), s["p"].reshape(1, -1)).sum(),
    "view_read": lambda s: s["p"][1:].exp().sum() + s["n"][::2].sum(),
    "add_all": lambda s: s["p"] + s["w"] + s["n"] + s["rm"] + s["rv"],
    "stats_aliases": lambda s: s["rm"].detach() * s["rv"].data,
    "stats_tolist": lambda s: torch.tensor(s["rm"].tolist() + s["rv"].tolist()),
}

step = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(sorted(WRITES)), st.sampled_from([0.5, -1.0, 2.0])),
    st.tuples(st.just("read"), st.sampled_from(sorted(READS)), st.just(0.0)),
    st.tuples(st.just("between_blocks"), st.sampled_from(["data_add", "numpy_view_here"]), st.just(1.5)),
)


def _state():
    a = np.linspace(-1.0, 1.0, 6, dtype=np.float32)
    return {
        "p": torch.nn.Parameter(torch.linspace(0.1, 0.6, 6)),
        "w": torch.linspace(-2.0, 3.0, 6),
        "a": a,
        "n": torch.from_numpy(a),
        "rm": torch.linspace(0.5, 1.0, 6),  # running mean and variance of a batch norm
        "rv": torch.linspace(1.0, 2.0, 6),
    }


def _run(program, device=None):
    """Run a program (under ral_mode(device) if given); every value it read, on CPU."""
    s = _state()
    reads = []
    mode = torch_fl.ral_mode(device) if device else None
    if mode:
        mode.__enter__()
    try:
        # warm the upload cache so a missed invalidation would show
        reads.append(READS["add_all"](s).detach().cpu().tolist())
        for kind, name, delta in program:
            if kind == "write":
                WRITES[name](s, delta)
            elif kind == "read":
                reads.append(READS[name](s).detach().cpu().tolist())
            else:  # leave the block, write, enter again
                if mode:
                    mode.__exit__(None, None, None)
                WRITES[name](s, delta)
                if mode:
                    mode = torch_fl.ral_mode(device)
                    mode.__enter__()
        reads.append(READS["add_all"](s).detach().cpu().tolist())
    finally:
        if mode:
            mode.__exit__(None, None, None)
    return reads


def _same_reads(device, program):
    expected = _run(program)
    got = _run(program, device)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"read {i} of {program}")


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(program=st.lists(step, min_size=1, max_size=8))
def test_random_programs_read_what_cpu_reads(device, program):
    _same_reads(device, program)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=400, deadline=None)
@given(program=st.lists(step, min_size=1, max_size=16))
def test_random_programs_read_what_cpu_reads_sweep(device, program):
    """The same property over longer programs and many more of them (`-m slow`)."""
    _same_reads(device, program)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("write", sorted(WRITES))
def test_each_write_is_seen_by_the_next_op(device, write):
    s = _state()
    with torch_fl.ral_mode(device):
        before = READS["add_all"](s).detach().cpu().tolist()
        WRITES[write](s, 2.0)
        after = READS["add_all"](s).detach().cpu().tolist()
    # the same two reads without the mode
    c = _state()
    cpu_before = READS["add_all"](c).detach().tolist()
    WRITES[write](c, 2.0)
    cpu_after = READS["add_all"](c).detach().tolist()
    np.testing.assert_allclose(before, cpu_before, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after, cpu_after, rtol=1e-6, atol=1e-6)
    assert after != before, f"{write} changed nothing: the test would prove nothing"


@pytest.mark.parametrize("device", DEVICES)
def test_manual_sgd_through_data_trains_as_cpu(device):
    """word_language_model's update, `p.data.add_(p.grad, alpha=-lr)`, under the mode."""

    def train(dev=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        losses = []
        ctx = torch_fl.ral_mode(dev) if dev else torch.enable_grad()
        with ctx:
            for _ in range(20):
                model.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-0.1)
                losses.append(float(loss))
        return losses

    cpu, ral = train(), train(device)
    assert cpu[-1] < cpu[0] * 0.9
    np.testing.assert_allclose(ral, cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_handed_out_under_the_mode_is_never_cached(device):
    from torch_fl import mode as mode_mod

    w = torch.ones(5)
    with torch_fl.ral_mode(device):
        arr = w.numpy()
        assert float((w * 2).sum()) == 10.0
        arr[:] = 3.0
        assert float((w * 2).sum()) == 30.0
        assert mode_mod._cache_get(w) is None


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_running_statistics_cost_no_wait_and_land_on_cpu(device):
    """Batch norm's running statistics are updated on their device twins without a host wait
    per layer (which stalled the forward behind every queued kernel), and every CPU-side reader
    (inside the block, through aliases, after it) sees CPU's values."""
    from torch_fl.device import sync

    model, ref = _cnn(), _cnn()
    x = torch.randn(2, 3, 5, 5)
    ref(x)
    want = ref(x)  # the reference runs outside the mode: two training forwards
    ref[1].running_mean.mul_(2)
    waits = []
    with torch_fl.ral_mode(device):
        model(x)  # warm: uploads the weights and statistics
        sync.SYNC_OBSERVERS.append(lambda dev, reason: waits.append(reason))
        try:
            out = model(x)
        finally:
            sync.SYNC_OBSERVERS.pop()
        assert waits == [], f"the training forward waited on the device: {waits}"
        torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
        bn = model[1]
        # CPU readers inside the block: a pass-through call, an alias with its own version
        # counter, the state dict, and a CPU in-place op, then a device op
        half_mean = [v / 2 for v in ref[1].running_mean.tolist()]
        assert bn.running_mean.tolist() == pytest.approx(half_mean, rel=1e-5, abs=1e-6)
        got_var = (bn.running_var.data * 1).cpu()
        got_mean4 = model.state_dict()["4.running_mean"].clone()
        bn.running_mean.mul_(2)
        got_mean = (bn.running_mean + 0).cpu()
        model(x)
    torch.testing.assert_close(got_var, ref[1].running_var, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_mean4.cpu(), ref[4].running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_mean, ref[1].running_mean, rtol=1e-5, atol=1e-6)
    ref(x)
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, dict(ref.named_buffers())[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_a_block_that_raises_still_settles_running_statistics(device):
    from torch_fl import mode as mode_mod

    model, ref = _cnn(), _cnn()
    x = torch.randn(2, 3, 5, 5)
    with pytest.raises(ValueError, match="user error"):
        with torch_fl.ral_mode(device):
            model(x)
            raise ValueError("user error")
    ref(x)
    assert not mode_mod._PENDING and not torch.overrides._get_current_function_mode_stack()
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, dict(ref.named_buffers())[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_optimizer_step_brings_running_statistics_home(device):
    """Code the mode never sees (another thread here; DDP's buffer broadcast before the next
    forward in a training loop) reads the statistics after an optimizer step inside a long block
    (`python -m torch_fl.run` runs a whole script in one) with CPU's values."""
    model, ref = _cnn(), _cnn()
    x = torch.randn(2, 3, 5, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        opt_ref.zero_grad()
        ref(x).square().sum().backward()
        opt_ref.step()
    seen = []
    with torch_fl.ral_mode(device):
        for _ in range(2):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
        _thread(lambda: seen.append((model[1].running_mean.clone(), model[4].running_var.clone())))
    torch.testing.assert_close(seen[0][0], ref[1].running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(seen[0][1], ref[4].running_var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_storage_copied_into_a_device_tensor_is_not_cached_while_its_tensor_lives(device, young_gc):
    """`device_buffer.copy_(cpu_tensor)` (how inductor's generated code on ral:0 reads a CPU graph
    input it may then update from C++ without a version bump) keeps the CPU tensor's storage out
    of the upload cache while that tensor lives; once it dies a new storage at the same address
    caches again (an address set that only grew made unrelated later tensors uncacheable)."""
    import gc

    from torch_fl import mode as mode_mod

    t = torch.arange(8.0)  # a CPU tensor (made inside the mode it would be on the device)
    with torch_fl.ral_mode(device):
        buf = torch.empty(8, device=device)
        buf.copy_(t)
        sptr = t.untyped_storage().data_ptr()
        assert sptr in mode_mod._EXPOSED
        assert float((t * 2).sum()) == 56.0 and mode_mod._cache_get(t) is None
        with torch.no_grad():
            torch.Tensor.add_(t.data, 1)  # a write the version counter of t does not see
        assert float((t * 2).sum()) == 72.0
        del t
        gc.collect()
        assert sptr not in mode_mod._EXPOSED
