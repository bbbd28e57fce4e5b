/* One manager's session with managerd: a SOCK_SEQPACKET socket carrying one Envelope per datagram, requests matched
 * to their one response by id, events in arrival order, Hello again after managerd comes back, and AppIdle after the
 * callbacks of each background wake's event (docs/ipc.md, docs/apps.md). */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct pending {
    struct pending *next;
    uint64_t id;
    beryl_answer_fn answer;
    void *context;
} pending;

typedef struct outgoing {
    struct outgoing *next;
    size_t length;
    uint8_t bytes[];
} outgoing;

/* How many datagrams wait for the socket before a request is refused (managerd drops a peer at 4096 unread). */
#define OUTGOING_CAP 1024

struct beryl_session {
    struct event_base *base;
    struct event *readable;
    struct event *writable;
    struct event *retry;
    /* A send that failed inside an app's call: the session ends from the loop, never under the caller's feet. */
    struct event *broken;
    int fd;
    char *path;
    char *app_id;
    char *restore_identifier;
    Beryl__Ipc__V1__ManagerRole role;
    beryl_session_hooks hooks;
    void (*destroy_owner)(void *owner);
    void *owner;
    beryl_manager_state state;
    uint64_t next_id;
    pending *pending;
    outgoing *queue_head, *queue_tail;
    size_t queued;
    /* Reconnection: the next delay, whether a Hello was ever answered, whether this connection's was. */
    int backoff_ms;
    bool welcomed_before;
    bool welcomed;
    bool failed_send;
    /* Counts connections, so that code after a callback can tell the session it started on has ended. */
    uint64_t generation;
    int depth;
    bool doomed;
    Beryl__Ipc__V1__ErrorCode last_error_code;
    uint8_t buffer[BERYL_DATAGRAM_CAP + 1];
};

static void schedule_connect(beryl_session *session, int delay_ms);
static void session_lost(beryl_session *session, const char *dropped_because);

static void set_state(beryl_session *session, beryl_manager_state state) {
    if (session->state == state) return;
    session->state = state;
    if (session->hooks.state_changed) session->hooks.state_changed(session->owner);
}

/* CBManagerState from managerd's ControllerState (S/Beryl/Types.swift): an unresponsive controller is off to apps. */
static beryl_manager_state state_from_wire(Beryl__Ipc__V1__ControllerState state) {
    switch (state) {
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_POWERED_ON: return BERYL_STATE_POWERED_ON;
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_POWERED_OFF:
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_UNRESPONSIVE: return BERYL_STATE_POWERED_OFF;
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_RESETTING: return BERYL_STATE_RESETTING;
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_UNSUPPORTED: return BERYL_STATE_UNSUPPORTED;
    case BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_UNAUTHORIZED: return BERYL_STATE_UNAUTHORIZED;
    default: return BERYL_STATE_UNKNOWN;
    }
}

static void enter(beryl_session *session) { session->depth++; }

/* Leaves a callback; true when the owner was freed meanwhile and nothing may touch the session any more. */
static bool leave(beryl_session *session) {
    if (--session->depth > 0) return session->doomed;
    if (!session->doomed) return false;
    session->destroy_owner(session->owner);
    return true;
}

static void fail_pending(beryl_session *session) {
    pending *list = session->pending;
    session->pending = NULL;
    beryl_error error;
    beryl_error_local(&error, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_UNKNOWN, "the session with managerd ended");
    while (list) {
        pending *next = list->next;
        if (list->answer) list->answer(session->owner, list->context, NULL, session->doomed ? NULL : &error);
        free(list);
        list = next;
    }
}

static void drop_queue(beryl_session *session) {
    while (session->queue_head) {
        outgoing *next = session->queue_head->next;
        free(session->queue_head);
        session->queue_head = next;
    }
    session->queue_tail = NULL;
    session->queued = 0;
}

static void close_socket(beryl_session *session) {
    if (session->readable) event_free(session->readable);
    if (session->writable) event_free(session->writable);
    session->readable = session->writable = NULL;
    if (session->fd >= 0) close(session->fd);
    session->fd = -1;
    drop_queue(session);
}

