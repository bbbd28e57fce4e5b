#ifndef BERYL_HCI_SOCKET_H
#define BERYL_HCI_SOCKET_H
#include <stddef.h>

/* Opens hciN as an HCI user channel (the host owns the controller; the kernel's stack stays out).
 * Brings the device down first, as the user channel requires. Returns the fd, or -errno with a
 * sentence in `why`. */
int beryl_hci_user_channel_open(int device, char *why, size_t why_length);

/* Opens a serial line raw, 8N1, at `baud` with or without RTS/CTS. Returns the fd or -errno. */
int beryl_uart_open(const char *path, int baud, int flow_control, char *why, size_t why_length);

/* Changes the speed of an open serial line (after a vendor baud-rate command). Returns 0 or -errno. */
int beryl_uart_set_baud(int fd, int baud);

/* Opens a pseudo-terminal pair for tests and the bridge; writes the slave's path. Returns the master fd or -errno. */
int beryl_pty_open(char *slave_path, size_t slave_path_length);

#endif
