/* The peripheral role: CBPeripheralManager, the services an app publishes and the requests centrals make of them. */
#include "internal.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* Values updateValue takes before it says wait. Each leaves as it is taken, without waiting for the answers to the
 * others, and they still reach the air in order: they go as ordered updates, so attd holds back every value of this
 * app after one it refused until its ReadyToUpdate, and refuses as "send again" one sent before the app saw the latest
 * ReadyToUpdate. A refused value therefore goes again first, and nothing passes a value still on its way that was sent
 * before the latest ReadyToUpdate (it will come back "send again"). The Swift library's UpdateQueue keeps the same rules. */
#define UPDATE_QUEUE_CAP 16

typedef struct local_descriptor {
    beryl_uuid uuid;
    uint8_t *value;
    size_t length;
} local_descriptor;

struct beryl_local_characteristic {
    beryl_uuid uuid;
    uint32_t properties, permissions;
    bool cached;
    uint8_t *value;
    size_t length;
    local_descriptor *descriptors;
    size_t descriptor_count;
    uint16_t value_handle;
    beryl_local_service *service;
};

typedef enum { SERVICE_NEW, SERVICE_ADDING, SERVICE_PUBLISHED, SERVICE_FAILED, SERVICE_REMOVED } service_state;

struct beryl_local_service {
    beryl_local_service *next;
    beryl_uuid uuid;
    bool primary;
    beryl_local_characteristic **characteristics;
    size_t characteristic_count;
    beryl_local_service **included;
    size_t included_count;
    uint16_t start, end;
    service_state state;
    beryl_peripheral_manager *manager;
};

struct beryl_request {
    beryl_request *next;
    uint64_t id;
    char *central;
    beryl_local_characteristic *characteristic;
    size_t offset;
    uint8_t *value;
    size_t length;
    size_t maximum_update_length;
    bool is_read;
    bool needs_response;
    /* Its session ended before the answer: nothing can carry one now. */
    bool orphaned;
    /* Answered (or, for a write command, delivered): freed by the next sweep. */
    bool done;
};

typedef struct queued_update {
    /* Names the value in its answer's context: unique for the manager's life, so an answer to a value of a queue
     * emptied since finds nothing. */
    uintptr_t id;
    /* On its way since the ReadyToUpdate count it was sent after. */
    bool on_its_way;
    uint32_t sent_after;
    uint16_t value_handle;
    bool indicate;
    size_t length;
    uint8_t value[BERYL_VALUE_CAP];
} queued_update;

struct beryl_peripheral_manager {
    beryl_session *session;
    beryl_peripheral_manager_callbacks callbacks;
    void *user;
    beryl_local_service *services;
    beryl_request *requests;
    struct event *sweep;
    /* Sends the queue again after a send the session could not take. */
    struct event *update_retry;
    bool advertising;
    /* Between start_advertising and stop_advertising: an AdvertisingStarted outside it is stale. */
    bool advertising_requested;
    /* In the order taken; the oldest first. */
    queued_update updates[UPDATE_QUEUE_CAP];
    size_t update_count;
    uintptr_t next_update_id;
    /* The count of the latest ReadyToUpdate (attd's, for this app; a new attd counts from zero). */
    uint32_t ready_seen;
    bool waiting_for_ready;
    bool owes_ready;
    beryl_pairing pairing;
};

/* ---- services the app builds ---- */

static void free_characteristic(beryl_local_characteristic *characteristic) {
    for (size_t i = 0; i < characteristic->descriptor_count; i++) free(characteristic->descriptors[i].value);
    free(characteristic->descriptors);
    free(characteristic->value);
    free(characteristic);
}

static void free_service(beryl_local_service *service) {
    for (size_t i = 0; i < service->characteristic_count; i++) free_characteristic(service->characteristics[i]);
    free(service->characteristics);
    free(service->included);
    free(service);
}

int beryl_local_service_create(beryl_local_service **out, const char *uuid, bool primary) {
    if (!out || !uuid) return BERYL_E_INVALID_ARGUMENT;
    *out = NULL;
    beryl_uuid parsed;
    int status = beryl_uuid_parse(uuid, &parsed);
    if (status != BERYL_OK) return status;
    beryl_local_service *service = calloc(1, sizeof *service);
    if (!service) return BERYL_E_NO_MEMORY;
    service->uuid = parsed;
    service->primary = primary;
    *out = service;
    return BERYL_OK;
}

void beryl_local_service_free(beryl_local_service *service) {
    /* One the manager owns is freed with the manager. */
    if (service && !service->manager) free_service(service);
}

static bool copy_value(uint8_t **out, const uint8_t *value, size_t length) {
    *out = NULL;
    if (length == 0) return true;
    *out = malloc(length);
    if (!*out) return false;
    memcpy(*out, value, length);
    return true;
}

