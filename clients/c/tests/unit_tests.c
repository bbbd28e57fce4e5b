/* libberyl's unit tests: UUIDs, every misuse error, and the library against a scripted managerd on a real socket —
 * what it sends for each call (decoded from the datagram) and what each event and answer does to its objects and
 * callbacks. */
#define _GNU_SOURCE
#include "fake_managerd.h"
#include "internal.h"

#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
#define CHECK(condition)                                                                   \
    do {                                                                                   \
        checks++;                                                                          \
        if (!(condition)) {                                                                \
            failures++;                                                                    \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__, __func__, #condition); \
        }                                                                                  \
    } while (0)
#define CHECK_EQ(a, b) CHECK((long long)(a) == (long long)(b))
static bool same_text(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }
#define CHECK_STR(a, b) CHECK(same_text((a), (b)))

#define POWERED_ON BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_POWERED_ON

/* ---- what the callbacks saw ---- */

typedef struct record {
    int states[16];
    int state_count;
    int restores;
    int restored_peripherals;
    bool restore_before_state;
    beryl_peripheral *discovered;
    char discovered_name[64];
    int discovered_rssi;
    size_t discovered_uuids;
    int connects, disconnects, failed_connects;
    beryl_error last_error;
    bool had_error;
    int service_discoveries, characteristic_discoveries, descriptor_discoveries, value_updates, writes, notify_updates;
    int ready_to_write, rssi;
    int drops;
    int retrieved;
    /* Peripheral manager. */
    beryl_local_service *added;
    int adds, reads, write_batches, subscribes, unsubscribes, ready_to_update, advertising_results, restored_services;
    beryl_request *read_request;
    beryl_request *write_requests[4];
    size_t write_count;
    bool respond_inside, answer_twice_status_set;
    int answer_twice_status;
    bool free_in_state, free_in_disconnect;
    /* Set: on_discover checks that the library sent nothing before the app's callback ran. */
    fake_managerd *quiet_during_discover;
    bool sent_before_callback;
    beryl_central *central;
    beryl_peripheral_manager *manager;
} record;

static void note_error(record *r, const beryl_error *error) {
    r->had_error = error != NULL;
    if (error) r->last_error = *error;
}

static void on_state(beryl_central *central, void *user) {
    record *r = user;
    if (r->state_count < 16) r->states[r->state_count++] = beryl_central_state(central);
    if (r->free_in_state) {
        beryl_central_free(central);
        r->central = NULL;
    }
}

static void on_restore(beryl_central *central, const beryl_central_restored *restored, void *user) {
    record *r = user;
    r->restores++;
    r->restored_peripherals = (int)restored->peripheral_count;
    r->restore_before_state = r->state_count == 0;
    if (restored->peripheral_count) r->discovered = restored->peripherals[0];
}

static void on_discover(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *ad, int rssi, void *user) {
    record *r = user;
    if (r->quiet_during_discover) {
        struct pollfd ready = {.fd = r->quiet_during_discover->peer, .events = POLLIN};
        r->sent_before_callback = poll(&ready, 1, 0) == 1;
    }
    r->discovered = peripheral;
    snprintf(r->discovered_name, sizeof r->discovered_name, "%s", ad->local_name ? ad->local_name : "");
    r->discovered_rssi = rssi;
    r->discovered_uuids = ad->service_uuid_count;
}

static void on_connect(beryl_central *c, beryl_peripheral *p, void *user) { ((record *)user)->connects++; }
static void on_fail(beryl_central *c, beryl_peripheral *p, const beryl_error *e, void *user) {
    ((record *)user)->failed_connects++;
    note_error(user, e);
}
static void on_disconnect(beryl_central *c, beryl_peripheral *p, const beryl_error *e, void *user) {
    record *r = user;
    r->disconnects++;
    note_error(r, e);
    if (r->free_in_disconnect) {
        beryl_central_free(c);
        r->central = NULL;
    }
}
static void on_drop(beryl_central *c, const char *why, void *user) { ((record *)user)->drops++; }

static const beryl_central_callbacks central_callbacks = {on_state, on_restore, on_discover, on_connect, on_fail, on_disconnect, on_drop};

static void on_services(beryl_peripheral *p, const beryl_error *e, void *user) { ((record *)user)->service_discoveries++; note_error(user, e); }
static void on_characteristics(beryl_peripheral *p, beryl_service *s, const beryl_error *e, void *user) { ((record *)user)->characteristic_discoveries++; note_error(user, e); }
static void on_descriptors(beryl_peripheral *p, beryl_characteristic *c, const beryl_error *e, void *user) { ((record *)user)->descriptor_discoveries++; note_error(user, e); }
static void on_value(beryl_peripheral *p, beryl_characteristic *c, const beryl_error *e, void *user) { ((record *)user)->value_updates++; note_error(user, e); }
static void on_write(beryl_peripheral *p, beryl_characteristic *c, const beryl_error *e, void *user) { ((record *)user)->writes++; note_error(user, e); }
static void on_notify(beryl_peripheral *p, beryl_characteristic *c, const beryl_error *e, void *user) { ((record *)user)->notify_updates++; note_error(user, e); }
static void on_rssi(beryl_peripheral *p, int rssi, const beryl_error *e, void *user) { ((record *)user)->rssi = rssi; note_error(user, e); }
static void on_ready_to_write(beryl_peripheral *p, void *user) { ((record *)user)->ready_to_write++; }

static const beryl_peripheral_callbacks peripheral_callbacks = {
    .did_discover_services = on_services,
    .did_discover_characteristics = on_characteristics,
    .did_discover_descriptors = on_descriptors,
    .did_update_value = on_value,
    .did_write_value = on_write,
    .did_update_notification_state = on_notify,
    .did_read_rssi = on_rssi,
    .is_ready_to_send_write_without_response = on_ready_to_write,
};

/* ---- helpers ---- */

typedef struct harness {
    struct event_base *base;
    fake_managerd fake;
    record r;
} harness;

static Beryl__Ipc__V1__ManagerRequest *manager_request(Beryl__Ipc__V1__Envelope *envelope) {
    if (!envelope || envelope->body_case != BERYL__IPC__V1__ENVELOPE__BODY_REQUEST ||
        envelope->request->kind_case != BERYL__IPC__V1__REQUEST__KIND_MANAGER)
        return NULL;
    return envelope->request->manager;
}

/* The next request, which must be of `kind`. */
static Beryl__Ipc__V1__Envelope *expect(harness *h, Beryl__Ipc__V1__ManagerRequest__KindCase kind) {
    Beryl__Ipc__V1__Envelope *envelope = fake_next(&h->fake, h->base);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(envelope);
    CHECK(request != NULL);
    if (request && request->kind_case != kind) {
        fprintf(stderr, "  expected request kind %d, got %d\n", kind, request->kind_case);
        CHECK(request->kind_case == kind);
    }
    return envelope;
}

static beryl_central *central_up(harness *h, const beryl_manager_options *extra) {
    memset(h, 0, sizeof *h);
    h->base = event_base_new();
    fake_start(&h->fake, true);
    beryl_manager_options options = extra ? *extra : (beryl_manager_options){0};
    options.socket_path = h->fake.path;
    beryl_central *central = NULL;
    CHECK_EQ(beryl_central_create(&central, h->base, &central_callbacks, &h->r, &options), BERYL_OK);
    h->r.central = central;
    CHECK(fake_accept(&h->fake, h->base));
    fake_free_envelope(fake_welcome(&h->fake, h->base, POWERED_ON, NULL, 0));
    pump(h->base, 20);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_POWERED_ON);
    return central;
}

static void harness_end(harness *h) {
    if (h->r.central) beryl_central_free(h->r.central);
    if (h->r.manager) beryl_peripheral_manager_free(h->r.manager);
    fake_stop(&h->fake);
    event_base_free(h->base);
}

static void send_discovered(harness *h, const char *identifier, const char *name) {
    char *uuids[] = {"180D"};
    Beryl__Ipc__V1__AdvertisementInfo ad = BERYL__IPC__V1__ADVERTISEMENT_INFO__INIT;
    ad.local_name = (char *)name;
    ad.service_uuids = uuids;
    ad.n_service_uuids = 1;
    ad.connectable = 1;
    Beryl__Ipc__V1__PeripheralInfo info = BERYL__IPC__V1__PERIPHERAL_INFO__INIT;
    info.identifier = (char *)identifier;
    info.name = (char *)name;
    info.rssi = -42;
    info.advertisement = &ad;
    Beryl__Ipc__V1__ScanDiscovery discovery = BERYL__IPC__V1__SCAN_DISCOVERY__INIT;
    discovery.manager = 1;
    discovery.peripheral = &info;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCOVERED;
    event.discovered = &discovery;
    fake_event(&h->fake, &event);
}

#define PERIPHERAL_ID "5E0B1A9C-0000-4000-8000-000000000001"

static void send_connected(harness *h) {
    Beryl__Ipc__V1__PeripheralConnected connected = BERYL__IPC__V1__PERIPHERAL_CONNECTED__INIT;
    connected.manager = 1;
    connected.peripheral = PERIPHERAL_ID;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_CONNECTED;
    event.connected = &connected;
    fake_event(&h->fake, &event);
}

static Beryl__Ipc__V1__ManagerResponse gatt_response(Beryl__Ipc__V1__GattResult *result) {
    Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
    response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_GATT;
    response.gatt = result;
    return response;
}

static void answer_gatt(harness *h, uint64_t id, Beryl__Ipc__V1__GattResult *result) {
    Beryl__Ipc__V1__ManagerResponse response = gatt_response(result);
    fake_respond(&h->fake, id, &response);
}

static void answer_gatt_database(harness *h, uint64_t id, Beryl__Ipc__V1__GattDatabase *database) {
    Beryl__Ipc__V1__GattResult result = BERYL__IPC__V1__GATT_RESULT__INIT;
    result.kind_case = BERYL__IPC__V1__GATT_RESULT__KIND_DATABASE;
    result.database = database;
    answer_gatt(h, id, &result);
}

/* A read's value; length 0 with no value: a write's or setNotify's empty answer. */
static void answer_gatt_value(harness *h, uint64_t id, uint8_t *value, size_t length) {
    Beryl__Ipc__V1__GattResult result = BERYL__IPC__V1__GATT_RESULT__INIT;
    if (value) {
        result.kind_case = BERYL__IPC__V1__GATT_RESULT__KIND_VALUE;
        result.value.data = value;
        result.value.len = length;
    }
    answer_gatt(h, id, &result);
}

/* A heart-rate service at 1–8: 2A37 (notify, value 3, CCCD 4), 2A38 (read, value 6), 2A39 (write, value 8). */
static void answer_heart_rate_characteristics(harness *h, uint64_t id) {
    Beryl__Ipc__V1__GattCharacteristicInfo c[3];
    Beryl__Ipc__V1__GattCharacteristicInfo *list[3];
    const char *uuids[3] = {"2A37", "2A38", "2A39"};
    uint32_t properties[3] = {0x10, 0x02, 0x0C}, handles[3] = {3, 6, 8};
    for (int i = 0; i < 3; i++) {
        beryl__ipc__v1__gatt_characteristic_info__init(&c[i]);
        c[i].uuid = (char *)uuids[i];
        c[i].properties = properties[i];
        c[i].value_handle = handles[i];
        list[i] = &c[i];
    }
    Beryl__Ipc__V1__GattServiceInfo service = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
    service.uuid = "180D";
    service.start_handle = 1;
    service.end_handle = 8;
    service.characteristics = list;
    service.n_characteristics = 3;
    Beryl__Ipc__V1__GattServiceInfo *services[] = {&service};
    Beryl__Ipc__V1__GattDatabase database = BERYL__IPC__V1__GATT_DATABASE__INIT;
    database.services = services;
    database.n_services = 1;
    answer_gatt_database(h, id, &database);
}

/* Scan, discover, connect and discover the heart-rate service and its characteristics. */
static beryl_peripheral *connected_heart_rate(harness *h, beryl_central *central) {
    beryl_uuid hr;
    beryl_uuid_parse("180D", &hr);
    CHECK_EQ(beryl_central_scan(central, &hr, 1, true), BERYL_OK);
    Beryl__Ipc__V1__Envelope *scan = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_START_SCAN);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(scan);
    if (request && request->start_scan) {
        CHECK_EQ(request->start_scan->n_service_uuids, 1);
        if (request->start_scan->n_service_uuids == 1) CHECK_STR(request->start_scan->service_uuids[0], "180D");
        CHECK(request->start_scan->allow_duplicates);
        CHECK_EQ(request->start_scan->manager, 1);
        fake_respond_ack(&h->fake, scan->request_id);
    }
    fake_free_envelope(scan);
    CHECK(beryl_central_is_scanning(central));
    send_discovered(h, PERIPHERAL_ID, "Beryl HR");
    pump(h->base, 20);
    beryl_peripheral *peripheral = h->r.discovered;
    CHECK(peripheral != NULL);
    if (!peripheral) return NULL;
    CHECK_STR(h->r.discovered_name, "Beryl HR");
    CHECK_EQ(h->r.discovered_rssi, -42);
    CHECK_EQ(h->r.discovered_uuids, 1);
    CHECK_STR(beryl_peripheral_identifier(peripheral), PERIPHERAL_ID);
    CHECK_STR(beryl_peripheral_name(peripheral), "Beryl HR");
    CHECK_EQ(beryl_central_connect(central, peripheral, &(beryl_connect_options){.notify_on_disconnection = true}), BERYL_OK);
    CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_CONNECTING);
    Beryl__Ipc__V1__Envelope *connect = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_CONNECT);
    request = manager_request(connect);
    if (request && request->connect) {
        CHECK_STR(request->connect->peripheral, PERIPHERAL_ID);
        CHECK(request->connect->notify_on_disconnection);
        CHECK(!request->connect->notify_on_connection);
        fake_respond_ack(&h->fake, connect->request_id);
    }
    fake_free_envelope(connect);
    send_connected(h);
    pump(h->base, 20);
    CHECK_EQ(h->r.connects, 1);
    CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_CONNECTED);
    beryl_peripheral_set_callbacks(peripheral, &peripheral_callbacks, &h->r);

    CHECK_EQ(beryl_peripheral_discover_services(peripheral, &hr, 1), BERYL_OK);
    Beryl__Ipc__V1__Envelope *discover = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(discover);
    if (request && request->gatt) {
        CHECK_STR(request->gatt->peripheral, PERIPHERAL_ID);
        CHECK_EQ(request->gatt->kind_case, BERYL__IPC__V1__GATT_OPERATION__KIND_DISCOVER);
        CHECK_EQ(request->gatt->discover->depth, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_SERVICES);
        CHECK_EQ(request->gatt->discover->n_service_uuids, 1);
        Beryl__Ipc__V1__GattServiceInfo service = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        service.uuid = "180D";
        service.start_handle = 1;
        service.end_handle = 8;
        Beryl__Ipc__V1__GattServiceInfo *services[] = {&service};
        Beryl__Ipc__V1__GattDatabase database = BERYL__IPC__V1__GATT_DATABASE__INIT;
        database.services = services;
        database.n_services = 1;
        answer_gatt_database(h, discover->request_id, &database);
    }
    fake_free_envelope(discover);
    pump(h->base, 20);
    CHECK_EQ(h->r.service_discoveries, 1);
    CHECK(!h->r.had_error);
    beryl_service *service = beryl_peripheral_find_service(peripheral, &hr);
    CHECK(service != NULL);
    if (!service) return peripheral;
    CHECK(beryl_service_is_primary(service));
    CHECK_EQ(beryl_peripheral_discover_characteristics(peripheral, service, NULL, 0), BERYL_OK);
    Beryl__Ipc__V1__Envelope *characteristics = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(characteristics);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->discover->depth, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_CHARACTERISTICS);
        CHECK_EQ(request->gatt->discover->start_handle, 1);
        CHECK_EQ(request->gatt->discover->end_handle, 8);
        answer_heart_rate_characteristics(h, characteristics->request_id);
    }
    fake_free_envelope(characteristics);
    pump(h->base, 20);
    CHECK_EQ(h->r.characteristic_discoveries, 1);
    CHECK_EQ(beryl_service_characteristic_count(service), 3);
    return peripheral;
}

