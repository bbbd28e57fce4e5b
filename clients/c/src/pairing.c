/* Pairing prompts for the app that holds the link (or, for a peripheral manager, any link): Beryl's pairing delegate
 * (iOS asks the user itself). The stack pairs; the app shows a passkey, asks for one, or compares numbers. */
#include "internal.h"

#include <string.h>

void beryl_pairing_set(beryl_pairing *pairing, const beryl_pairing_callbacks *callbacks, void *user) {
    if (callbacks) pairing->callbacks = *callbacks; else memset(&pairing->callbacks, 0, sizeof pairing->callbacks);
    pairing->user = user;
}

int beryl_pairing_answer(beryl_session *session, const char *peer, bool accept, uint32_t passkey) {
    if (!peer) return BERYL_E_INVALID_ARGUMENT;
    beryl_uuid parsed;
    if (strlen(peer) != 36 || beryl_uuid_parse(peer, &parsed) != BERYL_OK) return BERYL_E_BAD_UUID;
    /* A passkey is six decimal digits (Core Vol 3 Part H §2.3.5.3). */
    if (passkey > 999999) return BERYL_E_INVALID_ARGUMENT;
    Beryl__Ipc__V1__AnswerPairing answer = BERYL__IPC__V1__ANSWER_PAIRING__INIT;
    answer.peer = (char *)peer;
    answer.accept = accept;
    answer.passkey = accept ? passkey : 0;
    ManagerRequest request = BERYL__IPC__V1__MANAGER_REQUEST__INIT;
    request.kind_case = BERYL__IPC__V1__MANAGER_REQUEST__KIND_ANSWER_PAIRING;
    request.answer_pairing = &answer;
    return beryl_session_send(session, &request, NULL, NULL);
}

static beryl_pairing_prompt_kind prompt_kind(Beryl__Ipc__V1__PairingPromptKind kind) {
    switch (kind) {
    case BERYL__IPC__V1__PAIRING_PROMPT_KIND__DISPLAY_PASSKEY: return BERYL_PAIRING_DISPLAY_PASSKEY;
    case BERYL__IPC__V1__PAIRING_PROMPT_KIND__CONFIRM_NUMBER: return BERYL_PAIRING_CONFIRM_NUMBER;
    case BERYL__IPC__V1__PAIRING_PROMPT_KIND__CONFIRM_PAIRING: return BERYL_PAIRING_CONFIRM;
    default: return BERYL_PAIRING_ENTER_PASSKEY;
    }
}

bool beryl_pairing_deliver(beryl_pairing *pairing, beryl_session *session, const ManagerEvent *event) {
    if (event->kind_case == BERYL__IPC__V1__MANAGER_EVENT__KIND_PAIRING_PROMPT) {
        const Beryl__Ipc__V1__PairingPromptEvent *wire = event->pairing_prompt;
        if (!pairing->callbacks.prompt) {
            /* No one to ask: declined at once, rather than left to SMP's 30 s timeout (Core Vol 3 Part H §3.4). */
            beryl_pairing_answer(session, wire->peer, false, 0);
            return true;
        }
        beryl_pairing_prompt prompt = {wire->peer, wire->address, prompt_kind(wire->kind), wire->number};
        pairing->callbacks.prompt(&prompt, pairing->user);
        return true;
    }
    if (event->kind_case == BERYL__IPC__V1__MANAGER_EVENT__KIND_PAIRING_FINISHED) {
        const Beryl__Ipc__V1__PairingFinishedEvent *wire = event->pairing_finished;
        if (!pairing->callbacks.finished) return true;
        beryl_pairing_outcome outcome = {
            .peer = wire->peer,
            .address = wire->address,
            .identity = *wire->identity ? wire->identity : NULL,
            .success = wire->success,
            .bonded = wire->bonded,
            .authenticated = wire->authenticated,
            .secure_connections = wire->secure_connections,
            .ended_by_peer = wire->remote,
            .reason = (uint8_t)wire->reason,
        };
        pairing->callbacks.finished(&outcome, pairing->user);
        return true;
    }
    return false;
}