int beryl_local_service_add_characteristic(beryl_local_service *service, beryl_local_characteristic **out,
                                           const char *uuid, uint32_t properties, uint32_t permissions,
                                           const uint8_t *value, size_t length) {
    if (out) *out = NULL;
    if (!service || !uuid || (length > 0 && !value)) return BERYL_E_INVALID_ARGUMENT;
    if (service->state != SERVICE_NEW || service->manager) return BERYL_E_STATE;
    if (properties > 0x3FF || permissions > 0x3F) return BERYL_E_INVALID_ARGUMENT;
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    beryl_uuid parsed;
    int status = beryl_uuid_parse(uuid, &parsed);
    if (status != BERYL_OK) return status;
    /* A cached value cannot change by a write or a notification (Core Bluetooth: read-only characteristics). */
    if (value && (properties & ~(uint32_t)(BERYL_PROPERTY_READ | BERYL_PROPERTY_BROADCAST |
                                           BERYL_PROPERTY_EXTENDED_PROPERTIES)))
        return BERYL_E_NOT_PERMITTED;
    beryl_local_characteristic *characteristic = calloc(1, sizeof *characteristic);
    if (!characteristic) return BERYL_E_NO_MEMORY;
    characteristic->uuid = parsed;
    characteristic->properties = properties;
    characteristic->permissions = permissions;
    characteristic->cached = value != NULL;
    characteristic->service = service;
    beryl_local_characteristic **grown =
        realloc(service->characteristics, (service->characteristic_count + 1) * sizeof *grown);
    if (!copy_value(&characteristic->value, value, length) || !grown) {
        if (grown) service->characteristics = grown;
        free_characteristic(characteristic);
        return BERYL_E_NO_MEMORY;
    }
    characteristic->length = length;
    service->characteristics = grown;
    service->characteristics[service->characteristic_count++] = characteristic;
    if (out) *out = characteristic;
    return BERYL_OK;
}

int beryl_local_characteristic_add_descriptor(beryl_local_characteristic *characteristic, const char *uuid,
                                              const uint8_t *value, size_t length) {
    if (!characteristic || !uuid || (length > 0 && !value)) return BERYL_E_INVALID_ARGUMENT;
    if (characteristic->service->state != SERVICE_NEW || characteristic->service->manager) return BERYL_E_STATE;
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    beryl_uuid parsed, cccd, declaration;
    int status = beryl_uuid_parse(uuid, &parsed);
    if (status != BERYL_OK) return status;
    /* The stack writes the CCCD and the declarations itself (Core Vol 3 Part G §3.3). */
    beryl_uuid_parse("2902", &cccd);
    beryl_uuid_parse("2803", &declaration);
    if (beryl_uuid_equal(&parsed, &cccd) || beryl_uuid_equal(&parsed, &declaration)) return BERYL_E_NOT_PERMITTED;
    local_descriptor *grown =
        realloc(characteristic->descriptors, (characteristic->descriptor_count + 1) * sizeof *grown);
    if (!grown) return BERYL_E_NO_MEMORY;
    characteristic->descriptors = grown;
    local_descriptor *descriptor = &grown[characteristic->descriptor_count];
    descriptor->uuid = parsed;
    descriptor->length = length;
    if (!copy_value(&descriptor->value, value, length)) return BERYL_E_NO_MEMORY;
    characteristic->descriptor_count++;
    return BERYL_OK;
}

int beryl_local_service_include(beryl_local_service *service, beryl_local_service *included) {
    if (!service || !included || service == included) return BERYL_E_INVALID_ARGUMENT;
    if (service->state != SERVICE_NEW || service->manager) return BERYL_E_STATE;
    if (included->state != SERVICE_PUBLISHED) return BERYL_E_STATE;
    beryl_local_service **grown = realloc(service->included, (service->included_count + 1) * sizeof *grown);
    if (!grown) return BERYL_E_NO_MEMORY;
    service->included = grown;
    service->included[service->included_count++] = included;
    return BERYL_OK;
}

const beryl_uuid *beryl_local_service_uuid(const beryl_local_service *s) { return s ? &s->uuid : NULL; }
size_t beryl_local_service_characteristic_count(const beryl_local_service *s) { return s ? s->characteristic_count : 0; }
beryl_local_characteristic *beryl_local_service_characteristic_at(const beryl_local_service *s, size_t i) {
    return s && i < s->characteristic_count ? s->characteristics[i] : NULL;
}
const beryl_uuid *beryl_local_characteristic_uuid(const beryl_local_characteristic *c) { return c ? &c->uuid : NULL; }

/* ---- the manager's calls ---- */

static bool powered_on(const beryl_peripheral_manager *manager) {
    return beryl_session_state(manager->session) == BERYL_STATE_POWERED_ON;
}

static beryl_local_characteristic *published_characteristic(beryl_peripheral_manager *manager, uint32_t value_handle) {
    for (beryl_local_service *s = manager->services; s; s = s->next) {
        if (s->state != SERVICE_PUBLISHED) continue;
        for (size_t i = 0; i < s->characteristic_count; i++)
            if (s->characteristics[i]->value_handle == value_handle) return s->characteristics[i];
    }
    return NULL;
}

