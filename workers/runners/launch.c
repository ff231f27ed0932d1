/*
 * skillfleet-launch: start a node script that dies with its worker, and, for a node that
 * gives each run a uid of its own, in namespaces of its own as that uid.
 *
 *     skillfleet-launch WORKER_PID PROGRAM ARGV0 [ARG...]
 *     skillfleet-launch -u UID WORKER_PID PROGRAM ARGV0 [ARG...]
 *
 * Sets the parent-death signal to SIGKILL, checks that its parent is still WORKER_PID (the
 * worker may have died between the spawn and the prctl, and then nothing would signal us),
 * and execs PROGRAM (a path: there is no PATH search) with ARGV0 and the ARGs as its
 * arguments and the environment it got.
 *
 * With -u (run as root): new mount, PID and IPC namespaces; a child forks into them as their
 * PID 1 and mounts its own /proc (it sees only the run's processes: hidepid's equivalent) and
 * its own /dev/shm, drops every group, takes UID as its user and group, may gain no privilege
 * (no_new_privs) and at most NPROC_LIMIT processes, then starts PROGRAM as PID 2 in the
 * directory it was started in. Once PROGRAM ends, PID 1 ends as it did (a signal as 128 + its
 * number), and the kernel ends every process left in the namespace, so a run leaves nothing
 * behind. This process waits for PID 1 and ends as it did.
 *
 * This is what `setpriv --pdeathsig KILL --` (and util-linux's `unshare` with `setpriv` for -u)
 * do for the node runner, without a C library: the exec of this program costs about 0.05 ms,
 * setpriv's about 0.9 ms (its dynamic loading and locale set-up), on every run.
 *
 * Exit status when PROGRAM did not start: 126 (the signal could not be set, the worker is
 * gone, or a namespace, mount or uid could not be set up), 127 (the exec failed), as a shell
 * answers.
 *
 * Raw system calls for x86_64 Linux only; elsewhere the node runner uses setpriv. No C library:
 * build-launcher.sh builds it static and freestanding, for `make` and the application images.
 */
#if !defined(__x86_64__) || !defined(__linux__)
#error "skillfleet-launch has system calls for x86_64 Linux only; elsewhere setpriv is used"
#endif

#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/resource.h>
#include <linux/mount.h>
#include <signal.h>
#include <sys/syscall.h>

#define NPROC_LIMIT 1024
#define WAIT_EINTR 4

static long syscall6(long number, long a, long b, long c, long d, long e, long f) {
    long result;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return result;
}

static long syscall3(long number, long a, long b, long c) {
    return syscall6(number, a, b, c, 0, 0, 0);
}

__attribute__((noreturn)) static void leave(long status) {
    for (;;) syscall3(SYS_exit_group, status, 0, 0);
}

static void say(const char *message) {
    long length = 0;
    while (message[length] != '\0') length++;
    syscall3(SYS_write, 2, (long)message, length);
}

__attribute__((noreturn)) static void fail(const char *what) {
    say("skillfleet-launch: ");
    say(what);
    say("\n");
    leave(126);
}

static long number(const char *text) {  /* -1 unless text is all digits */
    long value = 0;
    if (*text == '\0') return -1;
    for (; *text != '\0'; text++) {
        if (*text < '0' || *text > '9' || value > 0xffffffffL) return -1;
        value = value * 10 + (*text - '0');
    }
    return value;
}

static int same(const char *a, const char *b) {
    while (*a != '\0' && *a == *b) a++, b++;
    return *a == *b;
}

static void die_with_parent(void) {
    if (syscall3(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0) != 0)
        fail("the parent-death signal could not be set");
}

__attribute__((noreturn)) static void run(char **argv, char **envp) {
    syscall3(SYS_execve, (long)argv[0], (long)(argv + 1), (long)envp);
    say("skillfleet-launch: could not execute ");
    say(argv[0]);
    say("\n");
    leave(127);
}

/* PID 1 of the run's namespaces: wait for the script, reaping what else ends, and end as it
 * did (a signal as 128 + its number: signals from inside a PID namespace can't end its PID 1). */
