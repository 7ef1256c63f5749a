/*
 * nfnl-pipe: kproxy's door to the kernel's netfilter netlink socket.
 *
 * Node.js has no AF_NETLINK sockets, so kproxy spawns this program once (an
 * argument array, no shell) and keeps it: it opens one NETLINK_NETFILTER
 * socket in its network namespace (the daemon's) and moves byte buffers
 * between that socket and its stdin/stdout. It knows netlink framing
 * (nlmsghdr, NLMSG_DONE, NLMSG_ERROR, NLM_F_MULTI) and nothing of nf_tables:
 * every message is built and read by kproxy (server/kernel/nfnl*.ts).
 *
 * Usage: nfnl-pipe [--reply-timeout-ms N]   (or --version)
 *
 * Frames, both ways: u32 length of the payload (little endian), u8 kind,
 * three zero bytes, the payload.
 *
 * Requests on stdin:
 *   'B' batch: the payload (netlink messages, e.g. an nf_tables batch) is sent
 *       in one datagram; every reply the kernel queued while processing it
 *       (errors, acks) is returned. The kernel handles a netlink message in
 *       the sender's sendmsg() call, so its replies are queued when sendmsg
 *       returns: they are read without waiting, until none is left.
 *   'Q' requests: the payload holds netlink messages that are sent one at a
 *       time; after each, replies are read until its NLMSG_DONE or
 *       NLMSG_ERROR, or a reply without NLM_F_MULTI (a single answer). A
 *       request the kernel leaves unanswered for the reply timeout (default
 *       REPLY_TIMEOUT_MS; a dump's datagrams each restart it) ends with
 *       -ETIMEDOUT instead of waiting for ever.
 *   'I' interface index: the payload is an interface name; the answer is its
 *       index in this namespace (what `nft` resolves `iif NAME` to).
 *   'N' interface name: the payload is an index (u32, little endian); the
 *       answer is one 'D' frame with its name, then 'E' 0.
 * Answers on stdout, for each request in order: zero or more 'D' frames (the
 * bytes of one datagram from the kernel each), then one 'E' frame holding an
 * i32 status: 0 (or the index for 'I'), or -errno when the request could not
 * be carried out (the kernel's own refusals come as NLMSG_ERROR in 'D').
 * Between them, 'F' frames (u32 sender port id, u32 datagram length) report
 * a datagram that did not come from the kernel and was dropped: any process
 * in the namespace may send to this socket's port id, and only the kernel's
 * answers are kproxy's. Replies left over from an earlier request (one that
 * timed out) are dropped before each request is sent.
 * At start, one 'E' frame with the protocol version (PROTOCOL_VERSION) says
 * the socket is open; if it cannot be, a message goes to stderr and the exit
 * status is 1. End of stdin ends the program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* PROTOCOL_VERSION: 2 added 'F' frames and the reply timeout (server/kernel/nfnl-pipe.ts checks it). */
#define PROTOCOL_VERSION 2
/* RECV_BUF: one datagram; the kernel makes dump datagrams of at most 32 KiB. */
#define RECV_BUF (256 * 1024)
/* RCVBUF: room for every error of a failed batch before kproxy reads them. */
#define RCVBUF (64 * 1024 * 1024)
#define MAX_FRAME (1u << 30)
/*
 * REPLY_TIMEOUT_MS: how long a 'Q' request waits for the kernel's next
 * datagram. The kernel answers a request, and fills each datagram of a dump,
 * inside the send or receive call itself: a reply that has not come within
 * seconds is not coming (a message the kernel ignores, a lost reply).
 */
#define REPLY_TIMEOUT_MS 5000

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

static int nl_fd = -1;
static int reply_timeout_ms = REPLY_TIMEOUT_MS;
static unsigned char recv_buf[RECV_BUF];

static int read_full(int fd, void *buf, size_t len) {
	unsigned char *p = buf;
	while (len > 0) {
		ssize_t n = read(fd, p, len);
		if (n == 0) return 0;
		if (n < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 1;
}

static void write_full(const void *buf, size_t len) {
	const unsigned char *p = buf;
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, p, len);
		if (n < 0) {
			if (errno == EINTR) continue;
			/* kproxy is gone: nothing is left to answer. */
			exit(0);
		}
		p += n;
		len -= (size_t)n;
	}
}

