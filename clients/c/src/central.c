/* The central role: CBCentralManager and the CBPeripheral objects it hands out, with their attribute trees.
 * Attribute objects are kept until the manager is freed, even after discovery or Service Changed drops them from a
 * peripheral's tree, so that a pointer an app holds never dangles (Core Bluetooth's objects live while referenced). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef Beryl__Ipc__V1__GattOperation GattOperation;
typedef Beryl__Ipc__V1__GattServiceInfo ServiceInfo;
typedef Beryl__Ipc__V1__GattCharacteristicInfo CharacteristicInfo;

/* Writes without response allowed on their way to managerd before can_send_write_without_response says wait. */
#define WRITES_IN_FLIGHT_CAP 16

struct beryl_descriptor {
    beryl_uuid uuid;
    uint16_t handle;
    uint8_t *value;
    size_t length;
    beryl_characteristic *characteristic;
};

struct beryl_characteristic {
    beryl_uuid uuid;
    uint32_t properties;
    uint16_t value_handle;
    uint8_t *value;
    size_t length;
    bool notifying;
    beryl_descriptor **descriptors;
    size_t descriptor_count;
    beryl_service *service;
};

struct beryl_service {
    beryl_uuid uuid;
    bool primary;
    uint16_t start, end;
    beryl_characteristic **characteristics;
    size_t characteristic_count;
    beryl_service **included;
    size_t included_count;
    beryl_peripheral *peripheral;
};

typedef enum { ATTIC_SERVICE, ATTIC_CHARACTERISTIC, ATTIC_DESCRIPTOR } attic_kind;

typedef struct attic_item {
    attic_kind kind;
    void *object;
} attic_item;

struct beryl_peripheral {
    beryl_peripheral *next;
    beryl_central *central;
    char *identifier;
    char *name;
    beryl_peripheral_state state;
    beryl_peripheral_callbacks callbacks;
    void *user;
    beryl_service **services;
    size_t service_count;
    /* Every attribute object ever made for this peripheral, freed with it. */
    attic_item *attic;
    size_t attic_count, attic_capacity;
    int writes_in_flight;
    bool write_queue_full;
    bool owes_ready_to_write;
};

struct beryl_central {
    beryl_session *session;
    beryl_central_callbacks callbacks;
    void *user;
    beryl_peripheral *peripherals;
    bool scanning;
    beryl_pairing pairing;
};

/* ---- objects ---- */

static bool attic_keep(beryl_peripheral *peripheral, attic_kind kind, void *object) {
    if (peripheral->attic_count == peripheral->attic_capacity) {
        size_t capacity = peripheral->attic_capacity ? peripheral->attic_capacity * 2 : 16;
        attic_item *grown = realloc(peripheral->attic, capacity * sizeof *grown);
        if (!grown) return false;
        peripheral->attic = grown;
        peripheral->attic_capacity = capacity;
    }
    peripheral->attic[peripheral->attic_count++] = (attic_item){kind, object};
    return true;
}

static void *new_object(beryl_peripheral *peripheral, attic_kind kind, size_t size) {
    void *object = calloc(1, size);
    if (object && !attic_keep(peripheral, kind, object)) {
        free(object);
        return NULL;
    }
    return object;
}

static void free_attic(beryl_peripheral *peripheral) {
    for (size_t i = 0; i < peripheral->attic_count; i++) {
        void *object = peripheral->attic[i].object;
        switch (peripheral->attic[i].kind) {
        case ATTIC_SERVICE: {
            beryl_service *service = object;
            free(service->characteristics);
            free(service->included);
            break;
        }
        case ATTIC_CHARACTERISTIC: {
            beryl_characteristic *characteristic = object;
            free(characteristic->value);
            free(characteristic->descriptors);
            break;
        }
        case ATTIC_DESCRIPTOR: free(((beryl_descriptor *)object)->value); break;
        }
        free(object);
    }
    free(peripheral->attic);
}

static bool append(void ***array, size_t *count, void *item) {
    void **grown = realloc(*array, (*count + 1) * sizeof **array);
    if (!grown) return false;
    grown[(*count)++] = item;
    *array = grown;
    return true;
}

static bool set_bytes(uint8_t **value, size_t *length, const uint8_t *bytes, size_t count) {
    uint8_t *copy = count ? malloc(count) : NULL;
    if (count && !copy) return false;
    if (count) memcpy(copy, bytes, count);
    free(*value);
    *value = copy;
    *length = count;
    return true;
}

static void parse_uuid_or_zero(const char *text, beryl_uuid *out) {
    if (beryl_uuid_parse(text, out) != BERYL_OK) memset(out, 0, sizeof *out);
}

static beryl_peripheral *find_peripheral(beryl_central *central, const char *identifier) {
    for (beryl_peripheral *p = central->peripherals; p; p = p->next)
        if (strcmp(p->identifier, identifier) == 0) return p;
    return NULL;
}

static beryl_peripheral *peripheral_for(beryl_central *central, const char *identifier) {
    beryl_peripheral *peripheral = find_peripheral(central, identifier);
    if (peripheral) return peripheral;
    peripheral = calloc(1, sizeof *peripheral);
    if (!peripheral) return NULL;
    peripheral->identifier = beryl_strdup(identifier);
    if (!peripheral->identifier) {
        free(peripheral);
        return NULL;
    }
    peripheral->central = central;
    peripheral->next = central->peripherals;
    central->peripherals = peripheral;
    return peripheral;
}

static void set_name(beryl_peripheral *peripheral, const char *name) {
    if (!name || !*name || (peripheral->name && strcmp(peripheral->name, name) == 0)) return;
    char *copy = beryl_strdup(name);
    if (!copy) return;
    free(peripheral->name);
    peripheral->name = copy;
}

static bool peripheral_belongs(const beryl_central *central, const beryl_peripheral *peripheral) {
    for (beryl_peripheral *p = central->peripherals; p; p = p->next)
        if (p == peripheral) return true;
    return false;
}

/* In the peripheral's tree: one of its services, or a (secondary) service one of them includes. */
static bool service_is_live(const beryl_service *service) {
    const beryl_peripheral *peripheral = service->peripheral;
    for (size_t i = 0; i < peripheral->service_count; i++) {
        if (peripheral->services[i] == service) return true;
        for (size_t k = 0; k < peripheral->services[i]->included_count; k++)
            if (peripheral->services[i]->included[k] == service) return true;
    }
    return false;
}

static bool characteristic_is_live(const beryl_characteristic *characteristic) {
    const beryl_service *service = characteristic->service;
    if (!service_is_live(service)) return false;
    for (size_t i = 0; i < service->characteristic_count; i++)
        if (service->characteristics[i] == characteristic) return true;
    return false;
}

static beryl_characteristic *characteristic_in(const beryl_service *service, uint32_t handle) {
    for (size_t c = 0; c < service->characteristic_count; c++)
        if (service->characteristics[c]->value_handle == handle) return service->characteristics[c];
    return NULL;
}

static beryl_characteristic *characteristic_with_value_handle(beryl_peripheral *peripheral, uint32_t handle) {
    for (size_t s = 0; s < peripheral->service_count; s++) {
        beryl_service *service = peripheral->services[s];
        beryl_characteristic *found = characteristic_in(service, handle);
        for (size_t k = 0; !found && k < service->included_count; k++) found = characteristic_in(service->included[k], handle);
        if (found) return found;
    }
    return NULL;
}

