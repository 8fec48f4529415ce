"""Each package's ``__all__`` is true: every name it lists is there, and a package that lists its modules
lists every one of them (a module moved or added is not left out of its package's face)."""

import importlib
import pkgutil

import pytest

import ddptop

PACKAGES = sorted(name for _, name, is_package in pkgutil.walk_packages(ddptop.__path__, "ddptop.") if is_package)


@pytest.mark.parametrize("name", PACKAGES)
def test_a_package_s_all_names_what_is_there_and_lists_every_module_it_lists_modules_of(name):
    package = importlib.import_module(name)
    listed = getattr(package, "__all__", None)
    if listed is None:
        return
    modules = sorted(found for _, found, _ in pkgutil.iter_modules(package.__path__))
    missing = [item for item in listed if item not in modules and not hasattr(package, item)]
    assert not missing, f"{name}.__all__ names what is not there: {missing}"
    if set(listed) <= set(modules):  # a list of its modules: all of them
        assert sorted(listed) == modules, f"{name}.__all__ leaves out {sorted(set(modules) - set(listed))}"