static beryl_characteristic *characteristic(beryl_peripheral *peripheral, const char *uuid) {
    beryl_uuid hr, wanted;
    beryl_uuid_parse("180D", &hr);
    beryl_uuid_parse(uuid, &wanted);
    return beryl_service_find_characteristic(beryl_peripheral_find_service(peripheral, &hr), &wanted);
}

/* ---- tests ---- */

static void test_uuids_parse_and_format_in_their_shortest_form(void) {
    beryl_uuid uuid;
    char text[BERYL_UUID_STRING_SIZE];
    CHECK_EQ(beryl_uuid_parse("180d", &uuid), BERYL_OK);
    beryl_uuid_format(&uuid, text);
    CHECK_STR(text, "180D");
    CHECK_EQ(beryl_uuid_parse("0000180D-0000-1000-8000-00805F9B34FB", &uuid), BERYL_OK);
    beryl_uuid_format(&uuid, text);
    CHECK_STR(text, "180D");
    CHECK_EQ(beryl_uuid_parse("12345678", &uuid), BERYL_OK);
    beryl_uuid_format(&uuid, text);
    CHECK_STR(text, "12345678");
    CHECK_EQ(beryl_uuid_parse("d00d0001-0000-1000-8000-00805f9b34fc", &uuid), BERYL_OK);
    beryl_uuid_format(&uuid, text);
    CHECK_STR(text, "D00D0001-0000-1000-8000-00805F9B34FC");
    beryl_uuid a, b;
    beryl_uuid_parse("2A37", &a);
    beryl_uuid_parse("00002a37-0000-1000-8000-00805f9b34fb", &b);
    CHECK(beryl_uuid_equal(&a, &b));
    const char *bad[] = {"", "18D", "180DX", "180G", "0000180D-0000-1000-8000-00805F9B34F", "0000180D+0000-1000-8000-00805F9B34FB",
                         "0000180D-0000-1000-8000-00805F9B34FG", "heart rate"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_EQ(beryl_uuid_parse(bad[i], &uuid), BERYL_E_BAD_UUID);
    CHECK_EQ(beryl_uuid_parse(NULL, &uuid), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_uuid_parse("180D", NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK(!beryl_uuid_equal(NULL, &a));
}

static void test_null_handles_and_bad_arguments_are_errors_never_crashes(void) {
    beryl_uuid uuid;
    beryl_uuid_parse("180D", &uuid);
    uint8_t value[600] = {0};
    beryl_central *central = NULL;
    struct event_base *base = event_base_new();
    CHECK_EQ(beryl_central_create(NULL, base, &central_callbacks, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_create(&central, NULL, &central_callbacks, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_create(&central, base, NULL, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    beryl_central_callbacks no_state = {0};
    CHECK_EQ(beryl_central_create(&central, base, &no_state, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_scan(NULL, NULL, 0, false), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_stop_scan(NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_connect(NULL, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_cancel_connection(NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_retrieve_peripherals(NULL, NULL, 0, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_retrieve_connected(NULL, NULL, 0, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_set_app_state(NULL, BERYL_APP_FOREGROUND), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_state(NULL), BERYL_STATE_UNKNOWN);
    CHECK_EQ(beryl_peripheral_discover_services(NULL, NULL, 0), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_read_value(NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_write_value(NULL, NULL, value, 1, BERYL_WRITE_WITH_RESPONSE), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_set_notify(NULL, NULL, true), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_read_rssi(NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_set_callbacks(NULL, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK(!beryl_peripheral_can_send_write_without_response(NULL));
    CHECK(beryl_peripheral_identifier(NULL) == NULL);
    CHECK(beryl_service_characteristic_at(NULL, 0) == NULL);
    CHECK(beryl_characteristic_value(NULL, NULL) == NULL);
    beryl_central_free(NULL);

    beryl_local_service *service = NULL;
    CHECK_EQ(beryl_local_service_create(&service, "not a uuid", true), BERYL_E_BAD_UUID);
    CHECK_EQ(beryl_local_service_create(NULL, "180D", true), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_local_service_create(&service, NULL, true), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_local_service_create(&service, "180D", true), BERYL_OK);
    beryl_local_characteristic *c = NULL;
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A3", BERYL_PROPERTY_READ, 1, NULL, 0), BERYL_E_BAD_UUID);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A38", BERYL_PROPERTY_READ, 1, value, 513), BERYL_E_TOO_LONG);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A38", 0x400, 1, NULL, 0), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A38", BERYL_PROPERTY_READ, 0x40, NULL, 0), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A38", BERYL_PROPERTY_READ, 1, NULL, 3), BERYL_E_INVALID_ARGUMENT);
    /* A cached value is read-only (Core Bluetooth raises for a writable one). */
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A39", BERYL_PROPERTY_WRITE, 2, value, 1), BERYL_E_NOT_PERMITTED);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &c, "2A37", BERYL_PROPERTY_NOTIFY, 1, NULL, 0), BERYL_OK);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(c, "2902", value, 2), BERYL_E_NOT_PERMITTED);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(c, "2803", value, 2), BERYL_E_NOT_PERMITTED);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(c, "2901", value, 513), BERYL_E_TOO_LONG);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(NULL, "2901", value, 1), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(c, "2901", (const uint8_t *)"bpm", 3), BERYL_OK);
    CHECK_EQ(beryl_local_service_include(service, service), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_manager_add_service(NULL, service), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_peripheral_manager_update_value(NULL, c, value, 1), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_request_respond(NULL, NULL, 0, NULL, 0), BERYL_E_INVALID_ARGUMENT);
    CHECK(beryl_request_central(NULL) == NULL);
    CHECK_EQ(beryl_peripheral_manager_create(NULL, base, NULL, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    beryl_peripheral_manager_free(NULL);
    beryl_local_service_free(service);
    beryl_local_service_free(NULL);
    CHECK(strlen(beryl_status_string(BERYL_E_ALREADY_ANSWERED)) > 0);
    CHECK_STR(beryl_status_string(12345), "unknown status");
    CHECK_STR(beryl_manager_state_string(BERYL_STATE_POWERED_ON), "poweredOn");
    beryl_manager_options long_path = {.socket_path = "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/managerd.sock"};
    CHECK_EQ(beryl_central_create(&central, base, &central_callbacks, NULL, &long_path), BERYL_E_TOO_LONG);
    event_base_free(base);
}

static void test_a_missing_stack_is_powered_off_and_the_library_connects_when_it_comes(void) {
    harness h = {0};
    h.base = event_base_new();
    fake_start(&h.fake, false);
    beryl_central *central = NULL;
    CHECK_EQ(beryl_central_create(&central, h.base, &central_callbacks, &h.r, &(beryl_manager_options){.socket_path = h.fake.path}), BERYL_OK);
    h.r.central = central;
    CHECK_EQ(h.r.state_count, 0);  /* never during create */
    pump(h.base, 50);
    CHECK_EQ(h.r.state_count, 1);
    CHECK_EQ(h.r.states[0], BERYL_STATE_POWERED_OFF);
    beryl_uuid uuid;
    beryl_uuid_parse("180D", &uuid);
    CHECK_EQ(beryl_central_scan(central, &uuid, 1, false), BERYL_E_NOT_POWERED_ON);
    fake_listen(&h.fake);
    CHECK(fake_accept(&h.fake, h.base));
    Beryl__Ipc__V1__Envelope *hello = fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(hello);
    CHECK(request && request->kind_case == BERYL__IPC__V1__MANAGER_REQUEST__KIND_HELLO);
    if (request && request->hello) CHECK_EQ(request->hello->role, BERYL__IPC__V1__MANAGER_ROLE__MANAGER_ROLE_CENTRAL);
    fake_free_envelope(hello);
    pump(h.base, 20);
    CHECK_EQ(h.r.state_count, 2);
    CHECK_EQ(h.r.states[1], BERYL_STATE_POWERED_ON);
    harness_end(&h);
}

static void test_hello_names_app_and_restore_identifier_and_a_refusal_is_final(void) {
    harness h = {0};
    h.base = event_base_new();
    fake_start(&h.fake, true);
    beryl_central *central = NULL;
    beryl_manager_options options = {.socket_path = h.fake.path, .app_id = "com.example.c", .restore_identifier = "hr"};
    CHECK_EQ(beryl_central_create(&central, h.base, &central_callbacks, &h.r, &options), BERYL_OK);
    h.r.central = central;
    CHECK(fake_accept(&h.fake, h.base));
    Beryl__Ipc__V1__Envelope *hello = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_HELLO);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(hello);
    if (request && request->hello) {
        CHECK_STR(request->hello->app_id, "com.example.c");
        CHECK_STR(request->hello->restore_identifier, "hr");
        CHECK(hello->request_id != 0);
        /* A manifest for another user: unauthorized, and no retry. */
        Beryl__Ipc__V1__Error error = BERYL__IPC__V1__ERROR__INIT;
        error.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED;
        error.message = "the manifest of com.example.c names another user";
        fake_respond_error(&h.fake, hello->request_id, &error);
    }
    fake_free_envelope(hello);
    pump(h.base, 300);
    CHECK_EQ(h.r.state_count, 1);
    CHECK_EQ(h.r.states[0], BERYL_STATE_UNAUTHORIZED);
    struct pollfd again = {.fd = h.fake.listener, .events = POLLIN};
    CHECK(poll(&again, 1, 0) == 0);  /* no second connection: the refusal is final */
    harness_end(&h);
}

static void test_central_calls_go_on_the_wire_and_events_update_the_tree(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    beryl_characteristic *measurement = characteristic(peripheral, "2A37");
    beryl_characteristic *location = characteristic(peripheral, "2A38");
    beryl_characteristic *control = characteristic(peripheral, "2A39");
    CHECK(measurement && location && control);
    if (!measurement || !location || !control) return harness_end(&h);
    CHECK_EQ(beryl_characteristic_properties(measurement), 0x10);

    /* Read: the value lands on the characteristic. */
    CHECK_EQ(beryl_peripheral_read_value(peripheral, location), BERYL_OK);
    Beryl__Ipc__V1__Envelope *read = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(read);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->kind_case, BERYL__IPC__V1__GATT_OPERATION__KIND_READ);
        CHECK_EQ(request->gatt->read->handle, 6);
        uint8_t chest = 1;
        answer_gatt_value(&h, read->request_id, &chest, 1);
    }
    fake_free_envelope(read);
    pump(h.base, 20);
    size_t length = 0;
    const uint8_t *value = beryl_characteristic_value(location, &length);
    CHECK_EQ(h.r.value_updates, 1);
    CHECK(length == 1 && value && value[0] == 1);

    /* An ATT error answer reaches the callback in the ATT domain with its code. */
    CHECK_EQ(beryl_peripheral_read_value(peripheral, location), BERYL_OK);
    read = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    Beryl__Ipc__V1__Error error = BERYL__IPC__V1__ERROR__INIT;
    error.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_SECURITY_FAILED;
    error.att_error = 0x05;
    error.message = "insufficient authentication";
    if (read) fake_respond_error(&h.fake, read->request_id, &error);
    fake_free_envelope(read);
    pump(h.base, 20);
    CHECK_EQ(h.r.value_updates, 2);
    CHECK(h.r.had_error && h.r.last_error.domain == BERYL_ERROR_DOMAIN_ATT && h.r.last_error.code == 0x05);

    /* What the properties forbid never leaves the library. */
    uint8_t one = 1;
    CHECK_EQ(beryl_peripheral_read_value(peripheral, control), BERYL_E_NOT_PERMITTED);
    CHECK_EQ(beryl_peripheral_write_value(peripheral, location, &one, 1, BERYL_WRITE_WITH_RESPONSE), BERYL_E_NOT_PERMITTED);
    CHECK_EQ(beryl_peripheral_set_notify(peripheral, location, true), BERYL_E_NOT_PERMITTED);
    uint8_t big[513] = {0};
    CHECK_EQ(beryl_peripheral_write_value(peripheral, control, big, 513, BERYL_WRITE_WITH_RESPONSE), BERYL_E_TOO_LONG);
    CHECK(fake_quiet(&h.fake, h.base));

    /* Subscribe: the CCCD is the handle after the value when no descriptor was discovered. */
    CHECK_EQ(beryl_peripheral_set_notify(peripheral, measurement, true), BERYL_OK);
    Beryl__Ipc__V1__Envelope *notify = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(notify);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->kind_case, BERYL__IPC__V1__GATT_OPERATION__KIND_SET_NOTIFY);
        CHECK_EQ(request->gatt->set_notify->value_handle, 3);
        CHECK_EQ(request->gatt->set_notify->cccd_handle, 4);
        CHECK(request->gatt->set_notify->enable);
        CHECK(!request->gatt->set_notify->indicate);
        answer_gatt_value(&h, notify->request_id, NULL, 0);
    }
    fake_free_envelope(notify);
    pump(h.base, 20);
    CHECK_EQ(h.r.notify_updates, 1);
    CHECK(beryl_characteristic_is_notifying(measurement));

    /* A notification: the value and the callback; one on an unknown handle is dropped. */
    uint8_t beat[2] = {0, 72};
    Beryl__Ipc__V1__GattNotification note = BERYL__IPC__V1__GATT_NOTIFICATION__INIT;
    note.peripheral = PERIPHERAL_ID;
    note.handle = 3;
    note.value.data = beat;
    note.value.len = 2;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_NOTIFICATION;
    event.notification = &note;
    fake_event(&h.fake, &event);
    note.handle = 99;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.value_updates, 3);
    value = beryl_characteristic_value(measurement, &length);
    CHECK(length == 2 && value && value[1] == 72);

    /* Write with response, RSSI, maximum write length. */
    CHECK_EQ(beryl_peripheral_write_value(peripheral, control, &one, 1, BERYL_WRITE_WITH_RESPONSE), BERYL_OK);
    Beryl__Ipc__V1__Envelope *write = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(write);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->kind_case, BERYL__IPC__V1__GATT_OPERATION__KIND_WRITE);
        CHECK_EQ(request->gatt->write->handle, 8);
        CHECK(!request->gatt->write->without_response);
        CHECK(request->gatt->write->value.len == 1 && request->gatt->write->value.data[0] == 1);
        fake_respond_ack(&h.fake, write->request_id);
    }
    fake_free_envelope(write);
    pump(h.base, 20);
    CHECK_EQ(h.r.writes, 1);
    CHECK(!h.r.had_error);
    CHECK_EQ(beryl_peripheral_read_rssi(peripheral), BERYL_OK);
    Beryl__Ipc__V1__Envelope *rssi = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_READ_RSSI);
    if (rssi) {
        Beryl__Ipc__V1__RSSIValue answer = BERYL__IPC__V1__RSSIVALUE__INIT;
        answer.rssi = -61;
        Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_RSSI;
        response.rssi = &answer;
        fake_respond(&h.fake, rssi->request_id, &response);
    }
    fake_free_envelope(rssi);
    pump(h.base, 20);
    CHECK_EQ(h.r.rssi, -61);

    /* Service Changed over the service's range: it leaves the tree (the object stays valid). */
    Beryl__Ipc__V1__GattServiceChanged change = BERYL__IPC__V1__GATT_SERVICE_CHANGED__INIT;
    change.start_handle = 1;
    change.end_handle = 0xFFFF;
    Beryl__Ipc__V1__PeripheralServicesChanged changed = BERYL__IPC__V1__PERIPHERAL_SERVICES_CHANGED__INIT;
    changed.peripheral = PERIPHERAL_ID;
    changed.change = &change;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_SERVICES_CHANGED;
    event.services_changed = &changed;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(beryl_peripheral_service_count(peripheral), 0);
    CHECK_EQ(beryl_peripheral_read_value(peripheral, location), BERYL_E_UNKNOWN_OBJECT);
    CHECK(beryl_characteristic_value(location, &length) != NULL);

    /* A supervision timeout: didDisconnect with connectionTimeout, notifying cleared. */
    Beryl__Ipc__V1__PeripheralDisconnected gone = BERYL__IPC__V1__PERIPHERAL_DISCONNECTED__INIT;
    gone.peripheral = PERIPHERAL_ID;
    gone.reason = 0x08;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCONNECTED;
    event.disconnected = &gone;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.disconnects, 1);
    CHECK(h.r.had_error && h.r.last_error.domain == BERYL_ERROR_DOMAIN_BLUETOOTH && h.r.last_error.code == BERYL_BT_CONNECTION_TIMEOUT);
    CHECK(!beryl_characteristic_is_notifying(measurement));
    CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_DISCONNECTED);
    CHECK_EQ(beryl_peripheral_discover_services(peripheral, NULL, 0), BERYL_E_NOT_CONNECTED);
    harness_end(&h);
}

static void test_writes_without_response_wait_on_a_full_queue_and_resume_on_ready(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    beryl_characteristic *control = characteristic(peripheral, "2A39");
    if (!control) return harness_end(&h);
    uint8_t byte = 7;
    CHECK(beryl_peripheral_can_send_write_without_response(peripheral));
    CHECK_EQ(beryl_peripheral_write_value(peripheral, control, &byte, 1, BERYL_WRITE_WITHOUT_RESPONSE), BERYL_OK);
    Beryl__Ipc__V1__Envelope *write = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(write);
    if (request && request->gatt) CHECK(request->gatt->write->without_response && !request->gatt->write->signed_);
    /* managerd: the link's queue is full. */
    Beryl__Ipc__V1__Error busy = BERYL__IPC__V1__ERROR__INIT;
    busy.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_BUSY;
    if (write) fake_respond_error(&h.fake, write->request_id, &busy);
    fake_free_envelope(write);
    pump(h.base, 20);
    CHECK(!beryl_peripheral_can_send_write_without_response(peripheral));
    CHECK_EQ(h.r.writes, 0);  /* no callback for a write without response */
    CHECK_EQ(beryl_peripheral_write_value(peripheral, control, &byte, 1, BERYL_WRITE_WITHOUT_RESPONSE), BERYL_OK);
    CHECK(fake_quiet(&h.fake, h.base));  /* dropped while the library said wait */
    CHECK_EQ(h.r.ready_to_write, 0);
    Beryl__Ipc__V1__PeripheralReadyToWrite ready = BERYL__IPC__V1__PERIPHERAL_READY_TO_WRITE__INIT;
    ready.peripheral = PERIPHERAL_ID;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READY_TO_WRITE;
    event.ready_to_write = &ready;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.ready_to_write, 1);
    CHECK(beryl_peripheral_can_send_write_without_response(peripheral));
    /* Sixteen on their way fill the library's window; their answers open it again. */
    uint64_t ids[16];
    for (int i = 0; i < 16; i++) CHECK_EQ(beryl_peripheral_write_value(peripheral, control, &byte, 1, BERYL_WRITE_WITHOUT_RESPONSE), BERYL_OK);
    CHECK(!beryl_peripheral_can_send_write_without_response(peripheral));
    for (int i = 0; i < 16; i++) {
        Beryl__Ipc__V1__Envelope *next = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
        ids[i] = next ? next->request_id : 0;
        fake_free_envelope(next);
    }
    CHECK_EQ(beryl_peripheral_write_value(peripheral, control, &byte, 1, BERYL_WRITE_WITHOUT_RESPONSE), BERYL_OK);
    for (int i = 0; i < 16; i++) fake_respond_ack(&h.fake, ids[i]);
    pump(h.base, 30);
    CHECK_EQ(h.r.ready_to_write, 2);
    CHECK(beryl_peripheral_can_send_write_without_response(peripheral));
    harness_end(&h);
}

static void test_a_wake_is_answered_with_app_idle_after_the_callbacks(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    (void)central;
    Beryl__Ipc__V1__PeripheralInfo info = BERYL__IPC__V1__PERIPHERAL_INFO__INIT;
    info.identifier = PERIPHERAL_ID;
    Beryl__Ipc__V1__ScanDiscovery discovery = BERYL__IPC__V1__SCAN_DISCOVERY__INIT;
    discovery.peripheral = &info;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCOVERED;
    event.discovered = &discovery;
    event.wake = 7;
    h.r.quiet_during_discover = &h.fake;
    fake_event(&h.fake, &event);
    Beryl__Ipc__V1__Envelope *idle = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_APP_IDLE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(idle);
    if (request && request->app_idle) CHECK_EQ(request->app_idle->wake, 7);
    CHECK(h.r.discovered != NULL);
    CHECK(!h.r.sent_before_callback);  /* AppIdle left after the callback, not before */
    fake_free_envelope(idle);
    event.wake = 0;
    fake_event(&h.fake, &event);
    CHECK(fake_quiet(&h.fake, h.base));  /* no wake, no AppIdle */
    harness_end(&h);
}

static void test_malformed_and_oversized_datagrams_drop_the_session_which_comes_back_others_are_ignored(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    const uint8_t garbage[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01};
    fake_send_raw(&h.fake, garbage, sizeof garbage);
    pump(h.base, 30);
    CHECK_EQ(h.r.drops, 1);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_RESETTING);
    CHECK(fake_accept(&h.fake, h.base));
    Beryl__Ipc__V1__Envelope *hello = fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0);
    CHECK(manager_request(hello) && manager_request(hello)->kind_case == BERYL__IPC__V1__MANAGER_REQUEST__KIND_HELLO);
    fake_free_envelope(hello);
    pump(h.base, 20);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_POWERED_ON);
    /* Longer than the IPC's cap. */
    size_t length = BERYL_DATAGRAM_CAP + 100;
    uint8_t *big = calloc(1, length);
    fake_send_raw(&h.fake, big, length);
    free(big);
    pump(h.base, 30);
    CHECK_EQ(h.r.drops, 2);
    /* An event for another daemon, and managerd's report (request id 0) of a datagram it could not read, are
     * ignored: the session goes on (docs/ipc.md). */
    CHECK(fake_accept(&h.fake, h.base));
    fake_free_envelope(fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0));
    pump(h.base, 20);
    Beryl__Ipc__V1__HciEvent hci = BERYL__IPC__V1__HCI_EVENT__INIT;
    Beryl__Ipc__V1__Event outer = BERYL__IPC__V1__EVENT__INIT;
    outer.kind_case = BERYL__IPC__V1__EVENT__KIND_HCI;
    outer.hci = &hci;
    Beryl__Ipc__V1__Envelope envelope = BERYL__IPC__V1__ENVELOPE__INIT;
    envelope.body_case = BERYL__IPC__V1__ENVELOPE__BODY_EVENT;
    envelope.event = &outer;
    uint8_t bytes[64];
    size_t packed = beryl__ipc__v1__envelope__pack(&envelope, bytes);
    fake_send_raw(&h.fake, bytes, packed);
    Beryl__Ipc__V1__Error unreadable = BERYL__IPC__V1__ERROR__INIT;
    unreadable.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_MALFORMED_MESSAGE;
    fake_respond_error(&h.fake, 0, &unreadable);
    pump(h.base, 30);
    CHECK_EQ(h.r.drops, 2);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_POWERED_ON);
    CHECK_EQ(beryl_central_stop_scan(central), BERYL_OK);
    fake_free_envelope(expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_STOP_SCAN));
    harness_end(&h);
}