/* ---- building the tree from what discovery answered ---- */

static beryl_descriptor *make_descriptor(beryl_characteristic *characteristic, const Beryl__Ipc__V1__GattDescriptorInfo *info) {
    for (size_t i = 0; i < characteristic->descriptor_count; i++)
        if (characteristic->descriptors[i]->handle == info->handle) return characteristic->descriptors[i];
    beryl_descriptor *descriptor = new_object(characteristic->service->peripheral, ATTIC_DESCRIPTOR, sizeof *descriptor);
    if (!descriptor) return NULL;
    parse_uuid_or_zero(info->uuid, &descriptor->uuid);
    descriptor->handle = (uint16_t)info->handle;
    descriptor->characteristic = characteristic;
    return descriptor;
}

static beryl_characteristic *make_characteristic(beryl_service *service, const CharacteristicInfo *info) {
    beryl_characteristic *characteristic = new_object(service->peripheral, ATTIC_CHARACTERISTIC, sizeof *characteristic);
    if (!characteristic) return NULL;
    parse_uuid_or_zero(info->uuid, &characteristic->uuid);
    characteristic->properties = info->properties;
    characteristic->value_handle = (uint16_t)info->value_handle;
    characteristic->service = service;
    for (size_t d = 0; d < info->n_descriptors; d++) {
        beryl_descriptor *descriptor = make_descriptor(characteristic, info->descriptors[d]);
        if (descriptor) append((void ***)&characteristic->descriptors, &characteristic->descriptor_count, descriptor);
    }
    return characteristic;
}

static beryl_service *make_service(beryl_peripheral *peripheral, const char *uuid, uint32_t start, uint32_t end, bool primary) {
    beryl_service *service = new_object(peripheral, ATTIC_SERVICE, sizeof *service);
    if (!service) return NULL;
    parse_uuid_or_zero(uuid, &service->uuid);
    service->start = (uint16_t)start;
    service->end = (uint16_t)end;
    service->primary = primary;
    service->peripheral = peripheral;
    return service;
}

static int by_start(const void *a, const void *b) {
    return (int)(*(beryl_service *const *)a)->start - (int)(*(beryl_service *const *)b)->start;
}

static int by_value_handle(const void *a, const void *b) {
    return (int)(*(beryl_characteristic *const *)a)->value_handle -
           (int)(*(beryl_characteristic *const *)b)->value_handle;
}

static beryl_service *service_at_start(beryl_peripheral *peripheral, uint32_t start) {
    for (size_t i = 0; i < peripheral->service_count; i++)
        if (peripheral->services[i]->start == start) return peripheral->services[i];
    return NULL;
}

/* A service in the tree, primary or included, by its first handle. */
static beryl_service *known_service(beryl_peripheral *peripheral, uint32_t start) {
    beryl_service *found = service_at_start(peripheral, start);
    for (size_t i = 0; !found && i < peripheral->service_count; i++)
        for (size_t k = 0; !found && k < peripheral->services[i]->included_count; k++)
            if (peripheral->services[i]->included[k]->start == start) found = peripheral->services[i]->included[k];
    return found;
}

/* The whole database, as restoration gives it: the tree is replaced. */
static void adopt_database(beryl_peripheral *peripheral, const GattDatabase *database) {
    peripheral->service_count = 0;
    for (size_t s = 0; s < database->n_services; s++) {
        const ServiceInfo *info = database->services[s];
        beryl_service *service = make_service(peripheral, info->uuid, info->start_handle, info->end_handle, true);
        if (!service || !append((void ***)&peripheral->services, &peripheral->service_count, service)) continue;
        for (size_t c = 0; c < info->n_characteristics; c++) {
            beryl_characteristic *characteristic = make_characteristic(service, info->characteristics[c]);
            if (characteristic)
                append((void ***)&service->characteristics, &service->characteristic_count, characteristic);
        }
    }
    for (size_t s = 0; s < database->n_services; s++) {
        const ServiceInfo *info = database->services[s];
        beryl_service *service = service_at_start(peripheral, info->start_handle);
        for (size_t i = 0; service && i < info->n_included; i++) {
            const Beryl__Ipc__V1__GattIncludedService *entry = info->included[i];
            /* A primary of the database, or a secondary service only reachable through this inclusion. */
            beryl_service *included = known_service(peripheral, entry->start_handle);
            if (!included) included = make_service(peripheral, entry->uuid, entry->start_handle, entry->end_handle, false);
            if (included) append((void ***)&service->included, &service->included_count, included);
        }
    }
    qsort(peripheral->services, peripheral->service_count, sizeof *peripheral->services, by_start);
}

/* ---- requests ---- */

typedef enum {
    OP_SERVICES, OP_INCLUDED, OP_CHARACTERISTICS, OP_DESCRIPTORS, OP_READ, OP_READ_DESCRIPTOR, OP_WRITE,
    OP_WRITE_COMMAND, OP_WRITE_DESCRIPTOR, OP_NOTIFY, OP_RSSI, OP_LENGTH, OP_CONNECT, OP_RETRIEVE,
} operation_kind;

typedef struct operation {
    operation_kind kind;
    beryl_peripheral *peripheral;
    void *target;
    /* The UUIDs a discovery asked for (none: all). */
    beryl_uuid *filter;
    size_t filter_count;
    bool enable;
    beryl_length_callback length_callback;
    beryl_retrieve_callback retrieve_callback;
    void *user;
} operation;

static operation *new_operation(operation_kind kind, beryl_peripheral *peripheral, void *target) {
    operation *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        op->peripheral = peripheral;
        op->target = target;
    }
    return op;
}

static void free_operation(operation *op) {
    free(op->filter);
    free(op);
}

static bool wanted(const operation *op, const char *uuid_text) {
    if (op->filter_count == 0) return true;
    beryl_uuid uuid;
    if (beryl_uuid_parse(uuid_text, &uuid) != BERYL_OK) return false;
    for (size_t i = 0; i < op->filter_count; i++)
        if (beryl_uuid_equal(&op->filter[i], &uuid)) return true;
    return false;
}

/* discoverServices: known services keep their objects; a sought primary service the answer lacks is gone. */
static void merge_services(beryl_peripheral *peripheral, const operation *op, const GattDatabase *database) {
    size_t kept = 0;
    for (size_t i = 0; i < peripheral->service_count; i++) {
        beryl_service *service = peripheral->services[i];
        char text[BERYL_UUID_STRING_SIZE];
        beryl_uuid_format(&service->uuid, text);
        bool found = false;
        for (size_t s = 0; s < database->n_services; s++)
            if (database->services[s]->start_handle == service->start) found = true;
        if (found || !service->primary || !wanted(op, text)) peripheral->services[kept++] = service;
    }
    peripheral->service_count = kept;
    for (size_t s = 0; s < database->n_services; s++) {
        const ServiceInfo *info = database->services[s];
        if (service_at_start(peripheral, info->start_handle)) continue;
        beryl_service *service = make_service(peripheral, info->uuid, info->start_handle, info->end_handle, true);
        if (service) append((void ***)&peripheral->services, &peripheral->service_count, service);
    }
    qsort(peripheral->services, peripheral->service_count, sizeof *peripheral->services, by_start);
}

