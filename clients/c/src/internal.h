/* What the library's parts share: the session with managerd (one per manager) and the message types' short names. */
#ifndef BERYL_INTERNAL_H
#define BERYL_INTERNAL_H

#include "beryl/beryl.h"

#include "envelope.pb-c.h"

typedef Beryl__Ipc__V1__Envelope Envelope;
typedef Beryl__Ipc__V1__ManagerRequest ManagerRequest;
typedef Beryl__Ipc__V1__ManagerResponse ManagerResponse;
typedef Beryl__Ipc__V1__ManagerEvent ManagerEvent;
typedef Beryl__Ipc__V1__Error WireError;
typedef Beryl__Ipc__V1__Welcome Welcome;
typedef Beryl__Ipc__V1__GattDatabase GattDatabase;

/* The IPC's datagram cap, both ways (docs/ipc.md). */
#define BERYL_DATAGRAM_CAP 65536
/* The longest attribute value (Core Vol 3 Part F §3.2.9). */
#define BERYL_VALUE_CAP 512
/* Every manager field on the wire: a session is one manager (manager.proto). */
#define BERYL_MANAGER_ID 1

typedef struct beryl_session beryl_session;

/* What a request's answer (or its failure) is handed to. response is NULL when error is set: the session ended, or
 * the answer was an Error. Both NULL: the manager is being freed; free the context and call nothing. */
typedef void (*beryl_answer_fn)(void *owner, void *context, const ManagerResponse *response, const beryl_error *error);

typedef struct beryl_session_hooks {
    /* again: a Hello was answered before on this manager (a reconnection). */
    void (*welcomed)(void *owner, const Welcome *welcome, bool again);
    void (*event)(void *owner, const ManagerEvent *event);
    /* The session ended (managerd went away, or the library dropped it); the state is resetting already. */
    void (*lost)(void *owner);
    void (*state_changed)(void *owner);
    void (*dropped)(void *owner, const char *why);
} beryl_session_hooks;

int beryl_session_create(beryl_session **out, struct event_base *base, const beryl_manager_options *options,
                         Beryl__Ipc__V1__ManagerRole role, const beryl_session_hooks *hooks, void *owner);
void beryl_session_free(beryl_session *session);
/* The manager's own free, run when a free asked for inside a callback can happen (the callback has returned). */
void beryl_session_set_destroy(beryl_session *session, void (*destroy_owner)(void *owner));
/* True when the caller must not free now: it is inside one of this session's callbacks, which frees it on return. */
bool beryl_session_defer_free(beryl_session *session);
beryl_manager_state beryl_session_state(const beryl_session *session);
const char *beryl_session_app_id(const beryl_session *session);
/* The IPC code of the Error being handed to an answer (flow control needs BUSY, which apps see as unknown). */
Beryl__Ipc__V1__ErrorCode beryl_session_error_code(const beryl_session *session);
/* Sends a request; answer (may be NULL) runs once with its answer or failure. */
int beryl_session_send(beryl_session *session, ManagerRequest *request, beryl_answer_fn answer, void *context);
int beryl_session_set_app_state(beryl_session *session, beryl_app_state state);
/* Takes `fd` (a socketpair's end) as its connection to managerd and says Hello on it, request id 1 (the fuzz target:
 * what it feeds then meets a session that can be welcomed and answered). */
void beryl_session_attach(beryl_session *session, int fd);
/* Feeds one datagram as if managerd had sent it (the fuzz target). */
void beryl_session_receive(beryl_session *session, const uint8_t *datagram, size_t length);
beryl_session *beryl_central_session(beryl_central *central);
beryl_session *beryl_peripheral_manager_session(beryl_peripheral_manager *manager);

/* The wire error as the app sees it (Core Bluetooth's domains; S/Beryl/Errors.swift's mapping). */
void beryl_error_from_wire(const WireError *wire, beryl_error *out);
void beryl_error_local(beryl_error *out, beryl_error_domain domain, int code, const char *message);
/* An HCI disconnection reason as didDisconnect's error; false when it is none (0x00, 0x16). */
bool beryl_error_from_disconnect(uint32_t reason, beryl_error *out);

/* A manager's pairing delegate. */
typedef struct beryl_pairing {
    beryl_pairing_callbacks callbacks;
    void *user;
} beryl_pairing;

void beryl_pairing_set(beryl_pairing *pairing, const beryl_pairing_callbacks *callbacks, void *user);
int beryl_pairing_answer(beryl_session *session, const char *peer, bool accept, uint32_t passkey);
/* Hands a pairing event to the app; false when the event is not one. */
bool beryl_pairing_deliver(beryl_pairing *pairing, beryl_session *session, const ManagerEvent *event);
int beryl_session_invalidate(beryl_session *session);

int beryl_uuid_list_to_strings(const beryl_uuid *uuids, size_t count, char ***out);
void beryl_strings_free(char **strings, size_t count);
char *beryl_strdup(const char *text);

#endif
