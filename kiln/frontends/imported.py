"""What every frontend returns: the graph, and the calibration samples the source provides."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.ir.graph import Graph


@dataclass
class Imported:
    graph: Graph
    calibration: dict[str, np.ndarray] = field(default_factory=dict)