static void service_added(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    beryl_peripheral_manager *manager = owner;
    beryl_local_service *service = context;
    if (!response && !error) return;  /* the manager is being freed; the service goes with it */
    const Beryl__Ipc__V1__ServicePublished *published =
        response && response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_SERVICE_ADDED ? response->service_added : NULL;
    beryl_error missing;
    if (!error && (!published || published->n_value_handles != service->characteristic_count)) {
        beryl_error_local(&missing, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_UNKNOWN, "managerd's answer named no handles");
        error = &missing;
    }
    if (error) {
        service->state = SERVICE_FAILED;
    } else {
        service->state = SERVICE_PUBLISHED;
        service->start = (uint16_t)published->start_handle;
        service->end = (uint16_t)published->end_handle;
        for (size_t i = 0; i < service->characteristic_count; i++)
            service->characteristics[i]->value_handle = (uint16_t)published->value_handles[i];
    }
    if (manager->callbacks.did_add_service) manager->callbacks.did_add_service(manager, service, error, manager->user);
}

static void adopt(beryl_peripheral_manager *manager, beryl_local_service *service) {
    service->manager = manager;
    service->next = manager->services;
    manager->services = service;
}

int beryl_peripheral_manager_add_service(beryl_peripheral_manager *manager, beryl_local_service *service) {
    if (!manager || !service) return BERYL_E_INVALID_ARGUMENT;
    if (service->manager || service->state != SERVICE_NEW) return BERYL_E_STATE;
    if (!powered_on(manager)) return BERYL_E_NOT_POWERED_ON;
    for (size_t i = 0; i < service->included_count; i++)
        if (service->included[i]->manager != manager) return BERYL_E_UNKNOWN_OBJECT;
    Beryl__Ipc__V1__CharacteristicSpec *specs = calloc(service->characteristic_count + 1, sizeof *specs);
    Beryl__Ipc__V1__CharacteristicSpec **spec_list = calloc(service->characteristic_count + 1, sizeof *spec_list);
    char (*uuids)[BERYL_UUID_STRING_SIZE] = calloc(service->characteristic_count + 1, sizeof *uuids);
    uint32_t *included = calloc(service->included_count + 1, sizeof *included);
    size_t descriptor_total = 0;
    for (size_t i = 0; i < service->characteristic_count; i++) descriptor_total += service->characteristics[i]->descriptor_count;
    Beryl__Ipc__V1__DescriptorSpec *descriptors = calloc(descriptor_total + 1, sizeof *descriptors);
    Beryl__Ipc__V1__DescriptorSpec **descriptor_list = calloc(descriptor_total + 1, sizeof *descriptor_list);
    char (*descriptor_uuids)[BERYL_UUID_STRING_SIZE] = calloc(descriptor_total + 1, sizeof *descriptor_uuids);
    int status = BERYL_E_NO_MEMORY;
    if (specs && spec_list && uuids && included && descriptors && descriptor_list && descriptor_uuids) {
        char service_uuid[BERYL_UUID_STRING_SIZE];
        beryl_uuid_format(&service->uuid, service_uuid);
        Beryl__Ipc__V1__ServiceSpec spec = BERYL__IPC__V1__SERVICE_SPEC__INIT;
        spec.uuid = service_uuid;
        spec.primary = service->primary;
        size_t d = 0;
        for (size_t i = 0; i < service->characteristic_count; i++) {
            const beryl_local_characteristic *characteristic = service->characteristics[i];
            Beryl__Ipc__V1__CharacteristicSpec *entry = &specs[i];
            beryl__ipc__v1__characteristic_spec__init(entry);
            beryl_uuid_format(&characteristic->uuid, uuids[i]);
            entry->uuid = uuids[i];
            entry->properties = characteristic->properties;
            entry->permissions = characteristic->permissions;
            entry->cached = characteristic->cached;
            entry->value.data = characteristic->value;
            entry->value.len = characteristic->length;
            entry->descriptors = &descriptor_list[d];
            entry->n_descriptors = characteristic->descriptor_count;
            for (size_t k = 0; k < characteristic->descriptor_count; k++, d++) {
                beryl__ipc__v1__descriptor_spec__init(&descriptors[d]);
                beryl_uuid_format(&characteristic->descriptors[k].uuid, descriptor_uuids[d]);
                descriptors[d].uuid = descriptor_uuids[d];
                descriptors[d].value.data = characteristic->descriptors[k].value;
                descriptors[d].value.len = characteristic->descriptors[k].length;
                descriptor_list[d] = &descriptors[d];
            }
            spec_list[i] = entry;
        }
        spec.characteristics = spec_list;
        spec.n_characteristics = service->characteristic_count;
        for (size_t i = 0; i < service->included_count; i++) included[i] = service->included[i]->start;
        spec.included_start_handles = included;
        spec.n_included_start_handles = service->included_count;
        Beryl__Ipc__V1__AddService add = BERYL__IPC__V1__ADD_SERVICE__INIT;
        add.manager = BERYL_MANAGER_ID;
        add.service = &spec;
        ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
        request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_ADD_SERVICE;
        request.add_service = &add;
        status = beryl_session_send(manager->session, &request, service_added, service);
    }
    free(specs);
    free(spec_list);
    free(uuids);
    free(included);
    free(descriptors);
    free(descriptor_list);
    free(descriptor_uuids);
    if (status == BERYL_OK) {
        service->state = SERVICE_ADDING;
        adopt(manager, service);
    }
    return status;
}

static int simple_request(beryl_peripheral_manager *manager, ManagerRequest *request) {
    return beryl_session_send(manager->session, request, NULL, NULL);
}

