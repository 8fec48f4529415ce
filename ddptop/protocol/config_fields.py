"""The fields that name a configuration, declared once.

A configuration is planned (``ddptop.run.plan_records.ConfigSpec``), told to its ranks in launch.json
(``ddptop.protocol.launchspec.RunConfig``, which ConfigSpec extends), announced by each rank when its model is
built (the ``config_start`` event, its fields made by ``bench_kernels.config_events``) and shown by the views
(``ddptop.run.snapshot.ConfigSnapshot``). Each of them takes these fields from ``ConfigFields``: RunConfig and
ConfigSnapshot derive from it, and config_start writes ``config_fields(cfg)``. A field added here is in all
of them, and in the configuration's records in launch.json and summary.json; only its value is to be made,
where the plan makes the others (``Plan._config``).

They are the first fields of each of those records, in this order (summary.json keeps its keys' order);
what follows them there (the global batch, the world size, the backend, ...) is RunConfig's own.

Standard library only, like the rest of ``ddptop.protocol``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddptop.protocol.vocab import Mode

if TYPE_CHECKING:
    from ddptop.protocol.modelspec import ModelKind


# keyword-only: a field added later may have a default (records written before it lack it) without the fields
# of RunConfig and ConfigSnapshot that follow these needing one
@dataclass(frozen=True, kw_only=True)
class ConfigFields:
    """What names one configuration wherever it goes: its id, its model, its mode and its batch."""

    config_id: str  # model/mode/bs<batch>/n<world size>/backend, and whatever else tells it from the others
    model: str
    mode: Mode
    batch_size: int  # per rank; 0 where the model draws its own (its kind's own_batch: a script)

    # the model spec's module is imported where asked: a rank reads these fields inside the user's own
    # process, which loads nothing it does not use (bench_kernels.script_probe)
    @property
    def kind(self) -> "ModelKind":
        """Its model's kind (``modelspec.ModelKind``): what it answers for itself (whose batch, a data wait, ...)."""
        from ddptop.protocol.modelspec import model_kind

        return model_kind(self.model)


def config_fields(config: ConfigFields) -> dict[str, Any]:
    """``config``'s values of the fields ``ConfigFields`` declares, by name and in their order: what a record
    of the configuration copies from another (a rank's config_start from its RunConfig, a view's snapshot from
    the plan's ConfigSpec)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(ConfigFields)}
