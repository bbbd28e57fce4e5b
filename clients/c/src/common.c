/* UUIDs, errors and the small things every part uses. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Bluetooth base UUID 00000000-0000-1000-8000-00805F9B34FB (Core Vol 3 Part B §2.5.1). */
static const uint8_t base_uuid[16] = {0, 0, 0, 0, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB};

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)tolower((unsigned char)c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool parse_hex(const char *text, size_t digits, uint8_t *out) {
    for (size_t i = 0; i < digits; i += 2) {
        int high = hex_value(text[i]), low = hex_value(text[i + 1]);
        if (high < 0 || low < 0) return false;
        out[i / 2] = (uint8_t)(high << 4 | low);
    }
    return true;
}

int beryl_uuid_parse(const char *text, beryl_uuid *out) {
    if (!text || !out) return BERYL_E_INVALID_ARGUMENT;
    size_t length = strlen(text);
    beryl_uuid uuid;
    memcpy(uuid.bytes, base_uuid, 16);
    if (length == 4) {
        if (!parse_hex(text, 4, uuid.bytes + 2)) return BERYL_E_BAD_UUID;
    } else if (length == 8) {
        if (!parse_hex(text, 8, uuid.bytes)) return BERYL_E_BAD_UUID;
    } else if (length == 36) {
        static const size_t groups[5][2] = {{0, 8}, {9, 4}, {14, 4}, {19, 4}, {24, 12}};
        if (text[8] != '-' || text[13] != '-' || text[18] != '-' || text[23] != '-') return BERYL_E_BAD_UUID;
        size_t at = 0;
        for (int g = 0; g < 5; g++) {
            if (!parse_hex(text + groups[g][0], groups[g][1], uuid.bytes + at)) return BERYL_E_BAD_UUID;
            at += groups[g][1] / 2;
        }
    } else {
        return BERYL_E_BAD_UUID;
    }
    *out = uuid;
    return BERYL_OK;
}

void beryl_uuid_format(const beryl_uuid *uuid, char out[BERYL_UUID_STRING_SIZE]) {
    if (!out) return;
    if (!uuid) {
        out[0] = 0;
        return;
    }
    const uint8_t *b = uuid->bytes;
    if (memcmp(b + 4, base_uuid + 4, 12) == 0) {
        if (b[0] == 0 && b[1] == 0) snprintf(out, BERYL_UUID_STRING_SIZE, "%02X%02X", b[2], b[3]);
        else snprintf(out, BERYL_UUID_STRING_SIZE, "%02X%02X%02X%02X", b[0], b[1], b[2], b[3]);
        return;
    }
    snprintf(out, BERYL_UUID_STRING_SIZE, "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

bool beryl_uuid_equal(const beryl_uuid *a, const beryl_uuid *b) {
    return a && b && memcmp(a->bytes, b->bytes, 16) == 0;
}

char *beryl_strdup(const char *text) {
    size_t length = strlen(text) + 1;
    char *copy = malloc(length);
    if (copy) memcpy(copy, text, length);
    return copy;
}

void beryl_strings_free(char **strings, size_t count) {
    if (!strings) return;
    for (size_t i = 0; i < count; i++) free(strings[i]);
    free(strings);
}

int beryl_uuid_list_to_strings(const beryl_uuid *uuids, size_t count, char ***out) {
    *out = NULL;
    if (count == 0) return BERYL_OK;
    if (!uuids) return BERYL_E_INVALID_ARGUMENT;
    if (count > 256) return BERYL_E_TOO_LONG;
    char **strings = calloc(count, sizeof *strings);
    if (!strings) return BERYL_E_NO_MEMORY;
    for (size_t i = 0; i < count; i++) {
        strings[i] = malloc(BERYL_UUID_STRING_SIZE);
        if (!strings[i]) {
            beryl_strings_free(strings, count);
            return BERYL_E_NO_MEMORY;
        }
        beryl_uuid_format(&uuids[i], strings[i]);
    }
    *out = strings;
    return BERYL_OK;
}

const char *beryl_status_string(int status) {
    switch (status) {
    case BERYL_OK: return "success";
    case BERYL_E_INVALID_ARGUMENT: return "invalid argument (a NULL handle or an out-of-range value)";
    case BERYL_E_BAD_UUID: return "not a UUID (4 or 8 hex digits, or the 36-character form)";
    case BERYL_E_TOO_LONG: return "too long (a value over 512 bytes, or a list over the library's limits)";
    case BERYL_E_NOT_POWERED_ON: return "the manager is not powered on";
    case BERYL_E_ALREADY_ANSWERED: return "the request was answered already";
    case BERYL_E_NOT_CONNECTED: return "the peripheral is not connected";
    case BERYL_E_NOT_PERMITTED: return "the attribute's properties do not allow it";
    case BERYL_E_NO_MEMORY: return "out of memory";
    case BERYL_E_UNKNOWN_OBJECT: return "the object does not belong to this manager";
    case BERYL_E_STATE: return "not allowed in the object's state";
    default: return "unknown status";
    }
}

const char *beryl_manager_state_string(beryl_manager_state state) {
    switch (state) {
    case BERYL_STATE_UNKNOWN: return "unknown";
    case BERYL_STATE_RESETTING: return "resetting";
    case BERYL_STATE_UNSUPPORTED: return "unsupported";
    case BERYL_STATE_UNAUTHORIZED: return "unauthorized";
    case BERYL_STATE_POWERED_OFF: return "poweredOff";
    case BERYL_STATE_POWERED_ON: return "poweredOn";
    default: return "invalid";
    }
}

void beryl_error_local(beryl_error *out, beryl_error_domain domain, int code, const char *message) {
    out->domain = domain;
    out->code = code;
    out->message = message;
}

/* The typed fields decide, in S/Beryl/Errors.swift's order; the message is for people only. */
void beryl_error_from_wire(const WireError *wire, beryl_error *out) {
    const char *message = wire->message ? wire->message : "";
    if (wire->att_error != 0 && wire->att_error <= 0xFF) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_ATT, (int)wire->att_error, message);
    } else if (wire->bluetooth_error > 0 && wire->bluetooth_error <= BERYL_BT_TOO_MANY_LE_PAIRED_DEVICES + 1) {
        /* The wire's values are one more than Apple's (common.proto), 0 meaning none. */
        beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, (int)wire->bluetooth_error - 1, message);
    } else if (wire->smp_reason != 0) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_ATT, BERYL_ATT_INSUFFICIENT_AUTHENTICATION, message);
    } else if (wire->hci_status != 0 && wire->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_SECURITY_FAILED) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_ATT, BERYL_ATT_INSUFFICIENT_ENCRYPTION, message);
    } else if (wire->controller_reason != 0 ||
               wire->manager_reason == BERYL__IPC__V1__MANAGER_REASON__MANAGER_REASON_PAIRING_UNDER_WAY) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_UNKNOWN, message);
    } else if (wire->manager_reason != 0 || wire->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT ||
               wire->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_MISSING_FIELD) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_INVALID_PARAMETERS, message);
    } else if (wire->code == BERYL__IPC__V1__ERROR_CODE__ERROR_CODE_PERMISSION_DENIED) {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_OPERATION_NOT_SUPPORTED, message);
    } else {
        beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_UNKNOWN, message);
    }
}