int beryl_peripheral_manager_remove_service(beryl_peripheral_manager *manager, beryl_local_service *service) {
    if (!manager || !service) return BERYL_E_INVALID_ARGUMENT;
    if (service->manager != manager) return BERYL_E_UNKNOWN_OBJECT;
    if (service->state != SERVICE_PUBLISHED) return BERYL_E_STATE;
    if (!powered_on(manager)) return BERYL_E_NOT_POWERED_ON;
    Beryl__Ipc__V1__RemoveService remove = BERYL__IPC__V1__REMOVE_SERVICE__INIT;
    remove.manager = BERYL_MANAGER_ID;
    remove.start_handle = service->start;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_REMOVE_SERVICE;
    request.remove_service = &remove;
    int status = simple_request(manager, &request);
    if (status == BERYL_OK) service->state = SERVICE_REMOVED;
    return status;
}

static void retire_services(beryl_peripheral_manager *manager) {
    for (beryl_local_service *s = manager->services; s; s = s->next)
        if (s->state == SERVICE_PUBLISHED || s->state == SERVICE_ADDING) s->state = SERVICE_REMOVED;
}

static int remove_all(beryl_peripheral_manager *manager) {
    Beryl__Ipc__V1__RemoveAllServices remove = BERYL__IPC__V1__REMOVE_ALL_SERVICES__INIT;
    remove.manager = BERYL_MANAGER_ID;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_REMOVE_ALL_SERVICES;
    request.remove_all_services = &remove;
    return simple_request(manager, &request);
}

int beryl_peripheral_manager_remove_all_services(beryl_peripheral_manager *manager) {
    if (!manager) return BERYL_E_INVALID_ARGUMENT;
    int status = remove_all(manager);
    if (status == BERYL_OK) retire_services(manager);
    return status;
}

static void advertising_answered(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    (void)context;
    (void)response;
    beryl_peripheral_manager *manager = owner;
    if (!error) return;  /* success is the AdvertisingStarted event that follows */
    manager->advertising = manager->advertising_requested = false;
    if (manager->callbacks.did_start_advertising) manager->callbacks.did_start_advertising(manager, error, manager->user);
}

int beryl_peripheral_manager_start_advertising(beryl_peripheral_manager *manager, const char *local_name,
                                               const beryl_uuid *service_uuids, size_t count) {
    if (!manager || (count > 0 && !service_uuids)) return BERYL_E_INVALID_ARGUMENT;
    /* A legacy advertisement's 31 octets hold no more than a 29-byte name (Core Vol 3 Part C §11). */
    if (local_name && strlen(local_name) > 248) return BERYL_E_TOO_LONG;
    if (!powered_on(manager)) return BERYL_E_NOT_POWERED_ON;
    char **strings = NULL;
    int status = beryl_uuid_list_to_strings(service_uuids, count, &strings);
    if (status != BERYL_OK) return status;
    Beryl__Ipc__V1__StartAdvertising start = BERYL__IPC__V1__START_ADVERTISING__INIT;
    start.manager = BERYL_MANAGER_ID;
    start.local_name = local_name ? (char *)local_name : (char *)"";
    start.service_uuids = strings;
    start.n_service_uuids = count;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_START_ADVERTISING;
    request.start_advertising = &start;
    status = beryl_session_send(manager->session, &request, advertising_answered, NULL);
    beryl_strings_free(strings, count);
    /* isAdvertising is true from the call on, as in Core Bluetooth; a failure clears it. */
    if (status == BERYL_OK) manager->advertising = manager->advertising_requested = true;
    return status;
}

static int stop_advertising(beryl_peripheral_manager *manager) {
    Beryl__Ipc__V1__StopAdvertising stop = BERYL__IPC__V1__STOP_ADVERTISING__INIT;
    stop.manager = BERYL_MANAGER_ID;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_STOP_ADVERTISING;
    request.stop_advertising = &stop;
    return simple_request(manager, &request);
}

int beryl_peripheral_manager_stop_advertising(beryl_peripheral_manager *manager) {
    if (!manager) return BERYL_E_INVALID_ARGUMENT;
    int status = stop_advertising(manager);
    if (status == BERYL_OK) manager->advertising = manager->advertising_requested = false;
    return status;
}

bool beryl_peripheral_manager_is_advertising(const beryl_peripheral_manager *manager) {
    return manager && manager->advertising;
}

/* ---- updateValue: decided here, pipelined, kept in order (UPDATE_QUEUE_CAP) ---- */

static void send_updates(beryl_peripheral_manager *manager);

static void ready_if_owed(beryl_peripheral_manager *manager) {
    if (!manager->owes_ready || manager->update_count >= UPDATE_QUEUE_CAP) return;
    manager->owes_ready = false;
    if (manager->callbacks.is_ready_to_update_subscribers)
        manager->callbacks.is_ready_to_update_subscribers(manager, manager->user);
}

static queued_update *find_update(beryl_peripheral_manager *manager, uintptr_t id) {
    for (size_t i = 0; i < manager->update_count; i++)
        if (manager->updates[i].id == id) return &manager->updates[i];
    return NULL;
}