static void flush_queue(beryl_session *session) {
    while (session->queue_head) {
        outgoing *head = session->queue_head;
        ssize_t sent = send(session->fd, head->bytes, head->length, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(session->writable, NULL);
            return;
        }
        session->queue_head = head->next;
        if (!session->queue_head) session->queue_tail = NULL;
        session->queued--;
        free(head);
        if (sent < 0) {
            /* managerd is gone (EPIPE, ECONNRESET). This may be inside an app's call: what is queued is dropped and
             * the session ends on the loop's next turn, with its callbacks. */
            session->failed_send = true;
            drop_queue(session);
            event_active(session->broken, 0, 0);
            return;
        }
    }
}

static void on_broken(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    beryl_session *session = arg;
    enter(session);
    /* Unless the reader saw the end first (and a new connection may be up since). */
    if (session->failed_send) session_lost(session, NULL);
    leave(session);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    beryl_session *session = arg;
    enter(session);
    flush_queue(session);
    leave(session);
}

/* Queues the encoded envelope behind what already waits, so that requests leave in the order they were made. */
static int transmit(beryl_session *session, const Envelope *envelope) {
    if (session->fd < 0 || session->failed_send) return BERYL_E_NOT_POWERED_ON;
    size_t length = beryl__ipc__v1__envelope__get_packed_size(envelope);
    if (length > BERYL_DATAGRAM_CAP) return BERYL_E_TOO_LONG;
    if (session->queued >= OUTGOING_CAP) return BERYL_E_STATE;
    outgoing *message = malloc(sizeof *message + length);
    if (!message) return BERYL_E_NO_MEMORY;
    message->next = NULL;
    message->length = beryl__ipc__v1__envelope__pack(envelope, message->bytes);
    if (session->queue_tail) session->queue_tail->next = message; else session->queue_head = message;
    session->queue_tail = message;
    session->queued++;
    if (session->queue_head == message) flush_queue(session);
    return session->failed_send ? BERYL_E_NOT_POWERED_ON : BERYL_OK;
}

static int send_request(beryl_session *session, ManagerRequest *request, beryl_answer_fn answer, void *context) {
    Beryl__Ipc__V1__Request outer = BERYL__IPC__V1__REQUEST__INIT;
    outer.kind_case = BERYL__IPC__V1__REQUEST__KIND_MANAGER;
    outer.manager = request;
    Envelope envelope = BERYL__IPC__V1__ENVELOPE__INIT;
    envelope.request_id = session->next_id;
    envelope.body_case = BERYL__IPC__V1__ENVELOPE__BODY_REQUEST;
    envelope.request = &outer;
    pending *waiting = calloc(1, sizeof *waiting);
    if (!waiting) return BERYL_E_NO_MEMORY;
    int status = transmit(session, &envelope);
    if (status != BERYL_OK) {
        free(waiting);
        return status;
    }
    waiting->id = session->next_id++;
    waiting->answer = answer;
    waiting->context = context;
    /* Appended: answers mostly come in request order, so the search is short. */
    pending **tail = &session->pending;
    while (*tail) tail = &(*tail)->next;
    *tail = waiting;
    return BERYL_OK;
}

int beryl_session_send(beryl_session *session, ManagerRequest *request, beryl_answer_fn answer, void *context) {
    if (session->fd < 0 || !session->welcomed || session->failed_send) return BERYL_E_NOT_POWERED_ON;
    return send_request(session, request, answer, context);
}

static void send_app_idle(beryl_session *session, uint64_t wake) {
    if (wake == 0 || session->fd < 0) return;
    Beryl__Ipc__V1__AppIdle idle = BERYL__IPC__V1__APP_IDLE__INIT;
    idle.wake = wake;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_APP_IDLE;
    request.app_idle = &idle;
    /* Without it managerd ends the app at its wake budget; a full queue is the one thing that can stop it. */
    (void)send_request(session, &request, NULL, NULL);
}

