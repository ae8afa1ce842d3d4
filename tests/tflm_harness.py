"""Running .tflite flatbuffers on the TFLite Micro interpreter (reference kernels), for parity tests."""
from __future__ import annotations

import numpy as np
from tflite_micro.python.tflite_micro import runtime

from kiln.export.tflite import Exported
from kiln.ir.graph import Graph


class Tflm:
    """A TFLite Micro interpreter over an exported graph that keeps every tensor for inspection."""

    def __init__(self, exported: Exported, graph: Graph) -> None:
        self.interpreter = runtime.Interpreter.from_bytes(
            exported.model, arena_size=(1 << 22) + 10 * len(exported.model), intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors
        )
        self.graph = graph
        self.index = exported.tensors

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on one array per graph input; returns every non-constant Kiln tensor's value by name."""
        for i, name in enumerate(self.graph.inputs):
            self.interpreter.set_input(np.ascontiguousarray(feeds[name]), i)
        self.interpreter.invoke()
        return {
            name: np.array(self.interpreter.GetTensor(index, 0)["tensor_data"])
            for name, index in self.index.items()
            if not self.graph.tensors[name].is_constant
        }


def run_file(model: bytes, samples: list[list[np.ndarray]], outputs: int) -> list[list[np.ndarray]]:
    """TFLM's `outputs` outputs of a .tflite file for each sample (one array per model input)."""
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=(1 << 22) + 10 * len(model))
    results = []
    for sample in samples:
        for i, x in enumerate(sample):
            interpreter.set_input(np.ascontiguousarray(x), i)
        interpreter.invoke()
        results.append([np.array(interpreter.get_output(i)) for i in range(outputs)])
    return results
