/*
 * libberyl: Core Bluetooth's central and peripheral managers for C programs, as clients of Beryl's managerd.
 *
 * Everything runs on the caller's libevent loop: the library never starts a thread and never blocks. Callbacks are
 * called from that loop, one at a time, with the user pointer given at creation. A manager that cannot reach the
 * stack is in a state (poweredOff, resetting, unauthorized), as in Core Bluetooth, and reconnects by itself.
 *
 * Ownership, for the whole API:
 * - Functions that take strings or buffers copy what they keep; the caller keeps ownership of what it passes.
 * - Objects handed to callbacks or returned by accessors (peripherals, services, characteristics, descriptors, local
 *   services, requests) belong to their manager and stay valid until that manager is freed, unless a function says
 *   otherwise (requests: until answered, see beryl_request_respond). Strings and buffers returned by accessors belong to the object.
 * - A manager is freed with its _free function, which may be called from inside its own callbacks.
 *
 * Functions return BERYL_OK (0) or a negative beryl_status; none aborts on bad input. Errors of operations that
 * complete later reach their callback as a const beryl_error * (NULL on success), in Core Bluetooth's two domains.
 */
#ifndef BERYL_BERYL_H
#define BERYL_BERYL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shared library exports what this header declares and nothing else. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

struct event_base;

/* ---- Status of a call, errors of an operation ---- */

typedef enum beryl_status {
    BERYL_OK = 0,
    /* A NULL handle or out-of-range argument. */
    BERYL_E_INVALID_ARGUMENT = -1,
    /* A UUID string that is not 4 or 8 hex digits or the 36-character form. */
    BERYL_E_BAD_UUID = -2,
    /* A value over 512 bytes (Core Vol 3 Part F §3.2.9), or a list over the library's limits. */
    BERYL_E_TOO_LONG = -3,
    /* The manager's state is not poweredOn. */
    BERYL_E_NOT_POWERED_ON = -4,
    /* The request was answered already (each is answered exactly once). */
    BERYL_E_ALREADY_ANSWERED = -5,
    /* The peripheral is not connected. */
    BERYL_E_NOT_CONNECTED = -6,
    /* The attribute's properties do not allow it (Core Bluetooth would answer with an ATT error). */
    BERYL_E_NOT_PERMITTED = -7,
    BERYL_E_NO_MEMORY = -8,
    /* The object does not belong to this manager (or was removed from it). */
    BERYL_E_UNKNOWN_OBJECT = -9,
    /* The object is in a state that does not allow it (a service added twice, a request not to be answered). */
    BERYL_E_STATE = -10,
} beryl_status;

/* A fixed English description of a status; never NULL. */
const char *beryl_status_string(int status);

typedef enum beryl_error_domain {
    /* CBErrorDomain: code is a beryl_bluetooth_error. */
    BERYL_ERROR_DOMAIN_BLUETOOTH = 1,
    /* CBATTErrorDomain: code is the ATT error code (Core Vol 3 Part F §3.4.1.1), application codes included. */
    BERYL_ERROR_DOMAIN_ATT = 2,
} beryl_error_domain;

/* CBError.Code, with Apple's values. */
typedef enum beryl_bluetooth_error {
    BERYL_BT_UNKNOWN = 0,
    BERYL_BT_INVALID_PARAMETERS = 1,
    BERYL_BT_INVALID_HANDLE = 2,
    BERYL_BT_NOT_CONNECTED = 3,
    BERYL_BT_OUT_OF_SPACE = 4,
    BERYL_BT_OPERATION_CANCELLED = 5,
    BERYL_BT_CONNECTION_TIMEOUT = 6,
    BERYL_BT_PERIPHERAL_DISCONNECTED = 7,
    BERYL_BT_UUID_NOT_ALLOWED = 8,
    BERYL_BT_ALREADY_ADVERTISING = 9,
    BERYL_BT_CONNECTION_FAILED = 10,
    BERYL_BT_CONNECTION_LIMIT_REACHED = 11,
    BERYL_BT_UNKNOWN_DEVICE = 12,
    BERYL_BT_OPERATION_NOT_SUPPORTED = 13,
    BERYL_BT_PEER_REMOVED_PAIRING_INFORMATION = 14,
    BERYL_BT_ENCRYPTION_TIMED_OUT = 15,
    BERYL_BT_TOO_MANY_LE_PAIRED_DEVICES = 16,
} beryl_bluetooth_error;

