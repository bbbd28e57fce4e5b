#include "beryl_event.h"
#include <event2/event.h>

_Static_assert(BERYL_EV_TIMEOUT == EV_TIMEOUT && BERYL_EV_READ == EV_READ && BERYL_EV_WRITE == EV_WRITE &&
               BERYL_EV_SIGNAL == EV_SIGNAL && BERYL_EV_PERSIST == EV_PERSIST, "libevent flag values");

struct event_base *beryl_event_base_new(int precise_timers) {
    /* Precise timers (timerfd on Linux) serve the simulator, whose link layer keeps sub-millisecond deadlines; epoll
     * rounds a timeout up to a whole millisecond. They cost a timerfd_settime system call on every pass of the loop
     * while any timer is pending (libevent's epoll backend sets it each time), so the daemons, whose deadlines are
     * milliseconds to seconds, do without. */
    if (!precise_timers) return event_base_new();
    struct event_config *config = event_config_new();
    if (!config) return event_base_new();
    event_config_set_flag(config, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *base = event_base_new_with_config(config);
    event_config_free(config);
    return base ? base : event_base_new();
}
void beryl_event_base_free(struct event_base *base) { event_base_free(base); }
int beryl_event_base_dispatch(struct event_base *base) { return event_base_dispatch(base) < 0 ? -1 : 0; }
int beryl_event_base_run_once(struct event_base *base, int wait) {
    return event_base_loop(base, wait ? EVLOOP_ONCE : EVLOOP_NONBLOCK);
}
int beryl_event_base_loopbreak(struct event_base *base) { return event_base_loopbreak(base); }

struct event *beryl_event_new(struct event_base *base, int fd, short what, beryl_event_callback callback, void *context) {
    return event_new(base, fd, what, callback, context);
}

int beryl_event_add(struct event *event, long long timeout_usec) {
    if (timeout_usec < 0) return event_add(event, NULL);
    struct timeval tv = { .tv_sec = timeout_usec / 1000000, .tv_usec = timeout_usec % 1000000 };
    return event_add(event, &tv);
}

void beryl_event_activate(struct event *event) { event_active(event, EV_TIMEOUT, 1); }

void beryl_event_free(struct event *event) {
    event_del(event);
    event_free(event);
}