static void remove_update(beryl_peripheral_manager *manager, queued_update *update) {
    size_t index = (size_t)(update - manager->updates);
    memmove(&manager->updates[index], &manager->updates[index + 1], (manager->update_count - index - 1) * sizeof *update);
    manager->update_count--;
}

static void update_answered(void *owner, void *context, const ManagerResponse *response, const beryl_error *error) {
    if (!response && !error) return;
    beryl_peripheral_manager *manager = owner;
    queued_update *update = find_update(manager, (uintptr_t)context);
    if (!update || !update->on_its_way) return;  /* of a queue emptied since */
    if (error) {
        /* Gone with its session, or refused for good (the service was removed): not sent again. */
        remove_update(manager, update);
    } else if (response->kind_case == BERYL__IPC__V1__MANAGER_RESPONSE__KIND_UPDATE_RESULT && !response->update_result->sent) {
        update->on_its_way = false;
        /* Full: it goes again first after ReadyToUpdate. Sent before the latest ReadyToUpdate: it goes again now. */
        if (!response->update_result->send_again) manager->waiting_for_ready = true;
    } else {
        remove_update(manager, update);
    }
    send_updates(manager);
    ready_if_owed(manager);
}

static void retry_updates(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    send_updates(arg);
}

/* Sends, in order, what may leave now. */
static void send_updates(beryl_peripheral_manager *manager) {
    size_t i = 0;
    while (i < manager->update_count) {
        queued_update *next = &manager->updates[i];
        if (next->on_its_way) {
            if (next->sent_after != manager->ready_seen) return;  /* it will come back "send again": nothing passes it */
            i++;
            continue;
        }
        if (manager->waiting_for_ready) return;
        Beryl__Ipc__V1__Notify update = BERYL__IPC__V1__NOTIFY__INIT;
        update.manager = BERYL_MANAGER_ID;
        update.value_handle = next->value_handle;
        update.value.data = next->value;
        update.value.len = next->length;
        update.indicate = next->indicate;
        update.ordered = true;
        update.ready_seen = manager->ready_seen;
        ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
        request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_UPDATE_VALUE;
        request.update_value = &update;
        int status = beryl_session_send(manager->session, &request, update_answered, (void *)next->id);
        if (status == BERYL_E_NOT_POWERED_ON) {
            /* No session to carry it: it goes, as one whose session ended would. */
            remove_update(manager, next);  /* the next one moves to index i */
            continue;
        }
        if (status != BERYL_OK) {
            /* The session's outgoing queue is full, or memory short: it stays first in line and goes again shortly. */
            event_add(manager->update_retry, &(struct timeval){.tv_usec = 10000});
            return;
        }
        next->on_its_way = true;
        next->sent_after = manager->ready_seen;
        i++;
    }
}

int beryl_peripheral_manager_update_value(beryl_peripheral_manager *manager,
                                          beryl_local_characteristic *characteristic, const uint8_t *value,
                                          size_t length) {
    if (!manager || !characteristic || (length > 0 && !value)) return BERYL_E_INVALID_ARGUMENT;
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    if (characteristic->service->manager != manager) return BERYL_E_UNKNOWN_OBJECT;
    if (characteristic->service->state != SERVICE_PUBLISHED) return BERYL_E_STATE;
    if (!(characteristic->properties & (BERYL_PROPERTY_NOTIFY | BERYL_PROPERTY_INDICATE))) return BERYL_E_NOT_PERMITTED;
    if (!powered_on(manager)) return BERYL_E_NOT_POWERED_ON;
    if (manager->update_count >= UPDATE_QUEUE_CAP) {
        manager->owes_ready = true;
        return 0;
    }
    queued_update *slot = &manager->updates[manager->update_count];
    slot->id = ++manager->next_update_id;
    slot->on_its_way = false;
    slot->value_handle = characteristic->value_handle;
    slot->indicate = !(characteristic->properties & BERYL_PROPERTY_NOTIFY);
    slot->length = length;
    if (length) memcpy(slot->value, value, length);
    manager->update_count++;
    send_updates(manager);
    return 1;
}

/* ---- requests from centrals ---- */

static void schedule_sweep(beryl_peripheral_manager *manager) { event_active(manager->sweep, 0, 0); }

static void free_request(beryl_request *request) {
    free(request->central);
    free(request->value);
    free(request);
}

static void sweep_requests(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    beryl_peripheral_manager *manager = arg;
    beryl_request **link = &manager->requests;
    while (*link) {
        beryl_request *request = *link;
        if (request->done) {
            *link = request->next;
            free_request(request);
        } else {
            link = &request->next;
        }
    }
}

static beryl_request *new_request(beryl_peripheral_manager *manager, uint64_t id, const char *central,
                                  beryl_local_characteristic *characteristic, size_t maximum_update_length) {
    beryl_request *request = calloc(1, sizeof *request);
    if (!request) return NULL;
    request->central = beryl_strdup(central ? central : "");
    if (!request->central) {
        free(request);
        return NULL;
    }
    request->id = id;
    request->characteristic = characteristic;
    request->maximum_update_length = maximum_update_length;
    request->next = manager->requests;
    manager->requests = request;
    return request;
}