/* ATT error codes an app answers requests with, and meets in BERYL_ERROR_DOMAIN_ATT (Core Vol 3 Part F §3.4.1.1). */
typedef enum beryl_att_error {
    BERYL_ATT_SUCCESS = 0x00,
    BERYL_ATT_INVALID_HANDLE = 0x01,
    BERYL_ATT_READ_NOT_PERMITTED = 0x02,
    BERYL_ATT_WRITE_NOT_PERMITTED = 0x03,
    BERYL_ATT_INVALID_PDU = 0x04,
    BERYL_ATT_INSUFFICIENT_AUTHENTICATION = 0x05,
    BERYL_ATT_REQUEST_NOT_SUPPORTED = 0x06,
    BERYL_ATT_INVALID_OFFSET = 0x07,
    BERYL_ATT_INSUFFICIENT_AUTHORIZATION = 0x08,
    BERYL_ATT_PREPARE_QUEUE_FULL = 0x09,
    BERYL_ATT_ATTRIBUTE_NOT_FOUND = 0x0A,
    BERYL_ATT_ATTRIBUTE_NOT_LONG = 0x0B,
    BERYL_ATT_INSUFFICIENT_ENCRYPTION_KEY_SIZE = 0x0C,
    BERYL_ATT_INVALID_ATTRIBUTE_VALUE_LENGTH = 0x0D,
    BERYL_ATT_UNLIKELY_ERROR = 0x0E,
    BERYL_ATT_INSUFFICIENT_ENCRYPTION = 0x0F,
    BERYL_ATT_UNSUPPORTED_GROUP_TYPE = 0x10,
    BERYL_ATT_INSUFFICIENT_RESOURCES = 0x11,
    BERYL_ATT_DATABASE_OUT_OF_SYNC = 0x12,
    BERYL_ATT_VALUE_NOT_ALLOWED = 0x13,
    /* The application's own errors (Core Vol 3 Part F §3.4.1.1): any code from FIRST to LAST, defined by its profile. */
    BERYL_ATT_APPLICATION_ERROR_FIRST = 0x80,
    BERYL_ATT_APPLICATION_ERROR_LAST = 0x9F,
} beryl_att_error;

typedef struct beryl_error {
    beryl_error_domain domain;
    int code;
    /* managerd's words for people; never parse it. Valid during the callback only. */
    const char *message;
} beryl_error;

/* ---- UUIDs ---- */

/* Always the 128-bit form; 16- and 32-bit UUIDs are expanded on the Bluetooth base UUID (Core Vol 3 Part B §2.5.1). */
typedef struct beryl_uuid {
    uint8_t bytes[16];
} beryl_uuid;

/* "180D" plus the terminator, or the 36-character form plus the terminator. */
#define BERYL_UUID_STRING_SIZE 37

/* Parses "180D", "0000180D" or "0000180D-0000-1000-8000-00805F9B34FB" (any case). BERYL_E_BAD_UUID otherwise. */
int beryl_uuid_parse(const char *text, beryl_uuid *out);
/* Writes the shortest form ("180D" for a 16-bit UUID on the base, 8 digits for 32-bit, else 36 characters). */
void beryl_uuid_format(const beryl_uuid *uuid, char out[BERYL_UUID_STRING_SIZE]);
bool beryl_uuid_equal(const beryl_uuid *a, const beryl_uuid *b);

/* ---- What every manager shares ---- */

/* CBManagerState, with Apple's values. */
typedef enum beryl_manager_state {
    BERYL_STATE_UNKNOWN = 0,
    BERYL_STATE_RESETTING = 1,
    BERYL_STATE_UNSUPPORTED = 2,
    BERYL_STATE_UNAUTHORIZED = 3,
    BERYL_STATE_POWERED_OFF = 4,
    BERYL_STATE_POWERED_ON = 5,
} beryl_manager_state;

