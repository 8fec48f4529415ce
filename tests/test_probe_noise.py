"""The script probe's gradient-norm hook on a real DDP model (a one-rank gloo group in this process): the
script's own comm hook runs inside it and is named as DDP names it, a second registration is refused as DDP
refuses it, a built-in hook runs as its Python form, and each synchronisation's norms are those of the
gradient; a step is paired only where its model synchronised once."""

from __future__ import annotations

import pytest

from bench_kernels.probe_noise import ScriptNoise


def _model(torch):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    return torch.nn.parallel.DistributedDataParallel(net)


def _step(torch, ddp, seed=1):
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = torch.randn(8, 32, generator=generator), torch.randint(0, 3, (8,), generator=generator)
    ddp.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(ddp(inputs), targets).backward()
    return sum(float(p.grad.double().square().sum()) for p in ddp.parameters())


def test_the_script_s_own_hook_runs_inside_the_probe_s_and_keeps_its_name(one_rank_group):
    torch = one_rank_group
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    noise, ddp = ScriptNoise(torch), _model(torch)
    noise._attach(ddp)  # on two ranks or more ``attach`` does this; one rank is enough to run the hook
    calls = []

    def scripts_hook(state, bucket):
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, scripts_hook)
    with pytest.raises(RuntimeError, match="can only be called once"):
        ddp.register_comm_hook(None, scripts_hook)
    _step(torch, ddp)
    assert calls == [0]
    assert ddp._get_ddp_logging_data().get("comm_hook") == scripts_hook.__qualname__
    # a hook of its own may hand back anything but the ranks' average (PowerSGD's approximation): not measured
    assert noise.step_pair() is None and "scripts_hook" in noise.failed


def test_under_torch_s_averaging_hook_the_norms_are_the_gradient_s(one_rank_group):
    torch = one_rank_group
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    noise, ddp = ScriptNoise(torch), _model(torch)
    noise._attach(ddp)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    squared = _step(torch, ddp)
    local, averaged = noise.step_pair()
    assert local == pytest.approx(squared, rel=1e-4) and averaged == pytest.approx(local, rel=1e-6)
    assert noise.failed is None
    noise.stop()  # the measured steps are over: no more norms are taken
    _step(torch, ddp)
    assert noise.step_pair() is None and all(not tap.local for tap in noise.taps)


def test_without_a_hook_of_the_script_s_ddp_averages_as_it_would_and_names_none(one_rank_group):
    torch = one_rank_group
    noise, ddp = ScriptNoise(torch), _model(torch)
    noise._attach(ddp)
    plain = _model(torch)
    assert _step(torch, ddp) == pytest.approx(_step(torch, plain), rel=1e-9)  # the same gradient as DDP's own
    assert not ddp._get_ddp_logging_data().get("comm_hook")
    assert noise.step_pair() is not None


def test_a_built_in_hook_runs_as_its_python_form(one_rank_group):
    torch = one_rank_group
    import torch.distributed as dist

    noise, ddp = ScriptNoise(torch), _model(torch)
    noise._attach(ddp)
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    _step(torch, ddp)
    assert noise.step_pair() is not None and noise.failed is None


def test_a_step_that_synchronised_twice_gives_no_pair(one_rank_group):
    """Every micro-batch synchronised: the second bucket holds the first's average plus its own gradient."""
    torch = one_rank_group
    noise, ddp = ScriptNoise(torch), _model(torch)
    noise._attach(ddp)
    ddp.zero_grad(set_to_none=True)
    for seed in (1, 2):
        generator = torch.Generator().manual_seed(seed)
        torch.nn.functional.cross_entropy(ddp(torch.randn(8, 32, generator=generator)),
                                          torch.randint(0, 3, (8,), generator=generator)).backward()
    assert noise.step_pair() is None
    _step(torch, ddp)
    assert noise.step_pair() is not None  # the next step, synchronised once, is paired again


def test_a_one_rank_group_is_left_alone(one_rank_group):
    torch = one_rank_group
    noise, ddp = ScriptNoise(torch), _model(torch)
    noise.attach(ddp)
    assert noise.taps == [] and noise.step_pair() is None