/* The answer goes to managerd even when the app's request object could not be made: a central waits on it. */
static void answer(beryl_peripheral_manager *manager, uint64_t id, uint32_t error, const uint8_t *value, size_t length) {
    Beryl__Ipc__V1__RespondToRequest respond = BERYL__IPC__V1__RESPOND_TO_REQUEST__INIT;
    respond.id = id;
    respond.error = error;
    respond.value.data = (uint8_t *)value;
    respond.value.len = length;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_RESPOND;
    request.respond = &respond;
    (void)simple_request(manager, &request);
}

static void read_requested(beryl_peripheral_manager *manager, const Beryl__Ipc__V1__CentralRead *read) {
    beryl_local_characteristic *characteristic = published_characteristic(manager, read->handle);
    beryl_request *request = characteristic && read->id
                                 ? new_request(manager, read->id, read->central, characteristic, read->maximum_update_length)
                                 : NULL;
    if (!request || !manager->callbacks.did_receive_read) {
        /* Not one of this app's values, or no one to ask (Core Vol 3 Part F §3.4.1.1). */
        if (request) request->done = true, schedule_sweep(manager);
        if (read->id) answer(manager, read->id, characteristic ? BERYL_ATT_UNLIKELY_ERROR : BERYL_ATT_INVALID_HANDLE, NULL, 0);
        return;
    }
    request->is_read = true;
    request->needs_response = true;
    request->offset = read->offset;
    manager->callbacks.did_receive_read(manager, request, manager->user);
}

static void write_requested(beryl_peripheral_manager *manager, const Beryl__Ipc__V1__CentralWrite *write) {
    size_t count = write->n_writes;
    beryl_request **batch = count ? calloc(count, sizeof *batch) : NULL;
    size_t made = 0;
    /* Why a write cannot reach the app, as the ATT error its central gets (Core Vol 3 Part F §3.4.1.1). */
    uint32_t refusal = batch ? BERYL_ATT_SUCCESS : BERYL_ATT_UNLIKELY_ERROR;
    for (size_t i = 0; refusal == BERYL_ATT_SUCCESS && i < count; i++) {
        const Beryl__Ipc__V1__AttWrite *part = write->writes[i];
        beryl_local_characteristic *characteristic = published_characteristic(manager, part->handle);
        if (!characteristic) {
            refusal = BERYL_ATT_INVALID_HANDLE;
            break;
        }
        if (part->value.len > BERYL_VALUE_CAP) {
            refusal = BERYL_ATT_INVALID_ATTRIBUTE_VALUE_LENGTH;
            break;
        }
        beryl_request *request = new_request(manager, write->id, write->central, characteristic, write->maximum_update_length);
        if (!request || !copy_value(&request->value, part->value.data, part->value.len)) {
            refusal = BERYL_ATT_UNLIKELY_ERROR;
            if (request) request->done = true;
            break;
        }
        request->length = part->value.len;
        request->offset = part->offset;
        request->needs_response = write->with_response && write->id != 0;
        batch[made++] = request;
    }
    if (refusal == BERYL_ATT_SUCCESS && !manager->callbacks.did_receive_writes) refusal = BERYL_ATT_UNLIKELY_ERROR;
    if (refusal != BERYL_ATT_SUCCESS) {
        for (size_t i = 0; i < made; i++) batch[i]->done = true;
        schedule_sweep(manager);
        if (write->with_response && write->id) answer(manager, write->id, refusal, NULL, 0);
        free(batch);
        return;
    }
    manager->callbacks.did_receive_writes(manager, batch, made, manager->user);
    /* A write command's requests end with the callback; they take no answer. */
    if (!write->with_response || write->id == 0) {
        for (size_t i = 0; i < made; i++) batch[i]->done = true;
        schedule_sweep(manager);
    }
    free(batch);
}

static bool request_belongs(const beryl_peripheral_manager *manager, const beryl_request *request) {
    for (const beryl_request *r = manager->requests; r; r = r->next)
        if (r == request) return true;
    return false;
}

int beryl_request_respond(beryl_peripheral_manager *manager, beryl_request *request, beryl_att_error result,
                          const uint8_t *value, size_t length) {
    if (!manager || !request || (length > 0 && !value) || (unsigned)result > 0xFF) return BERYL_E_INVALID_ARGUMENT;
    if (!request_belongs(manager, request)) return BERYL_E_UNKNOWN_OBJECT;
    if (!request->needs_response) return BERYL_E_STATE;
    if (request->done) return BERYL_E_ALREADY_ANSWERED;
    if (request->orphaned) {
        request->done = true;
        schedule_sweep(manager);
        return BERYL_E_NOT_POWERED_ON;
    }
    if (length > BERYL_VALUE_CAP) return BERYL_E_TOO_LONG;
    answer(manager, request->id, result, request->is_read && result == BERYL_ATT_SUCCESS ? value : NULL,
           request->is_read && result == BERYL_ATT_SUCCESS ? length : 0);
    /* One answer per ATT request: the batch's other writes are answered with it. */
    for (beryl_request *r = manager->requests; r; r = r->next)
        if (r->id == request->id && r->needs_response) r->done = true;
    schedule_sweep(manager);
    return BERYL_OK;
}