static void hello_answered(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    (void)owner;
    beryl_session *session = context;
    (void)error;
    if (!response) return;  /* failed with the session, which says so itself */
    if (response->kind_case != BERYL__IPC__V1__MANAGER_RESPONSE__KIND_WELCOME) {
        session_lost(session, "managerd answered Hello with something other than a Welcome");
        return;
    }
    const Welcome *welcome = response->welcome;
    bool again = session->welcomed_before;
    uint64_t generation = session->generation;
    session->welcomed_before = true;
    session->welcomed = true;
    session->backoff_ms = 0;
    if (session->hooks.welcomed) session->hooks.welcomed(session->owner, welcome, again);
    /* The callback may have freed the manager, or a failed send ended this connection: its state is not news. */
    if (session->doomed || session->generation != generation || session->fd < 0 || session->failed_send) return;
    set_state(session, state_from_wire(welcome->state));
    if (session->doomed || session->generation != generation) return;
    send_app_idle(session, welcome->wake);
}

/* A refused Hello (S/Beryl/Channel.swift): a manifest for another user is unauthorized, a Hello managerd cannot take
 * unsupported, both for good; a restore identifier still held by an ending instance of the app (BUSY) is tried
 * again after the backoff. What was asked meanwhile fails. */
static void hello_refused(beryl_session *session, const WireError *error) {
    if (error->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_BUSY) {
        session_lost(session, NULL);
        return;
    }
    close_socket(session);
    fail_pending(session);
    if (session->doomed) return;
    set_state(session, error->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED
                           ? BERYL_STATE_UNAUTHORIZED : BERYL_STATE_UNSUPPORTED);
}

static void say_hello(beryl_session *session) {
    Beryl__Ipc__V1__Hello hello = BERYL__IPC__V1__HELLO__INIT;
    hello.app_id = session->app_id ? session->app_id : (char *)"";
    hello.restore_identifier = session->restore_identifier ? session->restore_identifier : (char *)"";
    hello.role = session->role;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_HELLO;
    request.hello = &hello;
    if (send_request(session, &request, hello_answered, session) != BERYL_OK) session_lost(session, NULL);
}

static void dispatch_response(beryl_session *session, const Envelope *envelope) {
    pending **link = &session->pending;
    while (*link && (*link)->id != envelope->request_id) link = &(*link)->next;
    if (!*link) return;  /* an answer to nothing this session asked: ignored, as the Swift library does */
    pending *waiting = *link;
    *link = waiting->next;
    const Beryl__Ipc__V1__Response *response = envelope->response;
    if (response->kind_case == BERYL__IPC__V1__RESPONSE__KIND_ERROR) {
        if (waiting->answer == hello_answered) {
            hello_refused(session, response->error);
        } else if (waiting->answer) {
            session->last_error_code = response->error->code;
            beryl_error error;
            beryl_error_from_wire(response->error, &error);
            waiting->answer(session->owner, waiting->context, NULL, &error);
        }
    } else if (waiting->answer) {
        static const ManagerResponse empty = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        const ManagerResponse *answer =
            response->kind_case == BERYL__IPC__V1__RESPONSE__KIND_MANAGER ? response->manager : &empty;
        waiting->answer(session->owner, waiting->context, answer, NULL);
    }
    free(waiting);
}

static void dispatch_event(beryl_session *session, const ManagerEvent *event) {
    if (event->kind_case == BERYL__IPC__V1__MANAGER_EVENT__KIND_STATE_CHANGED) {
        set_state(session, state_from_wire(event->state_changed));
    } else if (session->hooks.event) {
        session->hooks.event(session->owner, event);
    }
    if (!session->doomed) send_app_idle(session, event->wake);
}

/* One datagram. What is not an Envelope carrying a response or a manager event ends the session: the other side is
 * not a managerd this library understands, and reconnecting starts clean. */
