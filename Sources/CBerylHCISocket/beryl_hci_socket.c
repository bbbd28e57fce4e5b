#define _GNU_SOURCE
#include "beryl_hci_socket.h"
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#ifndef HCI_CHANNEL_USER
#define HCI_CHANNEL_USER 1
#endif

/* The kernel binds a user channel only to a device that finished its setup and is down; which of those failed shows in
 * the device's public flags (HCI_UP, HCI_INIT), while its setup flag is private: a device neither up nor initialising
 * but still refused is one whose setup never finished. */
static void describe_busy_device(int fd, int device, char *why, size_t why_length) {
    struct hci_dev_info info;
    memset(&info, 0, sizeof(info));
    info.dev_id = device;
    int known = ioctl(fd, HCIGETDEVINFO, &info) == 0;
    if (known && (info.flags & (1 << HCI_UP)))
        snprintf(why, why_length, "hci%d was powered on again by another program as hcid took it (bluetoothd does: stop it, or `btmgmt --index %d power off`)", device, device);
    else if (known && (info.flags & (1 << HCI_INIT)))
        snprintf(why, why_length, "the kernel is still setting hci%d up; hcid takes it when that finishes", device);
    else
        snprintf(why, why_length, "the kernel never finished setting hci%d up (its setup commands failed or went unanswered: see `dmesg | grep hci%d`) and hands over only a device it set up: reload the controller's driver or replug it", device, device);
}

int beryl_hci_user_channel_open(int device, char *why, size_t why_length) {
    int fd = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, BTPROTO_HCI);
    if (fd < 0) {
        int code = errno;
        if (code == EAFNOSUPPORT || code == EPROTONOSUPPORT)
            snprintf(why, why_length, "this kernel has no Bluetooth support (AF_BLUETOOTH): load the bluetooth module or use a uart:/tcp:/unix: transport");
        else if (code == EPERM || code == EACCES)
            snprintf(why, why_length, "not allowed to open an HCI socket: run hcid as root or give it CAP_NET_RAW and CAP_NET_ADMIN");
        else
            snprintf(why, why_length, "socket(AF_BLUETOOTH): %s", strerror(code));
        return -code;
    }
    /* The user channel binds only to a device that is down. */
    if (ioctl(fd, HCIDEVDOWN, device) < 0 && errno != EALREADY) {
        int code = errno;
        if (code == ENODEV) snprintf(why, why_length, "there is no hci%d", device);
        else if (code == EPERM || code == EACCES) snprintf(why, why_length, "not allowed to bring hci%d down: hcid needs CAP_NET_ADMIN", device);
        /* The kernel refuses to close a device only while a user channel holds it (net/bluetooth/hci_core.c). */
        else if (code == EBUSY) snprintf(why, why_length, "hci%d is held through the HCI user channel by another program (another hcid?): the kernel gives a device to one user channel at a time", device);
        else snprintf(why, why_length, "cannot bring hci%d down: %s", device, strerror(code));
        close(fd);
        return -code;
    }
    struct sockaddr_hci address;
    memset(&address, 0, sizeof(address));
    address.hci_family = AF_BLUETOOTH;
    address.hci_dev = device;
    address.hci_channel = HCI_CHANNEL_USER;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0) {
        int code = errno;
        if (code == EBUSY) describe_busy_device(fd, device, why, why_length);
        else if (code == EUSERS) snprintf(why, why_length, "hci%d is held through the HCI user channel by another program (another hcid?): the kernel gives a device to one user channel at a time", device);
        else if (code == ENODEV) snprintf(why, why_length, "there is no hci%d", device);
        else if (code == EPERM || code == EACCES) snprintf(why, why_length, "not allowed to take hci%d: hcid needs CAP_NET_ADMIN", device);
        else snprintf(why, why_length, "cannot bind the user channel of hci%d: %s", device, strerror(code));
        close(fd);
        return -code;
    }
    return fd;
}

static speed_t speed_for(int baud) {
    switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 115200: return B115200;
    case 230400: return B230400;
    case 460800: return B460800;
    case 500000: return B500000;
    case 576000: return B576000;
    case 921600: return B921600;
    case 1000000: return B1000000;
    case 1152000: return B1152000;
    case 1500000: return B1500000;
    case 2000000: return B2000000;
    case 2500000: return B2500000;
    case 3000000: return B3000000;
    case 3500000: return B3500000;
    case 4000000: return B4000000;
    default: return 0;
    }
}

int beryl_uart_set_baud(int fd, int baud) {
    speed_t speed = speed_for(baud);
    if (!speed) return -EINVAL;
    struct termios tio;
    if (tcgetattr(fd, &tio) < 0) return -errno;
    cfsetispeed(&tio, speed);
    cfsetospeed(&tio, speed);
    if (tcsetattr(fd, TCSANOW, &tio) < 0) return -errno;
    return 0;
}

int beryl_uart_open(const char *path, int baud, int flow_control, char *why, size_t why_length) {
    int fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int code = errno;
        snprintf(why, why_length, "cannot open %s: %s", path, strerror(code));
        return -code;
    }
    struct termios tio;
    if (tcgetattr(fd, &tio) < 0) {
        int code = errno;
        snprintf(why, why_length, "%s is not a serial line: %s", path, strerror(code));
        close(fd);
        return -code;
    }
    cfmakeraw(&tio);
    tio.c_cflag |= CLOCAL | CREAD;
    tio.c_cflag &= ~(CSTOPB | PARENB);
    if (flow_control) tio.c_cflag |= CRTSCTS; else tio.c_cflag &= ~CRTSCTS;
    tio.c_cc[VMIN] = 0;
    tio.c_cc[VTIME] = 0;
    speed_t speed = speed_for(baud);
    if (!speed) {
        snprintf(why, why_length, "unsupported baud rate %d", baud);
        close(fd);
        return -EINVAL;
    }
    cfsetispeed(&tio, speed);
    cfsetospeed(&tio, speed);
    if (tcsetattr(fd, TCSANOW, &tio) < 0) {
        int code = errno;
        snprintf(why, why_length, "cannot configure %s: %s", path, strerror(code));
        close(fd);
        return -code;
    }
    tcflush(fd, TCIOFLUSH);
    return fd;
}

int beryl_pty_open(char *slave_path, size_t slave_path_length) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (master < 0) return -errno;
    if (grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, slave_path, slave_path_length) != 0) {
        int code = errno;
        close(master);
        return -code;
    }
    /* Raw on the master side too, so H4 bytes pass untouched. */
    struct termios tio;
    if (tcgetattr(master, &tio) == 0) {
        cfmakeraw(&tio);
        tcsetattr(master, TCSANOW, &tio);
    }
    return master;
}