__attribute__((noreturn)) static void init(long script) {
    int status = 0;
    long got;
    for (;;) {
        got = syscall6(SYS_wait4, -1, (long)&status, 0, 0, 0, 0);
        if (got == script) break;
        if (got < 0 && got != -WAIT_EINTR) leave(126);
    }
    if ((status & 0x7f) == 0) leave((status >> 8) & 0xff);
    leave(128 + (status & 0x7f));
}

/* In the new namespaces, as their PID 1: the run's own /proc and /dev/shm, its uid, then the
 * script as PID 2. */
__attribute__((noreturn)) static void become(long uid, char **argv, char **envp) {
    struct rlimit nproc = {NPROC_LIMIT, NPROC_LIMIT};
    die_with_parent();
    if (syscall6(SYS_mount, 0, (long)"/", 0, MS_REC | MS_PRIVATE, 0, 0) != 0)
        fail("the mounts could not be made private");
    if (syscall6(SYS_mount, (long)"proc", (long)"/proc", (long)"proc",
                 MS_NOSUID | MS_NODEV | MS_NOEXEC, 0, 0) != 0)
        fail("/proc could not be mounted");
    /* A host without /dev/shm has none to share either. */
    syscall6(SYS_mount, (long)"tmpfs", (long)"/dev/shm", (long)"tmpfs", MS_NOSUID | MS_NODEV,
             (long)"mode=1777,size=64m", 0);
    if (syscall3(SYS_setrlimit, RLIMIT_NPROC, (long)&nproc, 0) != 0)
        fail("the process limit could not be set");
    if (syscall3(SYS_setgroups, 0, 0, 0) != 0 || syscall3(SYS_setresgid, uid, uid, uid) != 0 ||
        syscall3(SYS_setresuid, uid, uid, uid) != 0)
        fail("the run's uid could not be taken");
    if (syscall6(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0) != 0)
        fail("no_new_privs could not be set");
    die_with_parent();  /* a change of credentials cleared it */
    long script = syscall3(SYS_fork, 0, 0, 0);
    if (script < 0) fail("the script could not be started");
    if (script == 0) {
        die_with_parent();
        run(argv, envp);
    }
    init(script);
}

/* Outside them: wait for PID 1 and end as it ended, its signal included. */
__attribute__((noreturn)) static void relay(long child) {
    int status = 0;
    struct rlimit none = {0, 0};
    long got;
    do {
        got = syscall6(SYS_wait4, child, (long)&status, 0, 0, 0, 0);
    } while (got == -WAIT_EINTR);
    if (got != child) leave(126);
    if ((status & 0x7f) == 0) leave((status >> 8) & 0xff);
    syscall3(SYS_setrlimit, RLIMIT_CORE, (long)&none, 0);  /* no core of this process */
    syscall3(SYS_kill, syscall3(SYS_getpid, 0, 0, 0), status & 0x7f, 0);
    leave(128 + (status & 0x7f));
}

/* Called from _start with the initial stack: argc, argv[0..argc], NULL, envp..., NULL. */
__attribute__((noreturn, used)) static void launch(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    long uid = -1;
    if (argc >= 3 && same(argv[1], "-u")) {
        uid = number(argv[2]);
        if (uid <= 0) fail("-u needs a uid other than root's");
        argv += 2;
        argc -= 2;
    }
    if (argc < 4) {
        say("usage: skillfleet-launch [-u UID] WORKER_PID PROGRAM ARGV0 [ARG...]\n");
        leave(126);
    }
    die_with_parent();
    if (syscall3(SYS_getppid, 0, 0, 0) != number(argv[1])) leave(126);  /* the worker is gone */
    if (uid < 0) run(argv + 2, envp);
    if (syscall3(SYS_unshare, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC, 0, 0) != 0)
        fail("the run's namespaces could not be made (is the worker root?)");
    long child = syscall3(SYS_fork, 0, 0, 0);
    if (child < 0) fail("the run's first process could not be started");
    if (child == 0) become(uid, argv + 2, envp);
    relay(child);
}

/* The entry point: hand the initial stack to launch() on an ABI-aligned stack. */
__asm__(".globl _start\n"
        "_start:\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call launch\n");