const char *beryl_manager_state_string(beryl_manager_state state);

typedef struct beryl_manager_options {
    /* managerd's socket; NULL: $BERYL_RUNTIME_DIR/managerd.sock, else /run/beryl/managerd.sock. */
    const char *socket_path;
    /* The app's id from its manifest; NULL: $BERYL_APP_ID, else none (a foreground-only app). */
    const char *app_id;
    /* Core Bluetooth's restore identifier key: opts the manager into preservation and restoration (needs app_id). */
    const char *restore_identifier;
} beryl_manager_options;

/* The launch options a program relaunched by managerd is given (UIApplicationLaunchOptionsBluetooth*Key): the
 * restore identifiers of the managers it must create again, read from its environment. */
typedef struct beryl_launch_options {
    size_t central_count;
    char **centrals;
    size_t peripheral_count;
    char **peripherals;
} beryl_launch_options;

/* Fills `out` (caller-owned struct; its lists are allocated and freed by beryl_launch_options_clear).
 * Returns 1 when the program was launched for restoration, 0 when not, or a negative status. */
int beryl_launch_options_read(beryl_launch_options *out);
void beryl_launch_options_clear(beryl_launch_options *options);

/* The app's state, for managerd's background rules (UIApplication's states). */
typedef enum beryl_app_state {
    BERYL_APP_FOREGROUND = 1,
    BERYL_APP_BACKGROUND = 2,
} beryl_app_state;

/* ---- Pairing: Beryl's pairing delegate (iOS asks the user itself; here the app that holds the link does) ---- */

typedef enum beryl_pairing_prompt_kind {
    /* Show `number`; the peer's user types it. */
    BERYL_PAIRING_DISPLAY_PASSKEY = 1,
    /* Ask the user for the passkey the peer shows; answer with it. */
    BERYL_PAIRING_ENTER_PASSKEY = 2,
    /* Show `number`; accept once the user says it matches the peer's. */
    BERYL_PAIRING_CONFIRM_NUMBER = 3,
    /* Just Works on a link whose pairing needs consent: accept or not. */
    BERYL_PAIRING_CONFIRM = 4,
} beryl_pairing_prompt_kind;

/* Valid during the callback only. */
typedef struct beryl_pairing_prompt {
    /* The stack's identifier for the peer, a UUID string (as beryl_peripheral_identifier gives): pass it as the answer's
     * `peer`. Not an address: the address is below. */
    const char *peer;
    /* The peer's address on the link, to show the user. */
    const char *address;
    beryl_pairing_prompt_kind kind;
    uint32_t number;
} beryl_pairing_prompt;

/* Valid during the callback only. */
typedef struct beryl_pairing_outcome {
    const char *peer;
    const char *address;
    /* The identity address the peer distributed, or NULL. */
    const char *identity;
    bool success, bonded, authenticated, secure_connections, ended_by_peer;
    /* The SMP Pairing Failed reason (Core Vol 3 Part H §3.5.5), 0xFF for the 30 s timeout; 0 on success. */
    uint8_t reason;
} beryl_pairing_outcome;

typedef struct beryl_pairing_callbacks {
    /* Answer with the manager's answer_pairing, once. Without this callback a prompt is declined at once. */
    void (*prompt)(const beryl_pairing_prompt *prompt, void *user);
    void (*finished)(const beryl_pairing_outcome *outcome, void *user);
} beryl_pairing_callbacks;

/* ---- Central role: CBCentralManager, CBPeripheral and its attributes ---- */

typedef struct beryl_central beryl_central;
typedef struct beryl_peripheral beryl_peripheral;
typedef struct beryl_service beryl_service;
typedef struct beryl_characteristic beryl_characteristic;
typedef struct beryl_descriptor beryl_descriptor;

