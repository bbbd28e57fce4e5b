/* A heart-rate central in C, written as the Core Bluetooth Programming Guide's central tasks are: scan for the
 * service, connect, discover, read the sensor location, subscribe to measurements and write the control point.
 *
 *   heart-rate-central-c [--runtime-dir DIR] [--count N] [--restore-id ID] [--forever]
 *
 * With --restore-id (or when managerd relaunches it, from its launch options) the manager opts into preservation and
 * restoration: killed while connected, it is relaunched by the stack and gets its peripheral back (will_restore_state
 * first). --forever keeps counting measurements instead of finishing after N. */
#include <beryl/beryl.h>

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct app {
    struct event_base *base;
    beryl_central *central;
    beryl_peripheral *monitor;
    beryl_characteristic *control_point;
    beryl_uuid service, measurement, location, control;
    int wanted, beats;
    bool forever;
    int exit_code;
} app;

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));

#include <stdarg.h>
static void say(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vprintf(format, arguments);
    va_end(arguments);
    putchar('\n');
    fflush(stdout);
}

static void finish(app *a, int code) {
    a->exit_code = code;
    event_base_loopbreak(a->base);
}

static void fail(app *a, const char *what, const beryl_error *error) {
    fprintf(stderr, "heart-rate-central-c: %s%s%s\n", what, error ? ": " : "", error ? error->message : "");
    finish(a, 1);
}

static void discovered_services(beryl_peripheral *peripheral, const beryl_error *error, void *user) {
    app *a = user;
    if (error) return fail(a, "service discovery failed", error);
    beryl_service *service = beryl_peripheral_find_service(peripheral, &a->service);
    if (!service) return fail(a, "the peripheral has no heart rate service", NULL);
    beryl_peripheral_discover_characteristics(peripheral, service, NULL, 0);
}

static void discovered_characteristics(beryl_peripheral *peripheral, beryl_service *service, const beryl_error *error,
                                       void *user) {
    app *a = user;
    if (error) return fail(a, "characteristic discovery failed", error);
    say("discovered %zu characteristics", beryl_service_characteristic_count(service));
    a->control_point = beryl_service_find_characteristic(service, &a->control);
    beryl_characteristic *location = beryl_service_find_characteristic(service, &a->location);
    if (location) beryl_peripheral_read_value(peripheral, location);
    beryl_characteristic *measurement = beryl_service_find_characteristic(service, &a->measurement);
    if (measurement) beryl_peripheral_set_notify(peripheral, measurement, true);
}

static void updated_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic, const beryl_error *error,
                          void *user) {
    app *a = user;
    if (error) return fail(a, "a read failed", error);
    size_t length = 0;
    const uint8_t *value = beryl_characteristic_value(characteristic, &length);
    if (beryl_uuid_equal(beryl_characteristic_uuid(characteristic), &a->location) && length >= 1) {
        say("sensor location %s", value[0] == 1 ? "chest" : "other");
    } else if (beryl_uuid_equal(beryl_characteristic_uuid(characteristic), &a->measurement) && length >= 2) {
        /* Flags first; bit 0 clear: an 8-bit heart rate value (Heart Rate Service §3.1.1.1). */
        if (!a->forever && a->beats >= a->wanted) return;
        say("heart rate %u bpm", value[1]);
        a->beats++;
        if (a->forever || a->beats < a->wanted) return;
        beryl_peripheral_set_notify(peripheral, characteristic, false);
        static const uint8_t reset = 0x01;
        /* The control point is optional (Heart Rate Service §3.3): without one there is nothing to reset. */
        if (a->control_point) beryl_peripheral_write_value(peripheral, a->control_point, &reset, 1, BERYL_WRITE_WITH_RESPONSE);
        else finish(a, 0);
    }
}

static void wrote_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic, const beryl_error *error,
                        void *user) {
    app *a = user;
    if (error) return fail(a, "the control point refused the write", error);
    say("reset energy expended");
    beryl_central_cancel_connection(a->central, peripheral);
    say("done");
    finish(a, 0);
}

static const beryl_peripheral_callbacks peripheral_callbacks = {
    .did_discover_services = discovered_services,
    .did_discover_characteristics = discovered_characteristics,
    .did_update_value = updated_value,
    .did_write_value = wrote_value,
};

static void state_updated(beryl_central *central, void *user) {
    app *a = user;
    beryl_manager_state state = beryl_central_state(central);
    say("state %s", beryl_manager_state_string(state));
    if (state != BERYL_STATE_POWERED_ON) return;
    if (a->monitor && beryl_peripheral_get_state(a->monitor) != BERYL_PERIPHERAL_DISCONNECTED) return;  /* restored */
    beryl_central_scan(central, &a->service, 1, false);
}

