"""SCons tool for the Cortex-M4 target: the arm-none-eabi cross toolchain and firmware images.

Apply it to a clone of a Kiln environment (`env.Clone(tools=["kiln_cortex_m"])`):
`env.KilnModel` then compiles each generated model with the cross compiler,
and `env.KilnFirmware(target, models, build_root)` links models into
`target.elf` (plus `target.map`) with the runtime, the kernel stubs and the
MPS2-AN386 platform files. The flags live in `kiln/target/cortex_m.py`,
shared with direct (non-SCons) builds and loaded, like the registry, under
the `kiln_scons` tool's private package name; the firmware's model table is
written from the models' generated headers (`kiln/model_table.py`), so the
SCons process reads no graph.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import SCons.Action
import SCons.Subst


def _kiln_scons():
    """The `kiln_scons` tool beside this one (loaded as SCons loads tools: by path, under its name)."""
    path = Path(__file__).with_name("kiln_scons.py")  # as SCons names tool files, so either of us may load it first
    loaded = sys.modules.get("kiln_scons")
    if loaded is not None and loaded.__file__ == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location("kiln_scons", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kiln_scons"] = module
    spec.loader.exec_module(module)
    return module


kiln_scons = _kiln_scons()
cortex_m = importlib.import_module(f"{kiln_scons._KILN}.target.cortex_m")

_PLATFORM_OBJECTS: dict[str, list] = {}


def _table_action(target, source, env):
    """Write the firmware's model table from the models' generated headers (the sources, in model order)."""
    models = [kiln_scons.model_table.firmware_model(p, Path(str(h)).read_text(), str(h))
              for p, h in zip(env["KILN_PREFIXES"], source)]
    kiln_scons.write_atomic(str(target[0]), kiln_scons.model_table.model_table(env["KILN_PREFIXES"], models).encode())
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
    base = kiln_scons.target_file(env, target)
    prefixes = kiln_scons.check_prefixes(models)
    table = env.Command(base.dir.File(f"./{base.name}_models.c"), [m["header"] for m in models] + [env.Value(" ".join(prefixes))],
                        SCons.Action.Action(_table_action, "kiln table $TARGET"), KILN_PREFIXES=prefixes)
    table_obj = env.Object(base.dir.File(f"./{base.name}_models{env.subst('$OBJSUFFIX')}"), table, CPPPATH=_includes(env))
    objs = [m["object"] for m in models] + table_obj + kiln_platform_objects(env, build_root)
    script = env.fs.File(str(cortex_m.LINKER_SCRIPT))
    elf, map_file = base.dir.File(f"./{base.name}.elf"), base.dir.File(f"./{base.name}.map")
    # Paths relative to the top folder keep absolute paths out of the cache signature; as literals the
    # whole flag is quoted (a flag built by substituting a node into text would not be).
    flags = [SCons.Subst.Literal(f"-T{script.path}"), SCons.Subst.Literal(f"-Wl,-Map={map_file.path}")]
    image = env.Program([elf, map_file], objs, LIBS=cortex_m.LIBS, LINKFLAGS=cortex_m.LINKFLAGS + flags)
    env.Depends(image, script)
    if len(models) == 1:  # a model's own image: the reports show its per-layer instructions
        kiln_scons.add_image_to_reports(env, build_root, [elf, map_file])
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
