"""Firmware targets: cross-compiling generated models for microcontroller cores and running them under QEMU.

`targets` holds one table per target (core flags, QEMU board, memory map),
`cortex_m` the cross builds (flags, linker scripts, the generated model
table) for every target, `qemu` runs firmware images on their target's board
and parses their reports, `elf` reads which target an image was linked for,
`size` reads flash and RAM use from an image and checks a model's budget
against a board, and `macs` counts a planned graph's multiply-accumulates.
"""