static void put_u32(unsigned char *b, uint32_t v) {
	b[0] = v & 0xff;
	b[1] = (v >> 8) & 0xff;
	b[2] = (v >> 16) & 0xff;
	b[3] = (v >> 24) & 0xff;
}

static void frame(char kind, const void *payload, uint32_t len) {
	unsigned char head[8] = {0};
	put_u32(head, len);
	head[4] = (unsigned char)kind;
	write_full(head, sizeof head);
	if (len) write_full(payload, len);
}

static void end(int32_t status) {
	unsigned char b[4];
	put_u32(b, (uint32_t)status);
	frame('E', b, 4);
}

/* foreign reports a datagram that was dropped because the kernel did not send it. */
static void foreign(uint32_t pid, size_t len) {
	unsigned char b[8];
	put_u32(b, pid);
	put_u32(b + 4, len > UINT32_MAX ? UINT32_MAX : (uint32_t)len);
	frame('F', b, sizeof b);
}

static long long now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * recv_kernel reads the next datagram the kernel sent into recv_buf and
 * returns its length. It waits up to wait_ms for one (0: not at all); with
 * none by then it returns -EAGAIN (wait_ms 0) or -ETIMEDOUT. Datagrams from
 * any other sender (nl_pid not 0) are dropped and reported, and do not
 * extend the wait. A datagram larger than recv_buf is -EMSGSIZE (never
 * handed on cut short); other failures are -errno.
 */
static ssize_t recv_kernel(int wait_ms) {
	long long deadline = now_ms() + wait_ms;
	for (;;) {
		struct sockaddr_nl from;
		socklen_t fromlen = sizeof from;
		memset(&from, 0, sizeof from);
		ssize_t n = recvfrom(nl_fd, recv_buf, sizeof recv_buf, MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from, &fromlen);
		if (n < 0) {
			if (errno == EINTR) continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
			long long left = deadline - now_ms();
			if (wait_ms == 0) return -EAGAIN;
			if (left <= 0) return -ETIMEDOUT;
			struct pollfd p = {.fd = nl_fd, .events = POLLIN};
			if (poll(&p, 1, (int)left) < 0 && errno != EINTR) return -errno;
			continue;
		}
		if (fromlen < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0) {
			foreign(from.nl_pid, (size_t)n);
			continue;
		}
		if ((size_t)n > sizeof recv_buf) return -EMSGSIZE;
		return n;
	}
}

/* drain_stale drops what is queued before a request is sent: late replies to an earlier one. */
static void drain_stale(void) {
	while (recv_kernel(0) >= 0) {
	}
}