static void merge_included(beryl_service *service, const operation *op, const GattDatabase *database) {
    if (database->n_services == 0) return;
    const ServiceInfo *info = database->services[0];
    for (size_t i = 0; i < info->n_included; i++) {
        const Beryl__Ipc__V1__GattIncludedService *entry = info->included[i];
        if (!wanted(op, entry->uuid)) continue;
        beryl_service *included = known_service(service->peripheral, entry->start_handle);
        if (!included) included = make_service(service->peripheral, entry->uuid, entry->start_handle, entry->end_handle, false);
        if (!included) continue;
        bool known = false;
        for (size_t k = 0; k < service->included_count; k++) known |= service->included[k] == included;
        if (!known) append((void ***)&service->included, &service->included_count, included);
    }
}

static void merge_characteristics(beryl_service *service, const GattDatabase *database) {
    if (database->n_services == 0) return;
    const ServiceInfo *info = database->services[0];
    for (size_t c = 0; c < info->n_characteristics; c++) {
        const CharacteristicInfo *entry = info->characteristics[c];
        bool known = false;
        for (size_t k = 0; k < service->characteristic_count; k++)
            known |= service->characteristics[k]->value_handle == entry->value_handle;
        if (known) continue;
        beryl_characteristic *characteristic = make_characteristic(service, entry);
        if (characteristic) append((void ***)&service->characteristics, &service->characteristic_count, characteristic);
    }
    qsort(service->characteristics, service->characteristic_count, sizeof *service->characteristics, by_value_handle);
}

static void merge_descriptors(beryl_characteristic *characteristic, const GattDatabase *database) {
    beryl_descriptor **found = NULL;
    size_t count = 0;
    if (database && database->n_services > 0 && database->services[0]->n_characteristics > 0) {
        const CharacteristicInfo *info = database->services[0]->characteristics[0];
        for (size_t d = 0; d < info->n_descriptors; d++) {
            beryl_descriptor *descriptor = make_descriptor(characteristic, info->descriptors[d]);
            if (descriptor) append((void ***)&found, &count, descriptor);
        }
    }
    free(characteristic->descriptors);
    characteristic->descriptors = found;
    characteristic->descriptor_count = count;
}

static void ready_to_write_if_owed(beryl_peripheral *peripheral) {
    if (!peripheral->owes_ready_to_write || !beryl_peripheral_can_send_write_without_response(peripheral)) return;
    peripheral->owes_ready_to_write = false;
    if (peripheral->callbacks.is_ready_to_send_write_without_response)
        peripheral->callbacks.is_ready_to_send_write_without_response(peripheral, peripheral->user);
}

static void answered(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    beryl_central *central = owner;
    operation *op = context;
    if (!response && !error) {
        free_operation(op);
        return;
    }
    beryl_peripheral *peripheral = op->peripheral;
    const beryl_peripheral_callbacks *cb = peripheral ? &peripheral->callbacks : NULL;
    void *user = peripheral ? peripheral->user : NULL;
    const Beryl__Ipc__V1__GattResult *result =
        response && response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_GATT ? response->gatt : NULL;
    const GattDatabase *database =
        result && result->kind_case == BERYL__IPC__V1__GATT_RESULT__KIND_DATABASE ? result->database : NULL;
    static const GattDatabase empty_database = BERYL__IPC__V1__GATT_DATABASE__INIT;
    if (!database) database = &empty_database;
    bool has_value = result && result->kind_case == BERYL__IPC__V1__GATT_RESULT__KIND_VALUE;
    switch (op->kind) {
    case OP_SERVICES:
        if (!error) merge_services(peripheral, op, database);
        if (cb->did_discover_services) cb->did_discover_services(peripheral, error, user);
        break;
    case OP_INCLUDED:
        if (!error) merge_included(op->target, op, database);
        if (cb->did_discover_included_services) cb->did_discover_included_services(peripheral, op->target, error, user);
        break;
    case OP_CHARACTERISTICS:
        if (!error) merge_characteristics(op->target, database);
        if (cb->did_discover_characteristics) cb->did_discover_characteristics(peripheral, op->target, error, user);
        break;
    case OP_DESCRIPTORS:
        if (!error) merge_descriptors(op->target, database);
        if (cb->did_discover_descriptors) cb->did_discover_descriptors(peripheral, op->target, error, user);
        break;
    case OP_READ: {
        beryl_characteristic *characteristic = op->target;
        if (!error && has_value) set_bytes(&characteristic->value, &characteristic->length, result->value.data, result->value.len);
        if (cb->did_update_value) cb->did_update_value(peripheral, characteristic, error, user);
        break;
    }
    case OP_READ_DESCRIPTOR: {
        beryl_descriptor *descriptor = op->target;
        if (!error && has_value) set_bytes(&descriptor->value, &descriptor->length, result->value.data, result->value.len);
        if (cb->did_update_descriptor_value) cb->did_update_descriptor_value(peripheral, descriptor, error, user);
        break;
    }
    case OP_WRITE:
        if (cb->did_write_value) cb->did_write_value(peripheral, op->target, error, user);
        break;
    case OP_WRITE_COMMAND:
        /* No callback for a write without response (Core Bluetooth): a full queue only says wait. */
        peripheral->writes_in_flight--;
        if (error && beryl_session_error_code(central->session) == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_BUSY)
            peripheral->write_queue_full = true;
        ready_to_write_if_owed(peripheral);
        break;
    case OP_WRITE_DESCRIPTOR:
        if (cb->did_write_descriptor_value) cb->did_write_descriptor_value(peripheral, op->target, error, user);
        break;
    case OP_NOTIFY: {
        beryl_characteristic *characteristic = op->target;
        if (!error) characteristic->notifying = op->enable;
        if (cb->did_update_notification_state) cb->did_update_notification_state(peripheral, characteristic, error, user);
        break;
    }
    case OP_RSSI: {
        /* 127: RSSI not available (Core Vol 4 Part E §7.5.4). */
        int rssi = !error && response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_RSSI ? response->rssi->rssi : 127;
        if (cb->did_read_rssi) cb->did_read_rssi(peripheral, rssi, error, user);
        break;
    }
    case OP_LENGTH: {
        size_t length = !error && response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_MAXIMUM_WRITE_LENGTH
                            ? response->maximum_write_length->length : 0;
        op->length_callback(peripheral, length, error, op->user);
        break;
    }
    case OP_CONNECT:
        if (error) {
            peripheral->state = BERYL_PERIPHERAL_DISCONNECTED;
            if (central->callbacks.did_fail_to_connect)
                central->callbacks.did_fail_to_connect(central, peripheral, error, central->user);
        }
        break;
    case OP_RETRIEVE: {
        beryl_peripheral **list = NULL;
        size_t count = 0;
        if (!error && response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_PERIPHERALS) {
            const Beryl__Ipc__V1__PeripheralList *answer = response->peripherals;
            for (size_t i = 0; i < answer->n_peripherals; i++) {
                beryl_peripheral *found = peripheral_for(central, answer->peripherals[i]->identifier);
                if (!found) continue;
                set_name(found, answer->peripherals[i]->name);
                append((void ***)&list, &count, found);
            }
        }
        op->retrieve_callback(central, list, count, error, op->user);
        free(list);
        break;
    }
    }
    free_operation(op);
}

