/* A heart-rate peripheral in C, written as the Core Bluetooth Programming Guide's peripheral tasks are: build the
 * service, add it once the manager is powered on, advertise, answer writes, notify subscribers once a second.
 *
 *   heart-rate-peripheral-c [--runtime-dir DIR] [--seconds N]
 */
#include <beryl/beryl.h>

#include <event2/event.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Heart Rate Service §3.3.1's "Control Point Value Not Supported", an application error. */
#define VALUE_NOT_SUPPORTED 0x80

typedef struct app {
    struct event_base *base;
    beryl_peripheral_manager *manager;
    beryl_local_characteristic *measurement;
    uint8_t beat;
    int subscribers;
    bool waiting_for_room;
} app;

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vprintf(format, arguments);
    va_end(arguments);
    putchar('\n');
    fflush(stdout);
}

static void state_updated(beryl_peripheral_manager *manager, void *user) {
    app *a = user;
    beryl_manager_state state = beryl_peripheral_manager_state(manager);
    say("state %s", beryl_manager_state_string(state));
    if (state != BERYL_STATE_POWERED_ON) return;
    beryl_local_service *service = NULL;
    if (beryl_local_service_create(&service, "180D", true) != BERYL_OK) return;
    static const uint8_t chest = 0x01;
    /* Measurement: dynamic, notified. Body sensor location "chest": cached, the stack answers reads itself. Control
     * point: a dynamic, writable value. */
    beryl_local_service_add_characteristic(service, &a->measurement, "2A37", BERYL_PROPERTY_NOTIFY, BERYL_PERMISSION_READABLE, NULL, 0);
    beryl_local_service_add_characteristic(service, NULL, "2A38", BERYL_PROPERTY_READ, BERYL_PERMISSION_READABLE, &chest, 1);
    beryl_local_service_add_characteristic(service, NULL, "2A39", BERYL_PROPERTY_WRITE, BERYL_PERMISSION_WRITEABLE, NULL, 0);
    int status = beryl_peripheral_manager_add_service(manager, service);
    if (status != BERYL_OK) {
        say("could not add the service: %s", beryl_status_string(status));
        beryl_local_service_free(service);
    }
}

static void service_added(beryl_peripheral_manager *manager, beryl_local_service *service, const beryl_error *error,
                          void *user) {
    if (error) return say("could not add the service: %s", error->message);
    say("added heart rate service");
    beryl_peripheral_manager_start_advertising(manager, "Beryl HR", beryl_local_service_uuid(service), 1);
}

static void advertising_started(beryl_peripheral_manager *manager, const beryl_error *error, void *user) {
    if (error) say("advertising failed: %s", error->message);
    else say("advertising as Beryl HR");
}

static void writes_received(beryl_peripheral_manager *manager, beryl_request *const *requests, size_t count, void *user) {
    /* 0x01 resets the energy expended; anything else is not supported (Heart Rate Service §3.3.1). */
    bool accepted = true;
    for (size_t i = 0; i < count; i++) {
        size_t length = 0;
        const uint8_t *value = beryl_request_value(requests[i], &length);
        accepted = accepted && length == 1 && value[0] == 0x01;
    }
    size_t length = 0;
    const uint8_t *first = count ? beryl_request_value(requests[0], &length) : NULL;
    say("control point write [%s] %s", length && first ? (first[0] == 1 ? "1" : "other") : "", accepted ? "accepted" : "refused");
    if (count && beryl_request_needs_response(requests[0]))
        beryl_request_respond(manager, requests[0], accepted ? BERYL_ATT_SUCCESS : VALUE_NOT_SUPPORTED, NULL, 0);
}

static void read_received(beryl_peripheral_manager *manager, beryl_request *request, void *user) {
    /* Only the measurement is dynamic and it is not readable. */
    beryl_request_respond(manager, request, BERYL_ATT_READ_NOT_PERMITTED, NULL, 0);
}

static void subscribed(beryl_peripheral_manager *manager, const char *central, beryl_local_characteristic *characteristic,
                       size_t maximum_update_length, void *user) {
    app *a = user;
    a->subscribers++;
    say("central subscribed to heart rate measurement");
}

static void unsubscribed(beryl_peripheral_manager *manager, const char *central, beryl_local_characteristic *characteristic,
                         void *user) {
    app *a = user;
    if (a->subscribers > 0) a->subscribers--;
    say("central unsubscribed");
}

static void send_measurement(app *a) {
    /* Flags 0: an 8-bit heart rate value (Heart Rate Service §3.1.1.1). */
    uint8_t value[2] = {0x00, a->beat};
    int sent = beryl_peripheral_manager_update_value(a->manager, a->measurement, value, sizeof value);
    a->waiting_for_room = sent == 0;
    if (sent == 0) say("transmit queue full; waiting for is_ready_to_update_subscribers");
    else if (sent < 0) say("update failed: %s", beryl_status_string(sent));
}

static void ready_to_update(beryl_peripheral_manager *manager, void *user) {
    app *a = user;
    if (a->waiting_for_room) send_measurement(a);
}

static void tick(evutil_socket_t fd, short what, void *user) {
    app *a = user;
    if (a->subscribers <= 0 || a->waiting_for_room) return;
    a->beat = a->beat >= 100 ? 60 : a->beat + 1;
    send_measurement(a);
}

/* The deadline, or SIGTERM: the loop ends and everything is freed (the leak checks run the example to its end). */
static void stop(evutil_socket_t fd, short what, void *user) { event_base_loopbreak(((app *)user)->base); }

int main(int argc, char **argv) {
    app a = {.beat = 60};
    const char *runtime_dir = NULL;
    int seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc) runtime_dir = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: heart-rate-peripheral-c [--runtime-dir DIR] [--seconds N]\n");
            return 64;
        }
    }
    char socket_path[4096];
    beryl_manager_options options = {.app_id = "com.example.heartrate-c"};
    if (runtime_dir) {
        snprintf(socket_path, sizeof socket_path, "%s/managerd.sock", runtime_dir);
        options.socket_path = socket_path;
    }
    a.base = event_base_new();
    static const beryl_peripheral_manager_callbacks callbacks = {
        .did_update_state = state_updated,
        .did_add_service = service_added,
        .did_start_advertising = advertising_started,
        .did_receive_read = read_received,
        .did_receive_writes = writes_received,
        .central_did_subscribe = subscribed,
        .central_did_unsubscribe = unsubscribed,
        .is_ready_to_update_subscribers = ready_to_update,
    };
    int status = beryl_peripheral_manager_create(&a.manager, a.base, &callbacks, &a, &options);
    if (status != BERYL_OK) {
        fprintf(stderr, "heart-rate-peripheral-c: %s\n", beryl_status_string(status));
        return 1;
    }
    /* A measurement a second. */
    struct event *timer = event_new(a.base, -1, EV_PERSIST, tick, &a);
    event_add(timer, &(struct timeval){.tv_sec = 1});
    struct event *deadline = evtimer_new(a.base, stop, &a);
    if (seconds > 0) evtimer_add(deadline, &(struct timeval){.tv_sec = seconds});
    struct event *terminate = evsignal_new(a.base, SIGTERM, stop, &a);
    evsignal_add(terminate, NULL);
    event_base_dispatch(a.base);
    event_free(terminate);
    event_free(timer);
    event_free(deadline);
    beryl_peripheral_manager_free(a.manager);
    event_base_free(a.base);
    return 0;
}
