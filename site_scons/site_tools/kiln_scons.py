"""SCons tool for Kiln: one builder per compiler stage, from the stage registry.

`generate(env)` registers builders and pseudo-builders; it holds no compiler
logic. What a stage reads, which files of a model folder it depends on, the C
symbol prefix rule and what a model table needs all come from the registry
(`kiln/stages.py` and the standard-library modules beside it), which this
tool loads by file path under a private package name: the SCons process
imports nothing else of Kiln, needs none of its third-party packages, and no
`site_scons/` module of the project (a `toolchain.py`, a `kiln.py`) can stand
in for a module of Kiln.

Each stage runs as its own process (`KILN_PYTHON -P -m kiln.runner NAME ...`,
from an argument list: no shell ever sees a folder name), so `scons -j` is
parallel. KILN_PYTHON is the Python that has Kiln: for an installed Kiln the
Python of the environment this tool was installed into, for a source checkout
the Python running SCons (with the checkout on PYTHONPATH); `KILN_PYTHON`
overrides it (`setting`: a command-line variable, `scons KILN_PYTHON=...`,
over a construction variable, over an environment variable). A stage
target's signature is exactly: its input artifacts' contents, the canonical
text of the model.toml tables it reads (a Value node), the contents of the
source modules the registry lists for it, and the stage's name — no absolute
paths, times or environment, so clones in different folders share cache
entries.

Model folder names may hold spaces and shell characters: stages get them as
arguments, and compiler command lines quote every path with `shlex.quote`
(SCons's own quoting leaves backquotes live). A target that changed in
place since the build wrote it (a corrupted artifact) is rebuilt, never
used: SCons itself only compares what a target depends on.

What a SConstruct calls (`docs/build.md`): `KilnModels` (every model folder,
as `Models`), `KilnModel`, `KilnTarget` (a firmware target's environment,
with the `kiln_cortex_m` tool), `KilnTargetModels`, `KilnApp` (a program of
the firmware's own sources and the models), `KilnProgram` and
`KilnManifest` (a model's own program, which each model declares itself),
`KilnRuntimeObjects` and `KilnErrors`.

Global settings: the tool adds the `--kiln-cache` options and appends its
part of `scons -h`. Only with the shared cache on does it set one global
option, `hash_format=sha256` (cache entries are named by build signatures),
and only when the project has not chosen a hash format itself.
`--kiln-cache=DIR` (or `KILN_CACHE`) turns on the shared build cache
(`VerifiedCacheDir`), `--kiln-cache=http(s)://...` the same cache on a
server speaking Bazel's HTTP remote-cache protocol (`RemoteCacheDir`);
`--kiln-cache-readonly` (or `KILN_CACHE_READONLY=1`) reads it without
writing anything to it.
"""
from __future__ import annotations

import atexit
import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import json
import os
import secrets
import shlex
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import SCons.Action
import SCons.Builder
import SCons.CacheDir
import SCons.Errors
import SCons.Node
import SCons.Node.Alias
import SCons.Node.FS
import SCons.Script
import SCons.Subst
import SCons.Util
import SCons.Warnings


