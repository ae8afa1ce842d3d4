"""SCons tool for Kiln: one builder per compiler stage, from the stage registry.

`generate(env)` registers builders and two pseudo-builders; it holds no
compiler logic. Each stage runs as its own process (`python -m toolchain
stage NAME ...`), so `scons -j` is parallel. A stage target's signature is
exactly: its input artifacts' contents, the canonical text of the model.toml
tables it reads (a Value node), and the contents of the source modules the
registry lists for it — no absolute paths, times or environment, so clones in
different folders share cache entries.

`--kiln-cache=DIR` (or `KILN_CACHE`) turns on a shared build cache whose
entries carry a SHA-256 of their content, checked on every retrieval;
`--kiln-cache-readonly` (or `KILN_CACHE_READONLY=1`) reads it without writing.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
from pathlib import Path

import SCons.Builder
import SCons.CacheDir
import SCons.Errors
import SCons.Script
import SCons.Util

# The compiler this tool drives is the one next to it, also when another repository loads the
# tool through `toolpath` (see examples/external_repo): SCons imports it from here, stages run it from here.
KILN_ROOT = Path(__file__).resolve().parents[2]
if str(KILN_ROOT) not in sys.path:
    sys.path.insert(0, str(KILN_ROOT))

from toolchain import config as model_config  # noqa: E402
from toolchain.codegen.names import c_identifier  # noqa: E402
from toolchain.errors import KilnError  # noqa: E402
from toolchain.frontends.config import depends_files  # noqa: E402
from toolchain.host import RUNTIME, STUBS, model_table  # noqa: E402
from toolchain.ir.serialize import write_atomic  # noqa: E402
from toolchain.manifest import manifest, recorded  # noqa: E402
from toolchain.stages import STAGES  # noqa: E402

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
        depends = depends_files(Path(model_dir_node.abspath), cfg["model"], str(toml))
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
        # The canonical JSON of the tables: `--debug=explain` shows a config change as the old text
        # ("no longer a dependency") and the new one ("a new dependency").
        sources.append(env.Value(model_config.canonical(model_config.view(cfg, st.tables))))
        if st.name == "import":  # the model folder, and the files outside it that model.depends lists
            sources += [env.File(str(f)) for f in source_files + depends]
        if "quant" in st.tables:
            sources += [env.File(p) for p in sorted(config_files)]
        nodes = getattr(menv, f"KilnStage_{st.name}")(targets, sources)
        menv.Depends(nodes, [env.File(str(f)) for f in st.source_files(TOOLCHAIN_ROOT)])
        # Stages replace their outputs atomically, so SCons need not delete them first: a killed stage
        # leaves the previous complete artifact (still recorded as out of date), never a missing one.
        menv.Precious(nodes)
        stages[st.name] = nodes
        env.Alias(f"{name}-{st.name}", nodes)
    c_source = [n for n in stages["codegen"] if str(n).endswith(".c")][0]
    obj = menv.Object(c_source, CPPPATH=[env.Dir(str(RUNTIME)), build])
    prefix = cfg["codegen"]["prefix"] or c_identifier(name)
    return {"name": name, "stages": stages, "object": obj, "prefix": prefix, "build": build}


def _manifest_action(target, source, env):
    write_atomic(str(target[0]), manifest([Path(str(s)) for s in source]).encode())
    return 0


def kiln_program(env, target: str, models: list[dict], build_root: str):
    """A host program linking `models` with the runtime, the kernel stubs and the harness."""
    runtime_objs = env.KilnRuntimeObjects(build_root)
    table = env.Command(f"{target}_models.c", [env.Value(model_table([m['prefix'] for m in models]))],
                        SCons.Action.Action(_model_table_action, "model table $TARGET"),
                        KILN_PREFIXES=[m["prefix"] for m in models])
    table_obj = env.Object(table, CPPPATH=[env.Dir(str(RUNTIME))])
    objs = [m["object"] for m in models]
    return env.Program(target, objs + table_obj + runtime_objs, LIBS=["m"])


def kiln_manifest(env, program, model: dict):
    """`<model>.manifest` (toolchain/manifest.py) for a model's own program, written after the program.

    It depends on the files it records, not on the program: a relink that
    changes nothing the check compares (new runtime flags) leaves it as it is.
    """
    files = recorded(model["name"])
    sources = sorted((n for nodes in model["stages"].values() for n in nodes if Path(str(n)).name in files), key=str)
    record = env.Command(model["build"].File(f"{model['name']}.manifest"), sources,
                         SCons.Action.Action(_manifest_action, "manifest $TARGET"))
    env.Requires(record, program)
    return record


def kiln_runtime_objects(env, build_root: str, harness: bool = True) -> list:
    """The runtime, harness and kernel stubs compiled once per build root.

    `harness=False` leaves out the host harness (`host_main.c`, which has `main`),
    for a firmware that calls the models from its own main.
    """
    if build_root not in _RUNTIME_OBJECTS:
        objs = []
        for folder, sub in ((RUNTIME, "runtime"), (STUBS, "firmware_stubs")):
            for c in sorted(Path(folder).glob("*.c")):
                objs += env.Object(f"{build_root}/_{sub}/{c.stem}", env.File(str(c)), CPPPATH=[env.Dir(str(RUNTIME))])
        _RUNTIME_OBJECTS[build_root] = objs
    return [o for o in _RUNTIME_OBJECTS[build_root] if harness or Path(str(o)).stem != "host_main"]


_RUNTIME_OBJECTS: dict[str, list] = {}

# -- the shared build cache ------------------------------------------------
_ENTRY_MAGIC = b"kiln-cache sha256:"


def _entry(data: bytes) -> bytes:
    return _ENTRY_MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data


def _verified_payload(path: str) -> bytes | None:
    """The content of cache entry `path`, or None when its hash does not match (or it is no Kiln entry)."""
    raw = Path(path).read_bytes()
    head, sep, data = raw.partition(b"\n")
    if not sep or not head.startswith(_ENTRY_MAGIC):
        return None
    return data if head[len(_ENTRY_MAGIC):].decode("ascii", "replace") == hashlib.sha256(data).hexdigest() else None


class VerifiedCacheDir(SCons.CacheDir.CacheDir):
    """SCons's CacheDir, but every entry carries the SHA-256 of its content, checked on retrieval.

    SCons trusts whatever file sits at a signature's path; a shared folder can
    hold a truncated or tampered file. A corrupted entry is reported and never
    used: the target is rebuilt and (unless read-only) the entry replaced.
    """

    readonly = False

    @classmethod
    def copy_to_cache(cls, env, src, dst) -> str:
        Path(dst).write_bytes(_entry(Path(src).read_bytes()))
        # Retrieval gives the target the entry's mode: programs stay executable.
        os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode) | stat.S_IWUSR)
        return dst

    @classmethod
    def copy_from_cache(cls, env, src, dst) -> str:
        data = _verified_payload(src)
        if data is None:
            raise SCons.Errors.BuildError(errstr=f"kiln: cache entry {src} changed while it was being read")
        write_atomic(dst, data)
        return dst

    def is_readonly(self) -> bool:
        return self.readonly or super().is_readonly()

    def retrieve(self, node) -> bool:
        _, cachefile = self.cachepath(node)
        if cachefile and os.path.isfile(cachefile) and _verified_payload(cachefile) is None:
            print(f"kiln: cache entry {cachefile} for {node} is corrupted (content hash mismatch); "
                  "ignoring it and rebuilding", file=sys.stderr)
            if not self.is_readonly():
                with contextlib.suppress(OSError):
                    os.unlink(cachefile)
            return False
        return super().retrieve(node)

    def get_cachedir_csig(self, node) -> str | None:
        _, cachefile = self.cachepath(node)
        data = _verified_payload(cachefile) if cachefile and os.path.isfile(cachefile) else None
        return None if data is None else SCons.Util.hash_signature(data)


class ReadOnlyVerifiedCacheDir(VerifiedCacheDir):
    """A verified cache that untrusted builds read from and never write to."""

    readonly = True


def _add_cache_options() -> None:
    try:
        SCons.Script.GetOption("kiln_cache")
        return  # added by an earlier Environment with this tool
    except AttributeError:
        pass
    SCons.Script.AddOption("--kiln-cache", dest="kiln_cache", metavar="DIR", default="",
                           help="Kiln: share built artifacts through the cache folder DIR (default: $KILN_CACHE)")
    SCons.Script.AddOption("--kiln-cache-readonly", dest="kiln_cache_readonly", action="store_true", default=False,
                           help="Kiln: read the cache, never write to it, for untrusted builds (or KILN_CACHE_READONLY=1)")


def _use_cache(env) -> None:
    """Turn on the verified cache when `--kiln-cache`/`KILN_CACHE` names a folder."""
    folder = SCons.Script.GetOption("kiln_cache") or os.environ.get("KILN_CACHE", "")
    readonly = SCons.Script.GetOption("kiln_cache_readonly") or os.environ.get("KILN_CACHE_READONLY", "") == "1"
    if not folder:
        if readonly:
            print("kiln: error: --kiln-cache-readonly needs a cache folder (--kiln-cache=DIR or KILN_CACHE)", file=sys.stderr)
            SCons.Script.Exit(2)
        return
    folder = os.path.join(SCons.Script.GetLaunchDir(), os.path.expanduser(folder))
    if readonly and not os.path.isdir(folder):
        print(f"kiln: no cache folder {folder}; building without the cache", file=sys.stderr)
        return
    env.CacheDir(folder, custom_class=ReadOnlyVerifiedCacheDir if readonly else VerifiedCacheDir)


def generate(env) -> None:
    # SHA-256 build signatures: cache entries are named by them (set here so repositories that load
    # this tool get them too; SCons applies the option after reading the SConscript files).
    SCons.Script.SetOption("hash_format", "sha256")
    _add_cache_options()
    _use_cache(env)
    env.PrependENVPath("PYTHONPATH", str(KILN_ROOT))
    env.SetDefault(KILN_PYTHON=sys.executable)
    for st in STAGES:
        env["BUILDERS"][f"KilnStage_{st.name}"] = _stage_builder(st)
    env.AddMethod(kiln_model, "KilnModel")
    env.AddMethod(kiln_program, "KilnProgram")
    env.AddMethod(kiln_manifest, "KilnManifest")
    env.AddMethod(kiln_runtime_objects, "KilnRuntimeObjects")


def exists(env) -> bool:
    return True
