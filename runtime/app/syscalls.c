/* The C library's system calls for a firmware with its own main() on a Kiln
 * target's board (KilnApp in the SCons tool): printf and the other stdio
 * functions write to the host's stdout and stderr through semihosting (what
 * `kiln qemu` shows), stdin reads the host's, malloc takes memory from the RAM
 * after .bss (__kiln_heap_start to __kiln_heap_end in the linker script, never
 * past it), and returning from main runs the C library's exit, so buffered
 * output is flushed before semihosting ends the run with main's status.
 * newlib (Arm) asks for _write, _sbrk and the rest by name; picolibc (RISC-V)
 * for the stdin, stdout and stderr streams and _exit. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "firmware.h"
#include "semihost.h"

extern char __kiln_heap_start[], __kiln_heap_end[];

void _exit(int status) __attribute__((noreturn));

void kiln_exit(int status)
{
    exit(status);
}

#if defined(__riscv)
/* picolibc's tinystdio hands over one character at a time: a line is sent
 * whole, and what is left when the program exits. */
static char g_line[128];
static size_t g_used;

static int flush_line(FILE *stream)
{
    int failed = g_used != 0u && semihost_write(SEMIHOST_STDOUT, g_line, g_used) != 0;
    (void)stream;
    g_used = 0u;
    return failed ? EOF : 0;
}

static int put_stdout(char c, FILE *stream)
{
    g_line[g_used++] = c;
    if (c == '\n' || g_used == sizeof g_line) {
        return flush_line(stream) == 0 ? (unsigned char)c : EOF;
    }
    return (unsigned char)c;
}

static int put_stderr(char c, FILE *stream)
{
    (void)stream;
    return semihost_write(SEMIHOST_STDERR, &c, 1u) == 0 ? (unsigned char)c : EOF;
}

static int get_stdin(FILE *stream)
{
    unsigned char c;
    (void)stream;
    return semihost_read_stdin(&c, 1u) == 1 ? c : EOF;
}

static FILE g_stdout = FDEV_SETUP_STREAM(put_stdout, NULL, flush_line, _FDEV_SETUP_WRITE);
static FILE g_stderr = FDEV_SETUP_STREAM(put_stderr, NULL, NULL, _FDEV_SETUP_WRITE);
static FILE g_stdin = FDEV_SETUP_STREAM(NULL, get_stdin, NULL, _FDEV_SETUP_READ);
FILE *const stdout = &g_stdout;
FILE *const stderr = &g_stderr;
FILE *const stdin = &g_stdin;

void _exit(int status)
{
    flush_line(stdout);
    semihost_exit(status);
}

/* picolibc's malloc grows its pool with sbrk. */
void *sbrk(ptrdiff_t increment)
#else
void _exit(int status)
{
    semihost_exit(status);
}

int _write(int fd, const char *buf, int len);
int _read(int fd, char *buf, int len);
int _close(int fd);
int _fstat(int fd, struct stat *st);
int _isatty(int fd);
int _lseek(int fd, int offset, int whence);
int _kill(int pid, int sig);
int _getpid(void);
void *_sbrk(ptrdiff_t increment);

/* Only the standard streams exist: 0 is the host's stdin, 1 its stdout, 2 its stderr. */
int _write(int fd, const char *buf, int len)
{
    if ((fd != 1 && fd != 2) || len < 0) {
        errno = EBADF;
        return -1;
    }
    if (semihost_write(fd == 1 ? SEMIHOST_STDOUT : SEMIHOST_STDERR, buf, (size_t)len) != 0) {
        errno = EIO;
        return -1;
    }
    return len;
}

int _read(int fd, char *buf, int len)
{
    long got;
    if (fd != 0 || len < 0) {
        errno = EBADF;
        return -1;
    }
    got = semihost_read_stdin(buf, (size_t)len);
    if (got < 0) {
        errno = EIO;
        return -1;
    }
    return (int)got;
}

int _close(int fd)
{
    (void)fd;
    return 0;
}

/* A character device, so the C library buffers stdout by line. */
int _fstat(int fd, struct stat *st)
{
    (void)fd;
    st->st_mode = S_IFCHR;
    return 0;
}

int _isatty(int fd)
{
    return fd >= 0 && fd <= 2;
}

int _lseek(int fd, int offset, int whence)
{
    (void)fd;
    (void)offset;
    (void)whence;
    errno = ESPIPE;
    return -1;
}

/* abort() raises SIGABRT: the run ends with status 128 + 6, as a host process's would read. */
int _kill(int pid, int sig)
{
    (void)pid;
    _exit(128 + sig);
}

int _getpid(void)
{
    return 1;
}

void *_sbrk(ptrdiff_t increment)
#endif
{
    static char *g_break = __kiln_heap_start;
    char *previous = g_break;
    if (increment > __kiln_heap_end - g_break || increment < __kiln_heap_start - g_break) {
        errno = ENOMEM;
        return (void *)-1;
    }
    g_break += increment;
    return previous;
}