typedef enum beryl_peripheral_state {
    BERYL_PERIPHERAL_DISCONNECTED = 0,
    BERYL_PERIPHERAL_CONNECTING = 1,
    BERYL_PERIPHERAL_CONNECTED = 2,
    BERYL_PERIPHERAL_DISCONNECTING = 3,
} beryl_peripheral_state;

/* Core Bluetooth's characteristic properties. */
enum {
    BERYL_PROPERTY_BROADCAST = 0x01,
    BERYL_PROPERTY_READ = 0x02,
    BERYL_PROPERTY_WRITE_WITHOUT_RESPONSE = 0x04,
    BERYL_PROPERTY_WRITE = 0x08,
    BERYL_PROPERTY_NOTIFY = 0x10,
    BERYL_PROPERTY_INDICATE = 0x20,
    BERYL_PROPERTY_AUTHENTICATED_SIGNED_WRITES = 0x40,
    BERYL_PROPERTY_EXTENDED_PROPERTIES = 0x80,
    BERYL_PROPERTY_NOTIFY_ENCRYPTION_REQUIRED = 0x100,
    BERYL_PROPERTY_INDICATE_ENCRYPTION_REQUIRED = 0x200,
};

typedef struct beryl_service_data {
    beryl_uuid uuid;
    const uint8_t *data;
    size_t length;
} beryl_service_data;

/* What an advertisement carried (CBAdvertisementData*Key); fields absent from it are NULL or 0. Valid during the
 * callback only. */
typedef struct beryl_advertisement {
    const char *local_name;
    size_t service_uuid_count;
    const beryl_uuid *service_uuids;
    const uint8_t *manufacturer_data;
    size_t manufacturer_data_length;
    bool tx_power_known;
    int tx_power_level;
    bool connectable;
    /* A background peripheral's services, in the overflow area (Core Bluetooth's hashed form). */
    size_t overflow_service_uuid_count;
    const beryl_uuid *overflow_service_uuids;
    size_t solicited_service_uuid_count;
    const beryl_uuid *solicited_service_uuids;
    size_t service_data_count;
    const beryl_service_data *service_data;
} beryl_advertisement;

/* What a restored central manager holds again (willRestoreState). Valid during the callback only. */
typedef struct beryl_central_restored {
    size_t peripheral_count;
    beryl_peripheral *const *peripherals;
    bool scanning;
    size_t scan_service_count;
    const beryl_uuid *scan_services;
} beryl_central_restored;

typedef struct beryl_central_callbacks {
    /* Required: the state changed (only on a change). */
    void (*did_update_state)(beryl_central *central, void *user);
    /* A restored manager, before its first did_update_state. */
    void (*will_restore_state)(beryl_central *central, const beryl_central_restored *restored, void *user);
    void (*did_discover)(beryl_central *central, beryl_peripheral *peripheral, const beryl_advertisement *advertisement,
                         int rssi, void *user);
    void (*did_connect)(beryl_central *central, beryl_peripheral *peripheral, void *user);
    void (*did_fail_to_connect)(beryl_central *central, beryl_peripheral *peripheral, const beryl_error *error,
                                void *user);
    /* error NULL: this app cancelled, or the link closed normally. */
    void (*did_disconnect)(beryl_central *central, beryl_peripheral *peripheral, const beryl_error *error, void *user);
    /* A datagram from managerd that was not a valid message: the library dropped the session and reconnects. */
    void (*did_drop_session)(beryl_central *central, const char *why, void *user);
} beryl_central_callbacks;

/* Creates a central manager on `base`. options may be NULL. The first state arrives through did_update_state. */
int beryl_central_create(beryl_central **out, struct event_base *base, const beryl_central_callbacks *callbacks,
                         void *user, const beryl_manager_options *options);
void beryl_central_free(beryl_central *central);
beryl_manager_state beryl_central_state(const beryl_central *central);
int beryl_central_set_app_state(beryl_central *central, beryl_app_state state);
/* Prompts for pairing on the links this manager holds. callbacks may be NULL (prompts are then declined). */
int beryl_central_set_pairing_callbacks(beryl_central *central, const beryl_pairing_callbacks *callbacks, void *user);
/* The answer to a prompt: accept (with the passkey the user entered, for ENTER_PASSKEY; up to 999999) or not. */
int beryl_central_answer_pairing(beryl_central *central, const char *peer, bool accept, uint32_t passkey);
/* The app's managers are done for good (a user quit, from inside the app): managerd discards what it preserved. */
int beryl_central_invalidate(beryl_central *central);

