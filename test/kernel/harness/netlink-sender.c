/*
 * netlink-sender: opens a NETLINK_NETFILTER socket of its own in the current
 * network namespace and sends one datagram (hex on the command line) to a
 * netlink port id, as any process in the namespace could: the kernel tier's
 * stand-in for a process that writes to kproxy's helper socket
 * (test/kernel/nfnl-pipe.test.ts compiles and runs it).
 *
 * Usage: netlink-sender PORT_ID HEX
 */
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
	if (argc != 3 || strlen(argv[2]) % 2) {
		fprintf(stderr, "usage: netlink-sender PORT_ID HEX\n");
		return 2;
	}
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER);
	struct sockaddr_nl me = {.nl_family = AF_NETLINK};
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) < 0) {
		perror("netlink-sender: socket");
		return 1;
	}
	size_t n = strlen(argv[2]) / 2;
	unsigned char *buf = malloc(n ? n : 1);
	for (size_t i = 0; i < n; i++) sscanf(argv[2] + 2 * i, "%2hhx", &buf[i]);
	struct sockaddr_nl to = {.nl_family = AF_NETLINK, .nl_pid = (unsigned)strtoul(argv[1], NULL, 10)};
	if (sendto(fd, buf, n, 0, (struct sockaddr *)&to, sizeof to) < 0) {
		perror("netlink-sender: sendto");
		return 1;
	}
	return 0;
}
