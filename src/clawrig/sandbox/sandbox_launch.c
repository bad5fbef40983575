/* clawrig's sandbox launcher and init as one small C program (clawrig.sandbox.launchbin):
 * what perl does for a pooled bwrap sandbox (clawrig.sandbox.mountns, clawrig.sandbox.zygote)
 * in ~0.4 ms of CPU instead of ~2 ms per perl start (two sandboxes per trial, each with a
 * launcher and an init). Compiled on first use, statically with musl where musl-gcc is there
 * (a glibc program's start reads the CPU's cache sizes by cpuid: ~0.6 ms of CPU on a virtual
 * machine, musl's ~0.04), else by the host's C compiler; where there is none, perl does the
 * same work.
 *
 *   sandbox-launch launch N PROCS_FILE... FSIZE NICE TEMPLATE_FD ENTRY BWRAP ARGS...
 *     join the N cgroups (this pid into each cgroup.procs file), no core dumps, RLIMIT_FSIZE
 *     of FSIZE bytes (0: none); clone ENTRY with every mount below it (open_tree), enter the
 *     template mount namespace (setns on TEMPLATE_FD), make a copy of it (unshare), attach
 *     the clone at ENTRY (move_mount), make it a slave of the host's mounts, NICE steps
 *     nicer, close the descriptor it runs from (/proc/self/fd/N) unless ARGS name it, exec
 *     BWRAP ARGS. With CLAWRIG_LAUNCH_KEEP_FDS set (comma-separated descriptors; the harness
 *     starts it by posix_spawn, which closes nothing: clawrig.sandbox.client.spawn_launcher),
 *     every descriptor above 2 that it does not list is closed first (close_range(2) over
 *     the gaps) and the variable is unset, so bwrap gets the listed ones alone. Numbers that
 *     are not whole decimals in range: the usage line, before anything is done. Sources: open_tree(2), move_mount(2), setns(2), unshare(2), the
 *     kernel's Documentation/filesystems/sharedsubtree.rst.
 *
 *   sandbox-launch init
 *     the sandbox's pid 1 under bwrap --as-pid-1, named clawrig-init: every descriptor but
 *     0-2 closed (nothing in the sandbox finds one in /proc/1/fd), one byte 'r' on stdout
 *     (bwrap has set the sandbox up), stdout and stderr then /dev/null (the agent could
 *     write into bwrap's stderr pipe by /proc/1/fd/2); then it reaps every process that
 *     ends up its child, forever. As a PID namespace's init it gets no signal from inside
 *     that it has no handler for (pid_namespaces(7)); its only handler, SIGCHLD's, does
 *     nothing.
 *
 * A failure is one line "clawrig launch: WHAT: REASON" on stderr and exit status 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define OPEN_TREE_CLONE_ 1
#define AT_RECURSIVE_ 0x8000
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x4

static int fail(const char *what, const char *arg) {
    if (arg)
        fprintf(stderr, "clawrig launch: %s %s: %s\n", what, arg, strerror(errno));
    else
        fprintf(stderr, "clawrig launch: %s: %s\n", what, strerror(errno));
    return 1;
}

static int usage(void) {
    fputs("clawrig launch: usage: [CLAWRIG_LAUNCH_KEEP_FDS=FD,...] launch N PROCS... FSIZE NICE "
          "TEMPLATE_FD ENTRY BWRAP ARGS... | init\n", stderr);
    return 2;
}

/* A whole decimal number in [lo, hi] from s into *out; 0 when s is not one. */
static int number(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* The descriptor this program runs from ("/proc/self/fd/N" as its argv[0]), else -1. */
static int own_fd(const char *argv0) {
    long long fd;
    const char *prefix = "/proc/self/fd/";
    if (strncmp(argv0, prefix, strlen(prefix)) != 0 ||
        !number(argv0 + strlen(prefix), 0, 1 << 30, &fd))
        return -1;
    return (int)fd;
}

/* Close [lo, hi] (hi ~0U: to the end), by close_range(2) or, before Linux 5.9, one by one up to
 * the descriptor limit. */
static void close_from_to(unsigned lo, unsigned hi) {
    if (lo > hi || syscall(SYS_close_range, lo, hi, 0) == 0)
        return;
    struct rlimit files;
    unsigned long top = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                            ? (unsigned long)files.rlim_cur
                            : 1UL << 20;
    for (unsigned long fd = lo; fd <= hi && fd < top; fd++)
        close((int)fd);
}

/* The descriptors in LIST ("3,7,12": whole decimals above 2, at most 64) into fds, sorted;
 * their count, or -1 when LIST is not such a list. */
static int keep_list(const char *list, long long fds[64]) {
    int count = 0;
    char buf[1024];
    size_t len = strlen(list);
    if (len == 0 || len >= sizeof buf || list[0] == ',' || list[len - 1] == ',' ||
        strstr(list, ",,"))
        return -1; /* (strtok_r would take empty items for none) */
    strcpy(buf, list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (count == 64 || !number(tok, 3, INT_MAX, &fds[count]))
            return -1;
        for (int j = count++; j > 0 && fds[j - 1] > fds[j]; j--) { /* insertion sort */
            long long t = fds[j];
            fds[j] = fds[j - 1];
            fds[j - 1] = t;
        }
    }
    return count;
}

/* Close every descriptor above 2 but the COUNT sorted ones in fds. */
static void keep_only(const long long *fds, int count) {
    unsigned next = 3;
    for (int k = 0; k < count; k++) {
        if ((unsigned)fds[k] > next)
            close_from_to(next, (unsigned)fds[k] - 1);
        next = (unsigned)fds[k] + 1;
    }
    close_from_to(next, ~0U);
}

static int launch(const char *self, int argc, char **argv) {
    long long n, fsize, nice_steps, template_fd;
    int i = 0;
    if (argc < 1 || !number(argv[i++], 0, 1024, &n) || argc < i + n + 5)
        return usage();
    if (!number(argv[i + n], 0, LLONG_MAX, &fsize) || !number(argv[i + n + 1], 0, 39, &nice_steps)
        || !number(argv[i + n + 2], 0, 1 << 30, &template_fd))
        return usage(); /* checked before anything is done */
    const char *keep = getenv("CLAWRIG_LAUNCH_KEEP_FDS");
    long long kept[64];
    int kept_count = keep ? keep_list(keep, kept) : 0;
    if (kept_count < 0)
        return usage();
    prctl(PR_SET_NAME, "clawrig-launch", 0, 0, 0); /* not "N" (/proc/self/fd/N), until exec */
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (int k = 0; k < n; k++, i++) {
        int fd = open(argv[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return fail("join", argv[i]);
        ssize_t wrote = write(fd, pid, len);
        if (wrote >= 0 && wrote != len)
            errno = EIO;
        if (wrote != len || close(fd) != 0)
            return fail("join", argv[i]);
    }
    i += 3; /* FSIZE NICE TEMPLATE_FD */
    const char *entry = argv[i++];
    struct rlimit none = {0, 0};
    struct rlimit size = {(rlim_t)fsize, (rlim_t)fsize};
    if (setrlimit(RLIMIT_CORE, &none) != 0)
        return fail("core", NULL);
    if (fsize && setrlimit(RLIMIT_FSIZE, &size) != 0)
        return fail("file size", NULL);
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, entry,
                            OPEN_TREE_CLONE_ | AT_RECURSIVE_ | O_CLOEXEC);
    if (tree < 0)
        return fail("clone", entry);
    if (setns((int)template_fd, CLONE_NEWNS) != 0)
        return fail("enter the template", NULL);
    close((int)template_fd);
    if (unshare(CLONE_NEWNS) != 0)
        return fail("unshare", NULL);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, entry, MOVE_MOUNT_F_EMPTY_PATH_) != 0)
        return fail("attach", entry);
    close(tree);
    if (mount(NULL, entry, NULL, MS_REC | MS_SLAVE, NULL) != 0)
        return fail("slave", entry);
    errno = 0;
    int prio = getpriority(PRIO_PROCESS, 0);
    if (errno == 0)
        setpriority(PRIO_PROCESS, 0, prio + (int)nice_steps);
    /* this program's own descriptor goes on only when the command names it (the zygote's
     * init, which bwrap runs); else nothing after bwrap (its supervisor) inherits it */
    int mine = own_fd(self);
    int named = 0;
    for (int k = i; k < argc; k++)
        named |= strcmp(argv[k], self) == 0;
    if (mine >= 0 && !named)
        close(mine);
    if (keep) {
        keep_only(kept, kept_count);
        unsetenv("CLAWRIG_LAUNCH_KEEP_FDS");
    }
    execv(argv[i], argv + i);
    return fail("exec", argv[i]);
}

static void on_child(int sig) { (void)sig; }

static int init(void) {
    sigset_t chld, none;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&none);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child;
    sigaction(SIGCHLD, &sa, NULL);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    prctl(PR_SET_NAME, "clawrig-init", 0, 0, 0); /* not "N" (/proc/self/fd/N) */
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0) { /* before Linux 5.9 */
        struct rlimit files;
        long top = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                       ? (long)files.rlim_cur
                       : 1L << 20;
        for (long fd = 3; fd < top; fd++)
            close((int)fd);
    }
    if (write(1, "r", 1) != 1)
        return fail("say ready", NULL);
    int null = open("/dev/null", O_WRONLY); /* stdout and stderr: nothing in the sandbox
                                                * writes into the harness's pipes by them */
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        sigsuspend(&none); /* returns once a SIGCHLD's handler has run */
    }
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "launch") == 0)
        return launch(argv[0], argc - 2, argv + 2);
    if (argc == 2 && strcmp(argv[1], "init") == 0)
        return init();
    return usage();
}