static void receive(beryl_session *session, const uint8_t *datagram, size_t length) {
    Envelope *envelope = beryl__ipc__v1__envelope__unpack(NULL, length, datagram);
    if (!envelope) {
        session_lost(session, "a datagram from managerd did not decode as an Envelope");
        return;
    }
    if (envelope->body_case == BERYL__IPC__V1__ENVELOPE__BODY_RESPONSE) {
        /* Request id 0: managerd's report of a datagram it could not read (docs/ipc.md); the session goes on. */
        if (envelope->request_id != 0) dispatch_response(session, envelope);
    } else if (envelope->body_case == BERYL__IPC__V1__ENVELOPE__BODY_EVENT) {
        /* Another daemon's events are not for a manager; ignored, as the Swift library does. */
        if (envelope->event->kind_case == BERYL__IPC__V1__EVENT__KIND_MANAGER) dispatch_event(session, envelope->event->manager);
    } else {
        session_lost(session, "managerd sent an envelope with neither an answer nor an event");
    }
    beryl__ipc__v1__envelope__free_unpacked(envelope, NULL);
}

void beryl_session_receive(beryl_session *session, const uint8_t *datagram, size_t length) {
    enter(session);
    receive(session, datagram, length);
    leave(session);
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    beryl_session *session = arg;
    enter(session);
    while (!session->doomed && session->fd == fd) {
        ssize_t length = recv(fd, session->buffer, sizeof session->buffer, MSG_DONTWAIT | MSG_TRUNC);
        if (length < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) session_lost(session, NULL);
            break;
        }
        if (length == 0) {
            session_lost(session, NULL);
            break;
        }
        if ((size_t)length > BERYL_DATAGRAM_CAP) {
            session_lost(session, "a datagram from managerd was longer than the IPC's 64 KiB cap");
            break;
        }
        receive(session, session->buffer, (size_t)length);
    }
    leave(session);
}

/* The session is gone: fail what waits, say resetting, and come back (50 ms doubling to 1 s, as the Swift library). */
static void session_lost(beryl_session *session, const char *dropped_because) {
    if (session->fd < 0) return;
    close_socket(session);
    session->welcomed = false;
    session->failed_send = false;
    if (dropped_because && session->hooks.dropped) session->hooks.dropped(session->owner, dropped_because);
    if (session->doomed) return;
    fail_pending(session);
    if (session->doomed) return;
    if (session->welcomed_before) set_state(session, BERYL_STATE_RESETTING);
    if (session->doomed) return;
    if (session->hooks.lost) session->hooks.lost(session->owner);
    if (session->doomed) return;
    int delay = session->backoff_ms;
    session->backoff_ms = delay * 2 < 50 ? 50 : (delay * 2 > 1000 ? 1000 : delay * 2);
    schedule_connect(session, delay);
}

static void try_connect(evutil_socket_t unused, short what, void *arg) {
    (void)unused;
    (void)what;
    beryl_session *session = arg;
    enter(session);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, session->path, sizeof address.sun_path - 1);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&address, sizeof address) == 0) {
        session->fd = fd;
        session->generation++;
        session->readable = event_new(session->base, fd, EV_READ | EV_PERSIST, on_readable, session);
        session->writable = event_new(session->base, fd, EV_WRITE, on_writable, session);
        event_add(session->readable, NULL);
        say_hello(session);
    } else {
        int why = errno;
        if (fd >= 0) close(fd);
        /* A stack that is not there is a state (S/Beryl/ManagerSession.swift): off, or unauthorized. */
        set_state(session, why == EACCES || why == EPERM ? BERYL_STATE_UNAUTHORIZED : BERYL_STATE_POWERED_OFF);
        if (!session->doomed) {
            int delay = session->backoff_ms < 100 ? 100 : session->backoff_ms;
            session->backoff_ms = delay * 2 > 1000 ? 1000 : delay * 2;
            schedule_connect(session, delay);
        }
    }
    leave(session);
}

void beryl_session_attach(beryl_session *session, int fd) {
    evtimer_del(session->retry);
    close_socket(session);
    session->fd = fd;
    session->generation++;
    session->readable = event_new(session->base, fd, EV_READ | EV_PERSIST, on_readable, session);
    session->writable = event_new(session->base, fd, EV_WRITE, on_writable, session);
    say_hello(session);
}

static void schedule_connect(beryl_session *session, int delay_ms) {
    struct timeval delay = {.tv_sec = delay_ms / 1000, .tv_usec = (delay_ms % 1000) * 1000};
    evtimer_add(session->retry, &delay);
}

