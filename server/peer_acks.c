/*
 * Whether a stream's client is taking its bytes, from the TCP socket
 * itself: the bytes the client's side has acknowledged (TCP_INFO's
 * tcpi_bytes_acked) and those still waiting for it (SIOCOUTQ).
 *
 * Why not "the kernel took the bytes": the send buffer grows to megabytes
 * (tcp_wmem), so a client that stopped reading kept its stream decoding to
 * max_tokens (an attack: four streams of 1,900 tokens, never read, on one
 * loopback connection each, decoded to the end; libmicrohttpd's clock
 * restarts on every byte the kernel takes). A client that does not read
 * stops acknowledging once its own receive buffer is full (a zero window).
 *
 * Its own file: linux/tcp.h (which has tcpi_bytes_acked, where glibc's
 * netinet/tcp.h does not) clashes with netinet/tcp.h.
 */
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "server.h"

int srv_peer_acks(struct MHD_Connection *c, uint64_t *acked, int *queued) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return -1;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    int q = 0;
    if (getsockopt(ci->connect_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked ||
        ioctl(ci->connect_fd, SIOCOUTQ, &q))
        return -1;
    *acked = ti.tcpi_bytes_acked;
    *queued = q;
    return 0;
}