static int send_operation(beryl_central *central, ManagerRequest *request, operation *op) {
    if (!op) return BERYL_E_NO_MEMORY;
    int status = beryl_session_send(central->session, request, answered, op);
    if (status != BERYL_OK) free_operation(op);
    return status;
}

static int gatt_ready(const beryl_peripheral *peripheral) {
    if (!peripheral) return BERYL_E_INVALID_ARGUMENT;
    if (beryl_session_state(peripheral->central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    if (peripheral->state != BERYL_PERIPHERAL_CONNECTED) return BERYL_E_NOT_CONNECTED;
    return BERYL_OK;
}

static int send_gatt(beryl_peripheral *peripheral, GattOperation *gatt, operation *op) {
    gatt->peripheral = peripheral->identifier;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_GATT;
    request.gatt = gatt;
    return send_operation(peripheral->central, &request, op);
}

static int discover(beryl_peripheral *peripheral, operation_kind kind, void *target, Beryl__Ipc__V1__GattDiscoveryDepth depth,
                    uint32_t start, uint32_t end, const beryl_uuid *uuids, size_t count) {
    if (count > 0 && !uuids) return BERYL_E_INVALID_ARGUMENT;
    char **strings = NULL;
    int status = beryl_uuid_list_to_strings(uuids, count, &strings);
    if (status != BERYL_OK) return status;
    operation *op = new_operation(kind, peripheral, target);
    if (op && count > 0) {
        op->filter = malloc(count * sizeof *uuids);
        if (op->filter) {
            memcpy(op->filter, uuids, count * sizeof *uuids);
            op->filter_count = count;
        } else {
            free(op);
            op = NULL;
        }
    }
    Beryl__Ipc__V1__DiscoverAttributes discover = BERYL__IPC__V1__DISCOVER_ATTRIBUTES__INIT;
    discover.depth = depth;
    discover.start_handle = start;
    discover.end_handle = end;
    if (kind == OP_CHARACTERISTICS) {
        discover.characteristic_uuids = strings;
        discover.n_characteristic_uuids = count;
    } else {
        discover.service_uuids = strings;
        discover.n_service_uuids = count;
    }
    GattOperation gatt = BERYL__IPC__V1__GATT_OPERATION__INIT;
    gatt.kind_case = BERYL__IPC__V1__GATT_OPERATION__KIND_DISCOVER;
    gatt.discover = &discover;
    status = send_gatt(peripheral, &gatt, op);
    beryl_strings_free(strings, count);
    return status;
}

/* ---- the central's public calls ---- */

int beryl_peripheral_discover_services(beryl_peripheral *peripheral, const beryl_uuid *uuids, size_t count) {
    int status = gatt_ready(peripheral);
    if (status != BERYL_OK) return status;
    return discover(peripheral, OP_SERVICES, NULL, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_SERVICES,
                    0, 0, uuids, count);
}

static int service_ready(beryl_peripheral *peripheral, beryl_service *service) {
    int status = gatt_ready(peripheral);
    if (status != BERYL_OK) return status;
    if (!service) return BERYL_E_INVALID_ARGUMENT;
    if (service->peripheral != peripheral || !service_is_live(service)) return BERYL_E_UNKNOWN_OBJECT;
    return BERYL_OK;
}

int beryl_peripheral_discover_included_services(beryl_peripheral *peripheral, beryl_service *service,
                                                const beryl_uuid *uuids, size_t count) {
    int status = service_ready(peripheral, service);
    if (status != BERYL_OK) return status;
    return discover(peripheral, OP_INCLUDED, service, BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_INCLUDED,
                    service->start, service->end, uuids, count);
}

int beryl_peripheral_discover_characteristics(beryl_peripheral *peripheral, beryl_service *service,
                                              const beryl_uuid *uuids, size_t count) {
    int status = service_ready(peripheral, service);
    if (status != BERYL_OK) return status;
    return discover(peripheral, OP_CHARACTERISTICS, service,
                    BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_CHARACTERISTICS, service->start,
                    service->end, uuids, count);
}

static int characteristic_ready(beryl_peripheral *peripheral, beryl_characteristic *characteristic) {
    int status = gatt_ready(peripheral);
    if (status != BERYL_OK) return status;
    if (!characteristic) return BERYL_E_INVALID_ARGUMENT;
    if (characteristic->service->peripheral != peripheral || !characteristic_is_live(characteristic))
        return BERYL_E_UNKNOWN_OBJECT;
    return BERYL_OK;
}

int beryl_peripheral_discover_descriptors(beryl_peripheral *peripheral, beryl_characteristic *characteristic) {
    int status = characteristic_ready(peripheral, characteristic);
    if (status != BERYL_OK) return status;
    /* A characteristic's descriptors lie between its value and the next declaration (Core Vol 3 Part G §3.3). */
    beryl_service *service = characteristic->service;
    uint32_t start = characteristic->value_handle + 1u, end = service->end;
    for (size_t i = 0; i < service->characteristic_count; i++) {
        uint32_t next = service->characteristics[i]->value_handle;
        if (next > characteristic->value_handle && next - 2u < end) end = next - 2u;
    }
    if (start > end) {
        /* Room for none: answered without asking, on this call's behalf, as the Swift library does. */
        merge_descriptors(characteristic, NULL);
        if (peripheral->callbacks.did_discover_descriptors)
            peripheral->callbacks.did_discover_descriptors(peripheral, characteristic, NULL, peripheral->user);
        return BERYL_OK;
    }
    return discover(peripheral, OP_DESCRIPTORS, characteristic,
                    BERYL__IPC__V1__GATT_DISCOVERY_DEPTH__GATT_DISCOVERY_DEPTH_DESCRIPTORS, start, end, NULL, 0);
}

static int read_handle(beryl_peripheral *peripheral, operation_kind kind, void *target, uint32_t handle) {
    Beryl__Ipc__V1__GattRead read = BERYL__IPC__V1__GATT_READ__INIT;
    read.handle = handle;
    GattOperation gatt = BERYL__IPC__V1__GATT_OPERATION__INIT;
    gatt.kind_case = BERYL__IPC__V1__GATT_OPERATION__KIND_READ;
    gatt.read = &read;
    return send_gatt(peripheral, &gatt, new_operation(kind, peripheral, target));
}

int beryl_peripheral_read_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic) {
    int status = characteristic_ready(peripheral, characteristic);
    if (status != BERYL_OK) return status;
    if (!(characteristic->properties & BERYL_PROPERTY_READ)) return BERYL_E_NOT_PERMITTED;
    return read_handle(peripheral, OP_READ, characteristic, characteristic->value_handle);
}

static int descriptor_ready(beryl_peripheral *peripheral, beryl_descriptor *descriptor) {
    if (!descriptor) return BERYL_E_INVALID_ARGUMENT;
    int status = characteristic_ready(peripheral, descriptor->characteristic);
    if (status != BERYL_OK) return status;
    const beryl_characteristic *characteristic = descriptor->characteristic;
    for (size_t i = 0; i < characteristic->descriptor_count; i++)
        if (characteristic->descriptors[i] == descriptor) return BERYL_OK;
    return BERYL_E_UNKNOWN_OBJECT;
}

int beryl_peripheral_read_descriptor(beryl_peripheral *peripheral, beryl_descriptor *descriptor) {
    int status = descriptor_ready(peripheral, descriptor);
    if (status != BERYL_OK) return status;
    return read_handle(peripheral, OP_READ_DESCRIPTOR, descriptor, descriptor->handle);
}

static int write_handle(beryl_peripheral *peripheral, operation *op, uint32_t handle, const uint8_t *value,
                        size_t length, bool without_response, bool is_signed) {
    Beryl__Ipc__V1__GattWrite write = BERYL__IPC__V1__GATT_WRITE__INIT;
    write.handle = handle;
    write.value.data = (uint8_t *)value;
    write.value.len = length;
    write.without_response = without_response;
    write.signed_ = is_signed;
    GattOperation gatt = BERYL__IPC__V1__GATT_OPERATION__INIT;
    gatt.kind_case = BERYL__IPC__V1__GATT_OPERATION__KIND_WRITE;
    gatt.write = &write;
    return send_gatt(peripheral, &gatt, op);
}

int beryl_peripheral_write_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                                 const uint8_t *value, size_t length, beryl_write_type type) {
    int status = characteristic_ready(peripheral, characteristic);
    if (status != BERYL_OK) return status;
    if (length > 0 && !value) return BERYL_E_INVALID_ARGUMENT;
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    uint32_t properties = characteristic->properties;
    if (type == BERYL_WRITE_WITH_RESPONSE) {
        if (!(properties & BERYL_PROPERTY_WRITE)) return BERYL_E_NOT_PERMITTED;
        return write_handle(peripheral, new_operation(OP_WRITE, peripheral, characteristic), characteristic->value_handle,
                            value, length, false, false);
    }
    if (type != BERYL_WRITE_WITHOUT_RESPONSE) return BERYL_E_INVALID_ARGUMENT;
    /* Signed only where the characteristic offers nothing else (Core Vol 3 Part G §4.9.2). */
    bool is_signed = !(properties & BERYL_PROPERTY_WRITE_WITHOUT_RESPONSE);
    if (is_signed && !(properties & BERYL_PROPERTY_AUTHENTICATED_SIGNED_WRITES)) return BERYL_E_NOT_PERMITTED;
    if (!beryl_peripheral_can_send_write_without_response(peripheral)) {
        /* Dropped, as Core Bluetooth drops what is written while it said wait; the ready callback follows. */
        peripheral->owes_ready_to_write = true;
        return BERYL_OK;
    }
    status = write_handle(peripheral, new_operation(OP_WRITE_COMMAND, peripheral, characteristic),
                          characteristic->value_handle, value, length, true, is_signed);
    if (status == BERYL_OK) {
        peripheral->writes_in_flight++;
        if (!beryl_peripheral_can_send_write_without_response(peripheral)) peripheral->owes_ready_to_write = true;
    }
    return status;
}