static void test_a_lost_session_fails_what_waits_and_says_hello_again(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    beryl_characteristic *location = characteristic(peripheral, "2A38");
    CHECK_EQ(beryl_peripheral_read_value(peripheral, location), BERYL_OK);
    fake_free_envelope(expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT));
    int updates = h.r.value_updates;
    fake_hang_up(&h.fake);
    pump(h.base, 30);
    CHECK_EQ(h.r.value_updates, updates + 1);
    CHECK(h.r.had_error);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_RESETTING);
    CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_DISCONNECTED);
    CHECK_EQ(h.r.disconnects, 0);  /* the Swift library's rule: no didDisconnect for managerd going away */
    CHECK(fake_accept(&h.fake, h.base));
    fake_free_envelope(fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0));
    pump(h.base, 20);
    CHECK_EQ(beryl_central_state(central), BERYL_STATE_POWERED_ON);
    harness_end(&h);
}

static void test_a_restored_central_hears_will_restore_before_the_state(void) {
    harness h = {0};
    h.base = event_base_new();
    fake_start(&h.fake, true);
    beryl_central *central = NULL;
    beryl_manager_options options = {.socket_path = h.fake.path, .app_id = "com.example.c", .restore_identifier = "hr"};
    CHECK_EQ(beryl_central_create(&central, h.base, &central_callbacks, &h.r, &options), BERYL_OK);
    h.r.central = central;
    CHECK(fake_accept(&h.fake, h.base));
    Beryl__Ipc__V1__GattCharacteristicInfo measurement = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT;
    measurement.uuid = "2A37";
    measurement.properties = 0x10;
    measurement.value_handle = 3;
    Beryl__Ipc__V1__GattCharacteristicInfo *characteristics[] = {&measurement};
    Beryl__Ipc__V1__GattServiceInfo service = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
    service.uuid = "180D";
    service.start_handle = 1;
    service.end_handle = 4;
    service.characteristics = characteristics;
    service.n_characteristics = 1;
    Beryl__Ipc__V1__GattServiceInfo *services[] = {&service};
    Beryl__Ipc__V1__GattDatabase database = BERYL__IPC__V1__GATT_DATABASE__INIT;
    database.services = services;
    database.n_services = 1;
    uint32_t notifying[] = {3};
    Beryl__Ipc__V1__PreservedLink link = BERYL__IPC__V1__PRESERVED_LINK__INIT;
    link.identifier = PERIPHERAL_ID;
    link.database = &database;
    link.notifying_value_handles = notifying;
    link.n_notifying_value_handles = 1;
    link.name = "Beryl HR";
    Beryl__Ipc__V1__PreservedLink *links[] = {&link};
    Beryl__Ipc__V1__PreservedCentralRole role = BERYL__IPC__V1__PRESERVED_CENTRAL_ROLE__INIT;
    role.links = links;
    role.n_links = 1;
    Beryl__Ipc__V1__PreservedState preserved = BERYL__IPC__V1__PRESERVED_STATE__INIT;
    preserved.central = &role;
    fake_free_envelope(fake_welcome(&h.fake, h.base, POWERED_ON, &preserved, 3));
    Beryl__Ipc__V1__Envelope *idle = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_APP_IDLE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(idle);
    if (request && request->app_idle) CHECK_EQ(request->app_idle->wake, 3);
    fake_free_envelope(idle);
    CHECK_EQ(h.r.restores, 1);
    CHECK_EQ(h.r.restored_peripherals, 1);
    CHECK(h.r.restore_before_state);
    CHECK_EQ(h.r.state_count, 1);
    /* The restored peripheral is connected, with its tree and its notifying state. */
    beryl_peripheral *peripheral = h.r.discovered;
    CHECK(peripheral != NULL);
    if (peripheral) {
        CHECK_STR(beryl_peripheral_identifier(peripheral), PERIPHERAL_ID);
        CHECK_STR(beryl_peripheral_name(peripheral), "Beryl HR");
        CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_CONNECTED);
        CHECK_EQ(beryl_peripheral_service_count(peripheral), 1);
        beryl_characteristic *restored = characteristic(peripheral, "2A37");
        CHECK(restored && beryl_characteristic_is_notifying(restored));
    }
    harness_end(&h);
}

