"""The wheel: the `kiln` package, with the C runtime, the portable kernels and the SCons tools inside it.

They live at the repository root (`runtime/`, `firmware_stubs/`,
`site_scons/site_tools/`) and install as `kiln/runtime/`,
`kiln/firmware_stubs/` and `kiln/site_tools/`; `kiln.paths` finds them in
either place. Everything else is in pyproject.toml.
"""
from pathlib import Path

from setuptools import find_packages, setup

DATA = {"kiln.runtime": "runtime", "kiln.firmware_stubs": "firmware_stubs", "kiln.site_tools": "site_scons/site_tools"}


def folders(package: str, folder: str) -> dict[str, str]:
    """`folder` and every folder inside it (a target's platform files), each as a package of the wheel."""
    root = Path(folder)
    inside = sorted(d for d in root.rglob("*") if d.is_dir() and d.name != "__pycache__")
    return {".".join([package, *d.relative_to(root).parts]): d.as_posix() for d in [root, *inside]}


PACKAGE_DIR = {name: path for package, folder in DATA.items() for name, path in folders(package, folder).items()}

setup(
    packages=find_packages(include=["kiln", "kiln.*"]) + list(PACKAGE_DIR),
    package_dir=PACKAGE_DIR,
    package_data={"kiln": ["**/*.j2", "**/*.fbs"], **{name: ["*.c", "*.h", "*.ld"] for name in PACKAGE_DIR}},
)