int beryl_peripheral_write_descriptor(beryl_peripheral *peripheral, beryl_descriptor *descriptor, const uint8_t *value,
                                      size_t length) {
    int status = descriptor_ready(peripheral, descriptor);
    if (status != BERYL_OK) return status;
    if (length > 0 && !value) return BERYL_E_INVALID_ARGUMENT;
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    /* The Client Characteristic Configuration belongs to set_notify (Core Bluetooth refuses it too). */
    beryl_uuid cccd;
    beryl_uuid_parse("2902", &cccd);
    if (beryl_uuid_equal(&descriptor->uuid, &cccd)) return BERYL_E_NOT_PERMITTED;
    return write_handle(peripheral, new_operation(OP_WRITE_DESCRIPTOR, peripheral, descriptor), descriptor->handle,
                        value, length, false, false);
}

bool beryl_peripheral_can_send_write_without_response(const beryl_peripheral *peripheral) {
    return peripheral && peripheral->state == BERYL_PERIPHERAL_CONNECTED && !peripheral->write_queue_full &&
           peripheral->writes_in_flight < WRITES_IN_FLIGHT_CAP;
}

int beryl_peripheral_set_notify(beryl_peripheral *peripheral, beryl_characteristic *characteristic, bool enabled) {
    int status = characteristic_ready(peripheral, characteristic);
    if (status != BERYL_OK) return status;
    uint32_t properties = characteristic->properties;
    if (!(properties & (BERYL_PROPERTY_NOTIFY | BERYL_PROPERTY_INDICATE))) return BERYL_E_NOT_PERMITTED;
    /* The discovered Client Characteristic Configuration, else the handle after the value (the usual layout). */
    uint32_t cccd_handle = characteristic->value_handle + 1u;
    beryl_uuid cccd;
    beryl_uuid_parse("2902", &cccd);
    for (size_t i = 0; i < characteristic->descriptor_count; i++)
        if (beryl_uuid_equal(&characteristic->descriptors[i]->uuid, &cccd)) cccd_handle = characteristic->descriptors[i]->handle;
    Beryl__Ipc__V1__GattSubscribe notify = BERYL__IPC__V1__GATT_SUBSCRIBE__INIT;
    notify.value_handle = characteristic->value_handle;
    notify.cccd_handle = cccd_handle;
    notify.indicate = !(properties & BERYL_PROPERTY_NOTIFY);
    notify.enable = enabled;
    GattOperation gatt = BERYL__IPC__V1__GATT_OPERATION__INIT;
    gatt.kind_case = BERYL__IPC__V1__GATT_OPERATION__KIND_SET_NOTIFY;
    gatt.set_notify = &notify;
    operation *op = new_operation(OP_NOTIFY, peripheral, characteristic);
    if (op) op->enable = enabled;
    return send_gatt(peripheral, &gatt, op);
}

int beryl_peripheral_read_rssi(beryl_peripheral *peripheral) {
    int status = gatt_ready(peripheral);
    if (status != BERYL_OK) return status;
    Beryl__Ipc__V1__ReadRSSI read = BERYL__IPC__V1__READ_RSSI__INIT;
    read.peripheral = peripheral->identifier;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_READ_RSSI;
    request.read_rssi = &read;
    return send_operation(peripheral->central, &request, new_operation(OP_RSSI, peripheral, NULL));
}

int beryl_peripheral_maximum_write_length(beryl_peripheral *peripheral, beryl_write_type type,
                                          beryl_length_callback callback, void *user) {
    if (!callback || (type != BERYL_WRITE_WITH_RESPONSE && type != BERYL_WRITE_WITHOUT_RESPONSE))
        return BERYL_E_INVALID_ARGUMENT;
    int status = gatt_ready(peripheral);
    if (status != BERYL_OK) return status;
    Beryl__Ipc__V1__GetMaximumWriteLength ask = BERYL__IPC__V1__GET_MAXIMUM_WRITE_LENGTH__INIT;
    ask.peripheral = peripheral->identifier;
    ask.without_response = type == BERYL_WRITE_WITHOUT_RESPONSE;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_MAXIMUM_WRITE_LENGTH;
    request.maximum_write_length = &ask;
    operation *op = new_operation(OP_LENGTH, peripheral, NULL);
    if (op) {
        op->length_callback = callback;
        op->user = user;
    }
    return send_operation(peripheral->central, &request, op);
}

static void scan_answered(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    beryl_central *central = owner;
    /* A refused scan is not running (the Swift library clears isScanning too). */
    if (error) central->scanning = false;
}