static void test_freeing_the_manager_inside_its_callback_is_safe(void) {
    harness h = {0};
    h.base = event_base_new();
    fake_start(&h.fake, false);
    h.r.free_in_state = true;
    beryl_central *central = NULL;
    CHECK_EQ(beryl_central_create(&central, h.base, &central_callbacks, &h.r, &(beryl_manager_options){.socket_path = h.fake.path}), BERYL_OK);
    h.r.central = central;
    pump(h.base, 50);
    CHECK_EQ(h.r.state_count, 1);
    CHECK(h.r.central == NULL);
    pump(h.base, 300);  /* no retry timer of a freed manager fires */
    CHECK_EQ(h.r.state_count, 1);
    harness_end(&h);
}

static void on_retrieved(beryl_central *central, beryl_peripheral *const *peripherals, size_t count, const beryl_error *error, void *user) {
    record *r = user;
    r->retrieved = (int)count;
    if (count) r->discovered = peripherals[0];
}

static void test_retrieve_peripherals_by_identifier(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    const char *bad[] = {"180D"};
    CHECK_EQ(beryl_central_retrieve_peripherals(central, bad, 1, on_retrieved, &h.r), BERYL_E_BAD_UUID);
    const char *identifiers[] = {PERIPHERAL_ID};
    CHECK_EQ(beryl_central_retrieve_peripherals(central, identifiers, 1, on_retrieved, &h.r), BERYL_OK);
    Beryl__Ipc__V1__Envelope *retrieve = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RETRIEVE_PERIPHERALS);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(retrieve);
    if (request && request->retrieve_peripherals) {
        CHECK_EQ(request->retrieve_peripherals->n_identifiers, 1);
        Beryl__Ipc__V1__PeripheralInfo info = BERYL__IPC__V1__PERIPHERAL_INFO__INIT;
        info.identifier = PERIPHERAL_ID;
        info.name = "Known";
        Beryl__Ipc__V1__PeripheralInfo *list[] = {&info};
        Beryl__Ipc__V1__PeripheralList answer = BERYL__IPC__V1__PERIPHERAL_LIST__INIT;
        answer.peripherals = list;
        answer.n_peripherals = 1;
        Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_PERIPHERALS;
        response.peripherals = &answer;
        fake_respond(&h.fake, retrieve->request_id, &response);
    }
    fake_free_envelope(retrieve);
    pump(h.base, 20);
    CHECK_EQ(h.r.retrieved, 1);
    CHECK(h.r.discovered && strcmp(beryl_peripheral_name(h.r.discovered), "Known") == 0);
    /* An empty list is answered with none, never with every peripheral managerd knows. */
    h.r.retrieved = -1;
    CHECK_EQ(beryl_central_retrieve_peripherals(central, NULL, 0, on_retrieved, &h.r), BERYL_OK);
    CHECK_EQ(h.r.retrieved, 0);
    CHECK(fake_quiet(&h.fake, h.base));
    harness_end(&h);
}

/* ---- the peripheral manager ---- */

static void pm_state(beryl_peripheral_manager *m, void *user) {
    record *r = user;
    if (r->state_count < 16) r->states[r->state_count++] = beryl_peripheral_manager_state(m);
}
static void pm_restore(beryl_peripheral_manager *m, const beryl_peripheral_restored *restored, void *user) {
    record *r = user;
    r->restores++;
    r->restored_services = (int)restored->service_count;
    r->restore_before_state = r->state_count == 0;
    if (restored->service_count) r->added = restored->services[0];
}
static void pm_added(beryl_peripheral_manager *m, beryl_local_service *s, const beryl_error *e, void *user) {
    record *r = user;
    r->adds++;
    r->added = s;
    note_error(r, e);
}
static void pm_advertising(beryl_peripheral_manager *m, const beryl_error *e, void *user) {
    ((record *)user)->advertising_results++;
    note_error(user, e);
}
static void pm_read(beryl_peripheral_manager *m, beryl_request *request, void *user) {
    record *r = user;
    r->reads++;
    r->read_request = request;
    if (r->respond_inside) {
        static const uint8_t value[] = {0x21, 0x22};
        CHECK_EQ(beryl_request_respond(m, request, BERYL_ATT_SUCCESS, value, sizeof value), BERYL_OK);
        r->answer_twice_status = beryl_request_respond(m, request, BERYL_ATT_SUCCESS, value, sizeof value);
        r->answer_twice_status_set = true;
    }
}
static void pm_writes(beryl_peripheral_manager *m, beryl_request *const *requests, size_t count, void *user) {
    record *r = user;
    r->write_batches++;
    r->write_count = count;
    for (size_t i = 0; i < count && i < 4; i++) r->write_requests[i] = requests[i];
    if (count && !beryl_request_needs_response(requests[0])) {
        CHECK_EQ(beryl_request_respond(m, requests[0], BERYL_ATT_SUCCESS, NULL, 0), BERYL_E_STATE);
    } else if (count) {
        CHECK_EQ(beryl_request_respond(m, requests[count - 1], 0x80, NULL, 0), BERYL_OK);
    }
}
static void pm_subscribe(beryl_peripheral_manager *m, const char *central, beryl_local_characteristic *c, size_t length, void *user) {
    ((record *)user)->subscribes++;
}
static void pm_unsubscribe(beryl_peripheral_manager *m, const char *central, beryl_local_characteristic *c, void *user) {
    ((record *)user)->unsubscribes++;
}
static void pm_ready(beryl_peripheral_manager *m, void *user) { ((record *)user)->ready_to_update++; }

static const beryl_peripheral_manager_callbacks pm_callbacks = {pm_state, pm_restore, pm_added, pm_advertising, pm_read,
                                                                pm_writes, pm_subscribe, pm_unsubscribe, pm_ready, NULL};

static beryl_peripheral_manager *manager_up(harness *h, Beryl__Ipc__V1__PreservedState *restored) {
    memset(h, 0, sizeof *h);
    h->base = event_base_new();
    fake_start(&h->fake, true);
    beryl_peripheral_manager *manager = NULL;
    beryl_manager_options options = {.socket_path = h->fake.path, .app_id = "com.example.c", .restore_identifier = restored ? "pm" : NULL};
    CHECK_EQ(beryl_peripheral_manager_create(&manager, h->base, &pm_callbacks, &h->r, &options), BERYL_OK);
    h->r.manager = manager;
    CHECK(fake_accept(&h->fake, h->base));
    Beryl__Ipc__V1__Envelope *hello = fake_welcome(&h->fake, h->base, POWERED_ON, restored, 0);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(hello);
    if (request && request->hello) CHECK_EQ(request->hello->role, BERYL__IPC__V1__MANAGER_ROLE__MANAGER_ROLE_PERIPHERAL);
    fake_free_envelope(hello);
    pump(h->base, 20);
    CHECK_EQ(beryl_peripheral_manager_state(manager), BERYL_STATE_POWERED_ON);
    return manager;
}

/* Adds 180D (2A37 notify dynamic, 2A38 cached with a 2901 descriptor, 2A39 write dynamic), answered with handles
 * 1–9 and value handles 3, 6, 9. */
static beryl_local_characteristic *published_measurement(harness *h, beryl_peripheral_manager *manager) {
    beryl_local_service *service = NULL;
    beryl_local_characteristic *measurement = NULL, *location = NULL;
    CHECK_EQ(beryl_local_service_create(&service, "180D", true), BERYL_OK);
    static const uint8_t chest = 1;
    CHECK_EQ(beryl_local_service_add_characteristic(service, &measurement, "2A37", BERYL_PROPERTY_NOTIFY, BERYL_PERMISSION_READABLE, NULL, 0), BERYL_OK);
    CHECK_EQ(beryl_local_service_add_characteristic(service, &location, "2A38", BERYL_PROPERTY_READ, BERYL_PERMISSION_READABLE, &chest, 1), BERYL_OK);
    CHECK_EQ(beryl_local_characteristic_add_descriptor(location, "2901", (const uint8_t *)"where", 5), BERYL_OK);
    CHECK_EQ(beryl_local_service_add_characteristic(service, NULL, "2A39", BERYL_PROPERTY_WRITE, BERYL_PERMISSION_WRITEABLE, NULL, 0), BERYL_OK);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, service), BERYL_OK);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, service), BERYL_E_STATE);
    Beryl__Ipc__V1__Envelope *add = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_ADD_SERVICE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(add);
    if (request && request->add_service && request->add_service->service) {
        const Beryl__Ipc__V1__ServiceSpec *spec = request->add_service->service;
        CHECK_STR(spec->uuid, "180D");
        CHECK(spec->primary);
        CHECK_EQ(spec->n_characteristics, 3);
        if (spec->n_characteristics == 3) {
            CHECK_STR(spec->characteristics[0]->uuid, "2A37");
            CHECK_EQ(spec->characteristics[0]->properties, 0x10);
            CHECK(!spec->characteristics[0]->cached);
            CHECK(spec->characteristics[1]->cached);
            CHECK(spec->characteristics[1]->value.len == 1 && spec->characteristics[1]->value.data[0] == 1);
            CHECK_EQ(spec->characteristics[1]->n_descriptors, 1);
            if (spec->characteristics[1]->n_descriptors == 1) CHECK_STR(spec->characteristics[1]->descriptors[0]->uuid, "2901");
            CHECK_EQ(spec->characteristics[2]->permissions, BERYL_PERMISSION_WRITEABLE);
        }
        uint32_t handles[] = {3, 6, 9};
        Beryl__Ipc__V1__ServicePublished published = BERYL__IPC__V1__SERVICE_PUBLISHED__INIT;
        published.start_handle = 1;
        published.end_handle = 9;
        published.value_handles = handles;
        published.n_value_handles = 3;
        Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_SERVICE_ADDED;
        response.service_added = &published;
        fake_respond(&h->fake, add->request_id, &response);
    }
    fake_free_envelope(add);
    pump(h->base, 20);
    CHECK_EQ(h->r.adds, 1);
    CHECK(h->r.added == service && !h->r.had_error);
    return measurement;
}

/* A refused add leaves the service with the caller, as the header says: it can be added once the stack is up, and
 * one never added is the caller's to free (ASan and Valgrind see a double free or a leak if either side is wrong). */
static void test_a_refused_add_service_leaves_the_service_with_the_caller(void) {
    harness h = {0};
    h.base = event_base_new();
    fake_start(&h.fake, false);
    beryl_peripheral_manager *manager = NULL;
    CHECK_EQ(beryl_peripheral_manager_create(&manager, h.base, &pm_callbacks, &h.r, &(beryl_manager_options){.socket_path = h.fake.path}), BERYL_OK);
    h.r.manager = manager;
    pump(h.base, 50);
    beryl_local_service *kept = NULL, *dropped = NULL;
    CHECK_EQ(beryl_local_service_create(&kept, "180D", true), BERYL_OK);
    CHECK_EQ(beryl_local_service_add_characteristic(kept, NULL, "2A37", BERYL_PROPERTY_NOTIFY, BERYL_PERMISSION_READABLE, NULL, 0), BERYL_OK);
    CHECK_EQ(beryl_local_service_create(&dropped, "180F", true), BERYL_OK);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, kept), BERYL_E_NOT_POWERED_ON);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, dropped), BERYL_E_NOT_POWERED_ON);
    beryl_local_service_free(dropped);
    fake_listen(&h.fake);
    CHECK(fake_accept(&h.fake, h.base));
    fake_free_envelope(fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0));
    pump(h.base, 20);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, kept), BERYL_OK);
    Beryl__Ipc__V1__Envelope *add = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_ADD_SERVICE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(add);
    if (request && request->add_service && request->add_service->service) {
        CHECK_STR(request->add_service->service->uuid, "180D");
        CHECK_EQ(request->add_service->service->n_characteristics, 1);
    }
    fake_free_envelope(add);
    harness_end(&h);  /* frees `kept` with the manager */
}

