/*
 * skillfleet-launch: start a node script that dies with its worker.
 *
 *     skillfleet-launch WORKER_PID PROGRAM ARGV0 [ARG...]
 *
 * Sets the parent-death signal to SIGKILL, checks that its parent is still WORKER_PID (the
 * worker may have died between the spawn and the prctl, and then nothing would signal us),
 * and execs PROGRAM (a path: there is no PATH search) with ARGV0 and the ARGs as its
 * arguments and the environment it got.
 * This is what `setpriv --pdeathsig KILL --` does for the node runner, without a C library:
 * the exec of this program costs about 0.05 ms, setpriv's about 0.9 ms (its dynamic loading
 * and locale set-up), on every run.
 *
 * Exit status when PROGRAM did not start: 126 (the signal could not be set, or the worker is
 * gone), 127 (the exec failed), as a shell answers.
 *
 * Raw system calls for x86_64 Linux only; elsewhere the node runner uses setpriv. No C library:
 * build-launcher.sh builds it static and freestanding, for `make` and the application images.
 */
#if !defined(__x86_64__) || !defined(__linux__)
#error "skillfleet-launch has system calls for x86_64 Linux only; elsewhere setpriv is used"
#endif

#include <linux/prctl.h>
#include <signal.h>
#include <sys/syscall.h>

static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

__attribute__((noreturn)) static void leave(long status) {
    for (;;) syscall3(SYS_exit_group, status, 0, 0);
}

static void say(const char *message) {
    long length = 0;
    while (message[length] != '\0') length++;
    syscall3(SYS_write, 2, (long)message, length);
}

static long number(const char *text) {  /* -1 unless text is all digits */
    long value = 0;
    if (*text == '\0') return -1;
    for (; *text != '\0'; text++) {
        if (*text < '0' || *text > '9') return -1;
        value = value * 10 + (*text - '0');
    }
    return value;
}

/* Called from _start with the initial stack: argc, argv[0..argc], NULL, envp..., NULL. */
__attribute__((noreturn, used)) static void launch(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    if (argc < 4) {
        say("usage: skillfleet-launch WORKER_PID PROGRAM ARGV0 [ARG...]\n");
        leave(126);
    }
    if (syscall3(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0) != 0) {
        say("skillfleet-launch: the parent-death signal could not be set\n");
        leave(126);
    }
    if (syscall3(SYS_getppid, 0, 0, 0) != number(argv[1])) leave(126);  /* the worker is gone */
    syscall3(SYS_execve, (long)argv[2], (long)(argv + 3), (long)envp);
    say("skillfleet-launch: could not execute ");
    say(argv[2]);
    say("\n");
    leave(127);
}

/* The entry point: hand the initial stack to launch() on an ABI-aligned stack. */
__asm__(".globl _start\n"
        "_start:\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call launch\n");