int beryl_central_scan(beryl_central *central, const beryl_uuid *service_uuids, size_t count, bool allow_duplicates) {
    if (!central || (count > 0 && !service_uuids)) return BERYL_E_INVALID_ARGUMENT;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    char **strings = NULL;
    int status = beryl_uuid_list_to_strings(service_uuids, count, &strings);
    if (status != BERYL_OK) return status;
    Beryl__Ipc__V1__StartScan scan = BERYL__IPC__V1__START_SCAN__INIT;
    scan.manager = BERYL_MANAGER_ID;
    scan.service_uuids = strings;
    scan.n_service_uuids = count;
    scan.allow_duplicates = allow_duplicates;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_START_SCAN;
    request.start_scan = &scan;
    status = beryl_session_send(central->session, &request, scan_answered, NULL);
    beryl_strings_free(strings, count);
    if (status == BERYL_OK) central->scanning = true;
    return status;
}

int beryl_central_stop_scan(beryl_central *central) {
    if (!central) return BERYL_E_INVALID_ARGUMENT;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    Beryl__Ipc__V1__StopScan stop = BERYL__IPC__V1__STOP_SCAN__INIT;
    stop.manager = BERYL_MANAGER_ID;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_STOP_SCAN;
    request.stop_scan = &stop;
    int status = beryl_session_send(central->session, &request, NULL, NULL);
    if (status == BERYL_OK) central->scanning = false;
    return status;
}

bool beryl_central_is_scanning(const beryl_central *central) { return central && central->scanning; }

int beryl_central_connect(beryl_central *central, beryl_peripheral *peripheral, const beryl_connect_options *options) {
    if (!central || !peripheral) return BERYL_E_INVALID_ARGUMENT;
    if (!peripheral_belongs(central, peripheral)) return BERYL_E_UNKNOWN_OBJECT;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    if (peripheral->state == BERYL_PERIPHERAL_CONNECTED || peripheral->state == BERYL_PERIPHERAL_CONNECTING)
        return BERYL_OK;  /* Core Bluetooth ignores a second connect */
    Beryl__Ipc__V1__Connect connect = BERYL__IPC__V1__CONNECT__INIT;
    connect.manager = BERYL_MANAGER_ID;
    connect.peripheral = peripheral->identifier;
    if (options) {
        connect.notify_on_connection = options->notify_on_connection;
        connect.notify_on_disconnection = options->notify_on_disconnection;
        connect.notify_on_notification = options->notify_on_notification;
    }
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_CONNECT;
    request.connect = &connect;
    int status = send_operation(central, &request, new_operation(OP_CONNECT, peripheral, NULL));
    if (status == BERYL_OK) peripheral->state = BERYL_PERIPHERAL_CONNECTING;
    return status;
}

int beryl_central_cancel_connection(beryl_central *central, beryl_peripheral *peripheral) {
    if (!central || !peripheral) return BERYL_E_INVALID_ARGUMENT;
    if (!peripheral_belongs(central, peripheral)) return BERYL_E_UNKNOWN_OBJECT;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    if (peripheral->state == BERYL_PERIPHERAL_DISCONNECTED) return BERYL_E_NOT_CONNECTED;
    Beryl__Ipc__V1__CancelConnection cancel = BERYL__IPC__V1__CANCEL_CONNECTION__INIT;
    cancel.manager = BERYL_MANAGER_ID;
    cancel.peripheral = peripheral->identifier;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_CANCEL_CONNECTION;
    request.cancel_connection = &cancel;
    int status = beryl_session_send(central->session, &request, NULL, NULL);
    if (status == BERYL_OK && peripheral->state == BERYL_PERIPHERAL_CONNECTED) peripheral->state = BERYL_PERIPHERAL_DISCONNECTING;
    return status;
}

static int retrieve(beryl_central *central, ManagerRequest *request, beryl_retrieve_callback callback, void *user) {
    operation *op = new_operation(OP_RETRIEVE, NULL, NULL);
    if (op) {
        op->retrieve_callback = callback;
        op->user = user;
    }
    return send_operation(central, request, op);
}

int beryl_central_retrieve_peripherals(beryl_central *central, const char *const *identifiers, size_t count,
                                       beryl_retrieve_callback callback, void *user) {
    if (!central || !callback || (count > 0 && !identifiers)) return BERYL_E_INVALID_ARGUMENT;
    if (count > 256) return BERYL_E_TOO_LONG;
    for (size_t i = 0; i < count; i++) {
        beryl_uuid parsed;
        if (!identifiers[i]) return BERYL_E_INVALID_ARGUMENT;
        if (strlen(identifiers[i]) != 36 || beryl_uuid_parse(identifiers[i], &parsed) != BERYL_OK) return BERYL_E_BAD_UUID;
    }
    /* An empty list would ask managerd for every peripheral it knows; Core Bluetooth answers none. */
    if (count == 0) {
        callback(central, NULL, 0, NULL, user);
        return BERYL_OK;
    }
    if (beryl_session_state(central->session) == BERYL_STATE_UNKNOWN) return BERYL_E_NOT_POWERED_ON;
    Beryl__Ipc__V1__RetrievePeripherals ask = BERYL__IPC__V1__RETRIEVE_PERIPHERALS__INIT;
    ask.identifiers = (char **)identifiers;
    ask.n_identifiers = count;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_RETRIEVE_PERIPHERALS;
    request.retrieve_peripherals = &ask;
    return retrieve(central, &request, callback, user);
}

int beryl_central_retrieve_connected(beryl_central *central, const beryl_uuid *service_uuids, size_t count,
                                     beryl_retrieve_callback callback, void *user) {
    if (!central || !callback || (count > 0 && !service_uuids)) return BERYL_E_INVALID_ARGUMENT;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) return BERYL_E_NOT_POWERED_ON;
    char **strings = NULL;
    int status = beryl_uuid_list_to_strings(service_uuids, count, &strings);
    if (status != BERYL_OK) return status;
    Beryl__Ipc__V1__RetrieveConnectedPeripherals ask = BERYL__IPC__V1__RETRIEVE_CONNECTED_PERIPHERALS__INIT;
    ask.service_uuids = strings;
    ask.n_service_uuids = count;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_RETRIEVE_CONNECTED;
    request.retrieve_connected = &ask;
    status = retrieve(central, &request, callback, user);
    beryl_strings_free(strings, count);
    return status;
}

/* ---- events ---- */

static size_t parse_uuids(char **texts, size_t count, beryl_uuid out[32]) {
    size_t parsed = 0;
    for (size_t i = 0; i < count && parsed < 32; i++)
        if (beryl_uuid_parse(texts[i], &out[parsed]) == BERYL_OK) parsed++;
    return parsed;
}