/* service_uuids may be NULL with count 0 (every peripheral). */
int beryl_central_scan(beryl_central *central, const beryl_uuid *service_uuids, size_t count, bool allow_duplicates);
int beryl_central_stop_scan(beryl_central *central);
bool beryl_central_is_scanning(const beryl_central *central);

typedef struct beryl_connect_options {
    bool notify_on_connection;
    bool notify_on_disconnection;
    bool notify_on_notification;
} beryl_connect_options;

/* Never times out: managerd keeps trying until connected or cancelled. options may be NULL. */
int beryl_central_connect(beryl_central *central, beryl_peripheral *peripheral, const beryl_connect_options *options);
/* did_disconnect (error NULL) follows, also for a connection still pending. */
int beryl_central_cancel_connection(beryl_central *central, beryl_peripheral *peripheral);

/* The answer to a retrieve call: the peripherals, valid during the callback (the objects themselves stay valid). */
typedef void (*beryl_retrieve_callback)(beryl_central *central, beryl_peripheral *const *peripherals, size_t count,
                                        const beryl_error *error, void *user);
/* retrievePeripherals(withIdentifiers:): identifiers are the UUID strings the stack gave peripherals. An empty list
 * is answered (none) before this returns. */
int beryl_central_retrieve_peripherals(beryl_central *central, const char *const *identifiers, size_t count,
                                       beryl_retrieve_callback callback, void *user);
/* retrieveConnectedPeripherals(withServices:). */
int beryl_central_retrieve_connected(beryl_central *central, const beryl_uuid *service_uuids, size_t count,
                                     beryl_retrieve_callback callback, void *user);

typedef struct beryl_peripheral_callbacks {
    void (*did_discover_services)(beryl_peripheral *peripheral, const beryl_error *error, void *user);
    void (*did_discover_included_services)(beryl_peripheral *peripheral, beryl_service *service,
                                           const beryl_error *error, void *user);
    void (*did_discover_characteristics)(beryl_peripheral *peripheral, beryl_service *service,
                                         const beryl_error *error, void *user);
    void (*did_discover_descriptors)(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                                     const beryl_error *error, void *user);
    /* A read completed, or a notification or indication arrived. */
    void (*did_update_value)(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                             const beryl_error *error, void *user);
    void (*did_update_descriptor_value)(beryl_peripheral *peripheral, beryl_descriptor *descriptor,
                                        const beryl_error *error, void *user);
    /* Writes with response only. */
    void (*did_write_value)(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                            const beryl_error *error, void *user);
    void (*did_write_descriptor_value)(beryl_peripheral *peripheral, beryl_descriptor *descriptor,
                                       const beryl_error *error, void *user);
    void (*did_update_notification_state)(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                                          const beryl_error *error, void *user);
    void (*did_read_rssi)(beryl_peripheral *peripheral, int rssi, const beryl_error *error, void *user);
    /* After can_send_write_without_response was false: there is room again. */
    void (*is_ready_to_send_write_without_response)(beryl_peripheral *peripheral, void *user);
    /* The peripheral's database changed (Service Changed): these services are gone from it. */
    void (*did_modify_services)(beryl_peripheral *peripheral, beryl_service *const *invalidated, size_t count,
                                void *user);
} beryl_peripheral_callbacks;

/* CBPeripheral.delegate: callbacks may be NULL to stop them. */
int beryl_peripheral_set_callbacks(beryl_peripheral *peripheral, const beryl_peripheral_callbacks *callbacks,
                                   void *user);