static void test_a_published_service_answers_reads_and_writes_exactly_once(void) {
    harness h;
    beryl_peripheral_manager *manager = manager_up(&h, NULL);
    published_measurement(&h, manager);
    beryl_uuid hr;
    beryl_uuid_parse("180D", &hr);
    CHECK_EQ(beryl_peripheral_manager_start_advertising(manager, "Beryl C", &hr, 1), BERYL_OK);
    Beryl__Ipc__V1__Envelope *advertise = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_START_ADVERTISING);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(advertise);
    if (request && request->start_advertising) {
        CHECK_STR(request->start_advertising->local_name, "Beryl C");
        CHECK_EQ(request->start_advertising->n_service_uuids, 1);
        fake_respond_ack(&h.fake, advertise->request_id);
    }
    fake_free_envelope(advertise);
    Beryl__Ipc__V1__AdvertisingStarted started = BERYL__IPC__V1__ADVERTISING_STARTED__INIT;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_ADVERTISING_STARTED;
    event.advertising_started = &started;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.advertising_results, 1);
    CHECK(!h.r.had_error && beryl_peripheral_manager_is_advertising(manager));

    /* A read answered inside the callback; a second answer is refused. */
    h.r.respond_inside = true;
    Beryl__Ipc__V1__CentralRead read = BERYL__IPC__V1__CENTRAL_READ__INIT;
    read.id = 41;
    read.central = "C0000000-0000-4000-8000-000000000001";
    read.handle = 3;
    read.offset = 0;
    read.maximum_update_length = 20;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READ_REQUEST;
    event.read_request = &read;
    fake_event(&h.fake, &event);
    Beryl__Ipc__V1__Envelope *answer = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RESPOND);
    request = manager_request(answer);
    if (request && request->respond) {
        CHECK_EQ(request->respond->id, 41);
        CHECK_EQ(request->respond->error, 0);
        CHECK(request->respond->value.len == 2 && request->respond->value.data[0] == 0x21);
    }
    fake_free_envelope(answer);
    CHECK_EQ(h.r.reads, 1);
    CHECK(h.r.answer_twice_status_set && h.r.answer_twice_status == BERYL_E_ALREADY_ANSWERED);
    CHECK(fake_quiet(&h.fake, h.base));

    /* A read of a handle that is not this app's is refused for it: Invalid Handle. */
    read.id = 42;
    read.handle = 77;
    fake_event(&h.fake, &event);
    answer = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RESPOND);
    request = manager_request(answer);
    if (request && request->respond) CHECK_EQ(request->respond->error, BERYL_ATT_INVALID_HANDLE);
    fake_free_envelope(answer);
    CHECK_EQ(h.r.reads, 1);

    /* A prepared write of two parts: one answer for the batch, with the app's error. */
    uint8_t first[] = {1}, second[] = {2};
    Beryl__Ipc__V1__AttWrite a = BERYL__IPC__V1__ATT_WRITE__INIT, b = BERYL__IPC__V1__ATT_WRITE__INIT;
    a.handle = 9;
    a.value.data = first;
    a.value.len = 1;
    b.handle = 9;
    b.offset = 1;
    b.value.data = second;
    b.value.len = 1;
    Beryl__Ipc__V1__AttWrite *parts[] = {&a, &b};
    Beryl__Ipc__V1__CentralWrite write = BERYL__IPC__V1__CENTRAL_WRITE__INIT;
    write.id = 43;
    write.central = read.central;
    write.writes = parts;
    write.n_writes = 2;
    write.with_response = true;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_WRITE_REQUEST;
    event.write_request = &write;
    fake_event(&h.fake, &event);
    answer = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RESPOND);
    request = manager_request(answer);
    if (request && request->respond) {
        CHECK_EQ(request->respond->id, 43);
        CHECK_EQ(request->respond->error, 0x80);
    }
    fake_free_envelope(answer);
    CHECK_EQ(h.r.write_batches, 1);
    CHECK_EQ(h.r.write_count, 2);
    CHECK(fake_quiet(&h.fake, h.base));

    /* A write command: delivered, never answered. */
    write.id = 0;
    write.with_response = false;
    write.n_writes = 1;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.write_batches, 2);
    CHECK(fake_quiet(&h.fake, h.base));

    /* A read left unanswered across the callback is answered later, once. */
    h.r.respond_inside = false;
    read.id = 44;
    read.handle = 3;
    read.offset = 2;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READ_REQUEST;
    event.read_request = &read;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK(h.r.read_request != NULL);
    if (h.r.read_request) {
        CHECK_EQ(beryl_request_offset(h.r.read_request), 2);
        CHECK_EQ(beryl_request_maximum_update_length(h.r.read_request), 20);
        CHECK_STR(beryl_request_central(h.r.read_request), read.central);
        uint8_t big[600] = {0};
        CHECK_EQ(beryl_request_respond(manager, h.r.read_request, BERYL_ATT_SUCCESS, big, 513), BERYL_E_TOO_LONG);
        CHECK_EQ(beryl_request_respond(manager, h.r.read_request, BERYL_ATT_INVALID_OFFSET, NULL, 0), BERYL_OK);
        answer = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RESPOND);
        request = manager_request(answer);
        if (request && request->respond) CHECK_EQ(request->respond->error, BERYL_ATT_INVALID_OFFSET);
        fake_free_envelope(answer);
    }

    /* Subscriptions. */
    Beryl__Ipc__V1__CentralSubscription subscription = BERYL__IPC__V1__CENTRAL_SUBSCRIPTION__INIT;
    subscription.central = read.central;
    subscription.value_handle = 3;
    subscription.notify = true;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_SUBSCRIPTION;
    event.subscription = &subscription;
    fake_event(&h.fake, &event);
    subscription.notify = false;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(h.r.subscribes, 1);
    CHECK_EQ(h.r.unsubscribes, 1);
    harness_end(&h);
}

/* One update_value (a Notify) off the wire, checked: the value's second byte and the ReadyToUpdate count it was sent after. */
static Beryl__Ipc__V1__Envelope *expect_update(harness *h, int value, uint32_t ready_seen) {
    Beryl__Ipc__V1__Envelope *update = expect(h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_UPDATE_VALUE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(update);
    CHECK(request && request->update_value);
    if (request && request->update_value) {
        CHECK_EQ(request->update_value->value_handle, 3);
        CHECK(!request->update_value->indicate);
        CHECK(request->update_value->ordered);
        CHECK_EQ(request->update_value->ready_seen, ready_seen);
        CHECK_EQ(request->update_value->value.len, 2);
        if (request->update_value->value.len == 2) CHECK_EQ(request->update_value->value.data[1], value);
    }
    return update;
}

/* Answers (and frees) an update_value: sent, refused as full, or refused as sent before the latest ReadyToUpdate. */
static void answer_update(harness *h, Beryl__Ipc__V1__Envelope *update, bool sent, bool send_again) {
    Beryl__Ipc__V1__UpdateResult result = BERYL__IPC__V1__UPDATE_RESULT__INIT;
    result.sent = sent;
    result.send_again = send_again;
    Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
    response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_UPDATE_RESULT;
    response.update_result = &result;
    fake_respond(&h->fake, update->request_id, &response);
    fake_free_envelope(update);
}

static void ready_to_update(harness *h, uint32_t count) {
    Beryl__Ipc__V1__ReadyToUpdate ready = BERYL__IPC__V1__READY_TO_UPDATE__INIT;
    ready.count = count;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READY_TO_UPDATE;
    event.ready_to_update = &ready;
    fake_event(&h->fake, &event);
}

static void test_update_value_is_decided_locally_pipelined_and_keeps_order_through_refusals(void) {
    harness h;
    beryl_peripheral_manager *manager = manager_up(&h, NULL);
    beryl_local_characteristic *measurement = published_measurement(&h, manager);
    uint8_t value[2] = {0, 0};
    /* Sixteen taken at once, without a round trip each; the seventeenth waits. */
    for (int i = 0; i < 16; i++) {
        value[1] = (uint8_t)i;
        CHECK_EQ(beryl_peripheral_manager_update_value(manager, measurement, value, 2), 1);
    }
    value[1] = 16;
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, measurement, value, 2), 0);
    /* All sixteen leave without waiting for one another's answers, in order, as ordered updates. */
    Beryl__Ipc__V1__Envelope *sent[16];
    for (int i = 0; i < 16; i++) sent[i] = expect_update(&h, i, 0);
    CHECK(fake_quiet(&h.fake, h.base));
    /* The stack's queue fills at value 2; attd holds back the rest of this app's values with it. */
    answer_update(&h, sent[0], true, false);
    answer_update(&h, sent[1], true, false);
    for (int i = 2; i < 16; i++) answer_update(&h, sent[i], false, false);
    CHECK(fake_quiet(&h.fake, h.base));  /* refused: nothing until ReadyToUpdate */
    CHECK_EQ(h.r.ready_to_update, 1);  /* room again after the refused seventeenth call */
    /* ReadyToUpdate: the refused values go again, first and in order. */
    ready_to_update(&h, 1);
    for (int i = 2; i < 16; i++) sent[i] = expect_update(&h, i, 1);
    CHECK(fake_quiet(&h.fake, h.base));
    /* Another ReadyToUpdate before their answers: value 3 comes back "send again" and goes at once, but value 4, still
     * on its way from before that ReadyToUpdate, holds back those after it until it too comes back. */
    answer_update(&h, sent[2], true, false);
    ready_to_update(&h, 2);
    CHECK(fake_quiet(&h.fake, h.base));  /* nothing refused: nothing to send */
    answer_update(&h, sent[3], false, true);
    sent[3] = expect_update(&h, 3, 2);
    CHECK(fake_quiet(&h.fake, h.base));
    answer_update(&h, sent[4], false, true);
    sent[4] = expect_update(&h, 4, 2);
    CHECK(fake_quiet(&h.fake, h.base));
    for (int i = 3; i < 16; i++) answer_update(&h, sent[i], true, false);
    CHECK(fake_quiet(&h.fake, h.base));
    /* The stack leaves poweredOn with a value on its way: the services and their values go, and the answer that
     * comes after ("send again") is not taken for anything. */
    value[1] = 20;
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, measurement, value, 2), 1);
    Beryl__Ipc__V1__Envelope *stale = expect_update(&h, 20, 2);
    Beryl__Ipc__V1__ManagerEvent off = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    off.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_STATE_CHANGED;
    off.state_changed = BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_POWERED_OFF;
    fake_event(&h.fake, &off);
    pump(h.base, 30);
    answer_update(&h, stale, false, true);
    CHECK(fake_quiet(&h.fake, h.base));
    CHECK(beryl_peripheral_manager_update_value(manager, measurement, value, 2) < 0);
    CHECK(fake_quiet(&h.fake, h.base));
    CHECK_EQ(h.r.ready_to_update, 1);
    CHECK(fake_quiet(&h.fake, h.base));
    beryl_local_service *other = NULL;
    beryl_local_characteristic *unpublished = NULL;
    beryl_local_service_create(&other, "1234", true);
    beryl_local_service_add_characteristic(other, &unpublished, "2A37", BERYL_PROPERTY_NOTIFY, 1, NULL, 0);
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, unpublished, value, 2), BERYL_E_UNKNOWN_OBJECT);
    uint8_t big[513] = {0};
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, measurement, big, 513), BERYL_E_TOO_LONG);
    beryl_local_service_free(other);
    harness_end(&h);
}

static void test_a_restored_peripheral_manager_gets_its_services_before_the_state(void) {
    Beryl__Ipc__V1__CharacteristicSpec measurement = BERYL__IPC__V1__CHARACTERISTIC_SPEC__INIT;
    measurement.uuid = "2A37";
    measurement.properties = 0x10;
    measurement.permissions = 1;
    Beryl__Ipc__V1__CharacteristicSpec *characteristics[] = {&measurement};
    Beryl__Ipc__V1__ServiceSpec spec = BERYL__IPC__V1__SERVICE_SPEC__INIT;
    spec.uuid = "180D";
    spec.primary = true;
    spec.characteristics = characteristics;
    spec.n_characteristics = 1;
    uint32_t handles[] = {3};
    Beryl__Ipc__V1__ServicePublished published = BERYL__IPC__V1__SERVICE_PUBLISHED__INIT;
    published.start_handle = 1;
    published.end_handle = 4;
    published.value_handles = handles;
    published.n_value_handles = 1;
    Beryl__Ipc__V1__PreservedService service = BERYL__IPC__V1__PRESERVED_SERVICE__INIT;
    service.spec = &spec;
    service.published = &published;
    Beryl__Ipc__V1__PreservedService *services[] = {&service};
    Beryl__Ipc__V1__PreservedPeripheralRole role = BERYL__IPC__V1__PRESERVED_PERIPHERAL_ROLE__INIT;
    role.services = services;
    role.n_services = 1;
    role.advertising = true;
    role.local_name = "Beryl C";
    Beryl__Ipc__V1__PreservedState preserved = BERYL__IPC__V1__PRESERVED_STATE__INIT;
    preserved.peripheral = &role;
    harness h;
    beryl_peripheral_manager *manager = manager_up(&h, &preserved);
    CHECK_EQ(h.r.restores, 1);
    CHECK_EQ(h.r.restored_services, 1);
    CHECK(h.r.restore_before_state);
    CHECK(beryl_peripheral_manager_is_advertising(manager));
    beryl_local_characteristic *restored = beryl_local_service_characteristic_at(h.r.added, 0);
    uint8_t value[2] = {0, 80};
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, restored, value, 2), 1);
    Beryl__Ipc__V1__Envelope *update = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_UPDATE_VALUE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(update);
    if (request && request->update_value) CHECK_EQ(request->update_value->value_handle, 3);
    fake_free_envelope(update);
    harness_end(&h);
}

static void test_launch_options_come_from_the_environment(void) {
    setenv("BERYL_LAUNCH_CENTRALS", "hr,,door", 1);
    unsetenv("BERYL_LAUNCH_PERIPHERALS");
    beryl_launch_options options;
    CHECK_EQ(beryl_launch_options_read(&options), 1);
    CHECK_EQ(options.central_count, 2);
    if (options.central_count == 2) {
        CHECK_STR(options.centrals[0], "hr");
        CHECK_STR(options.centrals[1], "door");
    }
    CHECK_EQ(options.peripheral_count, 0);
    beryl_launch_options_clear(&options);
    unsetenv("BERYL_LAUNCH_CENTRALS");
    CHECK_EQ(beryl_launch_options_read(&options), 0);
    CHECK_EQ(beryl_launch_options_read(NULL), BERYL_E_INVALID_ARGUMENT);
}