def _kiln_package() -> Path:
    """The `kiln` package this tool belongs to: around it in a wheel (kiln/site_tools/), at the checkout's root
    in a source checkout (site_scons/site_tools/)."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "stages.py").is_file() else here.parent / "kiln"


def load_registry(package: Path) -> ModuleType:
    """The package at `package`, as a private package: its standard-library modules import each other relatively."""
    name = "_kiln_registry_" + hashlib.sha256(str(package).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, package / "__init__.py", submodule_search_locations=[str(package)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


PACKAGE = _kiln_package()
_KILN = load_registry(PACKAGE).__name__
buildcache, model_config, errors, manifest, model_table, paths, progress, registry, remotecache, worker = (
    importlib.import_module(f"{_KILN}.{m}") for m in
    ("buildcache", "config", "errors", "manifest", "model_table", "paths", "progress", "stages", "remotecache", "worker"))
write_atomic = importlib.import_module(f"{_KILN}.atomic").write_atomic
firmware_targets = importlib.import_module(f"{_KILN}.target.targets")
KilnError = errors.KilnError
SOURCE_ROOT = PACKAGE.parent  # the folder the registry's `kiln/...` module paths are relative to


SETTINGS = ("KILN_PYTHON", "KILN_WORKERS", "KILN_PROGRESS")  # also SCons command-line variables: `scons KILN_PYTHON=...`


def setting(env, name: str) -> str | None:
    """A Kiln setting: the SCons command-line variable (`scons NAME=VALUE`), else the construction variable, else the
    environment variable."""
    for chosen in (SCons.Script.ARGUMENTS.get(name), env.get(name) if env is not None else None, os.environ.get(name)):
        if chosen is not None and str(chosen) != "":
            return str(chosen)
    return None


def _check_arguments() -> None:
    """A misspelt Kiln command-line variable (`scons KILN_PYTON=...`) would be ignored: stop, naming the known ones."""
    for name in SCons.Script.ARGUMENTS:
        if name.upper().startswith("KILN") and name not in SETTINGS:
            _error(f"unknown command-line variable {name!r}{errors.did_you_mean(name, SETTINGS)} "
                   f"(Kiln's: {', '.join(SETTINGS)})")


def kiln_python(env) -> str:
    """The Python that runs stages: `KILN_PYTHON` (`setting`), else found from Kiln."""
    chosen = setting(env, "KILN_PYTHON")
    if chosen:
        return str(chosen)
    if paths.source_checkout():
        return sys.executable
    site = str(PACKAGE.parent)
    if any(os.path.realpath(p) == os.path.realpath(site) for p in sys.path if p):
        return sys.executable
    for folder in PACKAGE.parents:  # a virtual environment holding the package
        if (folder / "pyvenv.cfg").is_file():
            for candidate in (folder / "bin" / "python", folder / "Scripts" / "python.exe"):
                if candidate.is_file():
                    return str(candidate)
    _error(f"cannot tell which Python has Kiln installed at {PACKAGE}; set KILN_PYTHON to it")


# -- stages -------------------------------------------------------------------------------
class StageAction(SCons.Action.FunctionAction):
    """Run one stage as `KILN_PYTHON -P -m kiln.runner NAME --model-dir DIR --build-dir DIR` from an argument list.

    The signature is the stage's name: everything else that decides its
    output is a source of the target (artifacts, config text, modules).
    """

    def __init__(self, stage: str) -> None:
        self.stage = stage
        super().__init__(self._run, {"strfunction": self._show})

    def _run(self, target, source, env) -> int:
        args = [self.stage, "--model-dir", env["KILN_MODEL_DIR"].path, "--build-dir", target[0].dir.path]
        python = str(env["KILN_PYTHON"])
        key = (env["KILN_BUILD_ROOT"], env["KILN_MODEL"])
        if not shutil.which(python, path=env["ENV"].get("PATH")):  # else the stage would fail without a word
            print(f"kiln: error: {self.stage} {key[1]}: KILN_PYTHON {python} is not a program", file=sys.stderr)
            return 1
        channel = _PROGRESS.started(key, self.stage)  # where the stage reports progress: no part of any signature
        start = time.perf_counter()
        status = None
        try:
            if use_workers(env):  # a warm worker, else (or when it fails) a fresh process: the same bytes either way
                status = worker.run(python, str(SOURCE_ROOT), SCons.Util.sanitize_shell_env(env["ENV"]), args,
                                    os.getcwd(), channel)
            if status is None:
                report = {} if channel is None else {"env": dict(env["ENV"], **{registry.PROGRESS_FD_ENV: str(channel)}),
                                                     "pass_fds": (channel,)}
                status = SCons.Action.scons_subproc_run(env, [python, "-P", "-m", "kiln.runner", *args], **report).returncode
        finally:
            _PROGRESS.ran(key, self.stage, time.perf_counter() - start, channel)
        return status

    def _show(self, target, source, env) -> str:
        return f"{_PROGRESS.count(target[0])}kiln {self.stage} {env['KILN_MODEL']}"

    def get_presig(self, target, source, env, executor=None) -> bytes:
        return f"kiln stage {self.stage}".encode()


def use_workers(env) -> bool:
    """Stages run in persistent workers (`kiln/worker.py`) unless `KILN_WORKERS=0` (`setting`) or `--kiln-no-workers`."""
    return setting(env, "KILN_WORKERS") != "0" and not SCons.Script.GetOption("kiln_no_workers")


class Progress:
    """The build's progress (`kiln/progress.py`) and, at exit, one summary line per model of what the build did.

    `[k/n]` before each stage action: k counts the stage actions started or
    taken from the cache, n the stage targets of the requested build that
    SCons has not found up to date (so far: a cold build's n is all of them).
    """

    def __init__(self) -> None:
        self.stage_nodes: dict = {}  # a stage action's first target -> ((build root, model), stage)
        self.reachable: list | None = None  # the stage nodes the requested build holds, found at its first stage
        self.started_count = 0
        self.models: dict[tuple[str, str], dict] = {}  # (build root, model) -> what the summary shows
        self.broken: list[str] = []
        self.display = None
        self.lock = threading.Lock()

    def count(self, node) -> str:
        with self.lock:
            self.started_count += 1
            snap = self._snapshot()
        return f"[{snap.started}/{snap.total}] " if snap.total else ""

    def _stage_nodes(self) -> list:
        if self.reachable is None:
            targets = list(SCons.Script.BUILD_TARGETS) or ["."]
            seen, todo, found = set(), [_node(t) for t in targets], []
            while todo:
                node = todo.pop()
                if node in seen:
                    continue
                seen.add(node)
                if node in self.stage_nodes:
                    found.append(node)
                todo.extend(node.children(scan=0))
            self.reachable = found
        return self.reachable

    def _snapshot(self):
        """k and n (see the class), and the stages still to run by model, from the stage nodes' states."""
        nodes = self._stage_nodes()
        current = sum(n.get_state() == SCons.Node.up_to_date for n in nodes)
        pending = [self.stage_nodes[n] for n in nodes if n.get_state() in (SCons.Node.no_state, SCons.Node.pending)]
        return progress.Snapshot(self.started_count, max(len(nodes) - current, self.started_count), pending)

    def _display(self):
        if self.display is None:
            how = progress.mode(setting(None, "KILN_PROGRESS"), sys.stdout)
            if SCons.Script.GetOption("silent") or SCons.Script.GetOption("no_exec"):
                how = "off"
            self.display = progress.Display(how, SCons.Script.GetOption("num_jobs") or 1, self._locked_snapshot, sys.stdout,
                                            delay=0.0 if setting(None, "KILN_PROGRESS") == "1" else progress.DELAY_S)
        return self.display

    def _locked_snapshot(self):
        with self.lock:
            return self._snapshot()

    def started(self, key: tuple[str, str], stage: str) -> int | None:
        """A stage action starts; the descriptor its stage reports progress to, or None."""
        return self._display().start(key, key[1], stage)

    def ran(self, key: tuple[str, str], stage: str, seconds: float, channel: int | None) -> None:
        if channel is not None:
            os.close(channel)
        self._display().finish(key, stage, seconds)
        entry = self.models[key]
        entry["run"] += 1
        entry["seconds"] += seconds

    def retrieved(self, node) -> None:
        if node not in self.stage_nodes:
            return  # a stage's other outputs: its action is counted once, by its first target
        with self.lock:
            self.started_count += 1
        self.models[self.stage_nodes[node][0]]["cached"] += 1

    def target_object(self, header, target: str, obj) -> None:
        """A model's object compiled for a firmware target: the summary shows its size as the model's flash there."""
        for entry in self.models.values():
            if entry["header"] is header:
                entry["targets"][target] = obj

    def summary(self) -> None:
        """One line per model the build touched: stages run and from the cache, arena and code bytes, stage time, or
        the stage it failed in; then one line per cache the build used: hits, misses, refused entries, entries
        stored."""
        if self.display is not None:
            self.display.close()
        if SCons.Script.GetOption("silent") or SCons.Script.GetOption("help"):
            return
        touched = [(k, e, self._outcome(e)) for k, e in sorted(self.models.items()) if e["run"] or e["cached"]]
        if touched:
            counts = [(what, sum(o[0] == what for _, _, o in touched)) for what in ("rebuilt", "failed", "stopped")]
            said = ", ".join(f"{n}{' model(s)' if i == 0 else ''} {what}" for i, (what, n) in enumerate(c for c in counts if c[1]))
            print(f"kiln: {said}; per model: stages run / from the cache, arena, code and constants (host object, or flash "
                  "on a target), stage time")
        for (root, model), e, (what, detail) in touched:
            stages = f"{e['run']} run / {e['cached']} cached of {len(registry.STAGES)} stages"
            if what != "rebuilt":
                print(f"kiln:   {root}/{model}: {detail}; {stages}, {e['seconds']:.1f} s")
                continue
            sizes = "".join(f", {s}" for s in self._sizes(e))
            print(f"kiln:   {root}/{model}: {stages}{sizes}, {e['seconds']:.1f} s")
        for message in self.broken if touched else []:
            print(f"kiln:   not built: {message}")
        for location, c in sorted(_CACHE_STATS.items()):
            if any(c.values()):
                server = _REMOTES.get(location)
                print(f"kiln: cache {location}: {c['hits']} hits, {c['misses']} misses, {c['refused']} entries refused, "
                      f"{c['stored']} stored" + (" (read-only)" if location in _READONLY else "")
                      + (f"; not used after it failed ({server.down})" if server and server.down else ""))

    def _outcome(self, e: dict) -> tuple[str, str]:
        """("rebuilt", ""), ("failed", what failed) or ("stopped", where the build stopped before the model was done)."""
        states = {st: e["stages"][st][0].get_state() for st in e["stages"]}
        failed = next((st for st, state in states.items() if state == SCons.Node.failed), None)
        if failed is not None:
            return "failed", f"FAILED in stage {failed} (its error is above)"
        if e["object"].get_state() == SCons.Node.failed:
            return "failed", f"FAILED compiling {e['object'].sources[0]} (its error is above)"
        reachable = set(self._stage_nodes())
        unfinished = next((st for st, nodes in e["stages"].items() if nodes[0] in reachable and states[st] in
                           (SCons.Node.no_state, SCons.Node.pending, SCons.Node.executing)), None)
        if unfinished is not None:
            return "stopped", f"not finished: the build stopped at an error before its stage {unfinished}"
        return "rebuilt", ""

    @staticmethod
    def _sizes(e: dict) -> list[str]:
        """Arena and code bytes of what this build has built or found up to date (a file it did not is stale)."""
        built = (SCons.Node.executed, SCons.Node.up_to_date)
        header = Path(e["header"].abspath)
        arena, host = model_table.model_sizes(header, Path(e["object"].abspath))
        out = [f"arena {_bytes(arena)}"] if e["header"].get_state() in built else []
        out += [f"host object {_bytes(host)}"] if e["object"].get_state() in built else []
        for target, obj in sorted(e["targets"].items()):
            if obj.get_state() in built:
                out.append(f"flash {_bytes(model_table.model_sizes(header, Path(obj.abspath))[1])} on {target}")
        return out


def _node(target):
    """The node a command-line or default target names."""
    if isinstance(target, SCons.Node.Node):
        return target
    return SCons.Node.Alias.default_ans.lookup(str(target)) or SCons.Node.FS.get_default_fs().Entry(str(target))


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,} B"


