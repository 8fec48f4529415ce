"""Build a model by torchvision name or ``package.module:factory`` (randomly initialised, no downloads)."""

from __future__ import annotations

import importlib
import inspect

from bench_kernels.catalog import TORCHVISION_MODELS, is_factory


def build_model(name: str, num_classes: int, image_size: int):
    """Return an ``nn.Module`` taking ``(B, 3, image_size, image_size)`` floats and giving class logits.

    A factory is called with whichever of ``num_classes`` and ``image_size`` it accepts.
    """
    if is_factory(name):
        module_name, attr = name.split(":", 1)
        factory = getattr(importlib.import_module(module_name), attr)
        try:
            accepted = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            accepted = {}
        wanted = {"num_classes": num_classes, "image_size": image_size}
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
            kwargs = wanted
        else:
            kwargs = {k: v for k, v in wanted.items() if k in accepted}
        return factory(**kwargs)

    import torchvision.models

    kwargs: dict = {"weights": None, "num_classes": num_classes}
    family = TORCHVISION_MODELS[name][0] if name in TORCHVISION_MODELS else ""
    if family == "vit":
        kwargs["image_size"] = image_size
    if family in ("inception", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=False)
    return torchvision.models.get_model(name, **kwargs)
