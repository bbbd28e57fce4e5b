/* Carries H4 packets between the kernel's virtual HCI device (/dev/vhci) and a byte stream (a virtio-serial port
 * whose other end is a controller on the host), so the guest kernel's Bluetooth core drives a host controller.
 *
 *   vhci_bridge PORT [--type N] [--silent]
 *
 * Each write() to /dev/vhci must carry exactly one H4 packet, so the stream is cut at packet boundaries (Core Vol 4
 * Part A §2). --type is the vendor packet's opcode: 0x00 a primary controller the kernel sets up, 0x80 a raw one it
 * does not. --silent creates the device but carries nothing, so the kernel's setup times out (the failed-setup case). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_all(int fd, const uint8_t *bytes, size_t length) {
    while (length > 0) {
        ssize_t written = write(fd, bytes, length);
        if (written < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

/* The length of the H4 packet at the head of `bytes`, 0 when more bytes are needed, -1 for an unknown type. */
static long packet_length(const uint8_t *bytes, size_t available) {
    if (available < 1) return 0;
    switch (bytes[0]) {
    case 0x01: return available < 4 ? 0 : 4 + bytes[3];                                   /* command */
    case 0x02: return available < 5 ? 0 : 5 + (bytes[3] | (bytes[4] << 8));              /* ACL */
    case 0x03: return available < 4 ? 0 : 4 + bytes[3];                                   /* SCO */
    case 0x04: return available < 3 ? 0 : 3 + bytes[2];                                   /* event */
    case 0x05: return available < 5 ? 0 : 5 + ((bytes[3] | (bytes[4] << 8)) & 0x3FFF);   /* ISO */
    default: return -1;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: vhci_bridge PORT [--type N] [--silent]\n");
        return 64;
    }
    int type = 0x00, silent = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--type") && i + 1 < argc) type = (int)strtol(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--silent")) silent = 1;
        else { fprintf(stderr, "vhci_bridge: unknown option %s\n", argv[i]); return 64; }
    }
    int port = open(argv[1], O_RDWR | O_NOCTTY);
    if (port < 0) { fprintf(stderr, "vhci_bridge: %s: %s\n", argv[1], strerror(errno)); return 69; }
    int vhci = open("/dev/vhci", O_RDWR);
    if (vhci < 0) { fprintf(stderr, "vhci_bridge: /dev/vhci: %s\n", strerror(errno)); return 69; }
    uint8_t create[2] = {0xFF, (uint8_t)type};
    if (write_all(vhci, create, sizeof create) < 0) { fprintf(stderr, "vhci_bridge: creating the device: %s\n", strerror(errno)); return 69; }
    /* The answer is a vendor packet: 0xFF, the opcode, then the new device's index (little-endian). */
    uint8_t answer[4];
    if (read(vhci, answer, sizeof answer) != 4 || answer[0] != 0xFF) { fprintf(stderr, "vhci_bridge: no device created\n"); return 69; }
    printf("vhci_bridge: hci%d created (type 0x%02x)%s\n", answer[2] | (answer[3] << 8), type, silent ? ", carrying nothing" : "");
    fflush(stdout);

    static uint8_t from_port[65536 + 8];
    size_t held = 0;
    static uint8_t from_vhci[65536 + 8];
    struct pollfd fds[2] = {{.fd = vhci, .events = POLLIN}, {.fd = port, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            perror("vhci_bridge: poll");
            return 70;
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(vhci, from_vhci, sizeof from_vhci);
            if (n <= 0) { fprintf(stderr, "vhci_bridge: /dev/vhci closed\n"); return 0; }
            if (!silent && write_all(port, from_vhci, (size_t)n) < 0) { perror("vhci_bridge: port write"); return 70; }
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(port, from_port + held, sizeof from_port - held);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                /* The host end is not connected yet (or went away): wait rather than spin. */
                usleep(10000);
                continue;
            }
            if (silent) continue;
            held += (size_t)n;
            size_t start = 0;
            for (;;) {
                long length = packet_length(from_port + start, held - start);
                if (length < 0) { fprintf(stderr, "vhci_bridge: unknown H4 packet type 0x%02x\n", from_port[start]); return 70; }
                if (length == 0 || (size_t)length > held - start) break;
                if (write_all(vhci, from_port + start, (size_t)length) < 0) { perror("vhci_bridge: vhci write"); return 70; }
                start += (size_t)length;
            }
            memmove(from_port, from_port + start, held - start);
            held -= start;
        }
    }
}