static char *default_socket_path(void) {
    const char *runtime = getenv("BERYL_RUNTIME_DIR");
    if (!runtime || !*runtime) runtime = "/run/beryl";
    size_t length = strlen(runtime) + sizeof "/managerd.sock";
    char *path = malloc(length);
    if (path) snprintf(path, length, "%s/managerd.sock", runtime);
    return path;
}

int beryl_session_create(beryl_session **out, struct event_base *base, const beryl_manager_options *options,
                         Beryl__Ipc__V1__ManagerRole role, const beryl_session_hooks *hooks, void *owner) {
    beryl_session *session = calloc(1, sizeof *session);
    if (!session) return BERYL_E_NO_MEMORY;
    session->fd = -1;
    session->base = base;
    session->role = role;
    session->hooks = *hooks;
    session->owner = owner;
    session->next_id = 1;
    const char *app_id = options && options->app_id ? options->app_id : getenv("BERYL_APP_ID");
    session->path = options && options->socket_path ? beryl_strdup(options->socket_path) : default_socket_path();
    session->app_id = app_id ? beryl_strdup(app_id) : NULL;
    session->restore_identifier =
        options && options->restore_identifier ? beryl_strdup(options->restore_identifier) : NULL;
    session->retry = evtimer_new(base, try_connect, session);
    session->broken = event_new(base, -1, 0, on_broken, session);
    if (!session->path || (app_id && !session->app_id) || !session->retry || !session->broken ||
        (options && options->restore_identifier && !session->restore_identifier)) {
        beryl_session_free(session);
        return BERYL_E_NO_MEMORY;
    }
    if (strlen(session->path) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        beryl_session_free(session);
        return BERYL_E_TOO_LONG;
    }
    /* Connected from the loop, so that the first state reaches the app as a callback, never during create. */
    schedule_connect(session, 0);
    *out = session;
    return BERYL_OK;
}

void beryl_session_set_destroy(beryl_session *session, void (*destroy_owner)(void *owner)) {
    session->destroy_owner = destroy_owner;
}

bool beryl_session_defer_free(beryl_session *session) {
    if (session->depth == 0) return false;
    session->doomed = true;
    return true;
}

void beryl_session_free(beryl_session *session) {
    if (!session) return;
    session->doomed = true;
    close_socket(session);
    fail_pending(session);
    if (session->retry) event_free(session->retry);
    if (session->broken) event_free(session->broken);
    free(session->path);
    free(session->app_id);
    free(session->restore_identifier);
    free(session);
}

beryl_manager_state beryl_session_state(const beryl_session *session) { return session->state; }

Beryl__Ipc__V1__ErrorCode beryl_session_error_code(const beryl_session *session) { return session->last_error_code; }

const char *beryl_session_app_id(const beryl_session *session) { return session->app_id; }

int beryl_session_invalidate(beryl_session *session) {
    Beryl__Ipc__V1__Invalidate invalidate = BERYL__IPC__V1__INVALIDATE__INIT;
    invalidate.manager = BERYL_MANAGER_ID;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_INVALIDATE;
    request.invalidate = &invalidate;
    return beryl_session_send(session, &request, NULL, NULL);
}

int beryl_session_set_app_state(beryl_session *session, beryl_app_state state) {
    if (state != BERYL_APP_FOREGROUND && state != BERYL_APP_BACKGROUND) return BERYL_E_INVALID_ARGUMENT;
    if (!session->app_id) return BERYL_E_STATE;  /* background rules are for apps with a manifest */
    Beryl__Ipc__V1__SetAppState report = BERYL__IPC__V1__SET_APP_STATE__INIT;
    report.app_id = session->app_id;
    report.state = state == BERYL_APP_FOREGROUND ? BERYL__IPC__V1__APP_LIFECYCLE__APP_LIFECYCLE_FOREGROUND
                                                 : BERYL__IPC__V1__APP_LIFECYCLE__APP_LIFECYCLE_BACKGROUND;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_SET_APP_STATE;
    request.set_app_state = &report;
    return beryl_session_send(session, &request, NULL, NULL);
}
