"""Firmware targets: cross-compiling generated models for Cortex-M4 and running them under QEMU.

`cortex_m` holds the cross toolchain settings and the generated model table,
`qemu` runs firmware images and parses their reports, `size` reads flash and
RAM use from an image, and `macs` counts a planned graph's multiply-accumulates.
"""