static void test_wire_errors_map_to_core_bluetooth_domains(void) {
    struct { WireError wire; beryl_error_domain domain; int code; } cases[8];
    for (int i = 0; i < 8; i++) beryl__ipc__v1__error__init(&cases[i].wire);
    cases[0].wire.att_error = 0x80; cases[0].domain = BERYL_ERROR_DOMAIN_ATT; cases[0].code = 0x80;
    cases[1].wire.bluetooth_error = BERYL__IPC__V1__BLUETOOTH_ERROR_CODE__BLUETOOTH_ERROR_CODE_UNKNOWN_DEVICE;
    cases[1].domain = BERYL_ERROR_DOMAIN_BLUETOOTH; cases[1].code = BERYL_BT_UNKNOWN_DEVICE;
    cases[2].wire.smp_reason = 3; cases[2].domain = BERYL_ERROR_DOMAIN_ATT; cases[2].code = BERYL_ATT_INSUFFICIENT_AUTHENTICATION;
    cases[3].wire.hci_status = 0x06; cases[3].wire.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_SECURITY_FAILED;
    cases[3].domain = BERYL_ERROR_DOMAIN_ATT; cases[3].code = BERYL_ATT_INSUFFICIENT_ENCRYPTION;
    cases[4].wire.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT; cases[4].domain = BERYL_ERROR_DOMAIN_BLUETOOTH; cases[4].code = BERYL_BT_INVALID_PARAMETERS;
    cases[5].wire.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED; cases[5].domain = BERYL_ERROR_DOMAIN_BLUETOOTH; cases[5].code = BERYL_BT_OPERATION_NOT_SUPPORTED;
    cases[6].wire.manager_reason = BERYL__IPC__V1__MANAGER_REASON__MANAGER_REASON_NOT_PUBLISHED; cases[6].domain = BERYL_ERROR_DOMAIN_BLUETOOTH; cases[6].code = BERYL_BT_INVALID_PARAMETERS;
    cases[7].wire.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_BUSY; cases[7].domain = BERYL_ERROR_DOMAIN_BLUETOOTH; cases[7].code = BERYL_BT_UNKNOWN;
    for (int i = 0; i < 8; i++) {
        beryl_error error;
        beryl_error_from_wire(&cases[i].wire, &error);
        CHECK_EQ(error.domain, cases[i].domain);
        CHECK_EQ(error.code, cases[i].code);
    }
    beryl_error error;
    CHECK(!beryl_error_from_disconnect(0x16, &error));
    CHECK(!beryl_error_from_disconnect(0x00, &error));
    CHECK(beryl_error_from_disconnect(0x13, &error) && error.code == BERYL_BT_PERIPHERAL_DISCONNECTED);
    CHECK(beryl_error_from_disconnect(0x3E, &error) && error.code == BERYL_BT_CONNECTION_FAILED);
    CHECK(beryl_error_from_disconnect(0x06, &error) && error.code == BERYL_BT_PEER_REMOVED_PAIRING_INFORMATION);
}

static void test_a_send_that_fails_ends_the_session_from_the_loop_not_inside_the_call(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    beryl_characteristic *location = characteristic(peripheral, "2A38");
    int states = h.r.state_count, updates = h.r.value_updates;
    fake_hang_up(&h.fake);
    /* The send fails (EPIPE): the call says so, and no callback runs inside it. */
    CHECK_EQ(beryl_peripheral_read_value(peripheral, location), BERYL_E_NOT_POWERED_ON);
    CHECK_EQ(beryl_central_stop_scan(central), BERYL_E_NOT_POWERED_ON);
    CHECK_EQ(h.r.state_count, states);
    CHECK_EQ(h.r.value_updates, updates);
    /* The app frees the manager from the state callback the loss brings. */
    h.r.free_in_state = true;
    pump(h.base, 30);
    CHECK_EQ(h.r.state_count, states + 1);
    CHECK_EQ(h.r.states[states], BERYL_STATE_RESETTING);
    CHECK(h.r.central == NULL);
    pump(h.base, 200);  /* nothing of the freed manager runs */
    CHECK_EQ(h.r.state_count, states + 1);
    harness_end(&h);
}

static void test_freeing_the_central_inside_a_batch_of_events(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    (void)peripheral;
    h.r.free_in_disconnect = true;
    Beryl__Ipc__V1__PeripheralDisconnected gone = BERYL__IPC__V1__PERIPHERAL_DISCONNECTED__INIT;
    gone.peripheral = PERIPHERAL_ID;
    gone.reason = 0x13;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCONNECTED;
    event.disconnected = &gone;
    event.wake = 4;
    fake_event(&h.fake, &event);
    send_discovered(&h, PERIPHERAL_ID, "after");
    send_connected(&h);
    int connects = h.r.connects;
    pump(h.base, 50);
    CHECK_EQ(h.r.disconnects, 1);
    CHECK(h.r.central == NULL);
    CHECK_EQ(h.r.connects, connects);  /* what followed in the same read went with the manager */
    harness_end(&h);
}

/* ---- the remaining requests, each decoded off the wire ---- */

static void on_length(beryl_peripheral *p, size_t length, const beryl_error *e, void *user) {
    ((record *)user)->rssi = (int)length;
    note_error(user, e);
}
static void on_included(beryl_peripheral *p, beryl_service *s, const beryl_error *e, void *user) { ((record *)user)->service_discoveries++; note_error(user, e); }
static void on_descriptor_value(beryl_peripheral *p, beryl_descriptor *d, const beryl_error *e, void *user) { ((record *)user)->value_updates++; note_error(user, e); }
static void on_descriptor_write(beryl_peripheral *p, beryl_descriptor *d, const beryl_error *e, void *user) { ((record *)user)->writes++; note_error(user, e); }

static void answer_one_service(harness *h, uint64_t id, Beryl__Ipc__V1__GattServiceInfo *one) {
    Beryl__Ipc__V1__GattServiceInfo *services[] = {one};
    Beryl__Ipc__V1__GattDatabase database = BERYL__IPC__V1__GATT_DATABASE__INIT;
    database.services = services;
    database.n_services = 1;
    answer_gatt_database(h, id, &database);
}

static void test_the_other_central_requests_and_state_changes(void) {
    harness h;
    beryl_central *central = central_up(&h, &(beryl_manager_options){.app_id = "com.example.c"});
    beryl_peripheral *peripheral = connected_heart_rate(&h, central);
    beryl_characteristic *measurement = characteristic(peripheral, "2A37");
    beryl_service *service = beryl_characteristic_service(measurement);
    if (!measurement || !service) return harness_end(&h);
    beryl_peripheral_callbacks callbacks = peripheral_callbacks;
    callbacks.did_discover_included_services = on_included;
    callbacks.did_update_descriptor_value = on_descriptor_value;
    callbacks.did_write_descriptor_value = on_descriptor_write;
    beryl_peripheral_set_callbacks(peripheral, &callbacks, &h.r);

    /* Descriptors of 2A37 (value 3) lie in 4..4: the next characteristic's value is 6, its declaration 5. */
    CHECK_EQ(beryl_peripheral_discover_descriptors(peripheral, measurement), BERYL_OK);
    Beryl__Ipc__V1__Envelope *envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(envelope);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->discover->depth, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_DESCRIPTORS);
        CHECK_EQ(request->gatt->discover->start_handle, 4);
        CHECK_EQ(request->gatt->discover->end_handle, 4);
        Beryl__Ipc__V1__GattDescriptorInfo cccd = BERYL__IPC__V1__GATT_DESCRIPTOR_INFO__INIT;
        cccd.uuid = "2902";
        cccd.handle = 4;
        Beryl__Ipc__V1__GattDescriptorInfo *descriptors[] = {&cccd};
        Beryl__Ipc__V1__GattCharacteristicInfo info = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT;
        info.uuid = "2A37";
        info.value_handle = 3;
        info.descriptors = descriptors;
        info.n_descriptors = 1;
        Beryl__Ipc__V1__GattCharacteristicInfo *characteristics[] = {&info};
        Beryl__Ipc__V1__GattServiceInfo one = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        one.characteristics = characteristics;
        one.n_characteristics = 1;
        answer_one_service(&h, envelope->request_id, &one);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(h.r.descriptor_discoveries, 1);
    CHECK_EQ(beryl_characteristic_descriptor_count(measurement), 1);
    beryl_descriptor *cccd = beryl_characteristic_descriptor_at(measurement, 0);
    uint8_t on[2] = {1, 0};
    CHECK_EQ(beryl_peripheral_write_descriptor(peripheral, cccd, on, 2), BERYL_E_NOT_PERMITTED);  /* set_notify's */
    CHECK_EQ(beryl_peripheral_read_descriptor(peripheral, cccd), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(envelope);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->kind_case, BERYL__IPC__V1__GATT_OPERATION__KIND_READ);
        CHECK_EQ(request->gatt->read->handle, 4);
        answer_gatt_value(&h, envelope->request_id, on, 2);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    size_t length = 0;
    const uint8_t *value = beryl_descriptor_value(cccd, &length);
    CHECK(length == 2 && value && value[0] == 1);

    /* Included services: over the service's range. */
    CHECK_EQ(beryl_peripheral_discover_included_services(peripheral, service, NULL, 0), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(envelope);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->discover->depth, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_INCLUDED);
        CHECK_EQ(request->gatt->discover->start_handle, 1);
        CHECK_EQ(request->gatt->discover->end_handle, 8);
        Beryl__Ipc__V1__GattIncludedService battery = BERYL__IPC__V1__GATT_INCLUDED_SERVICE__INIT;
        battery.uuid = "180F";
        battery.start_handle = 20;
        battery.end_handle = 24;
        Beryl__Ipc__V1__GattIncludedService *included[] = {&battery};
        Beryl__Ipc__V1__GattServiceInfo one = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        one.included = included;
        one.n_included = 1;
        answer_one_service(&h, envelope->request_id, &one);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(beryl_service_included_count(service), 1);
    beryl_service *battery = beryl_service_included_at(service, 0);
    CHECK(!beryl_service_is_primary(battery));
    /* The secondary service is part of the tree: its characteristics can be discovered, over its own range. */
    CHECK_EQ(beryl_peripheral_discover_characteristics(peripheral, battery, NULL, 0), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    request = manager_request(envelope);
    if (request && request->gatt) {
        CHECK_EQ(request->gatt->discover->start_handle, 20);
        CHECK_EQ(request->gatt->discover->end_handle, 24);
        Beryl__Ipc__V1__GattCharacteristicInfo level = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT;
        level.uuid = "2A19";
        level.properties = 0x12;
        level.value_handle = 22;
        Beryl__Ipc__V1__GattCharacteristicInfo *characteristics[] = {&level};
        Beryl__Ipc__V1__GattServiceInfo one = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        one.characteristics = characteristics;
        one.n_characteristics = 1;
        answer_one_service(&h, envelope->request_id, &one);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(beryl_service_characteristic_count(battery), 1);
    /* Discovered again: the same object, not a second one. */
    CHECK_EQ(beryl_peripheral_discover_included_services(peripheral, service, NULL, 0), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT);
    if (envelope) {
        Beryl__Ipc__V1__GattIncludedService again = BERYL__IPC__V1__GATT_INCLUDED_SERVICE__INIT;
        again.uuid = "180F";
        again.start_handle = 20;
        again.end_handle = 24;
        Beryl__Ipc__V1__GattIncludedService *included[] = {&again};
        Beryl__Ipc__V1__GattServiceInfo one = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        one.included = included;
        one.n_included = 1;
        answer_one_service(&h, envelope->request_id, &one);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(beryl_service_included_count(service), 1);
    CHECK(beryl_service_included_at(service, 0) == battery);

    /* Maximum write length, without response. */
    CHECK_EQ(beryl_peripheral_maximum_write_length(peripheral, BERYL_WRITE_WITHOUT_RESPONSE, on_length, &h.r), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_MAXIMUM_WRITE_LENGTH);
    request = manager_request(envelope);
    if (request && request->maximum_write_length) {
        CHECK(request->maximum_write_length->without_response);
        CHECK_STR(request->maximum_write_length->peripheral, PERIPHERAL_ID);
        Beryl__Ipc__V1__MaximumWriteLength answer = BERYL__IPC__V1__MAXIMUM_WRITE_LENGTH__INIT;
        answer.length = 244;
        Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_MAXIMUM_WRITE_LENGTH;
        response.maximum_write_length = &answer;
        fake_respond(&h.fake, envelope->request_id, &response);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(h.r.rssi, 244);

    /* Retrieve connected, stop scan, app state, cancel. */
    beryl_uuid hr;
    beryl_uuid_parse("180D", &hr);
    CHECK_EQ(beryl_central_retrieve_connected(central, &hr, 1, on_retrieved, &h.r), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_RETRIEVE_CONNECTED);
    request = manager_request(envelope);
    if (request && request->retrieve_connected) {
        CHECK_EQ(request->retrieve_connected->n_service_uuids, 1);
        Beryl__Ipc__V1__PeripheralList none = BERYL__IPC__V1__PERIPHERAL_LIST__INIT;
        Beryl__Ipc__V1__ManagerResponse response = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        response.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_PERIPHERALS;
        response.peripherals = &none;
        h.r.retrieved = -1;
        fake_respond(&h.fake, envelope->request_id, &response);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(h.r.retrieved, 0);
    CHECK_EQ(beryl_central_stop_scan(central), BERYL_OK);
    fake_free_envelope(expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_STOP_SCAN));
    CHECK(!beryl_central_is_scanning(central));
    CHECK_EQ(beryl_central_set_app_state(central, BERYL_APP_BACKGROUND), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_SET_APP_STATE);
    request = manager_request(envelope);
    if (request && request->set_app_state) {
        CHECK_STR(request->set_app_state->app_id, "com.example.c");
        CHECK_EQ(request->set_app_state->state, BERYL__IPC__V1__APP_LIFECYCLE__APP_LIFECYCLE_BACKGROUND);
    }
    fake_free_envelope(envelope);
    CHECK_EQ(beryl_central_set_app_state(central, (beryl_app_state)9), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_cancel_connection(central, peripheral), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_CANCEL_CONNECTION);
    request = manager_request(envelope);
    if (request && request->cancel_connection) CHECK_STR(request->cancel_connection->peripheral, PERIPHERAL_ID);
    fake_free_envelope(envelope);
    CHECK_EQ(beryl_peripheral_get_state(peripheral), BERYL_PERIPHERAL_DISCONNECTING);

    /* managerd's state changes: each reaches the app once (an unresponsive controller is off to apps). */
    int states = h.r.state_count;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_STATE_CHANGED;
    event.state_changed = BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_UNRESPONSIVE;
    fake_event(&h.fake, &event);
    event.state_changed = BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_POWERED_OFF;
    fake_event(&h.fake, &event);
    event.state_changed = BERYL__IPC__V1__CONTROLLER_STATE__CONTROLLER_STATE_RESETTING;
    fake_event(&h.fake, &event);
    pump(h.base, 30);
    CHECK_EQ(h.r.state_count, states + 2);
    CHECK_EQ(h.r.states[states], BERYL_STATE_POWERED_OFF);
    CHECK_EQ(h.r.states[states + 1], BERYL_STATE_RESETTING);
    CHECK_EQ(beryl_central_scan(central, NULL, 0, false), BERYL_E_NOT_POWERED_ON);
    harness_end(&h);
}

static void test_the_other_peripheral_manager_requests(void) {
    harness h;
    beryl_peripheral_manager *manager = manager_up(&h, NULL);
    published_measurement(&h, manager);
    beryl_local_service *service = h.r.added;
    /* A secondary service including the first; managerd refuses it. */
    beryl_local_service *second = NULL;
    CHECK_EQ(beryl_local_service_create(&second, "D00D0001-0000-1000-8000-00805F9B34FB", false), BERYL_OK);
    CHECK_EQ(beryl_local_service_include(second, service), BERYL_OK);
    CHECK_EQ(beryl_peripheral_manager_add_service(manager, second), BERYL_OK);
    Beryl__Ipc__V1__Envelope *envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_ADD_SERVICE);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(envelope);
    if (request && request->add_service && request->add_service->service) {
        CHECK(!request->add_service->service->primary);
        CHECK_EQ(request->add_service->service->n_included_start_handles, 1);
        if (request->add_service->service->n_included_start_handles == 1) CHECK_EQ(request->add_service->service->included_start_handles[0], 1);
        CHECK_STR(request->add_service->service->uuid, "D00D0001");  /* a 32-bit UUID on the base, in its short form */
        Beryl__Ipc__V1__Error error = BERYL__IPC__V1__ERROR__INIT;
        error.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT;
        error.field = "service.included_start_handles";
        fake_respond_error(&h.fake, envelope->request_id, &error);
    }
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(h.r.adds, 2);
    CHECK(h.r.added == second && h.r.had_error && h.r.last_error.code == BERYL_BT_INVALID_PARAMETERS);
    CHECK_EQ(beryl_peripheral_manager_remove_service(manager, second), BERYL_E_STATE);  /* never published */

    CHECK_EQ(beryl_peripheral_manager_remove_service(manager, service), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_REMOVE_SERVICE);
    request = manager_request(envelope);
    if (request && request->remove_service) CHECK_EQ(request->remove_service->start_handle, 1);
    fake_free_envelope(envelope);
    CHECK_EQ(beryl_peripheral_manager_update_value(manager, beryl_local_service_characteristic_at(service, 0), (const uint8_t *)"x", 1), BERYL_E_STATE);
    CHECK_EQ(beryl_peripheral_manager_stop_advertising(manager), BERYL_OK);
    fake_free_envelope(expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_STOP_ADVERTISING));
    CHECK_EQ(beryl_peripheral_manager_remove_all_services(manager), BERYL_OK);
    fake_free_envelope(expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_REMOVE_ALL_SERVICES));
    /* A refused StartAdvertising reaches did_start_advertising with its error. */
    CHECK_EQ(beryl_peripheral_manager_start_advertising(manager, NULL, NULL, 0), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_START_ADVERTISING);
    Beryl__Ipc__V1__Error error = BERYL__IPC__V1__ERROR__INIT;
    error.code = BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_INTERNAL;
    error.bluetooth_error = BERYL__IPC__V1__BLUETOOTH_ERROR_CODE__BLUETOOTH_ERROR_CODE_ALREADY_ADVERTISING;
    if (envelope) fake_respond_error(&h.fake, envelope->request_id, &error);
    fake_free_envelope(envelope);
    pump(h.base, 20);
    CHECK_EQ(h.r.advertising_results, 1);
    CHECK(h.r.had_error && h.r.last_error.code == BERYL_BT_ALREADY_ADVERTISING);
    harness_end(&h);
}

