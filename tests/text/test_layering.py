"""The text algorithms, the fastText format and the sampling hash sit below the stages and the classifier trainer: they
import neither (read from the AST, lazy imports included), and importing them loads no stage, no Ray."""

from __future__ import annotations

import subprocess
import sys

from tests.pipeline.test_import_cycles import import_graph

ALLOWED = {
    "tokenmill.text": ("tokenmill.text", "tokenmill.fasttext", "tokenmill.digest", "tokenmill.errors",
                       "tokenmill.config_base"),  # StrictModel, the settings models' base
    "tokenmill.fasttext": ("tokenmill.fasttext", "tokenmill.digest", "tokenmill.errors", "tokenmill.markers"),
    "tokenmill.sampling": (),
}
"""What each low package may import from tokenmill (a module, or a package and everything in it)."""


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_low_packages_import_only_what_lies_below_them():
    graph = import_graph()
    wrong = sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                   for low, allowed in ALLOWED.items()
                   if _inside(name, low) and not any(_inside(target, ok) for ok in allowed))
    assert not wrong, "imports upwards:\n" + "\n".join(wrong)
    assert "tokenmill.fasttext.binding" in graph["tokenmill.text.langid"]  # the graph sees these modules' imports


def test_the_classifier_trainer_imports_no_stage():
    """It reached into the clean stage for normalization and PII and into the sample stage for its hash, while the
    clean stage imports the classifier: one package-level cycle."""
    graph = import_graph()
    wrong = sorted(f"{name} -> {target}" for name, targets in graph.items() if _inside(name, "tokenmill.classifier")
                   for target in targets if _inside(target, "tokenmill.stages"))
    assert not wrong, "\n".join(wrong)
    assert "tokenmill.text.normalize" in graph["tokenmill.classifier.train"]
    assert "tokenmill.sampling" in graph["tokenmill.classifier.train"]


def test_importing_every_text_module_loads_no_stage_and_no_ray():
    code = ("import pkgutil, sys, importlib, tokenmill.text, tokenmill.fasttext, tokenmill.sampling\n"
            "for package in (tokenmill.text, tokenmill.fasttext):\n"
            "    for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tokenmill.stages', 'tokenmill.classifier', "
            "'tokenmill.pipeline.storage', 'tokenmill.pipeline.runner')) or m == 'ray' or m.startswith('ray.')))\n"
            "print(len([m for m in sys.modules if m.startswith('tokenmill.text.')]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded, text_modules = result.stdout.splitlines()
    assert loaded == "[]"
    assert int(text_modules) >= 15  # every module was imported, the quality package's included
