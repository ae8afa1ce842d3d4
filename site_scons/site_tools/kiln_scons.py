"""SCons tool for Kiln: one builder per compiler stage, from the stage registry.

`generate(env)` registers builders and two pseudo-builders; it holds no
compiler logic. Each stage runs as its own process (`python -m kiln
stage NAME ...`, started from an argument list: no shell ever sees a folder
name), so `scons -j` is parallel. A stage target's signature is exactly: its
input artifacts' contents, the canonical text of the model.toml tables it
reads (a Value node), the contents of the source modules the registry lists
for it, and the stage's name — no absolute paths, times or environment, so
clones in different folders share cache entries.

Model folder names may hold spaces and shell characters: stages get them as
arguments, and compiler command lines quote every path with `shlex.quote`
(SCons's own quoting leaves backquotes live). A target that changed in
place since the build wrote it (a corrupted artifact) is rebuilt, never
used: SCons itself only compares what a target depends on.

`--kiln-cache=DIR` (or `KILN_CACHE`) turns on the shared build cache
(`VerifiedCacheDir`); `--kiln-cache-readonly` (or `KILN_CACHE_READONLY=1`)
reads it without writing anything to it.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import stat
import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.CacheDir
import SCons.Errors
import SCons.Node
import SCons.Node.Alias
import SCons.Script
import SCons.Subst
import SCons.Util
import SCons.Warnings

# The compiler this tool drives is the one next to it, also when another repository loads the
# tool through `toolpath` (see examples/external_repo): SCons imports it from here, stages run it from here.
KILN_ROOT = Path(__file__).resolve().parents[2]
if str(KILN_ROOT) not in sys.path:
    sys.path.insert(0, str(KILN_ROOT))

from kiln import config as model_config  # noqa: E402
from kiln.buildcache import HMAC_KEY_ENV, Entry, entry_bytes, parse_entry, read_regular  # noqa: E402
from kiln.names import c_identifier  # noqa: E402
from kiln.errors import KilnError  # noqa: E402
from kiln.frontends.config import depends_files  # noqa: E402
from kiln.host import RUNTIME, STUBS, model_table  # noqa: E402
from kiln.ir.serialize import write_atomic  # noqa: E402
from kiln.manifest import manifest, recorded  # noqa: E402
from kiln.stages import STAGES  # noqa: E402

TOOLCHAIN_ROOT = Path(__import__("kiln").__file__).resolve().parent.parent


class StageAction(SCons.Action.FunctionAction):
    """Run one stage as `python -m kiln stage NAME --model-dir DIR --build-dir DIR` from an argument list.

    The signature is the stage's name: everything else that decides its
    output is a source of the target (artifacts, config text, modules).
    """

    def __init__(self, stage: str) -> None:
        self.stage = stage
        super().__init__(self._run, {"strfunction": self._show})

    def _run(self, target, source, env) -> int:
        cmd = [str(env["KILN_PYTHON"]), "-m", "kiln", "stage", self.stage,
               "--model-dir", env["KILN_MODEL_DIR"].path, "--build-dir", target[0].dir.path]
        return SCons.Action.scons_subproc_run(env, cmd).returncode

    def _show(self, target, source, env) -> str:
        return f"kiln {self.stage} {env['KILN_MODEL']}"

    def get_presig(self, target, source, env, executor=None) -> bytes:
        return f"kiln stage {self.stage}".encode()


def _model_table_action(target, source, env):
    Path(str(target[0])).write_text(model_table(env["KILN_PREFIXES"]))
    return 0


def _literal(path: str) -> str:
    """A path SCons takes as it is: `$` would start a substitution."""
    return path.replace("$", "$$")


def _error(message: str) -> None:
    print(f"kiln: error: {message}", file=sys.stderr)
    SCons.Script.Exit(2)


def kiln_model(env, model_dir: str, build_root: str) -> dict:
    """Declare every stage of one model; returns {"name", "stages": {name: [nodes]}, "object", "prefix", "build", "alias"}."""
    model_dir_node = model_dir if isinstance(model_dir, SCons.Node.Node) else env.Dir(_literal(model_dir))
    folder = Path(model_dir_node.abspath)
    name = folder.name
    toml = folder / "model.toml"
    try:
        model_config.check_model_name(name, str(folder))
        cfg = model_config.load(toml)
        depends = depends_files(folder, cfg["model"], str(toml))
        calibration = _calibration_files(folder, cfg, toml)
    except KilnError as exc:
        _error(str(exc))
    build = env.Dir(_literal(f"{build_root}/{name}"))
    menv = env.Clone(KILN_MODEL=name, KILN_MODEL_DIR=model_dir_node)
    rebuild_changed_targets(menv)
    excluded = {str(p) for p in calibration}
    source_files = sorted(
        f for f in folder.rglob("*")
        if f.is_file() and f.name != "model.toml" and "__pycache__" not in f.parts and str(f.resolve()) not in excluded
    )
    if folder / cfg["model"]["source"] not in source_files:
        _error(f"{toml}: model.source: {cfg['model']['source']} is not a file the build tracks in {name}/ "
               "(missing, or inside a symlinked folder)")
    stages: dict[str, list] = {}
    for st in STAGES:
        targets = [build.File("./" + a) for a in st.outputs(name)]
        sources = [build.File("./" + a) for a in st.consumes]
        if st.name == "import":  # the model folder, and the files outside it that model.depends lists
            sources += [env.fs.File(str(f)) for f in source_files + depends]
        if "quant" in st.tables:
            sources += [env.fs.File(str(p)) for p in calibration]
        # The canonical JSON of the tables: `--debug=explain` shows a config change as the old text
        # ("no longer a dependency") and the new one ("a new dependency").
        sources.append(env.Value(model_config.canonical(model_config.view(cfg, st.tables))))
        nodes = getattr(menv, f"KilnStage_{st.name}")(targets, sources)
        menv.Depends(nodes, [env.fs.File(str(f)) for f in st.source_files(TOOLCHAIN_ROOT)])
        # Stages replace their outputs atomically, so SCons need not delete them first: a killed stage
        # leaves the previous complete artifact (still recorded as out of date), never a missing one.
        menv.Precious(nodes)
        stages[st.name] = nodes
        env.Alias(SCons.Node.Alias.default_ans.Alias(f"{name}-{st.name}"), nodes)
    c_source = [n for n in stages["codegen"] if str(n).endswith(".c")][0]
    # The generated C includes its header from its own folder: no -I flag names the model's folder.
    obj = menv.Object(build.File(f"./{name}{menv.subst('$OBJSUFFIX')}"), c_source, CPPPATH=[env.fs.Dir(str(RUNTIME))])
    prefix = cfg["codegen"]["prefix"] or c_identifier(name)
    return {"name": name, "stages": stages, "object": obj, "prefix": prefix, "build": build,
            "alias": SCons.Node.Alias.default_ans.Alias(name)}


def _manifest_action(target, source, env):
    write_atomic(str(target[0]), manifest([Path(str(s)) for s in source]).encode())
    return 0


def _calibration_files(folder: Path, cfg: dict, toml: Path) -> list[Path]:
    """The `quant.calibration` files, resolved; a missing one stops the build in one line (not SCons's
    "Source not found")."""
    files = []
    for rel in cfg["quant"]["calibration"]:
        path = (folder / rel).resolve()
        if not path.is_file():
            raise KilnError(f"{toml}: quant.calibration: {rel} does not exist (relative to {folder.name}/)")
        files.append(path)
    return sorted(set(files))


def rebuild_changed_targets(env) -> None:
    """Make `env`'s targets rebuild when their file no longer holds what the build recorded writing.

    SCons decides from a target's dependencies only, so an artifact
    corrupted or replaced in place would be trusted (and fed to the next
    stage) until deleted by hand. The decider SCons asks about a target's
    first dependency also compares the target's own content signature with
    its `.sconsign` record. (The signatures are only right once SCons has
    read its options, so this cannot happen while the SConscripts are read.)
    """
    def wrap(decide):
        def decider(dependency, target, prev_ni, repo_node=None) -> bool:
            changed = decide(dependency, target, prev_ni, repo_node)
            return (dependency is target.children()[0] and _changed_in_place(target)) or changed
        return decider

    env.decide_source, env.decide_target = wrap(env.decide_source), wrap(env.decide_target)


_REPORTED: set[str] = set()


def _changed_in_place(target) -> bool:
    if target.get_state() == SCons.Node.executed or not target.exists():
        return False  # rebuilt in this run (or absent): nothing to distrust
    recorded = getattr(target.get_stored_info().ninfo, "csig", None)
    if not recorded or target.get_csig() == recorded:
        return False
    if target.get_internal_path() not in _REPORTED:
        _REPORTED.add(target.get_internal_path())
        print(f"kiln: {target} changed since the build wrote it; rebuilding it", file=sys.stderr)
    return True


def kiln_program(env, target, models: list[dict], build_root: str):
    """A host program linking `models` with the runtime, the kernel stubs and the harness.

    `target` is a File node (e.g. `m["build"].File(m["name"])`, safe for any folder name) or a path string.
    """
    program = target_file(env, target)
    prefixes = check_prefixes(models)
    runtime_objs = env.KilnRuntimeObjects(build_root)
    table = env.Command(program.dir.File(f"./{program.name}_models.c"), [env.Value(model_table(prefixes))],
                        SCons.Action.Action(_model_table_action, "model table $TARGET"), KILN_PREFIXES=prefixes)
    table_obj = env.Object(program.dir.File(f"./{program.name}_models{env.subst('$OBJSUFFIX')}"), table,
                           CPPPATH=[env.fs.Dir(str(RUNTIME))])
    objs = [m["object"] for m in models]
    return env.Program(program, objs + table_obj + runtime_objs, LIBS=["m"])


def target_file(env, target):
    """A File node for `target`: a node as it is, a string as SCons reads it (with `$` substitution)."""
    return target if isinstance(target, SCons.Node.Node) else env.File(target)


def check_prefixes(models: list[dict]) -> list[str]:
    """The models' symbol prefixes; two models with one prefix would only fail at link time, so stop here."""
    seen: dict[str, str] = {}
    for m in models:
        if m["prefix"] in seen:
            _error(f"models {seen[m['prefix']]!r} and {m['name']!r} both export C symbols named {m['prefix']}_*; "
                   "give one of them another [codegen] prefix in its model.toml")
        seen[m["prefix"]] = m["name"]
    return list(seen)


