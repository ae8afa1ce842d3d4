"""SCons tool for the Cortex-M4 target: the arm-none-eabi cross toolchain and firmware images.

Apply it to a clone of the Kiln environment (`env.Clone(tools=["kiln_cortex_m"])`):
`env.KilnModel` then compiles each generated model with the cross compiler,
and `env.KilnFirmware(target, models, build_root)` links models into
`target.elf` (plus `target.map`) with the runtime, the kernel stubs and the
MPS2-AN386 platform files. The flags live in `kiln.target.cortex_m`,
shared with direct (non-SCons) builds.
"""
from __future__ import annotations

from pathlib import Path

import SCons.Action
import SCons.Subst

from kiln_scons import check_prefixes, target_file
from kiln.ir import load
from kiln.target import cortex_m

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
            objs += env.Object(f"{build_root}/{sub}/{src.stem}", env.fs.File(str(src)), CPPPATH=_includes(env))
        _PLATFORM_OBJECTS[build_root] = objs
    return _PLATFORM_OBJECTS[build_root]


def kiln_firmware(env, target, models: list[dict], build_root: str) -> list:
    """A firmware image `target`.elf linking `models` (KilnModel results); returns [elf, map].

    `target` is a File node (safe for any folder name) or a path string, without a suffix.
    """
    base = target_file(env, target)
    prefixes = check_prefixes(models)
    planned = [n for m in models for n in m["stages"]["plan"]]
    table = env.Command(base.dir.File(f"./{base.name}_models.c"), planned + [env.Value(" ".join(prefixes))],
                        SCons.Action.Action(_table_action, "kiln table $TARGET"), KILN_PREFIXES=prefixes)
    env.Depends(table, env.File(cortex_m.__file__))
    table_obj = env.Object(base.dir.File(f"./{base.name}_models{env.subst('$OBJSUFFIX')}"), table, CPPPATH=_includes(env))
    objs = [m["object"] for m in models] + table_obj + kiln_platform_objects(env, build_root)
    script = env.fs.File(str(cortex_m.LINKER_SCRIPT))
    elf, map_file = base.dir.File(f"./{base.name}.elf"), base.dir.File(f"./{base.name}.map")
    # Paths relative to the top folder keep absolute paths out of the cache signature; as literals the
    # whole flag is quoted (a flag built by substituting a node into text would not be).
    flags = [SCons.Subst.Literal(f"-T{script.path}"), SCons.Subst.Literal(f"-Wl,-Map={map_file.path}")]
    image = env.Program([elf, map_file], objs, LIBS=cortex_m.LIBS, LINKFLAGS=cortex_m.LINKFLAGS + flags)
    env.Depends(image, script)
    return image


def _includes(env) -> list:
    return [env.fs.Dir(str(d)) for d in cortex_m.include_dirs()]


def generate(env) -> None:
    env.Replace(CC=cortex_m.CC, LINK=cortex_m.CC, CFLAGS=list(cortex_m.CFLAGS), CCFLAGS=list(cortex_m.CCFLAGS),
                PROGSUFFIX=".elf", AR="arm-none-eabi-ar", RANLIB="arm-none-eabi-ranlib")
    env.AddMethod(kiln_platform_objects, "KilnPlatformObjects")
    env.AddMethod(kiln_firmware, "KilnFirmware")


def exists(env) -> bool:
    return bool(env.Detect(cortex_m.CC))
