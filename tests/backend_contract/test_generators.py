"""Contract: torch.Generator(device="ral:N") through PyTorch's PrivateUse1 hooks, seeding, and
generator= in every random op, in both styles and on both devices: same seed, same numbers."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
F = torch.nn.functional

# every random factory and op a CUDA user passes generator= to; each returns a fresh tensor
RANDOM_OPS = {
    "randn": lambda d, g: torch.randn(64, generator=g, device=d),
    "rand": lambda d, g: torch.rand(64, generator=g, device=d),
    "randint": lambda d, g: torch.randint(0, 100, (64,), generator=g, device=d),
    "randperm": lambda d, g: torch.randperm(50, generator=g, device=d),
    "normal_": lambda d, g: torch.empty(64, device=d).normal_(generator=g),
    "normal": lambda d, g: torch.normal(torch.zeros(64, device=d), 1.0, generator=g),
    "uniform_": lambda d, g: torch.empty(64, device=d).uniform_(generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((64,), 0.5, device=d), generator=g),
    "bernoulli_": lambda d, g: torch.empty(64, device=d).bernoulli_(0.3, generator=g),
    "multinomial": lambda d, g: torch.multinomial(torch.ones(10, device=d), 5, generator=g),
    "exponential_": lambda d, g: torch.empty(64, device=d).exponential_(generator=g),
    "random_": lambda d, g: torch.empty(64, device=d).random_(0, 10, generator=g),
    "geometric_": lambda d, g: torch.empty(64, device=d).geometric_(0.3, generator=g),
    "cauchy_": lambda d, g: torch.empty(64, device=d).cauchy_(generator=g),
    "log_normal_": lambda d, g: torch.empty(64, device=d).log_normal_(generator=g),
    "rand_like": lambda d, g: torch.rand_like(torch.empty(64, device=d), generator=g),
    "randn_like": lambda d, g: torch.randn_like(torch.empty(64, device=d), generator=g),
}


@pytest.mark.parametrize("dev", DEVICES)
def test_generator_object(dev):
    g = torch.Generator(device=dev)
    assert g.device == torch.device(dev)
    g.manual_seed(1234)
    assert g.initial_seed() == 1234
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(100, device=dev, generator=g).cpu()
    g.set_state(state)
    torch.testing.assert_close(torch.randn(100, device=dev, generator=g).cpu(), a, rtol=0, atol=0)
    s = g.seed()
    assert g.initial_seed() == s
    with pytest.raises(ValueError, match="16 bytes"):
        g.set_state(torch.zeros(3, dtype=torch.uint8))
    # a bare "ral" generator belongs to the current device
    with torch.ral.device(torch.device(dev).index):
        assert torch.Generator(device="ral").device == torch.device(dev)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("op", sorted(RANDOM_OPS))
def test_generator_argument(dev, op):
    """Same seed, same numbers; the generator advances; the default generator is not used."""
    fn = RANDOM_OPS[op]
    g = torch.Generator(device=dev)
    g.manual_seed(7)
    a, b = fn(dev, g).cpu(), fn(dev, g).cpu()
    g.manual_seed(7)
    torch.testing.assert_close(fn(dev, g).cpu(), a, rtol=0, atol=0)
    assert not torch.equal(a, b), "the generator did not advance"
    torch.ral.manual_seed_all(1)
    ref = torch.randn(8, device=dev).cpu()
    torch.ral.manual_seed_all(1)
    fn(dev, g)
    torch.testing.assert_close(torch.randn(8, device=dev).cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("dev", DEVICES)
def test_generator_in_ral_mode(dev):
    """The ral_mode style: unmodified CPU code passing a ral generator."""
    g = torch.Generator(device=dev)
    with torch_fl.ral_mode(dev):
        g.manual_seed(3)
        x = torch.randn(32, generator=g)
        d = F.dropout(torch.ones(32), 0.5)
        g.manual_seed(3)
        y = torch.randn(32, generator=g)
    assert x.device == torch.device(dev) and d.device == torch.device(dev)
    torch.testing.assert_close(x.cpu(), y.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("dev", DEVICES)
def test_default_generator_seeding_and_fork_rng(dev):
    idx = torch.device(dev).index
    with torch.ral.device(idx):
        torch.ral.manual_seed(11)
        assert torch.ral.initial_seed() == 11
    a = torch.rand(16, device=dev).cpu()
    torch.ral.manual_seed_all(11)
    torch.testing.assert_close(torch.rand(16, device=dev).cpu(), a, rtol=0, atol=0)
    torch.manual_seed(5)  # seeds ral too, as it seeds CUDA
    b = torch.randint(0, 1000, (16,), device=dev).cpu()  # a CPU-kernel op follows the ral seed
    torch.manual_seed(5)
    torch.testing.assert_close(torch.randint(0, 1000, (16,), device=dev).cpu(), b, rtol=0, atol=0)
    with torch.random.fork_rng(devices=[idx], device_type="ral"):
        torch.randn(100, device=dev)
    after = torch.randn(8, device=dev).cpu()
    torch.manual_seed(5)
    torch.randint(0, 1000, (16,), device=dev)
    torch.testing.assert_close(torch.randn(8, device=dev).cpu(), after, rtol=0, atol=0)
    state = torch.ral.get_rng_state(dev)
    c = torch.randn(8, device=dev).cpu()
    torch.ral.set_rng_state(state, dev)
    torch.testing.assert_close(torch.randn(8, device=dev).cpu(), c, rtol=0, atol=0)


@pytest.mark.parametrize("dev", DEVICES)
def test_generator_of_another_device_type_raises(dev):
    with pytest.raises(RuntimeError, match="Expected a 'ral' device type for generator but found 'cpu'"):
        torch.randn(4, device=dev, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'ral' device type for generator but found 'cpu'"):
        torch.randint(0, 5, (4,), device=dev, generator=torch.Generator())  # a CPU-kernel op
    with pytest.raises(RuntimeError, match="Expected a 'ral' device type for generator but found 'cpu'"):
        torch.empty(4, device=dev).uniform_(generator=torch.Generator())
    assert torch.randn(4, device=dev).isfinite().all().item()  # the process keeps working