def kiln_manifest(env, program, model: dict):
    """`<model>.manifest` (kiln/manifest.py) for a model's own program, written after the program.

    It depends on the files it records, not on the program: a relink that
    changes nothing the check compares (new runtime flags) leaves it as it is.
    """
    files = recorded(model["name"])
    sources = sorted((n for nodes in model["stages"].values() for n in nodes if Path(str(n)).name in files), key=str)
    record = env.Command(model["build"].File(f"./{model['name']}.manifest"), sources,
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
                objs += env.Object(f"{build_root}/_{sub}/{c.stem}", env.fs.File(str(c)), CPPPATH=[env.fs.Dir(str(RUNTIME))])
        _RUNTIME_OBJECTS[build_root] = objs
    return [o for o in _RUNTIME_OBJECTS[build_root] if harness or Path(str(o)).stem != "host_main"]


_RUNTIME_OBJECTS: dict[str, list] = {}

# -- the shared build cache ------------------------------------------------
class VerifiedCacheDir(SCons.CacheDir.CacheDir):
    """SCons's CacheDir, with entries bound to their key and verified on every retrieval.

    SCons trusts whatever sits at a signature's path in a shared folder. Here
    an entry is used only when it is a regular file (never a symlink) whose
    header names this target's build signature and the SHA-256 of the
    content that follows (and, with `$KILN_CACHE_HMAC_KEY`, carries a valid
    HMAC): a swapped, forged, truncated or planted entry is a miss, reported
    once, and (unless read-only) replaced by the rebuilt target.
    """

    readonly = False

    def __init__(self, path) -> None:
        self.secret = os.environ.get(HMAC_KEY_ENV, "").encode() or None
        self._entries: dict[str, Entry | None] = {}
        super().__init__(path)
        prefix = self.config.get("prefix_len")
        if not isinstance(prefix, int) or isinstance(prefix, bool) or not 0 < prefix <= 8:
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config has an invalid prefix_len {prefix!r}")

    def is_readonly(self) -> bool:
        return self.readonly or super().is_readonly()

    def entry(self, node) -> Entry | None:
        """The verified entry for `node`, read once per build; None on a miss (a bad entry is reported)."""
        cachedir, cachefile = self.cachepath(node)
        if cachefile is None:
            return None
        if cachefile not in self._entries:
            raw = read_regular(cachefile) if not os.path.islink(cachedir) else "in a symlinked folder"
            found = parse_entry(raw, os.path.basename(cachefile), self.secret) if isinstance(raw, bytes) else raw
            if isinstance(found, str):
                print(f"kiln: cache entry {cachefile} for {node} is corrupted ({found}); ignoring it and rebuilding",
                      file=sys.stderr)
            self._entries[cachefile] = found if isinstance(found, Entry) else None
        return self._entries[cachefile]

    def retrieve(self, node) -> bool:
        if not self.is_enabled():
            return False
        env = node.get_build_env()
        if SCons.CacheDir.cache_show:
            if _RETRIEVE_SILENT(node, [], env, execute=1) == 0:
                node.build(presub=0, execute=0)
                return True
            return False
        return _RETRIEVE(node, [], env, execute=1) == 0

    def push(self, node) -> None:
        if self.is_readonly() or not self.is_enabled() or node.nocache:
            return
        path = node.get_internal_path()
        if os.path.islink(path) or not os.path.isfile(path):
            return  # only regular files are cached
        if self.entry(node) is not None:
            return  # a valid entry is there already (a concurrent build's)
        cachedir, cachefile = self.cachepath(node)
        try:
            if os.path.islink(cachedir):
                raise OSError(f"{cachedir} is a symlink")
            os.makedirs(cachedir, exist_ok=True)
            data = Path(path).read_bytes()
            entry = entry_bytes(os.path.basename(cachefile), data, stat.S_IMODE(os.stat(path).st_mode), self.secret)
            tmp = os.path.join(cachedir, f".{os.path.basename(cachefile)}.{secrets.token_hex(8)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(entry)
                os.replace(tmp, cachefile)
            except BaseException:
                os.unlink(tmp)
                raise
            self._entries[cachefile] = Entry(data, stat.S_IMODE(os.stat(path).st_mode))
        except OSError as exc:  # a full or unwritable cache never fails the build
            SCons.Warnings.warn(SCons.Warnings.CacheWriteErrorWarning, f"kiln: cannot write cache entry {cachefile} ({exc})")

    def get_cachedir_csig(self, node) -> str | None:
        found = self.entry(node)
        return None if found is None else SCons.Util.hash_signature(found.data)


class ReadOnlyVerifiedCacheDir(VerifiedCacheDir):
    """A verified cache that untrusted builds read and never write: no entries, config, tag, lock or times."""

    readonly = True

    def _readconfig(self, path: str) -> None:
        """Read the cache's config without creating or locking anything; without one, SCons's default layout."""
        raw = read_regular(os.path.join(path, "config"))
        try:
            self.config = json.loads(raw) if isinstance(raw, bytes) else {"prefix_len": SCons.CacheDir.CACHE_PREFIX_LEN}
        except ValueError:
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config is not JSON") from None
        if not isinstance(self.config, dict):
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config is not a JSON object")


def _retrieve(target, source, env) -> int:
    """Write a target from its verified cache entry (0), or report a miss (1)."""
    node = target[0]
    cd = env.get_CacheDir()
    cd.requests += 1
    found = cd.entry(node)
    if found is None:
        return 1
    cd.hits += 1
    if SCons.Action.execute_actions:
        path = node.get_internal_path()
        write_atomic(path, found.data)
        os.chmod(path, found.mode | stat.S_IWUSR)
        if not cd.is_readonly():  # a hit keeps the entry young for age-based cleaning
            with contextlib.suppress(OSError):
                os.utime(cd.cachepath(node)[1], follow_symlinks=False)
    return 0


def _retrieve_string(target, source, env) -> str:
    node = target[0]
    return f"Retrieved `{node.get_internal_path()}' from cache" if env.get_CacheDir().entry(node) else ""


_RETRIEVE = SCons.Action.Action(_retrieve, _retrieve_string)
_RETRIEVE_SILENT = SCons.Action.Action(_retrieve, None)


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
    env.SetDefault(KILN_PYTHON=SCons.Subst.Literal(sys.executable))  # one argument, quoted, whatever its path
    env["ESCAPE"] = shlex.quote  # SCons's POSIX quoting leaves backquotes live inside its double quotes
    for st in STAGES:
        env["BUILDERS"][f"KilnStage_{st.name}"] = SCons.Builder.Builder(action=StageAction(st.name))
    env.AddMethod(kiln_model, "KilnModel")
    env.AddMethod(kiln_program, "KilnProgram")
    env.AddMethod(kiln_manifest, "KilnManifest")
    env.AddMethod(kiln_runtime_objects, "KilnRuntimeObjects")


def exists(env) -> bool:
    return True