/* The stack's stable identifier for the peripheral (a UUID string). */
const char *beryl_peripheral_identifier(const beryl_peripheral *peripheral);
/* The name it advertised or GAP gave, or NULL. */
const char *beryl_peripheral_name(const beryl_peripheral *peripheral);
beryl_peripheral_state beryl_peripheral_get_state(const beryl_peripheral *peripheral);
size_t beryl_peripheral_service_count(const beryl_peripheral *peripheral);
beryl_service *beryl_peripheral_service_at(const beryl_peripheral *peripheral, size_t index);
beryl_service *beryl_peripheral_find_service(const beryl_peripheral *peripheral, const beryl_uuid *uuid);

/* uuids NULL with count 0: every service. */
int beryl_peripheral_discover_services(beryl_peripheral *peripheral, const beryl_uuid *uuids, size_t count);
int beryl_peripheral_discover_included_services(beryl_peripheral *peripheral, beryl_service *service,
                                                const beryl_uuid *uuids, size_t count);
int beryl_peripheral_discover_characteristics(beryl_peripheral *peripheral, beryl_service *service,
                                              const beryl_uuid *uuids, size_t count);
/* A characteristic with no handles for descriptors is answered (none) before this returns. */
int beryl_peripheral_discover_descriptors(beryl_peripheral *peripheral, beryl_characteristic *characteristic);
int beryl_peripheral_read_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic);
int beryl_peripheral_read_descriptor(beryl_peripheral *peripheral, beryl_descriptor *descriptor);

typedef enum beryl_write_type {
    BERYL_WRITE_WITH_RESPONSE = 0,
    BERYL_WRITE_WITHOUT_RESPONSE = 1,
} beryl_write_type;

/* Without response: check beryl_peripheral_can_send_write_without_response first; a write sent while it is false
 * may be dropped (as in Core Bluetooth), and is_ready_to_send_write_without_response follows. */
int beryl_peripheral_write_value(beryl_peripheral *peripheral, beryl_characteristic *characteristic,
                                 const uint8_t *value, size_t length, beryl_write_type type);
int beryl_peripheral_write_descriptor(beryl_peripheral *peripheral, beryl_descriptor *descriptor, const uint8_t *value,
                                      size_t length);
bool beryl_peripheral_can_send_write_without_response(const beryl_peripheral *peripheral);
int beryl_peripheral_set_notify(beryl_peripheral *peripheral, beryl_characteristic *characteristic, bool enabled);
int beryl_peripheral_read_rssi(beryl_peripheral *peripheral);

typedef void (*beryl_length_callback)(beryl_peripheral *peripheral, size_t length, const beryl_error *error,
                                      void *user);
/* maximumWriteValueLength(for:), answered on the loop: managerd knows the link's ATT_MTU. */
int beryl_peripheral_maximum_write_length(beryl_peripheral *peripheral, beryl_write_type type,
                                          beryl_length_callback callback, void *user);

const beryl_uuid *beryl_service_uuid(const beryl_service *service);
bool beryl_service_is_primary(const beryl_service *service);
beryl_peripheral *beryl_service_peripheral(const beryl_service *service);
size_t beryl_service_characteristic_count(const beryl_service *service);
beryl_characteristic *beryl_service_characteristic_at(const beryl_service *service, size_t index);
beryl_characteristic *beryl_service_find_characteristic(const beryl_service *service, const beryl_uuid *uuid);
size_t beryl_service_included_count(const beryl_service *service);
beryl_service *beryl_service_included_at(const beryl_service *service, size_t index);

const beryl_uuid *beryl_characteristic_uuid(const beryl_characteristic *characteristic);
uint32_t beryl_characteristic_properties(const beryl_characteristic *characteristic);
beryl_service *beryl_characteristic_service(const beryl_characteristic *characteristic);
/* The last value read or notified; NULL (length 0) before any. */
const uint8_t *beryl_characteristic_value(const beryl_characteristic *characteristic, size_t *length);
bool beryl_characteristic_is_notifying(const beryl_characteristic *characteristic);
size_t beryl_characteristic_descriptor_count(const beryl_characteristic *characteristic);
beryl_descriptor *beryl_characteristic_descriptor_at(const beryl_characteristic *characteristic, size_t index);

