"""SCons tool for the firmware targets: a target's cross toolchain and firmware images.

Apply it to a clone of a Kiln environment naming the target
(`env.Clone(tools=["kiln_cortex_m"], KILN_TARGET="cortex-m0")`; the default
is the Cortex-M4): `env.KilnModel` then compiles each generated model with
the target's cross compiler, and `env.KilnFirmware(target, models,
build_root)` links models into `target.elf` (plus `target.map`) with the
runtime, the kernel stubs, the harness and the target's platform files. The
targets are data (`kiln/target/targets.py`), the flags and the linker script
come from `kiln/target/cortex_m.py`, shared with direct (non-SCons) builds
and loaded, like the registry, under the `kiln_scons` tool's private package
name; the firmware's model table is written from the models' generated
headers (`kiln/model_table.py`), so the SCons process reads no graph. Before a
model's own image links, its budget (arena, I/O and stack against the
board's RAM, weights and code against its flash, `kiln.target.size.budget`)
is checked, and a model that cannot fit stops there with one line; a link
that overflows a region fails with one line naming it and the overflow.
"""
from __future__ import annotations

import importlib
import importlib.util
import subprocess
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
size = importlib.import_module(f"{kiln_scons._KILN}.target.size")

_PLATFORM_OBJECTS: dict[str, list] = {}
_SCRIPTS: dict[str, list] = {}
_LINK = "$LINK -o $TARGET $LINKFLAGS $SOURCES $_LIBDIRFLAGS $_LIBFLAGS"


def _table_action(target, source, env):
    """Write the firmware's model table from the models' generated headers (the sources, in model order)."""
    models = [kiln_scons.model_table.firmware_model(p, Path(str(h)).read_text(), str(h))
              for p, h in zip(env["KILN_PREFIXES"], source)]
    kiln_scons.write_atomic(str(target[0]), kiln_scons.model_table.model_table(env["KILN_PREFIXES"], models).encode())
    return 0


def _target(env):
    return cortex_m.resolve(env.get("KILN_TARGET"))


def _link_action(target, source, env):
    """Link; a region overflow is one line naming the region and by how much."""
    cmd = [str(a) for a in env.subst_list(_LINK, target=target, source=source)[0]]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env["ENV"])
    if proc.returncode != 0:
        print(f"kiln: error: {cortex_m.link_error(_target(env), Path(str(target[0])), proc.stderr)}", file=sys.stderr)
        return 1
    sys.stderr.write(proc.stderr)
    return 0


def _link_show(target, source, env) -> str:
    return env.subst(_LINK, target=target, source=source)


def _fit_action(target, source, env):
    """Write the model's budget on the target, or fail with one line when it cannot fit."""
    header, obj = (Path(str(s)) for s in source[:2])
    t = _target(env)
    needs = kiln_scons.model_table.firmware_model(env["KILN_PREFIX"], header.read_text(), str(header))
    flash = kiln_scons.model_table.model_sizes(header, obj)[1] or 0
    found = size.budget(env["KILN_MODEL"], t, needs.arena_size, needs.io_bytes, flash)
    problem = found.problem(t)
    if problem:
        print(f"kiln: error: {problem}", file=sys.stderr)
        return 1
    kiln_scons.write_atomic(str(target[0]), (f"{found.model} on {t.name}: RAM {found.ram} of {t.ram.length} bytes, "
                                             f"flash {found.flash} of {t.read_only_bytes} (before the platform)\n").encode())
    return 0


def _script_action(target, source, env):
    kiln_scons.write_atomic(str(target[0]), cortex_m.linker_script(_target(env)).encode())
    return 0


def kiln_linker_script(env, build_root: str) -> list:
    """The target's linker script (its memory map, then the platform's sections), once per build root."""
    if build_root not in _SCRIPTS:
        t = _target(env)
        parts = [env.fs.File(str(part)) for part in cortex_m.script_parts(t)]
        _SCRIPTS[build_root] = env.Command(env.Dir(kiln_scons._literal(build_root)).File(f"./{t.name}.ld"),
                                           [*parts, env.Value(cortex_m.linker_script(t))],
                                           SCons.Action.Action(_script_action, "kiln linker script $TARGET"))
    return _SCRIPTS[build_root]


def kiln_platform_objects(env, build_root: str) -> list:
    """The runtime (without the host harness), kernel stubs, harness and platform files, compiled once per build root."""
    kiln_scons.claim_root(env, build_root)
    if build_root not in _PLATFORM_OBJECTS:
        objs = []
        for src in cortex_m.platform_sources(_target(env)):
            sub = "_" + src.parent.name
            objs += env.Object(f"{build_root}/{sub}/{src.stem}", env.fs.File(str(src)), CPPPATH=_includes(env))
        _PLATFORM_OBJECTS[build_root] = objs
    return _PLATFORM_OBJECTS[build_root]