const char *beryl_request_central(const beryl_request *r) { return r ? r->central : NULL; }
beryl_local_characteristic *beryl_request_characteristic(const beryl_request *r) { return r ? r->characteristic : NULL; }
size_t beryl_request_offset(const beryl_request *r) { return r ? r->offset : 0; }
size_t beryl_request_maximum_update_length(const beryl_request *r) { return r ? r->maximum_update_length : 0; }
bool beryl_request_needs_response(const beryl_request *r) { return r && r->needs_response; }

const uint8_t *beryl_request_value(const beryl_request *r, size_t *length) {
    if (length) *length = r ? r->length : 0;
    return r ? r->value : NULL;
}

/* ---- events and the session ---- */

static void subscription_changed(beryl_peripheral_manager *manager, const Beryl__Ipc__V1__CentralSubscription *change) {
    beryl_local_characteristic *characteristic = published_characteristic(manager, change->value_handle);
    if (!characteristic) return;
    if (change->notify || change->indicate) {
        if (manager->callbacks.central_did_subscribe)
            manager->callbacks.central_did_subscribe(manager, change->central, characteristic,
                                                     change->maximum_update_length, manager->user);
    } else if (manager->callbacks.central_did_unsubscribe) {
        manager->callbacks.central_did_unsubscribe(manager, change->central, characteristic, manager->user);
    }
}

static void peripheral_event(void *owner, const ManagerEvent *event) {
    beryl_peripheral_manager *manager = owner;
    if (beryl_pairing_deliver(&manager->pairing, manager->session, event)) return;
    switch (event->kind_case) {
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_READ_REQUEST: read_requested(manager, event->read_request); break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_WRITE_REQUEST: write_requested(manager, event->write_request); break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_SUBSCRIPTION: subscription_changed(manager, event->subscription); break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_READY_TO_UPDATE:
        manager->ready_seen = event->ready_to_update->count;
        manager->waiting_for_ready = false;
        send_updates(manager);
        ready_if_owed(manager);
        break;
    case BERYL__IPC__V1__MANAGER_EVENT__KIND_ADVERTISING_STARTED: {
        if (!manager->advertising_requested) break;  /* for an advertisement stopped since */
        const char *failure = event->advertising_started->error;
        bool failed = failure && *failure;
        manager->advertising = manager->advertising_requested = !failed;
        beryl_error error;
        if (failed) beryl_error_local(&error, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_UNKNOWN, failure);
        if (manager->callbacks.did_start_advertising)
            manager->callbacks.did_start_advertising(manager, failed ? &error : NULL, manager->user);
        break;
    }
    default:
        break;
    }
}

static beryl_local_service *restored_service(beryl_peripheral_manager *manager, const Beryl__Ipc__V1__PreservedService *preserved) {
    const Beryl__Ipc__V1__ServiceSpec *spec = preserved->spec;
    const Beryl__Ipc__V1__ServicePublished *published = preserved->published;
    if (!spec || !published || published->n_value_handles != spec->n_characteristics) return NULL;
    beryl_local_service *service = NULL;
    if (beryl_local_service_create(&service, spec->uuid, spec->primary) != BERYL_OK) return NULL;
    for (size_t i = 0; i < spec->n_characteristics; i++) {
        const Beryl__Ipc__V1__CharacteristicSpec *entry = spec->characteristics[i];
        beryl_local_characteristic *characteristic = NULL;
        if (beryl_local_service_add_characteristic(service, &characteristic, entry->uuid, entry->properties & 0x3FF,
                                                   entry->permissions & 0x3F,
                                                   entry->cached ? (entry->value.len ? entry->value.data : (const uint8_t *)"") : NULL,
                                                   entry->cached ? entry->value.len : 0) != BERYL_OK) {
            free_service(service);
            return NULL;
        }
        characteristic->value_handle = (uint16_t)published->value_handles[i];
    }
    service->start = (uint16_t)published->start_handle;
    service->end = (uint16_t)published->end_handle;
    service->state = SERVICE_PUBLISHED;
    adopt(manager, service);
    return service;
}

static void peripheral_welcomed(void *owner, const Welcome *welcome, bool again) {
    beryl_peripheral_manager *manager = owner;
    if (again) {
        /* managerd came back: what it kept is dropped and the app adds its services again on poweredOn (the
         * Swift library's rule), so that the app's objects and the stack's database cannot disagree. */
        remove_all(manager);
        stop_advertising(manager);
        retire_services(manager);
        manager->advertising = false;
        return;
    }
    const Beryl__Ipc__V1__PreservedPeripheralRole *role =
        welcome->was_restored && welcome->restored ? welcome->restored->peripheral : NULL;
    if (!role) return;
    beryl_local_service **services = calloc(role->n_services + 1, sizeof *services);
    size_t count = 0;
    for (size_t i = 0; services && i < role->n_services; i++) {
        beryl_local_service *service = restored_service(manager, role->services[i]);
        if (service) services[count++] = service;
    }
    manager->advertising = role->advertising;
    if (manager->callbacks.will_restore_state) {
        beryl_peripheral_restored state = {count, services, role->advertising,
                                           role->local_name && *role->local_name ? role->local_name : NULL};
        manager->callbacks.will_restore_state(manager, &state, manager->user);
    }
    free(services);
}

