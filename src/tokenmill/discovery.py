"""Plug-ins found by module name: every module of a package imported once, so each registers what it declares."""

from __future__ import annotations

import functools
import importlib
import pkgutil


@functools.cache
def import_every_module(package_name: str) -> None:
    """Import every module under `package_name` (subpackages too), once per process.

    By name, not by `import` statements: the registry's owner (the pipeline for stages, the sources for readers)
    never imports a plug-in, so loading a config model does not import every stage or reader and its libraries."""
    package = importlib.import_module(package_name)
    for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
        importlib.import_module(module.name)
