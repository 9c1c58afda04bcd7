"""Packages: the design card keeps `datasets/`, `features/`, `predictor/`, ... at the repository
root, but they install and import as `perfcast.datasets`, `perfcast.features`, ... so that
perfcast never claims a generic top-level name (`datasets` is Hugging Face's). Metadata lives in
pyproject.toml; only this mapping needs code, so that a new subpackage is picked up by itself."""

from setuptools import find_namespace_packages, find_packages, setup

LAYERS = ["datasets", "features", "predictor", "training", "optimizer", "scheduler", "serving"]

package_dir = {"perfcast": "common"}  # errors, paths, atomic writes, ..., the command line
packages = ["perfcast", *(f"perfcast.{p}" for p in find_packages("common"))]
for layer in LAYERS:
    package_dir[f"perfcast.{layer}"] = layer
    # namespace discovery so that data-only folders (datasets/measured/cpu) ship as packages too
    found = find_namespace_packages(layer, exclude=["*__pycache__*"])
    packages += [f"perfcast.{layer}", *(f"perfcast.{layer}.{p}" for p in found)]

setup(packages=packages, package_dir=package_dir)
