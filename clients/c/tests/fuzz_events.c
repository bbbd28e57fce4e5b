/* libFuzzer target for the library's decoder and everything managerd's datagrams drive. An input is a role byte
 * (even: a central manager, odd: a peripheral manager) and datagrams, each with a 2-byte little-endian length, fed to
 * a manager whose session is one end of a socketpair: its Hello is request 1, and the callbacks below make requests
 * 2, 3, ... as an app would (scan, connect, discover, read, subscribe; publish, advertise, answer, update), so that
 * answers to them reach the code they drive. Whatever arrives, the library must not crash, leak or read out of
 * bounds. Seeds: tests/fuzz-corpus (written by beryl-unit-tests --write-seeds). */
#define _GNU_SOURCE
#include "internal.h"

#include <event2/event.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void central_state(beryl_central *central, void *user) {
    if (beryl_central_state(central) == BERYL_STATE_POWERED_ON) beryl_central_scan(central, NULL, 0, true);
}

static void services(beryl_peripheral *peripheral, const beryl_error *error, void *user) {
    for (size_t i = 0; i < beryl_peripheral_service_count(peripheral); i++)
        beryl_peripheral_discover_characteristics(peripheral, beryl_peripheral_service_at(peripheral, i), NULL, 0);
}

static void characteristics(beryl_peripheral *peripheral, beryl_service *service, const beryl_error *error, void *user) {
    static const uint8_t one = 1;
    for (size_t i = 0; i < beryl_service_characteristic_count(service); i++) {
        beryl_characteristic *characteristic = beryl_service_characteristic_at(service, i);
        beryl_peripheral_read_value(peripheral, characteristic);
        beryl_peripheral_set_notify(peripheral, characteristic, true);
        beryl_peripheral_write_value(peripheral, characteristic, &one, 1, BERYL_WRITE_WITHOUT_RESPONSE);
        beryl_peripheral_discover_descriptors(peripheral, characteristic);
    }
    beryl_peripheral_discover_included_services(peripheral, service, NULL, 0);
}

static void descriptors(beryl_peripheral *peripheral, beryl_characteristic *characteristic, const beryl_error *error, void *user) {
    for (size_t i = 0; i < beryl_characteristic_descriptor_count(characteristic); i++)
        beryl_peripheral_read_descriptor(peripheral, beryl_characteristic_descriptor_at(characteristic, i));
}

static const beryl_peripheral_callbacks peripheral_callbacks = {
    .did_discover_services = services,
    .did_discover_characteristics = characteristics,
    .did_discover_descriptors = descriptors,
};

static void discovered(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *ad, int rssi, void *user) {
    beryl_central_connect(central, peripheral, NULL);
}

static void connected(beryl_central *central, beryl_peripheral *peripheral, void *user) {
    beryl_peripheral_set_callbacks(peripheral, &peripheral_callbacks, NULL);
    beryl_peripheral_discover_services(peripheral, NULL, 0);
}

static void restored(beryl_central *central, const beryl_central_restored *state, void *user) {
    for (size_t i = 0; i < state->peripheral_count; i++) beryl_peripheral_set_callbacks(state->peripherals[i], &peripheral_callbacks, NULL);
}

static beryl_local_characteristic *measurement;

static void manager_state(beryl_peripheral_manager *manager, void *user) {
    if (beryl_peripheral_manager_state(manager) != BERYL_STATE_POWERED_ON) return;
    beryl_local_service *service = NULL;
    if (beryl_local_service_create(&service, "180D", true) != BERYL_OK) return;
    static const uint8_t chest = 1;
    beryl_local_service_add_characteristic(service, &measurement, "2A37", BERYL_PROPERTY_NOTIFY, BERYL_PERMISSION_READABLE, NULL, 0);
    beryl_local_service_add_characteristic(service, NULL, "2A38", BERYL_PROPERTY_READ, BERYL_PERMISSION_READABLE, &chest, 1);
    beryl_local_service_add_characteristic(service, NULL, "2A39", BERYL_PROPERTY_WRITE, BERYL_PERMISSION_WRITEABLE, NULL, 0);
    if (beryl_peripheral_manager_add_service(manager, service) != BERYL_OK) beryl_local_service_free(service);
}

static void added(beryl_peripheral_manager *manager, beryl_local_service *service, const beryl_error *error, void *user) {
    if (error) return;
    beryl_peripheral_manager_start_advertising(manager, "fuzz", beryl_local_service_uuid(service), 1);
    static const uint8_t beat[2] = {0, 60};
    for (int i = 0; i < 3; i++) beryl_peripheral_manager_update_value(manager, measurement, beat, sizeof beat);
}

static void read_received(beryl_peripheral_manager *manager, beryl_request *request, void *user) {
    static const uint8_t value[] = {1, 2, 3};
    beryl_request_respond(manager, request, BERYL_ATT_SUCCESS, value, sizeof value);
}

static void writes_received(beryl_peripheral_manager *manager, beryl_request *const *requests, size_t count, void *user) {
    if (count && beryl_request_needs_response(requests[0])) beryl_request_respond(manager, requests[0], 0, NULL, 0);
}

static void ready(beryl_peripheral_manager *manager, void *user) {
    static const uint8_t beat[2] = {0, 61};
    beryl_peripheral_manager_update_value(manager, measurement, beat, sizeof beat);
}

static void drain(int fd) {
    uint8_t buffer[BERYL_DATAGRAM_CAP];
    while (recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) > 0) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct event_base *base;
    if (!base) base = event_base_new();
    if (size < 1) return 0;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) return 0;
    beryl_manager_options options = {.socket_path = "/nonexistent/beryl-fuzz/managerd.sock", .app_id = "com.example.fuzz",
                                     .restore_identifier = "fuzz"};
    beryl_central *central = NULL;
    beryl_peripheral_manager *manager = NULL;
    beryl_session *session = NULL;
    measurement = NULL;
    if (data[0] % 2 == 0) {
        beryl_central_callbacks callbacks = {.did_update_state = central_state, .will_restore_state = restored,
                                             .did_discover = discovered, .did_connect = connected};
        if (beryl_central_create(&central, base, &callbacks, NULL, &options) == BERYL_OK) session = beryl_central_session(central);
    } else {
        beryl_peripheral_manager_callbacks callbacks = {.did_update_state = manager_state, .did_add_service = added,
                                                        .did_receive_read = read_received, .did_receive_writes = writes_received,
                                                        .is_ready_to_update_subscribers = ready};
        if (beryl_peripheral_manager_create(&manager, base, &callbacks, NULL, &options) == BERYL_OK)
            session = beryl_peripheral_manager_session(manager);
    }
    if (session) {
        beryl_session_attach(session, pair[0]);
        size_t at = 1;
        while (at + 2 <= size) {
            size_t length = (size_t)data[at] | (size_t)data[at + 1] << 8;
            at += 2;
            if (length > size - at) length = size - at;
            beryl_session_receive(session, data + at, length);
            drain(pair[1]);
            at += length;
        }
        /* What the library deferred to the loop (a failed send's teardown, the sweep of answered requests). */
        event_base_loop(base, EVLOOP_NONBLOCK);
    } else {
        close(pair[0]);
    }
    beryl_central_free(central);
    beryl_peripheral_manager_free(manager);
    close(pair[1]);
    return 0;
}