def kiln_firmware(env, target, models: list[dict], build_root: str) -> list:
    """A firmware image `target`.elf linking `models` (KilnModel results) with Kiln's harness; returns [elf, map].

    `target` is a File node (safe for any folder name) or a path string, without a suffix.
    """
    base = kiln_scons.target_file(env, target)
    prefixes = kiln_scons.check_prefixes(models)
    table = env.Command(base.dir.File(f"./{base.name}_models.c"), [m["header"] for m in models] + [env.Value(" ".join(prefixes))],
                        SCons.Action.Action(_table_action, "kiln table $TARGET"), KILN_PREFIXES=prefixes)
    table_obj = env.Object(base.dir.File(f"./{base.name}_models{env.subst('$OBJSUFFIX')}"), table, CPPPATH=_includes(env))
    image = _image(env, base, [m["object"] for m in models] + table_obj + kiln_platform_objects(env, build_root), build_root)
    if len(models) == 1:
        m = models[0]
        fit = env.Command(base.dir.File(f"./{base.name}.fit"), [m["header"], m["object"][0]],
                          SCons.Action.Action(_fit_action, "kiln fit $TARGET"), KILN_PREFIX=m["prefix"], KILN_MODEL=m["name"])
        env.Depends(image, fit)
    return image


def _image(env, base, objs: list, build_root: str) -> list:
    """Link `objs` with the target's linker script into `base`.elf and its map; returns [elf, map]."""
    script = kiln_linker_script(env, build_root)[0]
    elf, map_file = base.dir.File(f"./{base.name}.elf"), base.dir.File(f"./{base.name}.map")
    # Paths relative to the top folder keep absolute paths out of the cache signature; as literals the
    # whole flag is quoted (a flag built by substituting a node into text would not be).
    flags = [SCons.Subst.Literal(f"-T{script.path}"), SCons.Subst.Literal(f"-Wl,-Map={map_file.path}")]
    link = SCons.Action.Action(_link_action, _link_show, varlist=["LINK", "LINKFLAGS", "_LIBDIRFLAGS", "_LIBFLAGS"])
    image = env.Program([elf, map_file], objs, LIBS=cortex_m.LIBS,
                        LINKFLAGS=cortex_m.linkflags(_target(env)) + flags, LINKCOM=link)
    env.Depends(image, script)
    return image


def kiln_runtime_objects(env, build_root: str, harness: bool = True) -> list:
    """The runtime and kernels for the target, compiled once per build root, with its platform files: Kiln's harness
    (`harness=True`), or for a firmware with its own main the startup, semihosting and the C library's system calls
    (`runtime/app/`)."""
    objs = kiln_platform_objects(env, build_root)
    if harness:
        return objs
    if build_root not in _APP_OBJECTS:
        _APP_OBJECTS[build_root] = [env.Object(f"{build_root}/_app/{src.stem}", env.fs.File(str(src)), CPPPATH=_includes(env))[0]
                                    for src in cortex_m.app_sources()]
    return [o for o in objs if Path(str(o)).stem != cortex_m.HARNESS_MAIN] + _APP_OBJECTS[build_root]


_APP_OBJECTS: dict[str, list] = {}


def kiln_app(env, target, sources: list, models: list[dict]) -> list:
    """A firmware image of your own for the target: `sources` (C files with their own `main`, or objects) linked
    with `models` (`KilnTargetModels` in this environment), the runtime, the kernels, the board's startup code and
    linker script, and semihosting stdio (printf, `kiln qemu`); `target` names the image without its suffix.
    Returns [elf, map]."""
    base = kiln_scons.target_file(env, target)
    root = kiln_scons.app_root(env, base, models)
    if kiln_scons.stand_ins(models):
        return kiln_scons.stand_ins(models)
    objs = kiln_scons.app_objects(env, base, sources, models) + [o for m in models for o in m["object"]]
    return _image(env, base, objs + kiln_runtime_objects(env, root, harness=False), root)


def _includes(env) -> list:
    return [env.fs.Dir(str(d)) for d in cortex_m.include_dirs(_target(env))]


def generate(env) -> None:
    try:
        t = _target(env)
    except kiln_scons.KilnError as exc:  # an unknown KILN_TARGET: one line with the list of targets, not a traceback
        kiln_scons._error(str(exc))
    env.Replace(CC=cortex_m.compiler(t), LINK=cortex_m.compiler(t), CFLAGS=list(cortex_m.CFLAGS),
                CCFLAGS=cortex_m.ccflags(t), PROGSUFFIX=".elf", AR=t.toolchain + "ar", RANLIB=t.toolchain + "ranlib",
                KILN_TARGET=t.name)
    env.AddMethod(kiln_platform_objects, "KilnPlatformObjects")
    env.AddMethod(kiln_firmware, "KilnFirmware")
    env.AddMethod(kiln_firmware, "KilnProgram")  # a model's own program, on this target: its image
    env.AddMethod(kiln_runtime_objects, "KilnRuntimeObjects")
    env.AddMethod(kiln_app, "KilnApp")


def exists(env) -> bool:
    return bool(env.Detect(cortex_m.compiler(_target(env))))
