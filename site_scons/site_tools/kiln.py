"""SCons tool for Kiln: one builder per compiler stage, from the stage registry.

`generate(env)` registers builders and two pseudo-builders; it holds no
compiler logic. Each stage runs as its own process (`python -m toolchain
stage NAME ...`), so `scons -j` is parallel. A stage target's signature is
exactly: its input artifacts' contents, the canonical text of the model.toml
tables it reads (a Value node), and the contents of the source modules the
registry lists for it — no absolute paths, times or environment, so clones in
different folders share cache entries.
"""
from __future__ import annotations

import sys
from pathlib import Path

import SCons.Builder
import SCons.Script

from toolchain import config as model_config
from toolchain.codegen.names import c_identifier
from toolchain.errors import KilnError
from toolchain.host import RUNTIME, STUBS, model_table
from toolchain.stages import STAGES

TOOLCHAIN_ROOT = Path(__import__("toolchain").__file__).resolve().parent.parent


def _stage_builder(stage) -> SCons.Builder.Builder:
    action = SCons.Action.Action(
        f"$( $KILN_PYTHON $) -m toolchain stage {stage.name} --model-dir $KILN_MODEL_DIR --build-dir ${{TARGET.dir}}",
        cmdstr=f"kiln {stage.name} $KILN_MODEL",
    )
    return SCons.Builder.Builder(action=action)


def _model_table_action(target, source, env):
    Path(str(target[0])).write_text(model_table(env["KILN_PREFIXES"]))
    return 0


def kiln_model(env, model_dir: str, build_root: str) -> dict:
    """Declare every stage of one model; returns {"stages": {name: [nodes]}, "object": node, "prefix": str}."""
    model_dir_node = env.Dir(model_dir)
    name = Path(model_dir_node.abspath).name
    toml = Path(model_dir_node.abspath) / "model.toml"
    try:
        cfg = model_config.load(toml)
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        SCons.Script.Exit(2)
    build = env.Dir(f"{build_root}/{name}")
    menv = env.Clone(KILN_MODEL=name, KILN_MODEL_DIR=model_dir_node.path)
    config_files = {str((Path(model_dir_node.abspath) / p).resolve()) for p in cfg["quant"]["calibration"]}
    source_files = sorted(
        f for f in Path(model_dir_node.abspath).rglob("*")
        if f.is_file() and f.name != "model.toml" and "__pycache__" not in f.parts and str(f.resolve()) not in config_files
    )
    stages: dict[str, list] = {}
    for st in STAGES:
        targets = [build.File(a) for a in st.outputs(name)]
        sources = [build.File(a) for a in st.consumes]
        sources.append(env.Value(model_config.canonical(model_config.view(cfg, st.tables))))
        if st.name == "import":
            sources += [env.File(str(f)) for f in source_files]
        if "quant" in st.tables:
            sources += [env.File(p) for p in sorted(config_files)]
        nodes = getattr(menv, f"KilnStage_{st.name}")(targets, sources)
        menv.Depends(nodes, [env.File(str(f)) for f in st.source_files(TOOLCHAIN_ROOT)])
        stages[st.name] = nodes
        env.Alias(f"{name}-{st.name}", nodes)
    c_source = [n for n in stages["codegen"] if str(n).endswith(".c")][0]
    obj = menv.Object(c_source, CPPPATH=[env.Dir(str(RUNTIME)), build])
    prefix = cfg["codegen"]["prefix"] or c_identifier(name)
    return {"name": name, "stages": stages, "object": obj, "prefix": prefix, "build": build}


def kiln_program(env, target: str, models: list[dict], build_root: str):
    """A host program linking `models` with the runtime, the kernel stubs and the harness."""
    runtime_objs = env.KilnRuntimeObjects(build_root)
    table = env.Command(f"{target}_models.c", [env.Value(model_table([m['prefix'] for m in models]))],
                        SCons.Action.Action(_model_table_action, "model table $TARGET"),
                        KILN_PREFIXES=[m["prefix"] for m in models])
    table_obj = env.Object(table, CPPPATH=[env.Dir(str(RUNTIME))])
    objs = [m["object"] for m in models]
    return env.Program(target, objs + table_obj + runtime_objs, LIBS=["m"])


def kiln_runtime_objects(env, build_root: str) -> list:
    """The runtime, harness and kernel stubs compiled once per build root."""
    if build_root not in _RUNTIME_OBJECTS:
        objs = []
        for folder, sub in ((RUNTIME, "runtime"), (STUBS, "firmware_stubs")):
            for c in sorted(Path(folder).glob("*.c")):
                objs += env.Object(f"{build_root}/_{sub}/{c.stem}", env.File(str(c)), CPPPATH=[env.Dir(str(RUNTIME))])
        _RUNTIME_OBJECTS[build_root] = objs
    return _RUNTIME_OBJECTS[build_root]


_RUNTIME_OBJECTS: dict[str, list] = {}


def generate(env) -> None:
    env.SetDefault(KILN_PYTHON=sys.executable)
    for st in STAGES:
        env["BUILDERS"][f"KilnStage_{st.name}"] = _stage_builder(st)
    env.AddMethod(kiln_model, "KilnModel")
    env.AddMethod(kiln_program, "KilnProgram")
    env.AddMethod(kiln_runtime_objects, "KilnRuntimeObjects")


def exists(env) -> bool:
    return True
