"""ExportedProgram → source-level Kiln graph, shared by the model.py and .pt2 frontends.

The program is first decomposed to core ATen, except for the ops Kiln lowers
whole (convolution, linear, activations, pooling, resize, split, ...): a
decomposed hardswish or max-pool would reach the backend as a soup of
elementwise ops it cannot fuse. Each remaining ATen node is then mapped onto
ONNX-named source ops by the handlers in `torch_aten`.

Names are stable so the imported graph is byte-identical across runs:
graph inputs are the forward() parameter names, constants their state-dict
names, activations the FX node names. `Node.source` is "file.py: code line"
from the FX stack trace, never a line number, so editing a comment elsewhere
in model.py leaves the graph unchanged; `Node.source_name` is the qualified
name of the module that ran the op (`features.3.conv`), from torch.export's
`nn_module_stack`.
"""
from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from kiln.errors import KilnError, did_you_mean, node_context
from kiln.frontends.torch_aten import HANDLERS
from kiln.frontends.torch_emit import TORCH_DTYPES, Emitter, Unsupported, module_path, tensor_data
from kiln.ir.graph import Graph, Node, Tensor
from kiln.ir.verify import VerifyError, verify

_KEEP_WHOLE = (
    "linear.default",
    "silu.default",
    "hardswish.default",
    "hardsigmoid.default",
    "gelu.default",
    "max_pool2d.default",
    "adaptive_avg_pool2d.default",
    "upsample_nearest2d.vec",
    "split.Tensor",
    "split_with_sizes.default",
    "_safe_softmax.default",
)

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+, in [^\n]*\n(?P<code>[^\n]*)')
_LIBRARY = re.compile(r"(^<)|[/\\](site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python3[.\d]*[/\\]")


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core-ATen decompositions minus the ops Kiln maps whole onto source ops."""
    table = torch.export.default_decompositions()
    for name in _KEEP_WHOLE:
        packet, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, packet), overload), None)
    return table


def user_source(stack_trace: str | None, folder: Path | None = None) -> str:
    """The innermost user frame of an FX stack trace as "file.py: code".

    A frame in the model's folder wins; otherwise the innermost frame outside
    torch, site-packages and the standard library (a .pt2 from elsewhere).
    """
    frames = [(m["file"], m["code"].strip()) for m in _FRAME.finditer(stack_trace or "")]
    preferred = [f for f in frames if folder is not None and _inside(f[0], folder)]
    candidates = preferred or [f for f in frames if not _LIBRARY.search(f[0])]
    if not candidates:
        return ""
    file, code = candidates[-1]
    return f"{Path(file).name}: {code}"


def _inside(file: str, folder: Path) -> bool:
    try:
        return Path(file).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def convert(ep: ExportedProgram, name: str, where: str, folder: Path | None = None, input_names: list[str] | None = None) -> Graph:
    """Decompose `ep` and translate it into a verified source-level graph.

    `where` names the source file in error messages; `folder` (a model.py's
    folder) marks which stack-trace frames are the user's; `input_names`
    (forward()'s parameters) name the graph inputs, else the placeholders do.
    """
    try:
        with quiet_torch():
            ep = ep.run_decompositions(decomposition_table())
    except Exception as exc:  # torch raises many types for programs it cannot decompose
        raise KilnError(f"{where}: cannot decompose the exported program: {describe(exc)}") from None
    graph = Graph(name=name)
    emitter = Emitter(graph)
    _add_inputs(ep, graph, emitter, input_names, where)
    errors = _add_nodes(ep, emitter, folder)
    if errors:
        raise KilnError(f"{where}: {len(errors)} unsupported operator(s):\n  " + "\n  ".join(errors))
    _add_outputs(ep, graph, emitter, where)
    graph.remove_unused_tensors()
    try:
        verify(graph, levels=("source",))
    except VerifyError as exc:
        raise KilnError(f"{where}: imported graph is inconsistent: {exc}") from None
    return graph


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Silence torch's own deprecation chatter during export, which says nothing about the user's model."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def ir_dtype(dtype: torch.dtype, what: str) -> str:
    if dtype not in TORCH_DTYPES:
        raise KilnError(f"{what}: dtype {dtype} is not supported")
    return TORCH_DTYPES[dtype]


def _add_inputs(ep: ExportedProgram, graph: Graph, emitter: Emitter, names: list[str] | None, where: str) -> None:
    """Graph inputs (named `names`, else as the placeholders) first, then the used parameters, buffers and constants."""
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    for placeholder, name in zip(user, names or user):
        val = _placeholder(ep, placeholder).meta["val"]
        _check_static(val.shape, f"{where}: input {name!r}")
        graph.add_tensor(Tensor(name, tuple(val.shape), ir_dtype(val.dtype, f"{where}: input {name!r}")))
        graph.inputs.append(name)
        emitter.values[placeholder] = [name]
    used = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT and spec.arg.name in used:
            emitter.values[spec.arg.name] = [_constant(ep, spec, graph, where)]


def check_bindings(bindings: dict[str, Any], actual: dict[str, tuple[tuple[int, ...], torch.dtype]], where: str) -> None:
    """The model.toml `inputs` table against the model's inputs: known names, equal shapes and dtypes."""
    for name in sorted(bindings):
        spec = bindings[name] or {}
        if name not in actual:
            raise KilnError(f"{where}: model.toml inputs.{name}: the model has no input {name!r}{did_you_mean(name, actual)} "
                            f"(its inputs: {', '.join(actual)})")
        shape, dtype = actual[name]
        if "shape" in spec and [int(d) for d in spec["shape"]] != list(shape):
            raise KilnError(f"{where}: model.toml inputs.{name}.shape {list(spec['shape'])} does not match the model's {list(shape)}")
        if "dtype" in spec and spec["dtype"] != ir_dtype(dtype, f"{where}: input {name!r}"):
            raise KilnError(f"{where}: model.toml inputs.{name}.dtype {spec['dtype']!r} does not match the model's {ir_dtype(dtype, name)!r}")


def _placeholder(ep: ExportedProgram, name: str) -> torch.fx.Node:
    return next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name)