_PROGRESS = Progress()


def _literal(path: str) -> str:
    """A path SCons takes as it is: `$` would start a substitution."""
    return path.replace("$", "$$")


def _error(message: str) -> None:
    print(f"kiln: error: {message}", file=sys.stderr)
    SCons.Script.Exit(2)


def kiln_model(env, model_dir: str, build_root: str) -> dict:
    """Declare every stage of one model, its object and its own program (what `kiln check` runs); returns {"name",
    "stages": {name: [nodes]}, "object", "header", "program", "prefix", "build", "alias", "root", "target"}.

    A model whose model.toml (or folder) is wrong stops the build with its one-line error; `KilnModels` reports it
    and builds the others.
    """
    try:
        return _declare_model(env, model_dir, build_root)
    except KilnError as exc:
        _error(str(exc))


class Models(list):
    """The models `KilnModels` (or `KilnTargetModels`) declared, in name order: a list of the models that declare,
    which a SConstruct can also index by name.

    `models["kws"]` is that model; for a model whose model.toml is broken it
    is a stand-in of the same shape whose every target fails (its one-line
    error was reported when the SConscripts were read), so a SConstruct
    written for good models still builds every other one; an unknown name
    stops the build with one line and the closest name.
    """

    def __init__(self, declared: list[dict], broken: dict[str, dict], where: str) -> None:
        super().__init__(declared)
        self.broken = broken
        self.where = where

    def __getitem__(self, key):
        if not isinstance(key, str):
            return super().__getitem__(key)
        found = next((m for m in self if m["name"] == key), None) or self.broken.get(key)
        if found is None:
            names = sorted([m["name"] for m in self] + list(self.broken))
            close = difflib.get_close_matches(key, names, 1)
            _error(f"no model {key!r} in {self.where} (" + (f"did you mean {close[0]!r}?)" if close else
                                                            f"models: {', '.join(names) or 'none'})"))
        return found

    def __contains__(self, key) -> bool:
        if isinstance(key, str):
            return key in self.broken or any(m["name"] == key for m in self)
        return super().__contains__(key)


def kiln_models(env, models_dir: str, build_root: str) -> Models:
    """Declare every model folder (`*/model.toml`) under `models_dir`, in name order; returns them as `Models`.

    A broken model (bad model.toml, missing source or calibration file) is
    reported in one line, listed by `scons -h`, and its name is a target
    that fails; `env.KilnErrors()` gives those targets (a default build
    should include them, so it ends in failure after building every other
    model).
    """
    folder = models_dir if isinstance(models_dir, SCons.Node.Node) else env.Dir(_literal(models_dir))
    declared, broken = [], {}
    for toml in sorted(Path(folder.abspath).glob("*/model.toml")):
        try:
            declared.append(_declare_model(env, folder.Dir("./" + toml.parent.name), build_root))
        except KilnError as exc:
            broken[toml.parent.name] = _broken(env, toml.parent.name, build_root, str(exc))
    _help(build_root, declared)
    return Models(declared, broken, folder.path)


