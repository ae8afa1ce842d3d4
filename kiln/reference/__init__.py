"""NumPy reference executors: float for every op, integer (bit-exact with the C kernels) for int8 graphs."""
