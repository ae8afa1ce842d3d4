"""Kiln: compiles neural-network models into int8 C code for microcontrollers."""

__version__ = "0.1.0"