/* The stack dropped what this manager published (managerd clears a manager's services and advertising when the
 * controller leaves poweredOn, ManagerCore+State.swift; a lost session takes them too): the app adds them again on
 * poweredOn, and values queued for them go. */
static void services_gone(beryl_peripheral_manager *manager) {
    retire_services(manager);
    manager->advertising = manager->advertising_requested = false;
    manager->waiting_for_ready = false;
    manager->update_count = 0;
    manager->ready_seen = 0;
}

static void peripheral_lost(void *owner) {
    beryl_peripheral_manager *manager = owner;
    services_gone(manager);
    for (beryl_request *r = manager->requests; r; r = r->next) r->orphaned = true;
}

static void peripheral_state_changed(void *owner) {
    beryl_peripheral_manager *manager = owner;
    if (beryl_session_state(manager->session) != BERYL_STATE_POWERED_ON) services_gone(manager);
    manager->callbacks.did_update_state(manager, manager->user);
    /* A wait for room that the loss of the queue ended: the queue is empty, so there is room now. */
    if (beryl_session_state(manager->session) == BERYL_STATE_POWERED_ON) ready_if_owed(manager);
}

static void peripheral_dropped(void *owner, const char *why) {
    beryl_peripheral_manager *manager = owner;
    if (manager->callbacks.did_drop_session) manager->callbacks.did_drop_session(manager, why, manager->user);
}

static void destroy_manager(void *owner) {
    beryl_peripheral_manager *manager = owner;
    beryl_session_free(manager->session);
    if (manager->sweep) event_free(manager->sweep);
    if (manager->update_retry) event_free(manager->update_retry);
    while (manager->services) {
        beryl_local_service *next = manager->services->next;
        free_service(manager->services);
        manager->services = next;
    }
    while (manager->requests) {
        beryl_request *next = manager->requests->next;
        free_request(manager->requests);
        manager->requests = next;
    }
    free(manager);
}

int beryl_peripheral_manager_create(beryl_peripheral_manager **out, struct event_base *base,
                                    const beryl_peripheral_manager_callbacks *callbacks, void *user,
                                    const beryl_manager_options *options) {
    if (!out || !base || !callbacks || !callbacks->did_update_state) return BERYL_E_INVALID_ARGUMENT;
    *out = NULL;
    beryl_peripheral_manager *manager = calloc(1, sizeof *manager);
    if (!manager) return BERYL_E_NO_MEMORY;
    manager->callbacks = *callbacks;
    manager->user = user;
    manager->sweep = event_new(base, -1, 0, sweep_requests, manager);
    manager->update_retry = evtimer_new(base, retry_updates, manager);
    if (!manager->sweep || !manager->update_retry) {
        if (manager->sweep) event_free(manager->sweep);
        if (manager->update_retry) event_free(manager->update_retry);
        free(manager);
        return BERYL_E_NO_MEMORY;
    }
    static const beryl_session_hooks hooks = {peripheral_welcomed, peripheral_event, peripheral_lost,
                                              peripheral_state_changed, peripheral_dropped};
    int status = beryl_session_create(&manager->session, base, options,
                                      BERYL__IPC__V1__MANAGER_ROLE__MANAGER_ROLE_PERIPHERAL, &hooks, manager);
    if (status != BERYL_OK) {
        event_free(manager->sweep);
        event_free(manager->update_retry);
        free(manager);
        return status;
    }
    beryl_session_set_destroy(manager->session, destroy_manager);
    *out = manager;
    return BERYL_OK;
}

void beryl_peripheral_manager_free(beryl_peripheral_manager *manager) {
    if (!manager || beryl_session_defer_free(manager->session)) return;
    destroy_manager(manager);
}

beryl_session *beryl_peripheral_manager_session(beryl_peripheral_manager *manager) { return manager->session; }

beryl_manager_state beryl_peripheral_manager_state(const beryl_peripheral_manager *manager) {
    return manager ? beryl_session_state(manager->session) : BERYL_STATE_UNKNOWN;
}

int beryl_peripheral_manager_set_app_state(beryl_peripheral_manager *manager, beryl_app_state state) {
    return manager ? beryl_session_set_app_state(manager->session, state) : BERYL_E_INVALID_ARGUMENT;
}

int beryl_peripheral_manager_set_pairing_callbacks(beryl_peripheral_manager *manager,
                                                   const beryl_pairing_callbacks *callbacks, void *user) {
    if (!manager) return BERYL_E_INVALID_ARGUMENT;
    beryl_pairing_set(&manager->pairing, callbacks, user);
    return BERYL_OK;
}

int beryl_peripheral_manager_answer_pairing(beryl_peripheral_manager *manager, const char *peer, bool accept,
                                            uint32_t passkey) {
    return manager ? beryl_pairing_answer(manager->session, peer, accept, passkey) : BERYL_E_INVALID_ARGUMENT;
}

int beryl_peripheral_manager_invalidate(beryl_peripheral_manager *manager) {
    return manager ? beryl_session_invalidate(manager->session) : BERYL_E_INVALID_ARGUMENT;
}
