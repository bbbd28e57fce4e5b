#define _GNU_SOURCE
#include "fake_managerd.h"

#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

void pump(struct event_base *base, int ms) {
    for (int i = 0; i < ms; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    event_base_loop(base, EVLOOP_NONBLOCK);
}

void fake_start(fake_managerd *fake, bool listen) {
    memset(fake, 0, sizeof *fake);
    strcpy(fake->directory, "/tmp/beryl-c-unit-XXXXXX");
    if (!mkdtemp(fake->directory)) abort();
    snprintf(fake->path, sizeof fake->path, "%s/managerd.sock", fake->directory);
    fake->listener = fake->peer = -1;
    if (listen) fake_listen(fake);
}

void fake_listen(fake_managerd *fake) {
    fake->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strcpy(address.sun_path, fake->path);
    if (bind(fake->listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(fake->listener, 8) != 0) abort();
}

bool fake_accept(fake_managerd *fake, struct event_base *base) {
    for (int i = 0; i < 2000; i++) {
        struct pollfd ready = {.fd = fake->listener, .events = POLLIN};
        if (poll(&ready, 1, 0) == 1) {
            if (fake->peer >= 0) close(fake->peer);
            fake->peer = accept4(fake->listener, NULL, NULL, SOCK_CLOEXEC);
            return fake->peer >= 0;
        }
        pump(base, 1);
    }
    return false;
}

Beryl__Ipc__V1__Envelope *fake_next(fake_managerd *fake, struct event_base *base) {
    static uint8_t buffer[70000];
    for (int i = 0; i < 2000; i++) {
        struct pollfd ready = {.fd = fake->peer, .events = POLLIN};
        if (poll(&ready, 1, 0) == 1) {
            ssize_t length = recv(fake->peer, buffer, sizeof buffer, 0);
            if (length <= 0) return NULL;
            return beryl__ipc__v1__envelope__unpack(NULL, (size_t)length, buffer);
        }
        pump(base, 1);
    }
    return NULL;
}

bool fake_quiet(fake_managerd *fake, struct event_base *base) {
    pump(base, 100);
    struct pollfd ready = {.fd = fake->peer, .events = POLLIN};
    return poll(&ready, 1, 0) == 0;
}

void fake_free_envelope(Beryl__Ipc__V1__Envelope *envelope) {
    if (envelope) beryl__ipc__v1__envelope__free_unpacked(envelope, NULL);
}

static size_t pack(Beryl__Ipc__V1__Envelope *envelope, uint8_t **out) {
    size_t length = beryl__ipc__v1__envelope__get_packed_size(envelope);
    *out = malloc(length + 1);
    return beryl__ipc__v1__envelope__pack(envelope, *out);
}

static size_t pack_response(uint64_t id, Beryl__Ipc__V1__Response *response, uint8_t **out) {
    Beryl__Ipc__V1__Envelope envelope = BERYL__IPC__V1__ENVELOPE__INIT;
    envelope.request_id = id;
    envelope.body_case = BERYL__IPC__V1__ENVELOPE__BODY_RESPONSE;
    envelope.response = response;
    return pack(&envelope, out);
}

size_t fake_pack_answer(uint64_t id, Beryl__Ipc__V1__ManagerResponse *manager, uint8_t **out) {
    Beryl__Ipc__V1__Ack ack = BERYL__IPC__V1__ACK__INIT;
    Beryl__Ipc__V1__Response response = BERYL__IPC__V1__RESPONSE__INIT;
    if (manager) {
        response.kind_case = BERYL__IPC__V1__RESPONSE__KIND_MANAGER;
        response.manager = manager;
    } else {
        response.kind_case = BERYL__IPC__V1__RESPONSE__KIND_ACK;
        response.ack = &ack;
    }
    return pack_response(id, &response, out);
}

size_t fake_pack_event(Beryl__Ipc__V1__ManagerEvent *manager, uint8_t **out) {
    Beryl__Ipc__V1__Event event = BERYL__IPC__V1__EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__EVENT__KIND_MANAGER;
    event.manager = manager;
    Beryl__Ipc__V1__Envelope envelope = BERYL__IPC__V1__ENVELOPE__INIT;
    envelope.body_case = BERYL__IPC__V1__ENVELOPE__BODY_EVENT;
    envelope.event = &event;
    return pack(&envelope, out);
}

static void send_packed(fake_managerd *fake, uint8_t *bytes, size_t length) {
    fake_send_raw(fake, bytes, length);
    free(bytes);
}

void fake_respond(fake_managerd *fake, uint64_t id, Beryl__Ipc__V1__ManagerResponse *manager) {
    uint8_t *bytes;
    size_t length = fake_pack_answer(id, manager, &bytes);
    send_packed(fake, bytes, length);
}

void fake_respond_ack(fake_managerd *fake, uint64_t id) { fake_respond(fake, id, NULL); }

void fake_respond_error(fake_managerd *fake, uint64_t id, Beryl__Ipc__V1__Error *error) {
    Beryl__Ipc__V1__Response response = BERYL__IPC__V1__RESPONSE__INIT;
    response.kind_case = BERYL__IPC__V1__RESPONSE__KIND_ERROR;
    response.error = error;
    uint8_t *bytes;
    size_t length = pack_response(id, &response, &bytes);
    send_packed(fake, bytes, length);
}

void fake_event(fake_managerd *fake, Beryl__Ipc__V1__ManagerEvent *manager) {
    uint8_t *bytes;
    size_t length = fake_pack_event(manager, &bytes);
    send_packed(fake, bytes, length);
}

void fake_send_raw(fake_managerd *fake, const void *bytes, size_t length) {
    if (send(fake->peer, bytes, length, MSG_NOSIGNAL) != (ssize_t)length) perror("fake_send_raw");
}

Beryl__Ipc__V1__Envelope *fake_welcome(fake_managerd *fake, struct event_base *base, Beryl__Ipc__V1__ControllerState state,
                                       Beryl__Ipc__V1__PreservedState *restored, uint64_t wake) {
    Beryl__Ipc__V1__Envelope *hello = fake_next(fake, base);
    if (!hello) return NULL;
    Beryl__Ipc__V1__Welcome welcome = BERYL__IPC__V1__WELCOME__INIT;
    welcome.session_id = 7;
    welcome.state = state;
    welcome.restored = restored;
    welcome.was_restored = restored != NULL;
    welcome.wake = wake;
    Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
    response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_WELCOME;
    response.welcome = &welcome;
    fake_respond(fake, hello->request_id, &response);
    return hello;
}

void fake_hang_up(fake_managerd *fake) {
    if (fake->peer >= 0) close(fake->peer);
    fake->peer = -1;
}

void fake_stop(fake_managerd *fake) {
    fake_hang_up(fake);
    if (fake->listener >= 0) close(fake->listener);
    unlink(fake->path);
    rmdir(fake->directory);
}
