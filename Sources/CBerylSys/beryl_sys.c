#define _GNU_SOURCE
#include "beryl_sys.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sched.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/syscall.h>

int beryl_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

pid_t beryl_spawn(const char *const argv[], const char *const envp[], int new_session, const char *log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (log_path) {
        posix_spawn_file_actions_addopen(&actions, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0640);
        posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    /* Nothing but stdio crosses: a leaked pipe would keep a caller waiting for EOF, a leaked socket would keep it alive. */
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    /* The child must not inherit the parent's blocked or ignored signals (libevent, SIGPIPE). */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (new_session) flags |= POSIX_SPAWN_SETSID;
    posix_spawnattr_setflags(&attr, flags);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &actions, &attr, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return rc == 0 ? pid : -rc;
}

/* In a child before exec: stdin from /dev/null, stdout and stderr to the log (when given), no other descriptor, and
 * no blocked or ignored signal inherited (libevent's, SIGPIPE). */
/* In a child after fork: no descriptor above stderr, default signal dispositions, none blocked (the parent's threads
 * may block or ignore some, and exec keeps both). */
static void drop_inheritance(void) {
    close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int number = 1; number < NSIG; number++) signal(number, SIG_DFL);
}

static void prepare_child(int log_fd) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) { dup2(null_fd, 0); }
    if (log_fd >= 0) { dup2(log_fd, 1); dup2(log_fd, 2); }
    drop_inheritance();
}

/* -errno of a failed fork, after closing the log the child would have had. */
static pid_t fork_failed(int log_fd) {
    int error = errno;
    if (log_fd >= 0) close(log_fd);
    return -error;
}

/* The child's last step: the program, or exit status 127 with the reason in its log. */
static void exec_or_exit(const char *const argv[], const char *const envp[]) {
    execve(argv[0], (char *const *)argv, (char *const *)envp);
    dprintf(2, "beryl: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

pid_t beryl_spawn_bound(const char *const argv[], const char *const envp[], const char *log_path) {
    int log_fd = -1;
    if (log_path) {
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (log_fd < 0) return -errno;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return fork_failed(log_fd);
    if (pid == 0) {
        /* SIGTERM when the forking thread's process dies; if it died before this line, the child is an orphan now. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(1);
        prepare_child(log_fd);
        exec_or_exit(argv, envp);
    }
    if (log_fd >= 0) close(log_fd);
    return pid;
}

pid_t beryl_spawn_as(const char *const argv[], const char *const envp[], const char *log_path, uid_t uid, gid_t gid,
                     const char *user) {
    int log_fd = -1;
    if (log_path) {
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (log_fd < 0) return -errno;
        if (fchown(log_fd, uid, gid) != 0 && getuid() == 0) { /* best effort: the app may read its own log */ }
    }
    /* The user's supplementary groups come along: membership of the sockets' group is how an app reaches managerd.
     * Looked up before fork, as the child of a threaded process may only make async-signal-safe calls. */
    gid_t groups[256];
    int group_count = 0;
    if (user) {
        group_count = (int)(sizeof(groups) / sizeof(groups[0]));
        if (getgrouplist(user, gid, groups, &group_count) < 0) group_count = (int)(sizeof(groups) / sizeof(groups[0]));
    }
    pid_t pid = fork();
    if (pid < 0) return fork_failed(log_fd);
    if (pid == 0) {
        setsid();
        prepare_child(log_fd);
        /* managerd may hold ambient capabilities to launch apps as other users (its unit gives CAP_SETUID and more);
         * a change between two non-zero uids keeps them, and exec would hand them to the app: none may pass. */
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
            dprintf(2, "beryl: cannot clear ambient capabilities: %s\n", strerror(errno));
            _exit(126);
        }
        if (gid != getgid() || uid != getuid()) {
            /* Groups first: after setuid there is no privilege left to change them. */
            if (setgroups((size_t)group_count, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
                dprintf(2, "beryl: cannot become uid %u gid %u: %s\n", (unsigned)uid, (unsigned)gid, strerror(errno));
                _exit(126);
            }
        }
        exec_or_exit(argv, envp);
    }
    if (log_fd >= 0) close(log_fd);
    return pid;
}

pid_t beryl_reap(pid_t pid, int *exit_code, int *signal_number) {
    int status = 0;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got < 0) return -errno;
    *exit_code = -1;
    *signal_number = 0;
    if (got > 0) {
        if (WIFEXITED(status)) *exit_code = WEXITSTATUS(status);
        else if (WIFSIGNALED(status)) *signal_number = WTERMSIG(status);
    }
    return got;
}

void beryl_ignore_sigpipe(void) {
    signal(SIGPIPE, SIG_IGN);
}

int beryl_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) return -errno;
    // pidfd_open sets O_CLOEXEC on the descriptor itself (pidfd_open(2)); apps managerd spawns inherit none of them.
    return (int)fd;
#else
    (void)pid;
    return -ENOSYS;
#endif
}

int beryl_accept_nonblocking(int listener) {
    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int beryl_peer_hung_up(int fd) {
    struct pollfd poller = { .fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0 };
    if (poll(&poller, 1, 0) < 0) return 1;
    return (poller.revents & (POLLHUP | POLLRDHUP)) != 0;
}

void beryl_line_buffer_stdout(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
}

pid_t beryl_spawn_on_socket(const char *const argv[], int fd) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(1);
        if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0) _exit(126);
        drop_inheritance();
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int beryl_process_cpus(pid_t pid, int *cpus, int capacity) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(pid, sizeof set, &set) != 0) return -errno;
    int count = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && count < capacity; cpu++)
        if (CPU_ISSET(cpu, &set)) cpus[count++] = cpu;
    return count;
}

int beryl_set_process_cpus(pid_t pid, const int *cpus, int count) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < count; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) return -EINVAL;
        CPU_SET(cpus[i], &set);
    }
    /* The affinity is a thread's: each of the process's threads is set (/proc/PID/task). */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    if (!tasks) return -errno;
    int result = 0;
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        pid_t tid = (pid_t)atoi(entry->d_name);
        if (sched_setaffinity(tid, sizeof set, &set) != 0 && result == 0 && errno != ESRCH) result = -errno;
    }
    closedir(tasks);
    return result;
}

int beryl_seqpacket_pair(int fds[2]) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) return -errno;
    return 0;
}

long beryl_send_with_descriptor(int fd, const void *bytes, unsigned long length, int passed) {
    struct iovec part = { .iov_base = (void *)bytes, .iov_len = length };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof(control));
    struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof(control.space) };
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &passed, sizeof(int));
    ssize_t sent;
    do { sent = sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT); } while (sent < 0 && errno == EINTR);
    return sent < 0 ? -errno : (long)sent;
}

long beryl_receive_with_descriptor(int fd, void *bytes, unsigned long capacity, int *passed) {
    *passed = -1;
    struct iovec part = { .iov_base = bytes, .iov_len = capacity };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int) * 8)]; } control;
    struct msghdr message = { .msg_iov = &part, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof(control.space) };
    ssize_t length;
    do { length = recvmsg(fd, &message, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC); } while (length < 0 && errno == EINTR);
    if (length < 0) return -errno;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t index = 0; index < count; index++) {
            int descriptor;
            memcpy(&descriptor, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
            if (*passed < 0) *passed = descriptor; else close(descriptor);
        }
    }
    return (long)length;
}
