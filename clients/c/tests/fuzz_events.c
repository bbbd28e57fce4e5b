/* libFuzzer target for the library's decoder and event handling: an input is a role byte (even: a central manager,
 * odd: a peripheral manager) and datagrams, each with a 2-byte little-endian length, fed to the manager as if
 * managerd had sent them. Whatever arrives, the library must not crash, leak or read out of bounds. */
#include "internal.h"

#include <event2/event.h>
#include <stdlib.h>

static void central_state(beryl_central *central, void *user) {}
static void manager_state(beryl_peripheral_manager *manager, void *user) {}

/* Answers what a central's manager is asked, so that the request paths after a callback run too. */
static void read_received(beryl_peripheral_manager *manager, beryl_request *request, void *user) {
    static const uint8_t value[] = {1, 2, 3};
    beryl_request_respond(manager, request, BERYL_ATT_SUCCESS, value, sizeof value);
}

static void writes_received(beryl_peripheral_manager *manager, beryl_request *const *requests, size_t count, void *user) {
    if (count && beryl_request_needs_response(requests[0])) beryl_request_respond(manager, requests[0], 0, NULL, 0);
}

static void discovered(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *ad, int rssi, void *user) {
    beryl_central_connect(central, peripheral, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct event_base *base;
    if (!base) base = event_base_new();
    if (size < 1) return 0;
    beryl_manager_options options = {.socket_path = "/nonexistent/beryl-fuzz/managerd.sock", .app_id = "com.example.fuzz",
                                     .restore_identifier = "fuzz"};
    beryl_central *central = NULL;
    beryl_peripheral_manager *manager = NULL;
    beryl_session *session = NULL;
    if (data[0] % 2 == 0) {
        beryl_central_callbacks callbacks = {.did_update_state = central_state, .did_discover = discovered};
        if (beryl_central_create(&central, base, &callbacks, NULL, &options) != BERYL_OK) return 0;
        session = beryl_central_session(central);
    } else {
        beryl_peripheral_manager_callbacks callbacks = {.did_update_state = manager_state, .did_receive_read = read_received,
                                                        .did_receive_writes = writes_received};
        if (beryl_peripheral_manager_create(&manager, base, &callbacks, NULL, &options) != BERYL_OK) return 0;
        session = beryl_peripheral_manager_session(manager);
    }
    size_t at = 1;
    while (at + 2 <= size) {
        size_t length = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (length > size - at) length = size - at;
        beryl_session_receive(session, data + at, length);
        at += length;
    }
    beryl_central_free(central);
    beryl_peripheral_manager_free(manager);
    return 0;
}