static void discovered(beryl_central *central, const Beryl__Ipc__V1__ScanDiscovery *event) {
    const Beryl__Ipc__V1__PeripheralInfo *info = event->peripheral;
    if (!info || !info->identifier || !*info->identifier) return;
    beryl_peripheral *peripheral = peripheral_for(central, info->identifier);
    if (!peripheral) return;
    set_name(peripheral, info->name);
    beryl_advertisement advertisement = {0};
    /* An advertisement holds at most 31 (legacy) or 254 (extended) octets: 32 of each list is room enough. */
    beryl_uuid uuids[32], overflow[32], solicited[32];
    beryl_service_data service_data[32];
    const Beryl__Ipc__V1__AdvertisementInfo *ad = info->advertisement;
    if (ad) {
        advertisement.local_name = ad->local_name && *ad->local_name ? ad->local_name : NULL;
        advertisement.service_uuid_count = parse_uuids(ad->service_uuids, ad->n_service_uuids, uuids);
        advertisement.service_uuids = advertisement.service_uuid_count ? uuids : NULL;
        advertisement.overflow_service_uuid_count = parse_uuids(ad->overflow_service_uuids, ad->n_overflow_service_uuids, overflow);
        advertisement.overflow_service_uuids = advertisement.overflow_service_uuid_count ? overflow : NULL;
        advertisement.solicited_service_uuid_count = parse_uuids(ad->solicited_service_uuids, ad->n_solicited_service_uuids, solicited);
        advertisement.solicited_service_uuids = advertisement.solicited_service_uuid_count ? solicited : NULL;
        size_t data_count = 0;
        for (size_t i = 0; i < ad->n_service_data && data_count < 32; i++) {
            const Beryl__Ipc__V1__AdvertisementInfo__ServiceDataEntry *entry = ad->service_data[i];
            if (beryl_uuid_parse(entry->key, &service_data[data_count].uuid) != BERYL_OK) continue;
            service_data[data_count].data = entry->value.len ? entry->value.data : NULL;
            service_data[data_count].length = entry->value.len;
            data_count++;
        }
        advertisement.service_data = data_count ? service_data : NULL;
        advertisement.service_data_count = data_count;
        advertisement.manufacturer_data = ad->manufacturer_data.len ? ad->manufacturer_data.data : NULL;
        advertisement.manufacturer_data_length = ad->manufacturer_data.len;
        advertisement.tx_power_known = ad->tx_power_known;
        advertisement.tx_power_level = ad->tx_power_level;
        advertisement.connectable = ad->connectable;
    }
    if (central->callbacks.did_discover)
        central->callbacks.did_discover(central, peripheral, &advertisement, info->rssi, central->user);
}

static void link_ended(beryl_peripheral *peripheral) {
    peripheral->state = BERYL_PERIPHERAL_DISCONNECTED;
    peripheral->write_queue_full = false;
    peripheral->owes_ready_to_write = false;
    /* Every characteristic ever made, also those Service Changed dropped: none is notifying without a link. */
    for (size_t i = 0; i < peripheral->attic_count; i++)
        if (peripheral->attic[i].kind == ATTIC_CHARACTERISTIC) ((beryl_characteristic *)peripheral->attic[i].object)->notifying = false;
}

static void services_changed(beryl_peripheral *peripheral, const Beryl__Ipc__V1__GattServiceChanged *change) {
    if (!change) return;
    beryl_service **gone = NULL;
    size_t gone_count = 0, kept = 0;
    for (size_t i = 0; i < peripheral->service_count; i++) {
        beryl_service *service = peripheral->services[i];
        if (service->start <= change->end_handle && service->end >= change->start_handle)
            append((void ***)&gone, &gone_count, service);
        else
            peripheral->services[kept++] = service;
    }
    peripheral->service_count = kept;
    if (gone_count && peripheral->callbacks.did_modify_services)
        peripheral->callbacks.did_modify_services(peripheral, gone, gone_count, peripheral->user);
    free(gone);
}

static void central_event(void *owner, const ManagerEvent *event) {
    beryl_central *central = owner;
    beryl_peripheral *peripheral = NULL;
    if (beryl_pairing_deliver(&central->pairing, central->session, event)) return;
    switch (event->kind_case) {
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCOVERED:
        discovered(central, event->discovered);
        break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_CONNECTED:
        if (!(peripheral = find_peripheral(central, event->connected->peripheral))) break;
        peripheral->state = BERYL_PERIPHERAL_CONNECTED;
        if (central->callbacks.did_connect) central->callbacks.did_connect(central, peripheral, central->user);
        break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_DISCONNECTED: {
        if (!(peripheral = find_peripheral(central, event->disconnected->peripheral))) break;
        link_ended(peripheral);
        beryl_error error;
        bool failed = beryl_error_from_disconnect(event->disconnected->reason, &error);
        if (central->callbacks.did_disconnect)
            central->callbacks.did_disconnect(central, peripheral, failed ? &error : NULL, central->user);
        break;
    }
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_NOTIFICATION: {
        const Beryl__Ipc__V1__GattNotification *note = event->notification;
        if (!(peripheral = find_peripheral(central, note->peripheral))) break;
        beryl_characteristic *characteristic = characteristic_with_value_handle(peripheral, note->handle);
        if (!characteristic || note->value.len > BERYL_VALUE_CAP) break;
        if (!set_bytes(&characteristic->value, &characteristic->length, note->value.data, note->value.len)) break;
        if (peripheral->callbacks.did_update_value)
            peripheral->callbacks.did_update_value(peripheral, characteristic, NULL, peripheral->user);
        break;
    }
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_SERVICES_CHANGED:
        if ((peripheral = find_peripheral(central, event->services_changed->peripheral)))
            services_changed(peripheral, event->services_changed->change);
        break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_READY_TO_WRITE:
        if (!(peripheral = find_peripheral(central, event->ready_to_write->peripheral))) break;
        peripheral->write_queue_full = false;
        ready_to_write_if_owed(peripheral);
        break;
    default:
        /* Alerts (for `beryl alerts`) and connection events: not in this library's surface yet. */
        break;
    }
}

static void notifying_from(beryl_peripheral *peripheral, const Beryl__Ipc__V1__PreservedLink *link) {
    for (size_t i = 0; i < link->n_notifying_value_handles; i++) {
        beryl_characteristic *characteristic = characteristic_with_value_handle(peripheral, link->notifying_value_handles[i]);
        if (characteristic) characteristic->notifying = true;
    }
}

static void central_welcomed(void *owner, const Welcome *welcome, bool again) {
    beryl_central *central = owner;
    const Beryl__Ipc__V1__PreservedCentralRole *role =
        welcome->was_restored && welcome->restored ? welcome->restored->central : NULL;
    if (!role) return;
    beryl_peripheral **restored = NULL;
    size_t count = 0;
    for (size_t i = 0; i < role->n_links; i++) {
        const Beryl__Ipc__V1__PreservedLink *link = role->links[i];
        beryl_peripheral *peripheral = peripheral_for(central, link->identifier);
        if (!peripheral) continue;
        set_name(peripheral, link->name);
        peripheral->state = link->pending ? BERYL_PERIPHERAL_CONNECTING : BERYL_PERIPHERAL_CONNECTED;
        if (link->database && (!again || peripheral->service_count == 0)) adopt_database(peripheral, link->database);
        notifying_from(peripheral, link);
        append((void ***)&restored, &count, peripheral);
    }
    central->scanning = role->scanning;
    /* A reconnection takes the links back quietly; willRestoreState is for a relaunched app's first Welcome. */
    if (!again && central->callbacks.will_restore_state) {
        beryl_uuid services[32];
        size_t service_count = 0;
        for (size_t i = 0; i < role->n_scan_service_uuids && service_count < 32; i++)
            if (beryl_uuid_parse(role->scan_service_uuids[i], &services[service_count]) == BERYL_OK) service_count++;
        beryl_central_restored state = {count, restored, role->scanning, service_count, services};
        central->callbacks.will_restore_state(central, &state, central->user);
    }
    free(restored);
}