def _check_static(shape: Any, what: str) -> None:
    if not all(isinstance(d, int) for d in shape):
        raise KilnError(f"{what} has dynamic dimensions {list(shape)}; Kiln compiles static shapes")


def _constant(ep: ExportedProgram, spec: Any, graph: Graph, where: str) -> str:
    if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
        raise KilnError(f"{where}: unsupported program input {spec.arg.name!r} ({spec.kind.name.lower()})")
    value = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants.get(spec.target)
    if not isinstance(value, torch.Tensor):
        raise KilnError(f"{where}: constant {spec.target!r} is not a tensor")
    ir_dtype(value.dtype, f"{where}: constant {spec.target!r}")
    return graph.add_constant(spec.target, *tensor_data(value)).name


def _add_nodes(ep: ExportedProgram, emitter: Emitter, folder: Path | None) -> list[str]:
    """Translate every call node; return one line per unsupported op (all of them, not the first)."""
    errors: list[str] = []
    failed: set[str] = set()
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    for index, fx in enumerate(calls):
        target = _target_name(fx.target)
        handler = HANDLERS.get(target)
        source = user_source(fx.meta.get("stack_trace"), folder)
        where = node_context(index, fx.name, target, source, module_path(fx))
        if handler is None:
            errors.append(f"{where}: no Kiln mapping for this operator")
            failed.add(fx.name)
            continue
        if any(a.name in failed for a in fx.all_input_nodes):
            failed.add(fx.name)
            continue
        try:
            emitter.begin(fx, source)
            handler(emitter, fx)
        except Unsupported as exc:
            errors.append(f"{where}: {exc}")
            failed.add(fx.name)
    return errors


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def _add_outputs(ep: ExportedProgram, graph: Graph, emitter: Emitter, where: str) -> None:
    """User outputs in order; an input, constant or repeated output gets an Identity of its own."""
    for spec in ep.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise KilnError(f"{where}: the model mutates {spec.target or spec.arg.name!r} in forward(); Kiln models must be pure functions")
        name = getattr(spec.arg, "name", None)
        if name is None or name not in emitter.values:
            raise KilnError(f"{where}: output {spec.arg} is not a tensor")
        tensor = emitter.values[name][0]
        if tensor in graph.inputs or graph.tensors[tensor].is_constant or tensor in graph.outputs:
            out = graph.unique_tensor_name(f"{name}_output")
            src = graph.tensors[tensor]
            graph.add_tensor(Tensor(out, src.shape, src.dtype))
            graph.nodes.append(Node(graph.unique_node_name(out), "Identity", [tensor], [out]))
            tensor = out
        graph.outputs.append(tensor)
