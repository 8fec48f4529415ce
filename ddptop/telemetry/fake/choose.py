"""Which simulated node ``DDPTOP_FAKE_NVML=<choice>`` names: a profile's (``nvml.FakeNvml``) or, for a
driver report (``ddptop doctor --report``, a ``.json`` file), the replay of it (``replay.ReplayNvml``)."""

from __future__ import annotations

from ddptop.telemetry.fake.nodes import ProfileError, load_profile
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.fake.replay import ReplayNvml

_MODULES: dict[str, FakeNvml] = {}


def module_for(choice: str) -> FakeNvml:
    """The process-wide node for ``DDPTOP_FAKE_NVML=<choice>``; ValueError with the reason."""
    if choice not in _MODULES:
        try:
            profile = load_profile(choice)
        except ProfileError as exc:
            raise ValueError(str(exc)) from None
        _MODULES[choice] = ReplayNvml(profile) if profile.recorded is not None else FakeNvml(profile)
    return _MODULES[choice]