static int send_buf(const void *buf, size_t len) {
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	/* A batch is one datagram: the send buffer must hold it whole (nft does the same). */
	int size = len + 4096 > (size_t)INT32_MAX / 2 ? INT32_MAX / 2 : (int)(len + 4096);
	int cur = 0;
	socklen_t sl = sizeof cur;
	if (getsockopt(nl_fd, SOL_SOCKET, SO_SNDBUF, &cur, &sl) == 0 && cur < size) {
		if (setsockopt(nl_fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
			setsockopt(nl_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
	}
	for (;;) {
		ssize_t n = sendto(nl_fd, buf, len, 0, (struct sockaddr *)&kernel, sizeof kernel);
		if (n >= 0) return 0;
		if (errno != EINTR) return -errno;
	}
}

/* batch sends one datagram and returns the replies already queued. */
static void batch(const unsigned char *buf, uint32_t len) {
	drain_stale();
	int err = send_buf(buf, len);
	if (err) {
		end(err);
		return;
	}
	for (;;) {
		ssize_t n = recv_kernel(0);
		if (n == -EAGAIN) break;
		if (n < 0) {
			end((int32_t)n);
			return;
		}
		frame('D', recv_buf, (uint32_t)n);
	}
	end(0);
}

/*
 * finished says whether a datagram ends the answer to the request with
 * sequence number seq. The remaining length is signed: a message whose
 * nlmsg_len (aligned) runs past the datagram makes it negative, which ends
 * the walk (NLMSG_OK) instead of wrapping around and reading past recv_buf.
 */
static int finished(const unsigned char *buf, int len, uint32_t seq) {
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	for (; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
		if (h->nlmsg_seq != seq) continue;
		if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return 1;
		if (!(h->nlmsg_flags & NLM_F_MULTI)) return 1;
	}
	return 0;
}

/* requests sends each message in turn and returns its whole answer. */
static void requests(const unsigned char *buf, uint32_t len) {
	drain_stale();
	int left = (int)len; /* len <= MAX_FRAME */
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
		int err = send_buf(h, h->nlmsg_len);
		if (err) {
			end(err);
			return;
		}
		for (;;) {
			ssize_t n = recv_kernel(reply_timeout_ms);
			if (n < 0) {
				end((int32_t)n);
				return;
			}
			frame('D', recv_buf, (uint32_t)n);
			if (finished(recv_buf, (int)n, h->nlmsg_seq)) break;
		}
	}
	/* Bytes that are not a whole message: kproxy sent a malformed request. */
	if (left > 0) {
		end(-EINVAL);
		return;
	}
	end(0);
}

static void ifindex(const unsigned char *buf, uint32_t len) {
	char name[IF_NAMESIZE];
	if (len == 0 || len >= IF_NAMESIZE) {
		end(-EINVAL);
		return;
	}
	memcpy(name, buf, len);
	name[len] = 0;
	unsigned idx = if_nametoindex(name);
	end(idx ? (int32_t)idx : -errno);
}

static void ifname(const unsigned char *buf, uint32_t len) {
	char name[IF_NAMESIZE];
	if (len != 4) {
		end(-EINVAL);
		return;
	}
	unsigned idx = buf[0] | buf[1] << 8 | buf[2] << 16 | (unsigned)buf[3] << 24;
	if (!if_indextoname(idx, name)) {
		end(-errno);
		return;
	}
	frame('D', name, (uint32_t)strlen(name));
	end(0);
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--version") == 0) {
			printf("nfnl-pipe %d\n", PROTOCOL_VERSION);
			return 0;
		}
		if (strcmp(argv[i], "--reply-timeout-ms") == 0 && i + 1 < argc) {
			char *rest;
			long ms = strtol(argv[++i], &rest, 10);
			if (*rest || ms < 1 || ms > 600000) {
				fprintf(stderr, "nfnl-pipe: --reply-timeout-ms wants 1 to 600000, not %s\n", argv[i]);
				return 2;
			}
			reply_timeout_ms = (int)ms;
			continue;
		}
		fprintf(stderr, "nfnl-pipe: unknown argument %s\n", argv[i]);
		return 2;
	}
	nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (nl_fd < 0) {
		fprintf(stderr, "nfnl-pipe: cannot open a netfilter netlink socket: %s\n", strerror(errno));
		return 1;
	}
	struct sockaddr_nl local = {.nl_family = AF_NETLINK};
	if (bind(nl_fd, (struct sockaddr *)&local, sizeof local) < 0) {
		fprintf(stderr, "nfnl-pipe: cannot bind the netlink socket: %s\n", strerror(errno));
		return 1;
	}
	int one = 1, rcv = RCVBUF;
	/* Errors carry the refused message's header only, not the whole message back. */
	setsockopt(nl_fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
	setsockopt(nl_fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
	if (setsockopt(nl_fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
		setsockopt(nl_fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	end(PROTOCOL_VERSION);

	unsigned char *buf = NULL;
	size_t cap = 0;
	for (;;) {
		unsigned char head[8];
		int r = read_full(STDIN_FILENO, head, sizeof head);
		if (r <= 0) return r < 0 ? 1 : 0;
		uint32_t len = head[0] | head[1] << 8 | head[2] << 16 | (uint32_t)head[3] << 24;
		if (len > MAX_FRAME) {
			fprintf(stderr, "nfnl-pipe: a frame of %u bytes is too large\n", len);
			return 1;
		}
		if (len > cap) {
			free(buf);
			cap = len;
			buf = malloc(cap);
			if (!buf) {
				fprintf(stderr, "nfnl-pipe: out of memory for %u bytes\n", len);
				return 1;
			}
		}
		if (len && read_full(STDIN_FILENO, buf, len) <= 0) return 1;
		switch (head[4]) {
		case 'B':
			batch(buf, len);
			break;
		case 'Q':
			requests(buf, len);
			break;
		case 'I':
			ifindex(buf, len);
			break;
		case 'N':
			ifname(buf, len);
			break;
		default:
			end(-EINVAL);
		}
		/* A large batch's buffer is not kept for the rest of the daemon's life. */
		if (cap > (16u << 20)) {
			free(buf);
			buf = NULL;
			cap = 0;
		}
	}
}