const beryl_uuid *beryl_descriptor_uuid(const beryl_descriptor *descriptor);
beryl_characteristic *beryl_descriptor_characteristic(const beryl_descriptor *descriptor);
const uint8_t *beryl_descriptor_value(const beryl_descriptor *descriptor, size_t *length);

/* ---- Peripheral role: CBPeripheralManager and CBMutableService ---- */

typedef struct beryl_peripheral_manager beryl_peripheral_manager;
typedef struct beryl_local_service beryl_local_service;
typedef struct beryl_local_characteristic beryl_local_characteristic;
typedef struct beryl_request beryl_request;

/* Beryl's attribute permissions (CBAttributePermissions). */
enum {
    BERYL_PERMISSION_READABLE = 0x01,
    BERYL_PERMISSION_WRITEABLE = 0x02,
    BERYL_PERMISSION_READ_ENCRYPTION_REQUIRED = 0x04,
    BERYL_PERMISSION_WRITE_ENCRYPTION_REQUIRED = 0x08,
};

/* What a restored peripheral manager holds again. Valid during the callback only (the services stay valid). */
typedef struct beryl_peripheral_restored {
    size_t service_count;
    beryl_local_service *const *services;
    bool advertising;
    const char *local_name;
} beryl_peripheral_restored;

typedef struct beryl_peripheral_manager_callbacks {
    /* Required. */
    void (*did_update_state)(beryl_peripheral_manager *manager, void *user);
    void (*will_restore_state)(beryl_peripheral_manager *manager, const beryl_peripheral_restored *restored,
                               void *user);
    void (*did_add_service)(beryl_peripheral_manager *manager, beryl_local_service *service,
                            const beryl_error *error, void *user);
    void (*did_start_advertising)(beryl_peripheral_manager *manager, const beryl_error *error, void *user);
    /* Answer with beryl_request_respond, once. */
    void (*did_receive_read)(beryl_peripheral_manager *manager, beryl_request *request, void *user);
    /* Writes of one ATT request, all or nothing: answer once, through requests[0]. Write commands (without
     * response) come here too; they take no answer (beryl_request_needs_response is false). */
    void (*did_receive_writes)(beryl_peripheral_manager *manager, beryl_request *const *requests, size_t count,
                               void *user);
    /* central: the stack's identifier for the central, valid during the callback (copy it to keep it). */
    void (*central_did_subscribe)(beryl_peripheral_manager *manager, const char *central,
                                  beryl_local_characteristic *characteristic, size_t maximum_update_length,
                                  void *user);
    void (*central_did_unsubscribe)(beryl_peripheral_manager *manager, const char *central,
                                    beryl_local_characteristic *characteristic, void *user);
    /* After update_value returned 0: there is room again. */
    void (*is_ready_to_update_subscribers)(beryl_peripheral_manager *manager, void *user);
    void (*did_drop_session)(beryl_peripheral_manager *manager, const char *why, void *user);
} beryl_peripheral_manager_callbacks;

int beryl_peripheral_manager_create(beryl_peripheral_manager **out, struct event_base *base,
                                    const beryl_peripheral_manager_callbacks *callbacks, void *user,
                                    const beryl_manager_options *options);
void beryl_peripheral_manager_free(beryl_peripheral_manager *manager);
beryl_manager_state beryl_peripheral_manager_state(const beryl_peripheral_manager *manager);
int beryl_peripheral_manager_set_app_state(beryl_peripheral_manager *manager, beryl_app_state state);
/* Prompts for pairing with a central. callbacks may be NULL (prompts are then declined). */
int beryl_peripheral_manager_set_pairing_callbacks(beryl_peripheral_manager *manager,
                                                   const beryl_pairing_callbacks *callbacks, void *user);
int beryl_peripheral_manager_answer_pairing(beryl_peripheral_manager *manager, const char *peer, bool accept,
                                            uint32_t passkey);
int beryl_peripheral_manager_invalidate(beryl_peripheral_manager *manager);

