#ifndef BERYL_EVENT_H
#define BERYL_EVENT_H
/* A narrow face of libevent for Swift: libevent's own headers collide with Glibc's module map. */

struct event_base;
struct event;

typedef void (*beryl_event_callback)(int fd, short what, void *context);

enum {
    BERYL_EV_TIMEOUT = 0x01,
    BERYL_EV_READ = 0x02,
    BERYL_EV_WRITE = 0x04,
    BERYL_EV_SIGNAL = 0x08,
    BERYL_EV_PERSIST = 0x10,
};

/* precise_timers: sub-millisecond timers through timerfd, at a system call per loop pass. */
struct event_base *beryl_event_base_new(int precise_timers);
void beryl_event_base_free(struct event_base *base);
/* Returns 0 when stopped or out of events, -1 on error. */
int beryl_event_base_dispatch(struct event_base *base);
/* Runs ready callbacks once; waits for the first event when wait is nonzero. */
int beryl_event_base_run_once(struct event_base *base, int wait);
int beryl_event_base_loopbreak(struct event_base *base);

struct event *beryl_event_new(struct event_base *base, int fd, short what, beryl_event_callback callback, void *context);
/* timeout_usec < 0 means no timeout. */
int beryl_event_add(struct event *event, long long timeout_usec);
/* Queues the event's callback behind the callbacks already queued in this loop iteration (it need not be added). */
void beryl_event_activate(struct event *event);
void beryl_event_free(struct event *event);

#endif