/* ---- pairing, invalidate, the advertisement's other fields ---- */

typedef struct pairing_record {
    int prompts, outcomes;
    beryl_pairing_prompt_kind kind;
    uint32_t number;
    char peer[64], address[64], identity[64];
    bool success, bonded, ended_by_peer, identity_null;
    uint8_t reason;
} pairing_record;

static void on_prompt(const beryl_pairing_prompt *prompt, void *user) {
    pairing_record *p = user;
    p->prompts++;
    p->kind = prompt->kind;
    p->number = prompt->number;
    snprintf(p->peer, sizeof p->peer, "%s", prompt->peer);
    snprintf(p->address, sizeof p->address, "%s", prompt->address);
}

static void on_finished(const beryl_pairing_outcome *outcome, void *user) {
    pairing_record *p = user;
    p->outcomes++;
    p->success = outcome->success;
    p->bonded = outcome->bonded;
    p->ended_by_peer = outcome->ended_by_peer;
    p->reason = outcome->reason;
    p->identity_null = outcome->identity == NULL;
}

static void send_prompt(harness *h, Beryl__Ipc__V1__PairingPromptKind kind, uint32_t number) {
    Beryl__Ipc__V1__PairingPromptEvent prompt = BERYL__IPC__V1__PAIRING_PROMPT_EVENT__INIT;
    prompt.peer = PERIPHERAL_ID;
    prompt.kind = kind;
    prompt.number = number;
    prompt.address = "C0:11:22:33:44:55/random";
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_PAIRING_PROMPT;
    event.pairing_prompt = &prompt;
    fake_event(&h->fake, &event);
}

static void test_pairing_prompts_reach_the_app_and_its_answer_goes_on_the_wire(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    /* No pairing callbacks: declined at once, not left to SMP's timeout. */
    send_prompt(&h, BERYL__IPC__V1__PAIRING_PROMPT_KIND__CONFIRM_PAIRING, 0);
    Beryl__Ipc__V1__Envelope *envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_ANSWER_PAIRING);
    Beryl__Ipc__V1__ManagerRequest *request = manager_request(envelope);
    if (request && request->answer_pairing) {
        CHECK_STR(request->answer_pairing->peer, PERIPHERAL_ID);
        CHECK(!request->answer_pairing->accept);
    }
    fake_free_envelope(envelope);

    pairing_record p = {0};
    beryl_pairing_callbacks callbacks = {on_prompt, on_finished};
    CHECK_EQ(beryl_central_set_pairing_callbacks(central, &callbacks, &p), BERYL_OK);
    send_prompt(&h, BERYL__IPC__V1__PAIRING_PROMPT_KIND__ENTER_PASSKEY, 0);
    pump(h.base, 20);
    CHECK_EQ(p.prompts, 1);
    CHECK_EQ(p.kind, BERYL_PAIRING_ENTER_PASSKEY);
    CHECK_STR(p.peer, PERIPHERAL_ID);
    CHECK_STR(p.address, "C0:11:22:33:44:55/random");
    CHECK(fake_quiet(&h.fake, h.base));  /* the app answers, not the library */
    CHECK_EQ(beryl_central_answer_pairing(central, PERIPHERAL_ID, true, 1000000), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_answer_pairing(central, "180D", true, 1), BERYL_E_BAD_UUID);
    CHECK_EQ(beryl_central_answer_pairing(central, NULL, true, 1), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_answer_pairing(central, PERIPHERAL_ID, true, 123456), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_ANSWER_PAIRING);
    request = manager_request(envelope);
    if (request && request->answer_pairing) {
        CHECK(request->answer_pairing->accept);
        CHECK_EQ(request->answer_pairing->passkey, 123456);
    }
    fake_free_envelope(envelope);
    send_prompt(&h, BERYL__IPC__V1__PAIRING_PROMPT_KIND__CONFIRM_NUMBER, 654321);
    pump(h.base, 20);
    CHECK_EQ(p.kind, BERYL_PAIRING_CONFIRM_NUMBER);
    CHECK_EQ(p.number, 654321);

    Beryl__Ipc__V1__PairingFinishedEvent finished = BERYL__IPC__V1__PAIRING_FINISHED_EVENT__INIT;
    finished.peer = PERIPHERAL_ID;
    finished.success = 0;
    finished.reason = 0x04;  /* Confirm Value Failed */
    finished.remote = 1;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_PAIRING_FINISHED;
    event.pairing_finished = &finished;
    fake_event(&h.fake, &event);
    pump(h.base, 20);
    CHECK_EQ(p.outcomes, 1);
    CHECK(!p.success && p.ended_by_peer && p.reason == 0x04 && p.identity_null);

    /* A user quit from inside the app. */
    CHECK_EQ(beryl_central_invalidate(central), BERYL_OK);
    envelope = expect(&h, BERYL__IPC__V1__MANAGER_REQUEST__KIND_INVALIDATE);
    request = manager_request(envelope);
    if (request && request->invalidate) CHECK_EQ(request->invalidate->manager, 1);
    fake_free_envelope(envelope);
    CHECK_EQ(beryl_central_invalidate(NULL), BERYL_E_INVALID_ARGUMENT);
    CHECK_EQ(beryl_central_set_pairing_callbacks(NULL, NULL, NULL), BERYL_E_INVALID_ARGUMENT);
    harness_end(&h);
}

static size_t overflow_seen, solicited_seen, service_data_seen, service_data_length;

static void on_discover_everything(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *ad, int rssi, void *user) {
    overflow_seen = ad->overflow_service_uuid_count;
    solicited_seen = ad->solicited_service_uuid_count;
    service_data_seen = ad->service_data_count;
    service_data_length = ad->service_data_count ? ad->service_data[0].length : 0;
}

static void test_an_advertisement_brings_every_field(void) {
    harness h;
    beryl_central *central = central_up(&h, NULL);
    (void)central;
    /* Through this test's own discover callback. */
    beryl_central_callbacks callbacks = central_callbacks;
    callbacks.did_discover = on_discover_everything;
    beryl_central_free(h.r.central);
    fake_hang_up(&h.fake);
    h.r.central = NULL;
    CHECK_EQ(beryl_central_create(&h.r.central, h.base, &callbacks, &h.r, &(beryl_manager_options){.socket_path = h.fake.path}), BERYL_OK);
    CHECK(fake_accept(&h.fake, h.base));
    fake_free_envelope(fake_welcome(&h.fake, h.base, POWERED_ON, NULL, 0));
    char *overflow[] = {"7E570001-0000-1000-8000-00805F9B34FB", "not a uuid"};
    char *solicited[] = {"1812"};
    uint8_t battery[] = {87};
    Beryl__Ipc__V1__AdvertisementInfo__ServiceDataEntry entry = BERYL__IPC__V1__ADVERTISEMENT_INFO__SERVICE_DATA_ENTRY__INIT;
    entry.key = "180F";
    entry.value.data = battery;
    entry.value.len = 1;
    Beryl__Ipc__V1__AdvertisementInfo__ServiceDataEntry *entries[] = {&entry};
    Beryl__Ipc__V1__AdvertisementInfo ad = BERYL__IPC__V1__ADVERTISEMENT_INFO__INIT;
    ad.overflow_service_uuids = overflow;
    ad.n_overflow_service_uuids = 2;
    ad.solicited_service_uuids = solicited;
    ad.n_solicited_service_uuids = 1;
    ad.service_data = entries;
    ad.n_service_data = 1;
    Beryl__Ipc__V1__PeripheralInfo info = BERYL__IPC__V1__PERIPHERAL_INFO__INIT;
    info.identifier = PERIPHERAL_ID;
    info.advertisement = &ad;
    Beryl__Ipc__V1__ScanDiscovery discovery = BERYL__IPC__V1__SCAN_DISCOVERY__INIT;
    discovery.peripheral = &info;
    Beryl__Ipc__V1__ManagerEvent event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCOVERED;
    event.discovered = &discovery;
    fake_event(&h.fake, &event);
    pump(h.base, 30);
    CHECK_EQ(overflow_seen, 1);  /* the one that parses */
    CHECK_EQ(solicited_seen, 1);
    CHECK_EQ(service_data_seen, 1);
    CHECK_EQ(service_data_length, 1);
    harness_end(&h);
}

/* ---- seeds for the fuzz target (tests/fuzz-corpus, written once with --write-seeds DIR and committed) ---- */

/* A seed: the role byte, then each datagram with its 2-byte little-endian length. */
typedef struct seed {
    FILE *file;
} seed;

static bool seed_open(seed *seed, const char *directory, const char *name, uint8_t role) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", directory, name);
    seed->file = fopen(path, "wb");
    if (seed->file) fputc(role, seed->file);
    return seed->file != NULL;
}

static void seed_datagram(seed *seed, const uint8_t *bytes, size_t length) {
    fputc((int)(length & 0xFF), seed->file);
    fputc((int)(length >> 8), seed->file);
    fwrite(bytes, 1, length, seed->file);
}

static void seed_event(seed *seed, Beryl__Ipc__V1__ManagerEvent *event) {
    uint8_t *bytes;
    size_t length = fake_pack_event(event, &bytes);
    seed_datagram(seed, bytes, length);
    free(bytes);
}

static void seed_response(seed *seed, uint64_t id, Beryl__Ipc__V1__ManagerResponse *response) {
    uint8_t *bytes;
    size_t length = fake_pack_answer(id, response, &bytes);
    seed_datagram(seed, bytes, length);
    free(bytes);
}

static void write_seed(const char *directory, const char *name, uint8_t role, Beryl__Ipc__V1__ManagerEvent **events, size_t count) {
    seed seed;
    if (!seed_open(&seed, directory, name, role)) return;
    for (size_t i = 0; i < count; i++) seed_event(&seed, events[i]);
    fclose(seed.file);
}