def _broken(env, name: str, build_root: str, message: str) -> dict:
    """Report a model that cannot be declared, once; returns its stand-in, whose targets (its name, an alias: nothing
    is written under a name that may be unusable) fail, after the rest of the build."""
    if message not in _PROGRESS.broken:
        print(f"kiln: error: {message}", file=sys.stderr)
        _PROGRESS.broken.append(message)
    alias = SCons.Node.Alias.default_ans.Alias(name)
    fail = env.Alias(alias, [], SCons.Action.Action(lambda target, source, env: 1, None))
    env.AlwaysBuild(fail)
    if alias not in _BROKEN:
        _BROKEN.append(alias)
    return {"name": name, "stages": {st.name: fail for st in registry.STAGES}, "object": fail, "header": alias,
            "program": fail, "prefix": name, "build": env.Dir(_literal(f"{build_root}/{name}")), "alias": alias,
            "root": build_root, "target": _target_name(env), "broken": message}


def stand_ins(models: list[dict]) -> list:
    """The failing targets of the broken models among `models` (a program that links one is that target)."""
    return [n for m in models if "broken" in m for n in m["object"]]


_BROKEN: list = []


def kiln_errors(env, after: list | None = None) -> list:
    """The targets of the broken models `KilnModels` found (each fails; its error was reported), built after the
    targets of `after` that do not need them (the rest of a default build, so a build without `-k` still builds
    every other model first)."""
    if after and _BROKEN:
        env.Depends(_BROKEN, _independent(SCons.Util.flatten(after), set(_BROKEN)))
    _check_targets()
    return list(_BROKEN)


def _independent(nodes: list, broken: set) -> list:
    """The nodes of `nodes` whose declared dependencies reach none of `broken` (those that do fail on their own)."""
    reaches: dict = {}
    for top in nodes:
        todo = [(top, False)]
        while todo:
            node, expanded = todo.pop()
            if node in reaches:
                continue
            children = node.children(scan=0)
            if expanded or node in broken:
                reaches[node] = node in broken or any(reaches.get(c, False) for c in children)
                continue
            todo.append((node, True))
            todo.extend((c, False) for c in children if c not in reaches)
    return [n for n in nodes if not reaches[n]]


_ROOTS: dict[str, str] = {}  # build root -> the target ("host" or a firmware target) whose files it holds


def _target_name(env) -> str:
    return str(env.get("KILN_TARGET") or "host")


def claim_root(env, build_root: str) -> None:
    """A build root holds one target's files: the host's or one firmware target's (their objects share names)."""
    root, target = os.path.normpath(str(build_root)), _target_name(env)
    holder = _ROOTS.setdefault(root, target)
    if holder != target:
        _error(f"build root {root} holds the {holder} build; give the {target} build a root of its own "
               f"(for example {os.path.join(os.path.dirname(root) or '.', target)})")


def _check_targets() -> None:
    """A command-line target that names nothing the build declared, close to a name it did (a model, MODEL-STAGE,
    report): one line with the suggestion, where SCons would only say it does not know how to make it."""
    if SCons.Script.GetOption("help"):
        return
    aliases = SCons.Node.Alias.default_ans
    for name in SCons.Script.COMMAND_LINE_TARGETS:
        if aliases.lookup(name) is not None:
            continue
        node = SCons.Node.FS.get_default_fs().Entry(name)
        close = errors.did_you_mean(name, aliases) if not (node.exists() or node.has_builder()) else ""
        if close:
            _error(f"unknown target {name!r}{close}")


def _declare_model(env, model_dir, build_root: str) -> dict:
    claim_root(env, build_root)
    model_dir_node = model_dir if isinstance(model_dir, SCons.Node.Node) else env.Dir(_literal(model_dir))
    folder = Path(model_dir_node.abspath)
    name = folder.name
    toml = folder / "model.toml"
    model_config.check_model_name(name, str(folder))
    cfg = model_config.load(toml)
    files = {st.name: registry.model_files(st.name, folder, cfg, toml) for st in registry.STAGES}
    prefix = registry.symbol_prefix(name, cfg["codegen"])
    build = env.Dir(_literal(f"{build_root}/{name}"))
    menv = env.Clone(KILN_MODEL=name, KILN_MODEL_DIR=model_dir_node, KILN_BUILD_ROOT=build_root)
    rebuild_changed_targets(menv)
    stages: dict[str, list] = {}
    for st in registry.STAGES:
        targets = [build.File("./" + a) for a in st.outputs(name)]
        sources = [build.File("./" + a) for a in st.consumes] + [_model_file(env, st.name, f) for f in files[st.name]]
        # The canonical JSON of the tables: `--debug=explain` shows a config change as the old text
        # ("no longer a dependency") and the new one ("a new dependency").
        sources.append(env.Value(model_config.canonical(model_config.view(cfg, st.tables))))
        nodes = getattr(menv, f"KilnStage_{st.name}")(targets, sources)
        menv.Depends(nodes, stage_sources(env, build_root, st))
        # Stages replace their outputs atomically, so SCons need not delete them first: a killed stage
        # leaves the previous complete artifact (still recorded as out of date), never a missing one.
        menv.Precious(nodes)
        stages[st.name] = nodes
        _PROGRESS.stage_nodes[nodes[0]] = ((build_root, name), st.name)  # one per action
        env.Alias(SCons.Node.Alias.default_ans.Alias(f"{name}-{st.name}"), nodes)
    c_source, header = (next(n for n in stages["codegen"] if str(n).endswith(suffix)) for suffix in (".c", ".h"))
    # The generated C includes its header from its own folder: no -I flag names the model's folder. Compiled
    # by `env` itself, whose compiler a later script may still set (PlatformIO's platform script runs after
    # the extra script that declares the models).
    obj = env.Object(build.File(f"./{name}{env.subst('$OBJSUFFIX')}"), c_source, CPPPATH=[env.fs.Dir(str(paths.runtime()))])
    alias = SCons.Node.Alias.default_ans.Alias(name)
    env.Alias(alias, obj)
    _PROGRESS.models[(build_root, name)] = {"run": 0, "cached": 0, "seconds": 0.0, "header": header, "object": obj[0],
                                            "stages": stages, "targets": {}}
    env.Requires(obj, root_record(env, build_root))
    add_to_report(env, build_root, [n for nodes in stages.values() for n in nodes] + obj)
    model = {"name": name, "stages": stages, "object": obj, "prefix": prefix, "build": build, "alias": alias,
             "header": header, "root": build_root, "target": _target_name(env)}
    return _with_program(env, model)