/* A service to add: built by the app, then given to beryl_peripheral_manager_add_service (which takes ownership
 * when it returns BERYL_OK). A service never added, or whose add was refused at once, is freed with
 * beryl_local_service_free. */
int beryl_local_service_create(beryl_local_service **out, const char *uuid, bool primary);
void beryl_local_service_free(beryl_local_service *service);
/* value NULL: a dynamic value, read and written through requests; otherwise a cached value (up to 512 bytes) that
 * the stack serves itself. The characteristic belongs to the service. */
int beryl_local_service_add_characteristic(beryl_local_service *service, beryl_local_characteristic **out,
                                           const char *uuid, uint32_t properties, uint32_t permissions,
                                           const uint8_t *value, size_t length);
/* A descriptor with a fixed value (0x2902 is the stack's own and refused). */
int beryl_local_characteristic_add_descriptor(beryl_local_characteristic *characteristic, const char *uuid,
                                              const uint8_t *value, size_t length);
/* An included service: one this manager has published. */
int beryl_local_service_include(beryl_local_service *service, beryl_local_service *included);

const beryl_uuid *beryl_local_service_uuid(const beryl_local_service *service);
size_t beryl_local_service_characteristic_count(const beryl_local_service *service);
beryl_local_characteristic *beryl_local_service_characteristic_at(const beryl_local_service *service, size_t index);
const beryl_uuid *beryl_local_characteristic_uuid(const beryl_local_characteristic *characteristic);

/* Returns BERYL_OK when the request went out: the manager then owns the service (freed with it), whether
 * did_add_service reports success or failure. Any other status means the call did not take it: the service stays
 * the caller's, to add again later or to free with beryl_local_service_free. */
int beryl_peripheral_manager_add_service(beryl_peripheral_manager *manager, beryl_local_service *service);
int beryl_peripheral_manager_remove_service(beryl_peripheral_manager *manager, beryl_local_service *service);
int beryl_peripheral_manager_remove_all_services(beryl_peripheral_manager *manager);
/* local_name may be NULL; service_uuids NULL with count 0. did_start_advertising follows. */
int beryl_peripheral_manager_start_advertising(beryl_peripheral_manager *manager, const char *local_name,
                                               const beryl_uuid *service_uuids, size_t count);
int beryl_peripheral_manager_stop_advertising(beryl_peripheral_manager *manager);
bool beryl_peripheral_manager_is_advertising(const beryl_peripheral_manager *manager);

/* updateValue(_:for:onSubscribedCentrals:) to every subscribed central. Returns 1 when the value is taken (queued
 * in order for the stack), 0 when the transmit queue is full (is_ready_to_update_subscribers follows; send it again
 * then), or a negative status. Decided locally: no round trip per call. */
int beryl_peripheral_manager_update_value(beryl_peripheral_manager *manager,
                                          beryl_local_characteristic *characteristic, const uint8_t *value,
                                          size_t length);

/* A central's read or write (CBATTRequest). */
const char *beryl_request_central(const beryl_request *request);
beryl_local_characteristic *beryl_request_characteristic(const beryl_request *request);
size_t beryl_request_offset(const beryl_request *request);
/* Writes: the value written. */
const uint8_t *beryl_request_value(const beryl_request *request, size_t *length);
/* ATT_MTU - 3 on the central's link. */
size_t beryl_request_maximum_update_length(const beryl_request *request);
bool beryl_request_needs_response(const beryl_request *request);
/* respond(to:withResult:): once per read, once per write batch (through its first request). For a read, value is
 * the bytes from the request's offset on. A second answer in the same callback is BERYL_E_ALREADY_ANSWERED; the
 * request (for a batch, every request of it) is freed once the callback that answered it has returned, so a pointer
 * kept after that must not be used again (its memory may hold a later request). A write command's requests take no
 * answer and are freed when did_receive_writes returns. A request whose session ended before the answer is answered
 * with BERYL_E_NOT_POWERED_ON (nothing can carry it) and freed the same way. */
int beryl_request_respond(beryl_peripheral_manager *manager, beryl_request *request, beryl_att_error result,
                          const uint8_t *value, size_t length);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
