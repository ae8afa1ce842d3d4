"""PlatformIO extra script (`extra_scripts = pre:kiln_models.py`): Kiln's models as targets of PlatformIO's SCons.

A `pre:` script runs before PlatformIO's platform script collects the
sources, so the generated models, the Kiln runtime and the portable kernels
join `PIOBUILDFILES`, and the firmware's own sources find the generated
headers through `CPPPATH`. The objects are compiled with the environment's
compiler and flags, which the platform script (run later) sets.
"""
import os
import subprocess

Import("env")  # noqa: F821 (PlatformIO's construction environment)

# The Python that has Kiln: PlatformIO's own ($PYTHONEXE), or KILN_PYTHON.
kiln_python = os.environ.get("KILN_PYTHON") or env.subst("$PYTHONEXE")  # noqa: F821
tools = subprocess.run([kiln_python, "-P", "-m", "kiln", "scons-tools"], stdout=subprocess.PIPE, text=True)
if tools.returncode:
    env.Exit(2)  # noqa: F821 (the line above it said what that Python lacks)
env["KILN_PYTHON"] = kiln_python  # noqa: F821
env.Tool("kiln_scons", toolpath=[tools.stdout.strip()])  # noqa: F821

build_root = os.path.join(env.subst("$BUILD_DIR"), "kiln")  # noqa: F821
models = env.KilnModels(os.path.join(env.subst("$PROJECT_DIR"), "models"), build_root)  # noqa: F821
env.Append(CPPPATH=[m["build"] for m in models] + [env["KILN_RUNTIME"]])  # noqa: F821
env.Append(PIOBUILDFILES=[m["object"] for m in models] + env.KilnRuntimeObjects(build_root, harness=False))  # noqa: F821