def _with_program(env, model: dict) -> dict:
    """`model` with its own program: Kiln's harness linked with this model alone (`env.KilnProgram`: a host program,
    or a firmware target's image) and its manifest, which `kiln check` runs and compares; part of the model's alias."""
    program = env.KilnProgram(model["build"].File("./" + model["name"]), [model], model["root"])
    model["program"] = program + env.KilnManifest(program[0], model)
    env.Alias(model["alias"], model["program"])
    if model["target"] == firmware_targets.DEFAULT:  # a Cortex-M4 image: the reports show its per-layer instructions
        add_image_to_reports(env, model["root"], model["program"])
    return model


def kiln_target_models(env, models: list[dict], build_root: str) -> Models:
    """`models` (declared by `KilnModels` in their stage root) for another build root, a firmware target's.

    The stages do not depend on the target, so none runs again: each model's
    stage artifacts are copied into `build_root/<model>/` (what `kiln check`,
    the benchmarks and the report read there), its generated C is compiled
    there by `env`, the target's environment, and its own image and manifest
    join the model's alias. Returns the models as `KilnModels` does, with the
    copies as their stage nodes (a broken model's stand-in stays one).
    """
    claim_root(env, build_root)
    found = []
    for m in models:
        build = env.Dir(_literal(f"{build_root}/{m['name']}"))
        stages = {name: [env.Command(build.File("./" + n.name), n, _COPY)[0] for n in nodes]
                  for name, nodes in m["stages"].items()}
        copies = [n for nodes in stages.values() for n in nodes]
        c_source, header = (next(n for n in stages["codegen"] if str(n).endswith(suffix)) for suffix in (".c", ".h"))
        obj = env.Object(build.File(f"./{m['name']}{env.subst('$OBJSUFFIX')}"), c_source,
                         CPPPATH=[env.fs.Dir(str(paths.runtime()))])
        env.Requires(obj, copies + root_record(env, build_root))  # the whole folder, for `kiln check` and the report
        _PROGRESS.target_object(m["header"], env.get("KILN_TARGET", build_root), obj[0])
        add_to_report(env, build_root, copies + obj)
        found.append(_with_program(env, dict(m, stages=stages, object=obj, build=build, header=header, root=build_root,
                                             target=_target_name(env))))
    broken = {name: _broken(env, name, build_root, b["broken"]) for name, b in getattr(models, "broken", {}).items()}
    _help(build_root, found)
    return Models(found, broken, getattr(models, "where", build_root))


def _copy_action(target, source, env):
    write_atomic(str(target[0]), Path(str(source[0])).read_bytes())
    return 0


_COPY = SCons.Action.Action(_copy_action, "kiln share $TARGET")


class CommentFreePython(SCons.Node.FS.File):
    """A Python file of a model whose content signature is its tokens without comments (`registry.python_tokens`),
    so a comment edit of a model.py changes no signature and runs no stage."""

    __slots__ = ()

    def get_csig(self) -> str:
        ninfo = self.get_ninfo()
        if not hasattr(ninfo, "csig"):
            try:
                data = Path(self.get_abspath()).read_bytes()
            except OSError:
                ninfo.csig = ""  # as SCons has it for a file it cannot read
            else:
                ninfo.csig = SCons.Util.hash_signature(registry.python_tokens(data))
        return ninfo.csig


def _model_file(env, stage: str, path: Path):
    node = env.fs.File(str(path))
    if stage == "import" and registry.comment_free(path) and type(node) is SCons.Node.FS.File:
        node.__class__ = CommentFreePython
    return node


_SOURCE_FILES: dict[str, list] = {}  # stage -> its source-file nodes, found once per build
_SOURCE_LISTS: dict[tuple[str, str], list] = {}  # (build root, stage) -> the node standing for them


def stage_sources(env, build_root: str, st) -> list:
    """One node per stage and build root standing for the stage's source modules: `<build root>/_kiln/<stage>.sources`,
    the list of their paths and content signatures. Each stage target depends on it alone (not on every module), and
    `--debug=explain` names the module that changed when it rebuilds."""
    key = (build_root, st.name)
    if key not in _SOURCE_LISTS:
        if st.name not in _SOURCE_FILES:
            _SOURCE_FILES[st.name] = [env.fs.File(str(f)) for f in st.source_files(SOURCE_ROOT)]
        target = env.Dir(_literal(build_root)).Dir("./_kiln").File(f"./{st.name}.sources")
        _SOURCE_LISTS[key] = env.Command(target, _SOURCE_FILES[st.name],
                                         SCons.Action.Action(_source_list_action, "stage sources $TARGET"))
    return _SOURCE_LISTS[key]


def _source_list_action(target, source, env) -> int:
    lines = [f"{Path(s.get_abspath()).relative_to(SOURCE_ROOT).as_posix()} {s.get_csig()}\n" for s in source]
    write_atomic(str(target[0]), "".join(lines).encode())
    return 0


def _help(build_root: str, models: list[dict]) -> None:
    names = ", ".join(m["name"] for m in models) or "(none)"
    broken = "".join(f"\n  not built: {line}" for line in _PROGRESS.broken)
    SCons.Script.Help(
        f"\nKiln models ({build_root}): {names}{broken}\n"
        f"  stages, in order: {', '.join(s.name for s in registry.STAGES)}\n"
        "  targets: MODEL (its stages, object and own program, and what the SConstruct adds), MODEL-STAGE (one model up\n"
        "           to one stage),\n"
        f"           report ({build_root}/report.html: layers, memory and sizes of every model)\n"
        "  options: --kiln-cache=DIR or =http(s)://SERVER (or KILN_CACHE) shares stage results between builds and clones;\n"
        "           --kiln-cache-readonly (or KILN_CACHE_READONLY=1) reads it and never writes (untrusted builds);\n"
        "           KILN_PYTHON=PYTHON runs the stages with that Python (default: the one Kiln is installed in);\n"
        "           --kiln-no-workers (or KILN_WORKERS=0) runs each stage in a fresh process instead of a warm worker;\n"
        "           KILN_PROGRESS=0 shows no progress line, KILN_PROGRESS=1 shows it from the start\n"
        "           (KILN_* settings: on the command line, `scons KILN_PYTHON=...`, or in the environment)\n",
        append=True, local_only=True)


_REPORTS: dict[str, list] = {}
_IMAGES: dict[str, list] = {}  # build root -> the models' own Cortex-M4 images declared there


