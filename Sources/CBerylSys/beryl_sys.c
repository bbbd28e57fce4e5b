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

int beryl_accept_nonblocking(int listener) {
    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int beryl_peer_hung_up(int fd) {
    struct pollfd poller = { .fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0 };
    if (poll(&poller, 1, 0) < 0) return 1;
    return (poller.revents & (POLLHUP | POLLRDHUP)) != 0;
}
