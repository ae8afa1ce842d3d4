"""SCons tool for the Cortex-M4 target: the arm-none-eabi cross toolchain and firmware images.

Apply it to a clone of the Kiln environment (`env.Clone(tools=["kiln_cortex_m"])`):
`env.KilnModel` then compiles each generated model with the cross compiler,
and `env.KilnFirmware(target, models, build_root)` links models into
`target.elf` (plus `target.map`) with the runtime, the kernel stubs and the
MPS2-AN386 platform files. The flags live in `toolchain.target.cortex_m`,
shared with direct (non-SCons) builds.
"""
from __future__ import annotations

from pathlib import Path

import SCons.Action

from toolchain.ir import load
from toolchain.target import cortex_m

_PLATFORM_OBJECTS: dict[str, list] = {}


def _table_action(target, source, env):
    """Write the firmware's model table from the planned graphs (the sources, in model order)."""
    graphs = [load(Path(str(s)), "planned") for s in source[: len(env["KILN_PREFIXES"])]]
    models = [cortex_m.firmware_model(p, g) for p, g in zip(env["KILN_PREFIXES"], graphs)]
    Path(str(target[0])).write_text(cortex_m.firmware_table(models))
    return 0


def kiln_platform_objects(env, build_root: str) -> list:
    """The runtime (without the host harness), kernel stubs and platform files, compiled once per build root."""
    if build_root not in _PLATFORM_OBJECTS:
        objs = []
        for src in cortex_m.platform_sources():
            sub = "_" + src.parent.name
            objs += env.Object(f"{build_root}/{sub}/{src.stem}", env.File(str(src)), CPPPATH=_includes(env))
        _PLATFORM_OBJECTS[build_root] = objs
    return _PLATFORM_OBJECTS[build_root]


def kiln_firmware(env, target: str, models: list[dict], build_root: str) -> list:
    """A firmware image `target`.elf linking `models` (KilnModel results); returns [elf, map]."""
    prefixes = [m["prefix"] for m in models]
    planned = [n for m in models for n in m["stages"]["plan"]]
    table = env.Command(f"{target}_models.c", planned + [env.Value(" ".join(prefixes))],
                        SCons.Action.Action(_table_action, "kiln table $TARGET"), KILN_PREFIXES=prefixes)
    env.Depends(table, env.File(cortex_m.__file__))
    table_obj = env.Object(table, CPPPATH=_includes(env))
    objs = [m["object"] for m in models] + table_obj + kiln_platform_objects(env, build_root)
    script = env.File(str(cortex_m.LINKER_SCRIPT))
    # Node substitutions keep the command line free of absolute paths (cache signatures).
    image = env.Program([f"{target}.elf", f"{target}.map"], objs, KILN_LDSCRIPT=script, LIBS=cortex_m.LIBS,
                        LINKFLAGS=cortex_m.LINKFLAGS + ["-T$KILN_LDSCRIPT", "-Wl,-Map=${TARGETS[1]}"])
    env.Depends(image, script)
    return image


def _includes(env) -> list:
    return [env.Dir(str(d)) for d in cortex_m.include_dirs()]


def generate(env) -> None:
    env.Replace(CC=cortex_m.CC, LINK=cortex_m.CC, CFLAGS=list(cortex_m.CFLAGS), CCFLAGS=list(cortex_m.CCFLAGS),
                PROGSUFFIX=".elf", AR="arm-none-eabi-ar", RANLIB="arm-none-eabi-ranlib")
    env.AddMethod(kiln_platform_objects, "KilnPlatformObjects")
    env.AddMethod(kiln_firmware, "KilnFirmware")


def exists(env) -> bool:
    return bool(env.Detect(cortex_m.CC))
