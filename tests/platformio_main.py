"""A stand-in for PlatformIO's `platformio/builder/main.py`, the SConstruct `pio run` hands to SCons, for the
tests: PlatformIO cannot download its platforms and toolchains here.

It does what PlatformIO's does for a project, in its order: one construction
environment with PlatformIO's variables (`PIOENV`, `PROJECT_DIR`,
`PROJECT_SRC_DIR`, `BUILD_DIR` under `.pio/build/`, `PYTHONEXE`, `PROGNAME`,
`PIOBUILDFILES`, the host environment as `ENV`), the `.sconsign` in the
build folder, the `pre:` extra scripts of platformio.ini run with
`env.SConscript(script, exports="env")`, then the platform script: it sets
the cross compiler and its flags (here the arm-none-eabi GCC that Debian
packages, for a Cortex-M4F, as PlatformIO's ststm32 platform sets for
nucleo_f446re), compiles `src/` and links `PIOBUILDFILES` into
`firmware.elf` (newlib's startup and `nosys` stubs stand in for the CMSIS
framework's startup files), then the `post:` scripts.

    python -m SCons -Q -f tests/platformio_main.py    (in the project folder)
"""
import configparser
import os
import sys

project = os.getcwd()  # SCons runs in the project folder, as `pio run` has it
ini = configparser.ConfigParser()
ini.read(os.path.join(project, "platformio.ini"))
section = next(s for s in ini.sections() if s.startswith("env:"))
scripts = ini[section].get("extra_scripts", "").split()

env = DefaultEnvironment(
    tools=["ar", "as", "gcc", "gnulink"],
    ENV=os.environ,
    PIOENV=section[4:],
    PROJECT_DIR=project,
    PROJECT_SRC_DIR=os.path.join(project, "src"),
    BUILD_DIR=os.path.join(project, ".pio", "build", section[4:]),
    PYTHONEXE=sys.executable,
    PROGNAME="firmware",
    PIOBUILDFILES=[],
)
env.SConscriptChdir(0)
env.SConsignFile(os.path.join("$BUILD_DIR", ".sconsign%d%d" % sys.version_info[:2]))

for item in scripts:
    if item.startswith("pre:"):
        env.SConscript(os.path.join(project, item[4:]), exports="env")

# The platform script (ststm32's builder/main.py, for a Cortex-M4F board).
cpu = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
env.Replace(AR="arm-none-eabi-ar", AS="arm-none-eabi-as", CC="arm-none-eabi-gcc", LINK="arm-none-eabi-gcc",
            RANLIB="arm-none-eabi-ranlib", PROGSUFFIX=".elf", CFLAGS=["-std=gnu11"],
            CCFLAGS=cpu + ["-Os", "-Wall", "-ffunction-sections", "-fdata-sections"],
            LINKFLAGS=cpu + ["-Os", "-Wl,--gc-sections", "--specs=nano.specs", "--specs=nosys.specs"], LIBS=["m"])
sources = sorted(Glob(os.path.join(project, "src", "*.c")), key=str)
env.Append(PIOBUILDFILES=[env.Object(os.path.join("$BUILD_DIR", "src", s.name[:-2]), s) for s in sources])
program = env.Program(os.path.join("$BUILD_DIR", "${PROGNAME}"), env["PIOBUILDFILES"])
Default(program)

for item in scripts:
    if item.startswith("post:"):
        env.SConscript(os.path.join(project, item[5:]), exports="env")