def add_to_report(env, build_root: str, nodes: list) -> None:
    """`scons report`: `<build root>/report.html` (kiln build-report), rebuilt when a model's artifacts, its
    compiled code or the compiler change, and built after the build's Cortex-M4 images (their per-layer counts)."""
    if build_root not in _REPORTS:
        page = env.Command(env.Dir(_literal(build_root)).File("./report.html"), [],
                           SCons.Action.Action(_run_report, "kiln build-report $TARGET"))
        env.Depends(page, [env.fs.File(str(f)) for f in registry.package_files(SOURCE_ROOT)])
        env.Depends(page, [n for image in _IMAGES.values() for n in image])
        env.Alias("report", page)
        _REPORTS[build_root] = page
    env.Depends(_REPORTS[build_root], nodes)


def add_image_to_reports(env, build_root: str, image: list) -> None:
    """A model's own Cortex-M4 image and manifest, in any build root: every report shows its per-layer counts."""
    _IMAGES.setdefault(build_root, []).extend(image)
    for page in _REPORTS.values():
        env.Depends(page, image)


def _run_report(target, source, env) -> int:
    cmd = [str(env["KILN_PYTHON"]), "-P", "-m", "kiln", "build-report", target[0].dir.path, "-o", target[0].path]
    for root in sorted(_IMAGES):  # where the Cortex-M4 images are, whatever the build's layout
        cmd += ["--cortex-m4", env.Dir(_literal(root)).path]
    return SCons.Action.scons_subproc_run(env, cmd).returncode


def _model_table_action(target, source, env):
    write_atomic(str(target[0]), model_table.model_table(env["KILN_PREFIXES"]).encode())
    return 0


def _manifest_action(target, source, env):
    about = env["KILN_ABOUT"]
    files = [Path(str(s)) for s in source if isinstance(s, SCons.Node.FS.File)]
    write_atomic(str(target[0]), manifest.manifest(files, about["program"], about["target"]).encode())
    return 0


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
    table = env.Command(program.dir.File(f"./{program.name}_models.c"), [env.Value(" ".join(prefixes))],
                        SCons.Action.Action(_model_table_action, "model table $TARGET"), KILN_PREFIXES=prefixes)
    table_obj = env.Object(program.dir.File(f"./{program.name}_models{env.subst('$OBJSUFFIX')}"), table,
                           CPPPATH=[env.fs.Dir(str(paths.runtime()))])
    objs = [m["object"] for m in models]
    return env.Program(program, objs + table_obj + runtime_objs, LIBS=["m"])


def kiln_app(env, target, sources: list, models: list[dict]) -> list:
    """A firmware of your own: `sources` (C files, compiled with the models' headers and `kiln_runtime.h` on the
    include path, or objects) linked with `models`, the runtime and the kernels, without Kiln's harness; with the
    C library's maths (`m`), which the kernels need. In a target's environment (`KilnTarget`) the same call links
    an image for its board (`kiln_cortex_m`); here, a host program.

    `target` is a File node or a path string; each C source compiles into `_<name>/` beside it, so one main.c
    builds for the host and every target.
    """
    program = target_file(env, target)
    root = app_root(env, program, models)
    if stand_ins(models):
        return stand_ins(models)
    objs = app_objects(env, program, sources, models) + [o for m in models for o in m["object"]]
    runtime = env.KilnRuntimeObjects(root, harness=False)
    return env.Program(program, objs + runtime, LIBS=with_libm(env))


def app_root(env, program, models: list[dict]) -> str:
    """The build root of an app's models: they must be one root's, declared for the app's target."""
    roots = {m["root"] for m in models}
    if len(roots) != 1 or any(m["target"] != _target_name(env) for m in models):
        where = ", ".join(f"{m['name']} ({m['target']}, {m['root']})" for m in models) or "none"
        _error(f"KilnApp {program}: link models declared for this environment's target ({_target_name(env)}), "
               f"all in one build root (KilnModels, or KilnTargetModels in a KilnTarget environment); got {where}")
    return roots.pop()


def app_objects(env, program, sources: list, models: list[dict]) -> list:
    """`sources` compiled for `program` (C files; anything else, such as an object, as it is)."""
    folder = program.dir.Dir("./_" + program.name)
    include = list(env.get("CPPPATH", [])) + [m["build"] for m in models] + [env["KILN_RUNTIME"]]
    objs = []
    for src in SCons.Util.flatten(sources):
        node = src if isinstance(src, SCons.Node.Node) else env.File(src)
        if node.name.endswith(".c"):
            objs += env.Object(folder.File("./" + node.name[:-2] + env.subst("$OBJSUFFIX")), node, CPPPATH=include)
        else:
            objs.append(node)
    return objs


def with_libm(env) -> list:
    """The environment's libraries and the C library's maths (`expf`, `tanhf`, ... in the kernels)."""
    libs = list(env.get("LIBS", []))
    return libs + ([] if "m" in libs else ["m"])


_CROSS: dict = {}


def kiln_target(env, name: str, **overrides):
    """The construction environment of firmware target `name` (`kiln/target/targets.py`): a clone of `env` with
    the `kiln_cortex_m` tool, the target's cross compiler and flags; `overrides` are set on it. An unknown name is
    one line listing the targets."""
    try:
        firmware_targets.target(name)
    except KilnError as exc:
        _error(str(exc))
    key = (id(env), name, repr(sorted(overrides.items())))
    if key not in _CROSS:
        cross = env.Clone(KILN_TARGET=name, **overrides)
        cross.Tool("kiln_cortex_m", toolpath=[str(Path(__file__).parent)])
        _CROSS[key] = (env, cross)  # the env too: its id stays its own while the clone lives
    return _CROSS[key][1]


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
    files = manifest.recorded(model["name"])
    sources = sorted((n for nodes in model["stages"].values() for n in nodes if Path(str(n)).name in files), key=str)
    program = target_file(env, program)
    about = {"program": program.name, "target": _target_name(env)}  # which file `kiln check` runs, and where
    record = env.Command(model["build"].File(f"./{model['name']}.manifest"), sources + [env.Value(json.dumps(about))],
                         SCons.Action.Action(_manifest_action, "manifest $TARGET"), KILN_ABOUT=about)
    env.Requires(record, program)
    return record


_RECORDS: dict[str, list] = {}