/* didDisconnectPeripheral's error from the HCI reason (S/Beryl/Errors.swift; Core Vol 1 Part F §1.3). */
bool beryl_error_from_disconnect(uint32_t reason, beryl_error *out) {
    switch (reason) {
    case 0x00:
    case 0x16: return false;
    case 0x08:
    case 0x22: beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_CONNECTION_TIMEOUT, "the link timed out"); break;
    case 0x3E: beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_CONNECTION_FAILED, "the connection failed to be established"); break;
    case 0x06: beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_PEER_REMOVED_PAIRING_INFORMATION, "the peer removed its pairing information"); break;
    default: beryl_error_local(out, BERYL_ERROR_DOMAIN_BLUETOOTH, BERYL_BT_PERIPHERAL_DISCONNECTED, "the peripheral disconnected"); break;
    }
    return true;
}

static int split_list(const char *text, char ***out, size_t *count) {
    *out = NULL;
    *count = 0;
    if (!text || !*text) return BERYL_OK;
    size_t capacity = 1;
    for (const char *c = text; *c; c++) capacity += *c == ',';
    char **items = calloc(capacity, sizeof *items);
    if (!items) return BERYL_E_NO_MEMORY;
    const char *start = text;
    for (;;) {
        const char *end = strchr(start, ',');
        size_t length = end ? (size_t)(end - start) : strlen(start);
        if (length > 0) {
            char *item = malloc(length + 1);
            if (!item) {
                beryl_strings_free(items, *count);
                *count = 0;
                return BERYL_E_NO_MEMORY;
            }
            memcpy(item, start, length);
            item[length] = 0;
            items[(*count)++] = item;
        }
        if (!end) break;
        start = end + 1;
    }
    *out = items;
    return BERYL_OK;
}

/* managerd relaunches an app with the restore identifiers it must create again (S/BerylManager/AppLaunches.swift). */
int beryl_launch_options_read(beryl_launch_options *out) {
    if (!out) return BERYL_E_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int status = split_list(getenv("BERYL_LAUNCH_CENTRALS"), &out->centrals, &out->central_count);
    if (status == BERYL_OK) status = split_list(getenv("BERYL_LAUNCH_PERIPHERALS"), &out->peripherals, &out->peripheral_count);
    if (status != BERYL_OK) {
        beryl_launch_options_clear(out);
        return status;
    }
    return out->central_count + out->peripheral_count > 0 ? 1 : 0;
}

void beryl_launch_options_clear(beryl_launch_options *options) {
    if (!options) return;
    beryl_strings_free(options->centrals, options->central_count);
    beryl_strings_free(options->peripherals, options->peripheral_count);
    memset(options, 0, sizeof *options);
}
