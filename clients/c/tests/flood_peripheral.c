/* A peripheral that floods its one subscriber: `count` values of `size` bytes, each starting with its sequence number
 * (32-bit little-endian), given to update_value as fast as it takes them, waiting for is_ready_to_update_subscribers
 * whenever it says 0. The interop tests count what arrives, in order, on a central.
 *
 *   beryl-flood-peripheral-c --runtime-dir DIR --count N --size BYTES
 */
#include <beryl/beryl.h>

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLOOD_SERVICE "B0000001-0000-1000-8000-00805F9B34FB"
#define FLOOD_VALUE "B0000002-0000-1000-8000-00805F9B34FB"

typedef struct flood {
    struct event_base *base;
    beryl_local_characteristic *value;
    long count, size, taken, refused;
    bool subscribed;
} flood;

static void send_more(beryl_peripheral_manager *manager, flood *f) {
    uint8_t value[512] = {0};
    while (f->subscribed && f->taken < f->count) {
        uint32_t sequence = (uint32_t)f->taken;
        for (int i = 0; i < 4; i++) value[i] = (uint8_t)(sequence >> (8 * i));
        int status = beryl_peripheral_manager_update_value(manager, f->value, value, (size_t)f->size);
        if (status == 0) {
            f->refused++;
            return;  /* is_ready_to_update_subscribers follows */
        }
        if (status < 0) {
            printf("update failed: %s\n", beryl_status_string(status));
            fflush(stdout);
            return;
        }
        f->taken++;
    }
    if (f->taken == f->count) {
        printf("flooded %ld values, refused %ld times\n", f->taken, f->refused);
        fflush(stdout);
        f->taken++;  /* said once */
    }
}

static void state_updated(beryl_peripheral_manager *manager, void *user) {
    flood *f = user;
    if (beryl_peripheral_manager_state(manager) != BERYL_STATE_POWERED_ON) return;
    beryl_local_service *service = NULL;
    if (beryl_local_service_create(&service, FLOOD_SERVICE, true) != BERYL_OK) return;
    beryl_local_service_add_characteristic(service, &f->value, FLOOD_VALUE, BERYL_PROPERTY_NOTIFY, BERYL_PERMISSION_READABLE, NULL, 0);
    if (beryl_peripheral_manager_add_service(manager, service) != BERYL_OK) beryl_local_service_free(service);
}

static void service_added(beryl_peripheral_manager *manager, beryl_local_service *service, const beryl_error *error, void *user) {
    if (error) {
        printf("could not add the service: %s\n", error->message);
        fflush(stdout);
        return;
    }
    beryl_peripheral_manager_start_advertising(manager, "Beryl flood", beryl_local_service_uuid(service), 1);
}

static void advertising_started(beryl_peripheral_manager *manager, const beryl_error *error, void *user) {
    printf(error ? "advertising failed\n" : "advertising as Beryl flood\n");
    fflush(stdout);
}

static void subscribed(beryl_peripheral_manager *manager, const char *central, beryl_local_characteristic *characteristic,
                       size_t maximum_update_length, void *user) {
    flood *f = user;
    printf("subscribed, values up to %zu bytes\n", maximum_update_length);
    fflush(stdout);
    f->subscribed = true;
    send_more(manager, f);
}

static void ready(beryl_peripheral_manager *manager, void *user) { send_more(manager, user); }

static void stop(evutil_socket_t fd, short what, void *user) { event_base_loopbreak(((flood *)user)->base); }

int main(int argc, char **argv) {
    flood f = {.count = 1000, .size = 20};
    const char *runtime_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc) runtime_dir = argv[++i];
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) f.count = atol(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) f.size = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: beryl-flood-peripheral-c [--runtime-dir DIR] [--count N] [--size 4..512]\n");
            return 64;
        }
    }
    if (f.size < 4 || f.size > 512 || f.count < 1) {
        fprintf(stderr, "beryl-flood-peripheral-c: --size must be 4..512 and --count at least 1\n");
        return 64;
    }
    char socket_path[4096];
    beryl_manager_options options = {.app_id = "com.example.flood-c"};
    if (runtime_dir) {
        snprintf(socket_path, sizeof socket_path, "%s/managerd.sock", runtime_dir);
        options.socket_path = socket_path;
    }
    f.base = event_base_new();
    static const beryl_peripheral_manager_callbacks callbacks = {
        .did_update_state = state_updated,
        .did_add_service = service_added,
        .did_start_advertising = advertising_started,
        .central_did_subscribe = subscribed,
        .is_ready_to_update_subscribers = ready,
    };
    beryl_peripheral_manager *manager = NULL;
    int status = beryl_peripheral_manager_create(&manager, f.base, &callbacks, &f, &options);
    if (status != BERYL_OK) {
        fprintf(stderr, "beryl-flood-peripheral-c: %s\n", beryl_status_string(status));
        return 1;
    }
    struct event *terminate = evsignal_new(f.base, SIGTERM, stop, &f);
    evsignal_add(terminate, NULL);
    event_base_dispatch(f.base);
    event_free(terminate);
    beryl_peripheral_manager_free(manager);
    event_base_free(f.base);
    return 0;
}