static void central_lost(void *owner) {
    beryl_central *central = owner;
    /* managerd is gone: every link is down without a callback (the Swift library's rule); restoration or a new
     * connect brings them back. */
    for (beryl_peripheral *p = central->peripherals; p; p = p->next) link_ended(p);
}

static void central_state_changed(void *owner) {
    beryl_central *central = owner;
    if (beryl_session_state(central->session) != BERYL_STATE_POWERED_ON) central->scanning = false;
    central->callbacks.did_update_state(central, central->user);
}

static void central_dropped(void *owner, const char *why) {
    beryl_central *central = owner;
    if (central->callbacks.did_drop_session) central->callbacks.did_drop_session(central, why, central->user);
}

static void destroy_central(void *owner) {
    beryl_central *central = owner;
    beryl_session_free(central->session);
    while (central->peripherals) {
        beryl_peripheral *next = central->peripherals->next;
        free_attic(central->peripherals);
        free(central->peripherals->services);
        free(central->peripherals->identifier);
        free(central->peripherals->name);
        free(central->peripherals);
        central->peripherals = next;
    }
    free(central);
}

int beryl_central_create(beryl_central **out, struct event_base *base, const beryl_central_callbacks *callbacks,
                         void *user, const beryl_manager_options *options) {
    if (!out || !base || !callbacks || !callbacks->did_update_state) return BERYL_E_INVALID_ARGUMENT;
    *out = NULL;
    beryl_central *central = calloc(1, sizeof *central);
    if (!central) return BERYL_E_NO_MEMORY;
    central->callbacks = *callbacks;
    central->user = user;
    static const beryl_session_hooks hooks = {central_welcomed, central_event, central_lost, central_state_changed,
                                              central_dropped};
    int status = beryl_session_create(&central->session, base, options, BERYL__IPC__V1__MANAGER_ROLE__MANAGER_ROLE_CENTRAL,
                                      &hooks, central);
    if (status != BERYL_OK) {
        free(central);
        return status;
    }
    beryl_session_set_destroy(central->session, destroy_central);
    *out = central;
    return BERYL_OK;
}

void beryl_central_free(beryl_central *central) {
    if (!central || beryl_session_defer_free(central->session)) return;
    destroy_central(central);
}

beryl_session *beryl_central_session(beryl_central *central) { return central->session; }

beryl_manager_state beryl_central_state(const beryl_central *central) {
    return central ? beryl_session_state(central->session) : BERYL_STATE_UNKNOWN;
}

int beryl_central_set_app_state(beryl_central *central, beryl_app_state state) {
    return central ? beryl_session_set_app_state(central->session, state) : BERYL_E_INVALID_ARGUMENT;
}

int beryl_central_set_pairing_callbacks(beryl_central *central, const beryl_pairing_callbacks *callbacks, void *user) {
    if (!central) return BERYL_E_INVALID_ARGUMENT;
    beryl_pairing_set(&central->pairing, callbacks, user);
    return BERYL_OK;
}

int beryl_central_answer_pairing(beryl_central *central, const char *peer, bool accept, uint32_t passkey) {
    return central ? beryl_pairing_answer(central->session, peer, accept, passkey) : BERYL_E_INVALID_ARGUMENT;
}

int beryl_central_invalidate(beryl_central *central) {
    return central ? beryl_session_invalidate(central->session) : BERYL_E_INVALID_ARGUMENT;
}

/* ---- accessors ---- */

int beryl_peripheral_set_callbacks(beryl_peripheral *peripheral, const beryl_peripheral_callbacks *callbacks, void *user) {
    if (!peripheral) return BERYL_E_INVALID_ARGUMENT;
    if (callbacks) peripheral->callbacks = *callbacks; else memset(&peripheral->callbacks, 0, sizeof peripheral->callbacks);
    peripheral->user = user;
    return BERYL_OK;
}

const char *beryl_peripheral_identifier(const beryl_peripheral *p) { return p ? p->identifier : NULL; }
const char *beryl_peripheral_name(const beryl_peripheral *p) { return p ? p->name : NULL; }
beryl_peripheral_state beryl_peripheral_get_state(const beryl_peripheral *p) { return p ? p->state : BERYL_PERIPHERAL_DISCONNECTED; }
size_t beryl_peripheral_service_count(const beryl_peripheral *p) { return p ? p->service_count : 0; }
beryl_service *beryl_peripheral_service_at(const beryl_peripheral *p, size_t i) { return p && i < p->service_count ? p->services[i] : NULL; }

beryl_service *beryl_peripheral_find_service(const beryl_peripheral *p, const beryl_uuid *uuid) {
    for (size_t i = 0; p && uuid && i < p->service_count; i++)
        if (beryl_uuid_equal(&p->services[i]->uuid, uuid)) return p->services[i];
    return NULL;
}

const beryl_uuid *beryl_service_uuid(const beryl_service *s) { return s ? &s->uuid : NULL; }
bool beryl_service_is_primary(const beryl_service *s) { return s && s->primary; }
beryl_peripheral *beryl_service_peripheral(const beryl_service *s) { return s ? s->peripheral : NULL; }
size_t beryl_service_characteristic_count(const beryl_service *s) { return s ? s->characteristic_count : 0; }
beryl_characteristic *beryl_service_characteristic_at(const beryl_service *s, size_t i) { return s && i < s->characteristic_count ? s->characteristics[i] : NULL; }
size_t beryl_service_included_count(const beryl_service *s) { return s ? s->included_count : 0; }
beryl_service *beryl_service_included_at(const beryl_service *s, size_t i) { return s && i < s->included_count ? s->included[i] : NULL; }

beryl_characteristic *beryl_service_find_characteristic(const beryl_service *s, const beryl_uuid *uuid) {
    for (size_t i = 0; s && uuid && i < s->characteristic_count; i++)
        if (beryl_uuid_equal(&s->characteristics[i]->uuid, uuid)) return s->characteristics[i];
    return NULL;
}

const beryl_uuid *beryl_characteristic_uuid(const beryl_characteristic *c) { return c ? &c->uuid : NULL; }
uint32_t beryl_characteristic_properties(const beryl_characteristic *c) { return c ? c->properties : 0; }
beryl_service *beryl_characteristic_service(const beryl_characteristic *c) { return c ? c->service : NULL; }
bool beryl_characteristic_is_notifying(const beryl_characteristic *c) { return c && c->notifying; }
size_t beryl_characteristic_descriptor_count(const beryl_characteristic *c) { return c ? c->descriptor_count : 0; }
beryl_descriptor *beryl_characteristic_descriptor_at(const beryl_characteristic *c, size_t i) { return c && i < c->descriptor_count ? c->descriptors[i] : NULL; }

const uint8_t *beryl_characteristic_value(const beryl_characteristic *c, size_t *length) {
    if (length) *length = c ? c->length : 0;
    return c ? c->value : NULL;
}

const beryl_uuid *beryl_descriptor_uuid(const beryl_descriptor *d) { return d ? &d->uuid : NULL; }
beryl_characteristic *beryl_descriptor_characteristic(const beryl_descriptor *d) { return d ? d->characteristic : NULL; }

const uint8_t *beryl_descriptor_value(const beryl_descriptor *d, size_t *length) {
    if (length) *length = d ? d->length : 0;
    return d ? d->value : NULL;
}