static void will_restore(beryl_central *central, const beryl_central_restored *restored, void *user) {
    app *a = user;
    say("will restore %zu peripherals", restored->peripheral_count);
    for (size_t i = 0; i < restored->peripheral_count; i++) {
        beryl_peripheral *peripheral = restored->peripherals[i];
        a->monitor = peripheral;
        beryl_peripheral_set_callbacks(peripheral, &peripheral_callbacks, a);
        beryl_service *service = beryl_peripheral_find_service(peripheral, &a->service);
        if (service) a->control_point = beryl_service_find_characteristic(service, &a->control);
    }
}

static void discovered(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *advertisement,
                       int rssi, void *user) {
    app *a = user;
    if (a->monitor) return;
    say("discovered %s (RSSI %d)", advertisement->local_name ? advertisement->local_name : "a heart rate monitor", rssi);
    a->monitor = peripheral;
    beryl_central_stop_scan(central);
    beryl_connect_options options = {.notify_on_notification = a->forever};
    beryl_central_connect(central, peripheral, &options);
}

static void connected(beryl_central *central, beryl_peripheral *peripheral, void *user) {
    app *a = user;
    say("connected");
    beryl_peripheral_set_callbacks(peripheral, &peripheral_callbacks, a);
    beryl_peripheral_discover_services(peripheral, &a->service, 1);
}

static void failed_to_connect(beryl_central *central, beryl_peripheral *peripheral, const beryl_error *error, void *user) {
    fail(user, "could not connect", error);
}

static void disconnected(beryl_central *central, beryl_peripheral *peripheral, const beryl_error *error, void *user) {
    say("disconnected");
}

static void terminated(evutil_socket_t fd, short what, void *user) { finish(user, 0); }

static void gave_up(evutil_socket_t fd, short what, void *user) {
    fail(user, "no heart rate monitor served the measurements in time", NULL);
}

int main(int argc, char **argv) {
    app a = {.wanted = 5};
    const char *runtime_dir = NULL, *restore_id = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc) runtime_dir = argv[++i];
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) a.wanted = atoi(argv[++i]);
        else if (strcmp(argv[i], "--restore-id") == 0 && i + 1 < argc) restore_id = argv[++i];
        else if (strcmp(argv[i], "--forever") == 0) a.forever = true;
        else {
            fprintf(stderr, "usage: heart-rate-central-c [--runtime-dir DIR] [--count N] [--restore-id ID] [--forever]\n");
            return 64;
        }
    }
    if (a.wanted < 1) a.wanted = 1;
    beryl_uuid_parse("180D", &a.service);
    beryl_uuid_parse("2A37", &a.measurement);
    beryl_uuid_parse("2A38", &a.location);
    beryl_uuid_parse("2A39", &a.control);

    /* A relaunch names the managers to create again (UIApplicationLaunchOptionsBluetoothCentralsKey). */
    beryl_launch_options launch;
    if (beryl_launch_options_read(&launch) == 1 && launch.central_count > 0) {
        say("relaunched by the stack to restore %s", launch.centrals[0]);
        restore_id = launch.centrals[0];
    }
    char socket_path[4096];
    beryl_manager_options options = {.restore_identifier = restore_id};
    if (runtime_dir) {
        snprintf(socket_path, sizeof socket_path, "%s/managerd.sock", runtime_dir);
        options.socket_path = socket_path;
    }
    if (!getenv("BERYL_APP_ID") && restore_id) options.app_id = "com.example.heartrate-central-c";

    a.base = event_base_new();
    static const beryl_central_callbacks callbacks = {
        .did_update_state = state_updated,
        .will_restore_state = will_restore,
        .did_discover = discovered,
        .did_connect = connected,
        .did_fail_to_connect = failed_to_connect,
        .did_disconnect = disconnected,
    };
    int status = beryl_central_create(&a.central, a.base, &callbacks, &a, &options);
    if (status != BERYL_OK) {
        fprintf(stderr, "heart-rate-central-c: %s\n", beryl_status_string(status));
        return 1;
    }
    /* A stack that never comes up, or a monitor that never answers, is this tool's failure, not a state to wait in. */
    struct event *timeout = evtimer_new(a.base, gave_up, &a);
    if (!a.forever) evtimer_add(timeout, &(struct timeval){.tv_sec = 20});
    struct event *terminate = evsignal_new(a.base, SIGTERM, terminated, &a);
    evsignal_add(terminate, NULL);
    event_base_dispatch(a.base);
    event_free(terminate);
    event_free(timeout);
    beryl_central_free(a.central);
    beryl_launch_options_clear(&launch);
    event_base_free(a.base);
    return a.exit_code;
}
