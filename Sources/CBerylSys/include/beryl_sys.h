#ifndef BERYL_SYS_H
#define BERYL_SYS_H
#include <sys/types.h>

/// SO_PEERCRED of a connected UNIX socket; returns 0 or -errno.
int beryl_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// Spawns argv[0] (a path) with argv/envp, optionally in a new session, with stdin from /dev/null
/// and stdout/stderr appended to log_path (or inherited when NULL). Returns the pid or -errno.
pid_t beryl_spawn(const char *const argv[], const char *const envp[], int new_session, const char *log_path);

/// Like beryl_spawn in the caller's session, but the child is sent SIGTERM when the caller dies (PR_SET_PDEATHSIG):
/// how the supervisor starts its daemons, so that none outlives a supervisor killed outright.
pid_t beryl_spawn_bound(const char *const argv[], const char *const envp[], const char *log_path);

/// Like beryl_spawn in a new session, but the child drops to uid/gid before exec, when they differ from the caller's,
/// with `user`'s supplementary groups (none when `user` is NULL): how managerd launches an app as its manifest's user.
/// The log file is opened before the switch. Returns the pid or -errno (an exec failure shows as exit status 127).
pid_t beryl_spawn_as(const char *const argv[], const char *const envp[], const char *log_path, uid_t uid, gid_t gid,
                     const char *user);

/// waitpid(WNOHANG) decoded: returns the pid (0 if none, -errno on error); *exit_code or *signal set.
pid_t beryl_reap(pid_t pid, int *exit_code, int *signal_number);

/// pidfd_open(2) with PIDFD_NONBLOCK unset and close-on-exec: a descriptor that turns readable when `pid` ends, whether
/// or not it is the caller's child. Returns the fd or -errno (-ENOSYS before Linux 5.3).
int beryl_pidfd_open(pid_t pid);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC; returns the fd or -errno.
int beryl_accept_nonblocking(int listener);

/// Whether the peer of a stream or SEQPACKET socket has hung up (POLLHUP or POLLRDHUP), without blocking.
int beryl_peer_hung_up(int fd);

/// Ignores SIGPIPE: every socket write checks for EPIPE itself (SIG_IGN is a macro Swift cannot import).
void beryl_ignore_sigpipe(void);

/// Line-buffers stdout, so that output redirected to a log file appears a line at a time.
void beryl_line_buffer_stdout(void);

/// Spawns argv[0] (a path) with `fd` as its stdin and stdout and no other descriptor, default signals, bound to the
/// caller as beryl_spawn_bound: how a benchmark starts a bare echo peer (cat on a SEQPACKET socket returns each datagram
/// as it came). Returns the pid or -errno.
pid_t beryl_spawn_on_socket(const char *const argv[], int fd);

/// The CPUs `pid`'s (main thread's) affinity allows, ascending, at most `capacity`; returns their count or -errno.
int beryl_process_cpus(pid_t pid, int *cpus, int capacity);

/// Every thread of `pid` may run on `cpus` only. Returns 0 or -errno (the first failure).
int beryl_set_process_cpus(pid_t pid, const int *cpus, int count);

/// socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC), both ends non-blocking: a data channel (attd keeps fds[0]
/// and passes fds[1] on). Returns 0 or -errno.
int beryl_seqpacket_pair(int fds[2]);

/// Sends one datagram (MSG_NOSIGNAL | MSG_DONTWAIT) with `passed` attached as SCM_RIGHTS. Returns the bytes sent or
/// -errno; the caller still owns `passed` (the receiver gets its own copy).
long beryl_send_with_descriptor(int fd, const void *bytes, unsigned long length, int passed);

/// Receives one datagram (MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC) of at most `capacity` bytes, and the one
/// descriptor passed with it as SCM_RIGHTS into *passed (-1 when none; any beyond the first are closed, so that a
/// peer cannot fill this process's descriptor table). Returns the datagram's true length (as recv with MSG_TRUNC) or -errno.
long beryl_receive_with_descriptor(int fd, void *bytes, unsigned long capacity, int *passed);

#endif