def root_record(env, build_root: str) -> list:
    """`<build root>/_kiln/build.json`: the target the root holds and the `scons` arguments that build it
    (`KILN_SCONS_ARGS`), so `kiln check` knows a root's board and says how to build a model it lacks."""
    if build_root not in _RECORDS:
        text = manifest.root_record(_target_name(env), str(env.get("KILN_SCONS_ARGS", "")))
        _RECORDS[build_root] = env.Command(env.Dir(_literal(build_root)).Dir("./_kiln").File("./build.json"),
                                           env.Value(text), SCons.Action.Action(_record_action, None))
    return _RECORDS[build_root]


def _record_action(target, source, env):
    write_atomic(str(target[0]), source[0].read().encode())
    return 0


def kiln_runtime_objects(env, build_root: str, harness: bool = True) -> list:
    """The runtime, harness and kernel stubs compiled once per build root.

    `harness=False` leaves out the host harness (`host_main.c`, which has `main`),
    for a firmware that calls the models from its own main (`KilnApp` links them so).
    """
    claim_root(env, build_root)
    if build_root not in _RUNTIME_OBJECTS:
        objs = []
        for folder, sub in ((paths.runtime(), "runtime"), (paths.stubs(), "firmware_stubs")):
            for c in sorted(Path(folder).glob("*.c")):
                objs += env.Object(f"{build_root}/_{sub}/{c.stem}", env.fs.File(str(c)), CPPPATH=[env.fs.Dir(str(paths.runtime()))])
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
        self.secret = os.environ.get(buildcache.HMAC_KEY_ENV, "").encode() or None
        self._entries: dict[str, object] = {}
        super().__init__(path)
        prefix = self.config.get("prefix_len")
        if not isinstance(prefix, int) or isinstance(prefix, bool) or not 0 < prefix <= 8:
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config has an invalid prefix_len {prefix!r}")

    def is_readonly(self) -> bool:
        return self.readonly or super().is_readonly()

    def entry(self, node):
        """The verified entry for `node`, read once per build; None on a miss (a bad entry is reported)."""
        cachedir, cachefile = self.cachepath(node)
        if cachefile is None:
            return None
        if cachefile not in self._entries:
            found = self.fetch(cachedir, cachefile)
            if isinstance(found, str):
                print(f"kiln: cache entry {cachefile} for {node} is corrupted ({found}); ignoring it and rebuilding",
                      file=sys.stderr)
                _count(self.path, "refused")
            self._entries[cachefile] = found if isinstance(found, buildcache.Entry) else None
        return self._entries[cachefile]

    def fetch(self, cachedir: str, cachefile: str):
        """The entry at `cachefile` (None when absent, the reason when it is refused)."""
        raw = buildcache.read_regular(cachefile) if not os.path.islink(cachedir) else "in a symlinked folder"
        return buildcache.parse_entry(raw, os.path.basename(cachefile), self.secret) if isinstance(raw, bytes) else raw

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
        data, mode = Path(path).read_bytes(), stat.S_IMODE(os.stat(path).st_mode)
        if self.store(cachedir, cachefile, data, mode):
            self._entries[cachefile] = buildcache.Entry(data, mode)
            _count(self.path, "stored")

    def store(self, cachedir: str, cachefile: str, data: bytes, mode: int) -> bool:
        """Write an entry under a temporary name, then rename it; False (with a warning) when the folder refuses."""
        try:
            if os.path.islink(cachedir):
                raise OSError(f"{cachedir} is a symlink")
            os.makedirs(cachedir, exist_ok=True)
            entry = buildcache.entry_bytes(os.path.basename(cachefile), data, mode, self.secret)
            tmp = os.path.join(cachedir, f".{os.path.basename(cachefile)}.{secrets.token_hex(8)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(entry)
                os.replace(tmp, cachefile)
            except BaseException:
                os.unlink(tmp)
                raise
            return True
        except OSError as exc:  # a full or unwritable cache never fails the build
            SCons.Warnings.warn(SCons.Warnings.CacheWriteErrorWarning, f"kiln: cannot write cache entry {cachefile} ({exc})")
            return False

    def touch(self, node) -> None:
        """A hit keeps the entry young for age-based cleaning (not in a read-only cache)."""
        if not self.is_readonly():
            with contextlib.suppress(OSError):
                os.utime(self.cachepath(node)[1], follow_symlinks=False)

    def get_cachedir_csig(self, node) -> str | None:
        found = self.entry(node)
        return None if found is None else SCons.Util.hash_signature(found.data)


class ReadOnlyVerifiedCacheDir(VerifiedCacheDir):
    """A verified cache that untrusted builds read and never write: no entries, config, tag, lock or times."""

    readonly = True

    def _readconfig(self, path: str) -> None:
        """Read the cache's config without creating or locking anything; without one, SCons's default layout."""
        raw = buildcache.read_regular(os.path.join(path, "config"))
        try:
            self.config = json.loads(raw) if isinstance(raw, bytes) else {"prefix_len": SCons.CacheDir.CACHE_PREFIX_LEN}
        except ValueError:
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config is not JSON") from None
        if not isinstance(self.config, dict):
            raise SCons.Errors.UserError(f"kiln: cache folder {path}: its config is not a JSON object")


class RemoteCacheDir(VerifiedCacheDir):
    """The verified cache on a server speaking Bazel's HTTP remote-cache protocol (`kiln/remotecache.py`).

    Entries are the same as in a folder, keyed by the same SHA-256 build
    signatures. One client per URL serves every environment of the build, so
    a server that fails is dropped once, for all of them.
    """

    def __init__(self, url: str) -> None:
        self.server = _REMOTES[url]
        self.secret = self.server.secret
        self._entries = {}
        SCons.CacheDir.CacheDir.__init__(self, url)

    def _readconfig(self, path: str) -> None:
        self.config = {"prefix_len": SCons.CacheDir.CACHE_PREFIX_LEN}  # nothing to read: keys name entries directly

    def is_readonly(self) -> bool:
        return self.server.readonly or SCons.CacheDir.cache_readonly

    def cachepath(self, node) -> tuple:
        if not self.is_enabled():
            return None, None
        return self.path, f"{self.path.rstrip('/')}/ac/{node.get_cachedir_bsig()}"

    def fetch(self, cachedir: str, cachefile: str):
        return self.server.get(cachefile.rpartition("/")[2])

    def store(self, cachedir: str, cachefile: str, data: bytes, mode: int) -> bool:
        return self.server.put(cachefile.rpartition("/")[2], data, mode)

    def touch(self, node) -> None:
        """The server ages its own entries (bazel-remote by last access)."""


_REMOTES: dict = {}  # URL -> the RemoteCache client every environment of this build shares
_READONLY: set[str] = set()  # the caches this build only reads
_CACHE_STATS: dict[str, dict[str, int]] = {}  # cache folder or URL -> hits, misses, refused, stored
_STATS_LOCK = threading.Lock()


def _count(location: str, what: str) -> None:
    with _STATS_LOCK:
        stats = _CACHE_STATS.setdefault(location, {"hits": 0, "misses": 0, "refused": 0, "stored": 0})
        stats[what] += 1


def _retrieve(target, source, env) -> int:
    """Write a target from its verified cache entry (0), or report a miss (1)."""
    node = target[0]
    cd = env.get_CacheDir()
    cd.requests += 1
    found = cd.entry(node)
    _count(cd.path, "misses" if found is None else "hits")
    if found is None:
        return 1
    cd.hits += 1
    _PROGRESS.retrieved(node)
    if SCons.Action.execute_actions:
        path = node.get_internal_path()
        write_atomic(path, found.data)
        os.chmod(path, found.mode | stat.S_IWUSR)
        cd.touch(node)
    return 0


def _retrieve_string(target, source, env) -> str:
    node = target[0]
    return f"Retrieved `{node.get_internal_path()}' from cache" if env.get_CacheDir().entry(node) else ""


_RETRIEVE = SCons.Action.Action(_retrieve, _retrieve_string)
_RETRIEVE_SILENT = SCons.Action.Action(_retrieve, None)


def _add_options() -> bool:
    """Add the `--kiln-cache` options and the exit summary once per SCons run; False when an earlier Environment did."""
    try:
        SCons.Script.GetOption("kiln_cache")
        return False
    except AttributeError:
        pass
    SCons.Script.AddOption("--kiln-cache", dest="kiln_cache", metavar="DIR|URL", default="",
                           help="Kiln: share built artifacts through the cache folder DIR, or a Bazel remote-cache "
                                "server at http(s)://URL (default: $KILN_CACHE)")
    SCons.Script.AddOption("--kiln-cache-readonly", dest="kiln_cache_readonly", action="store_true", default=False,
                           help="Kiln: read the cache, never write to it, for untrusted builds (or KILN_CACHE_READONLY=1)")
    SCons.Script.AddOption("--kiln-no-workers", dest="kiln_no_workers", action="store_true", default=False,
                           help="Kiln: run every stage in a fresh process, not in a warm worker (or KILN_WORKERS=0)")
    atexit.register(_PROGRESS.summary)
    return True


def _use_cache(env) -> None:
    """Turn on the verified cache when `--kiln-cache`/`KILN_CACHE` names a folder or a server."""
    folder = SCons.Script.GetOption("kiln_cache") or os.environ.get("KILN_CACHE", "")
    readonly = SCons.Script.GetOption("kiln_cache_readonly") or os.environ.get("KILN_CACHE_READONLY", "") == "1"
    if not folder:
        if readonly:
            _error("--kiln-cache-readonly needs a cache folder (--kiln-cache=DIR or KILN_CACHE)")
        return
    if remotecache.is_url(folder):
        _use_server(env, folder, readonly)
        return
    folder = os.path.join(SCons.Script.GetLaunchDir(), os.path.expanduser(folder))
    if readonly and not os.path.isdir(folder):
        print(f"kiln: no cache folder {folder}; building without the cache", file=sys.stderr)
        return
    if SCons.Script.GetOption("hash_format") is None:
        # Entries are named by build signatures: SHA-256 ones (SCons applies the option after reading the SConscripts).
        SCons.Script.SetOption("hash_format", "sha256")
    if readonly:
        _READONLY.add(folder)
    env.CacheDir(folder, custom_class=ReadOnlyVerifiedCacheDir if readonly else VerifiedCacheDir)


def _use_server(env, url: str, readonly: bool) -> None:
    """Turn on the verified cache on the server at `url` (entries keyed by SHA-256 build signatures)."""
    if url not in _REMOTES:
        try:
            _REMOTES[url] = remotecache.RemoteCache(url, os.environ.get(buildcache.HMAC_KEY_ENV, "").encode() or None, readonly)
        except KilnError as exc:
            _error(str(exc))
    chosen = SCons.Script.GetOption("hash_format")
    if chosen not in (None, "sha256"):
        _error(f"--kiln-cache={url}: a cache server keys entries by SHA-256 signatures; this build sets hash_format={chosen}")
    if readonly:
        _READONLY.add(url)
    if chosen is None:
        SCons.Script.SetOption("hash_format", "sha256")
    env.CacheDir(url, custom_class=RemoteCacheDir)


def generate(env) -> None:
    _add_options()
    _check_arguments()
    _use_cache(env)
    if paths.source_checkout():  # stages import this checkout's kiln
        env.PrependENVPath("PYTHONPATH", str(SOURCE_ROOT))
    env["KILN_PYTHON"] = SCons.Subst.Literal(kiln_python(env))  # one argument, quoted, whatever its path
    if os.name == "posix":
        env["ESCAPE"] = shlex.quote  # SCons's POSIX quoting leaves backquotes live inside its double quotes
    env["KILN_TARGETS"] = list(firmware_targets.TARGETS)  # the firmware targets (`target=NAME`), as data
    env["KILN_RUNTIME"] = env.Dir(str(paths.runtime()))  # for CPPPATH: kiln_runtime.h, which generated headers include
    env.AppendUnique(LIBS=["m"])  # the kernels' maths: any program that links Kiln's objects needs it
    for st in registry.STAGES:
        env["BUILDERS"][f"KilnStage_{st.name}"] = SCons.Builder.Builder(action=StageAction(st.name))
    env.AddMethod(kiln_model, "KilnModel")
    env.AddMethod(kiln_models, "KilnModels")
    env.AddMethod(kiln_target_models, "KilnTargetModels")
    env.AddMethod(kiln_target, "KilnTarget")
    env.AddMethod(kiln_app, "KilnApp")
    env.AddMethod(kiln_errors, "KilnErrors")
    env.AddMethod(kiln_program, "KilnProgram")
    env.AddMethod(kiln_manifest, "KilnManifest")
    env.AddMethod(kiln_runtime_objects, "KilnRuntimeObjects")


def exists(env) -> bool:
    return True
