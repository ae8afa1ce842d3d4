"""The normalization passes, one module each: `run(graph) -> (graph, changed)`; `kiln.normalize` lists their order."""
