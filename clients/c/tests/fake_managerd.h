/* A scripted managerd for the unit tests: a real SOCK_SEQPACKET socket in a temporary directory, read and written by
 * the test between turns of the library's event loop. */
#ifndef BERYL_FAKE_MANAGERD_H
#define BERYL_FAKE_MANAGERD_H

#include "envelope.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct fake_managerd {
    char directory[64];
    char path[128];
    int listener;
    int peer;
} fake_managerd;

/* listen: false leaves the socket path absent (a stack that is not running). */
void fake_start(fake_managerd *fake, bool listen);
void fake_listen(fake_managerd *fake);
/* Runs the loop until the library has connected, then accepts. */
bool fake_accept(fake_managerd *fake, struct event_base *base);
/* The next request the library sent, running the loop meanwhile; NULL after 2 s. Free with fake_free_envelope. */
Beryl__Ipc__V1__Envelope *fake_next(fake_managerd *fake, struct event_base *base);
/* True when nothing more arrives within 100 ms of loop turns. */
bool fake_quiet(fake_managerd *fake, struct event_base *base);
void fake_free_envelope(Beryl__Ipc__V1__Envelope *envelope);
/* An answer (manager NULL: an Ack) or an event as the datagram managerd sends; *out is malloc'd for the caller. */
size_t fake_pack_answer(uint64_t id, Beryl__Ipc__V1__ManagerResponse *manager, uint8_t **out);
size_t fake_pack_event(Beryl__Ipc__V1__ManagerEvent *manager, uint8_t **out);
/* manager NULL: an Ack. */
void fake_respond(fake_managerd *fake, uint64_t id, Beryl__Ipc__V1__ManagerResponse *response);
void fake_respond_ack(fake_managerd *fake, uint64_t id);
void fake_respond_error(fake_managerd *fake, uint64_t id, Beryl__Ipc__V1__Error *error);
void fake_event(fake_managerd *fake, Beryl__Ipc__V1__ManagerEvent *event);
void fake_send_raw(fake_managerd *fake, const void *bytes, size_t length);
/* Answers the Hello that must come next with a Welcome in `state`; returns the Hello's envelope (caller frees). */
Beryl__Ipc__V1__Envelope *fake_welcome(fake_managerd *fake, struct event_base *base, Beryl__Ipc__V1__ControllerState state,
                                       Beryl__Ipc__V1__PreservedState *restored, uint64_t wake);
void fake_hang_up(fake_managerd *fake);
void fake_stop(fake_managerd *fake);
/* Turns the loop for about `ms` milliseconds. */
void pump(struct event_base *base, int ms);

#endif
