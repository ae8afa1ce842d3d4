/* Arm semihosting for the Cortex-M firmware harness: host stdout/stderr,
 * stdin and files, and exit with a status. Every call traps to the debugger
 * or emulator with `bkpt 0xab`; without one attached the core halts, so only
 * firmware meant to run under semihosting links this. C99, no allocation. */
#ifndef KILN_SEMIHOST_H
#define KILN_SEMIHOST_H

#include <stddef.h>
#include <stdint.h>

/* The host's standard streams, opened on first use. */
typedef enum { SEMIHOST_STDIN = 0, SEMIHOST_STDOUT = 1, SEMIHOST_STDERR = 2 } semihost_stream_t;

/* Writes `len` bytes to a host stream; returns 0 on success. */
int semihost_write(semihost_stream_t stream, const void *buf, size_t len);

/* Writes a NUL-terminated string to a host stream; returns 0 on success. */
int semihost_puts(semihost_stream_t stream, const char *text);

/* Reads up to `len` bytes from host stdin; returns the bytes read (0 at end
 * of input) or -1 on error. Repeats short reads until `len` or end of input. */
long semihost_read_stdin(void *buf, size_t len);

/* Copies the program's command line (the program name, then its arguments,
 * separated by spaces) into `buf` as a NUL-terminated string; 0 on success. */
int semihost_cmdline(char *buf, size_t len);

/* Ends the program: the host (QEMU) exits with `status`. Never returns. */
void semihost_exit(int status) __attribute__((noreturn));

#endif /* KILN_SEMIHOST_H */