static void write_seeds(const char *directory) {
    char *uuids[] = {"180D"};
    Beryl__Ipc__V1__AdvertisementInfo ad = BERYL__IPC__V1__ADVERTISEMENT_INFO__INIT;
    ad.local_name = "Beryl HR";
    ad.service_uuids = uuids;
    ad.n_service_uuids = 1;
    Beryl__Ipc__V1__PeripheralInfo info = BERYL__IPC__V1__PERIPHERAL_INFO__INIT;
    info.identifier = PERIPHERAL_ID;
    info.advertisement = &ad;
    Beryl__Ipc__V1__ScanDiscovery discovery = BERYL__IPC__V1__SCAN_DISCOVERY__INIT;
    discovery.peripheral = &info;
    Beryl__Ipc__V1__ManagerEvent discovered = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    discovered.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCOVERED;
    discovered.discovered = &discovery;
    Beryl__Ipc__V1__PeripheralConnected link = BERYL__IPC__V1__PERIPHERAL_CONNECTED__INIT;
    link.peripheral = PERIPHERAL_ID;
    Beryl__Ipc__V1__ManagerEvent connected = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    connected.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_CONNECTED;
    connected.connected = &link;
    connected.wake = 2;
    uint8_t beat[2] = {0, 70};
    Beryl__Ipc__V1__GattNotification note = BERYL__IPC__V1__GATT_NOTIFICATION__INIT;
    note.peripheral = PERIPHERAL_ID;
    note.handle = 3;
    note.value.data = beat;
    note.value.len = 2;
    Beryl__Ipc__V1__ManagerEvent notification = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    notification.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_NOTIFICATION;
    notification.notification = &note;
    Beryl__Ipc__V1__GattServiceChanged change = BERYL__IPC__V1__GATT_SERVICE_CHANGED__INIT;
    change.start_handle = 1;
    change.end_handle = 9;
    Beryl__Ipc__V1__PeripheralServicesChanged changed = BERYL__IPC__V1__PERIPHERAL_SERVICES_CHANGED__INIT;
    changed.peripheral = PERIPHERAL_ID;
    changed.change = &change;
    Beryl__Ipc__V1__ManagerEvent services = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    services.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_SERVICES_CHANGED;
    services.services_changed = &changed;
    Beryl__Ipc__V1__PeripheralDisconnected gone = BERYL__IPC__V1__PERIPHERAL_DISCONNECTED__INIT;
    gone.peripheral = PERIPHERAL_ID;
    gone.reason = 0x13;
    Beryl__Ipc__V1__ManagerEvent disconnected = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    disconnected.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCONNECTED;
    disconnected.disconnected = &gone;
    Beryl__Ipc__V1__ManagerEvent *central_events[] = {&discovered, &connected, &notification, &services, &disconnected};
    write_seed(directory, "central-session", 0, central_events, 5);

    /* The fuzz target's central, welcomed with a restored link, then answered in the order its callbacks ask:
     * scan (2), connect (3), services (4), characteristics (5), subscribe (6), descriptors (7), read (8),
     * descriptors (9), included (10). */
    seed central;
    if (seed_open(&central, directory, "central-welcomed", 0)) {
        Beryl__Ipc__V1__GattCharacteristicInfo c37 = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT, c38 = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT;
        c37.uuid = "2A37";
        c37.properties = 0x10;
        c37.value_handle = 3;
        c38.uuid = "2A38";
        c38.properties = 0x02;
        c38.value_handle = 6;
        Beryl__Ipc__V1__GattCharacteristicInfo *chars[] = {&c37, &c38};
        Beryl__Ipc__V1__GattIncludedService battery = BERYL__IPC__V1__GATT_INCLUDED_SERVICE__INIT;
        battery.uuid = "180F";
        battery.start_handle = 20;
        battery.end_handle = 24;
        Beryl__Ipc__V1__GattIncludedService *included[] = {&battery};
        Beryl__Ipc__V1__GattServiceInfo hr = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        hr.uuid = "180D";
        hr.start_handle = 1;
        hr.end_handle = 8;
        hr.characteristics = chars;
        hr.n_characteristics = 2;
        hr.included = included;
        hr.n_included = 1;
        Beryl__Ipc__V1__GattServiceInfo *list[] = {&hr};
        Beryl__Ipc__V1__GattDatabase database = BERYL__IPC__V1__GATT_DATABASE__INIT;
        database.services = list;
        database.n_services = 1;
        uint32_t notifying[] = {3};
        Beryl__Ipc__V1__PreservedLink link = BERYL__IPC__V1__PRESERVED_LINK__INIT;
        link.identifier = "5E0B1A9C-0000-4000-8000-000000000002";
        link.database = &database;
        link.notifying_value_handles = notifying;
        link.n_notifying_value_handles = 1;
        Beryl__Ipc__V1__PreservedLink *links[] = {&link};
        Beryl__Ipc__V1__PreservedCentralRole role = BERYL__IPC__V1__PRESERVED_CENTRAL_ROLE__INIT;
        role.links = links;
        role.n_links = 1;
        role.scanning = 1;
        Beryl__Ipc__V1__PreservedState preserved = BERYL__IPC__V1__PRESERVED_STATE__INIT;
        preserved.central = &role;
        Beryl__Ipc__V1__Welcome welcome = BERYL__IPC__V1__WELCOME__INIT;
        welcome.state = POWERED_ON;
        welcome.restored = &preserved;
        welcome.was_restored = 1;
        welcome.wake = 1;
        Beryl__Ipc__V1__ManagerResponse welcomed = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        welcomed.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_WELCOME;
        welcomed.welcome = &welcome;
        seed_response(&central, 1, &welcomed);
        seed_response(&central, 2, NULL);
        seed_event(&central, &discovered);
        seed_response(&central, 3, NULL);
        seed_event(&central, &connected);
        Beryl__Ipc__V1__GattResult found = BERYL__IPC__V1__GATT_RESULT__INIT;
        found.kind_case = BERYL__IPC__V1__GATT_RESULT__KIND_DATABASE;
        found.database = &database;
        Beryl__Ipc__V1__ManagerResponse gatt = gatt_response(&found);
        seed_response(&central, 4, &gatt);
        seed_response(&central, 5, &gatt);
        Beryl__Ipc__V1__GattResult nothing = BERYL__IPC__V1__GATT_RESULT__INIT;
        Beryl__Ipc__V1__ManagerResponse empty = gatt_response(&nothing);
        seed_response(&central, 6, &empty);
        Beryl__Ipc__V1__GattDescriptorInfo cccd = BERYL__IPC__V1__GATT_DESCRIPTOR_INFO__INIT;
        cccd.uuid = "2902";
        cccd.handle = 4;
        Beryl__Ipc__V1__GattDescriptorInfo *descs[] = {&cccd};
        Beryl__Ipc__V1__GattCharacteristicInfo with = BERYL__IPC__V1__GATT_CHARACTERISTIC_INFO__INIT;
        with.uuid = "2A37";
        with.value_handle = 3;
        with.descriptors = descs;
        with.n_descriptors = 1;
        Beryl__Ipc__V1__GattCharacteristicInfo *one_char[] = {&with};
        Beryl__Ipc__V1__GattServiceInfo holder = BERYL__IPC__V1__GATT_SERVICE_INFO__INIT;
        holder.characteristics = one_char;
        holder.n_characteristics = 1;
        Beryl__Ipc__V1__GattServiceInfo *holders[] = {&holder};
        Beryl__Ipc__V1__GattDatabase described = BERYL__IPC__V1__GATT_DATABASE__INIT;
        described.services = holders;
        described.n_services = 1;
        Beryl__Ipc__V1__GattResult descriptors = BERYL__IPC__V1__GATT_RESULT__INIT;
        descriptors.kind_case = BERYL__IPC__V1__GATT_RESULT__KIND_DATABASE;
        descriptors.database = &described;
        Beryl__Ipc__V1__ManagerResponse described_response = gatt_response(&descriptors);
        seed_response(&central, 7, &described_response);
        uint8_t chest = 1;
        Beryl__Ipc__V1__GattResult value = BERYL__IPC__V1__GATT_RESULT__INIT;
        value.kind_case = BERYL__IPC__V1__GATT_RESULT__KIND_VALUE;
        value.value.data = &chest;
        value.value.len = 1;
        Beryl__Ipc__V1__ManagerResponse valued = gatt_response(&value);
        seed_response(&central, 8, &valued);
        seed_response(&central, 9, &described_response);
        seed_response(&central, 10, &gatt);
        seed_event(&central, &notification);
        seed_event(&central, &services);
        seed_event(&central, &disconnected);
        fclose(central.file);
    }

    Beryl__Ipc__V1__CentralRead read = BERYL__IPC__V1__CENTRAL_READ__INIT;
    read.id = 5;
    read.central = PERIPHERAL_ID;
    read.handle = 3;
    Beryl__Ipc__V1__ManagerEvent read_event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    read_event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READ_REQUEST;
    read_event.read_request = &read;
    uint8_t one[] = {1};
    Beryl__Ipc__V1__AttWrite part = BERYL__IPC__V1__ATT_WRITE__INIT;
    part.handle = 3;
    part.value.data = one;
    part.value.len = 1;
    Beryl__Ipc__V1__AttWrite *parts[] = {&part, &part};
    Beryl__Ipc__V1__CentralWrite write = BERYL__IPC__V1__CENTRAL_WRITE__INIT;
    write.id = 6;
    write.central = PERIPHERAL_ID;
    write.writes = parts;
    write.n_writes = 2;
    write.with_response = 1;
    Beryl__Ipc__V1__ManagerEvent write_event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    write_event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_WRITE_REQUEST;
    write_event.write_request = &write;
    Beryl__Ipc__V1__CentralSubscription subscription = BERYL__IPC__V1__CENTRAL_SUBSCRIPTION__INIT;
    subscription.central = PERIPHERAL_ID;
    subscription.value_handle = 3;
    subscription.notify = 1;
    Beryl__Ipc__V1__ManagerEvent subscribe = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    subscribe.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_SUBSCRIPTION;
    subscribe.subscription = &subscription;
    Beryl__Ipc__V1__ReadyToUpdate ready = BERYL__IPC__V1__READY_TO_UPDATE__INIT;
    Beryl__Ipc__V1__ManagerEvent ready_event = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    ready_event.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_READY_TO_UPDATE;
    ready_event.ready_to_update = &ready;
    Beryl__Ipc__V1__AdvertisingStarted started = BERYL__IPC__V1__ADVERTISING_STARTED__INIT;
    started.error = "advertising is busy";
    Beryl__Ipc__V1__ManagerEvent advertising = BERYL__IPC__V1__MANAGER_EVENT__INIT;
    advertising.kind_case = BERYL__IPC__V1__MANAGER_EVENT__KIND_ADVERTISING_STARTED;
    advertising.advertising_started = &started;
    Beryl__Ipc__V1__ManagerEvent *peripheral_events[] = {&read_event, &write_event, &subscribe, &ready_event, &advertising};
    write_seed(directory, "peripheral-session", 1, peripheral_events, 5);

    /* The fuzz target's peripheral manager: welcomed (1), its service published (2), advertising (3), the first
     * update refused (4) and sent again after ReadyToUpdate (5), then requests from a central. */
    seed manager;
    if (seed_open(&manager, directory, "peripheral-welcomed", 1)) {
        Beryl__Ipc__V1__Welcome welcome = BERYL__IPC__V1__WELCOME__INIT;
        welcome.state = POWERED_ON;
        Beryl__Ipc__V1__ManagerResponse welcomed = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        welcomed.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_WELCOME;
        welcomed.welcome = &welcome;
        seed_response(&manager, 1, &welcomed);
        uint32_t handles[] = {3, 6, 9};
        Beryl__Ipc__V1__ServicePublished published = BERYL__IPC__V1__SERVICE_PUBLISHED__INIT;
        published.start_handle = 1;
        published.end_handle = 9;
        published.value_handles = handles;
        published.n_value_handles = 3;
        Beryl__Ipc__V1__ManagerResponse added = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        added.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_SERVICE_ADDED;
        added.service_added = &published;
        seed_response(&manager, 2, &added);
        seed_response(&manager, 3, NULL);
        Beryl__Ipc__V1__UpdateResult refused = BERYL__IPC__V1__UPDATE_RESULT__INIT;
        Beryl__Ipc__V1__ManagerResponse refusal = BERYL__IPC__V1__MANAGER_RESPONSE__INIT;
        refusal.kind_case = BERYL__IPC__V1__MANAGER_RESPONSE__KIND_UPDATE_RESULT;
        refusal.update_result = &refused;
        seed_response(&manager, 4, &refusal);
        seed_event(&manager, &ready_event);
        Beryl__Ipc__V1__UpdateResult sent = BERYL__IPC__V1__UPDATE_RESULT__INIT;
        sent.sent = 1;
        Beryl__Ipc__V1__ManagerResponse accepted = refusal;
        accepted.update_result = &sent;
        seed_response(&manager, 5, &accepted);
        seed_event(&manager, &subscribe);
        read.handle = 3;
        seed_event(&manager, &read_event);
        part.handle = 9;
        seed_event(&manager, &write_event);
        started.error = "";
        seed_event(&manager, &advertising);
        fclose(manager.file);
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        write_seeds(argv[2]);
        return 0;
    }
    /* Line by line, so that a sanitizer's abort cannot swallow the cases that passed before it. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct { const char *name; void (*run)(void); } tests[] = {
#define TEST(name) {#name, name}
        TEST(test_uuids_parse_and_format_in_their_shortest_form),
        TEST(test_null_handles_and_bad_arguments_are_errors_never_crashes),
        TEST(test_a_missing_stack_is_powered_off_and_the_library_connects_when_it_comes),
        TEST(test_hello_names_app_and_restore_identifier_and_a_refusal_is_final),
        TEST(test_central_calls_go_on_the_wire_and_events_update_the_tree),
        TEST(test_writes_without_response_wait_on_a_full_queue_and_resume_on_ready),
        TEST(test_a_wake_is_answered_with_app_idle_after_the_callbacks),
        TEST(test_malformed_and_oversized_datagrams_drop_the_session_which_comes_back_others_are_ignored),
        TEST(test_a_lost_session_fails_what_waits_and_says_hello_again),
        TEST(test_a_restored_central_hears_will_restore_before_the_state),
        TEST(test_freeing_the_manager_inside_its_callback_is_safe),
        TEST(test_retrieve_peripherals_by_identifier),
        TEST(test_a_refused_add_service_leaves_the_service_with_the_caller),
        TEST(test_a_published_service_answers_reads_and_writes_exactly_once),
        TEST(test_update_value_is_decided_locally_pipelined_and_keeps_order_through_refusals),
        TEST(test_a_restored_peripheral_manager_gets_its_services_before_the_state),
        TEST(test_launch_options_come_from_the_environment),
        TEST(test_wire_errors_map_to_core_bluetooth_domains),
        TEST(test_the_other_central_requests_and_state_changes),
        TEST(test_a_send_that_fails_ends_the_session_from_the_loop_not_inside_the_call),
        TEST(test_freeing_the_central_inside_a_batch_of_events),
        TEST(test_pairing_prompts_reach_the_app_and_its_answer_goes_on_the_wire),
        TEST(test_an_advertisement_brings_every_field),
        TEST(test_the_other_peripheral_manager_requests),
    };
    size_t count = sizeof tests / sizeof *tests;
    for (size_t i = 0; i < count; i++) {
        int before = failures;
        tests[i].run();
        printf("%s %s\n", failures == before ? "PASS" : "FAIL", tests[i].name);
    }
    printf("%zu tests, %d checks, %d failed\n", count, checks, failures);
    return failures ? 1 : 0;
}
