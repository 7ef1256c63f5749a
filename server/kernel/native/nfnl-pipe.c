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
 *   'X' x_tables counts: the payload is 4 or 6 (one byte) and a table's
 *       name; 'D' frames of text count its chains (see xtables() below),
 *       then 'E' 0, or -ENOENT when the namespace has no such table.
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
/* glibc's net/if.h and netinet/in.h before the kernel's headers: their definitions then keep linux/if.h and linux/in.h from defining them again. */
#include <net/if.h>
#include <netinet/in.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter_ipv4/ip_tables.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <linux/netlink.h>
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

/*
 * xtables: a legacy (x_tables) table's chains, counted where iptables-save
 * would print every rule. The payload is one byte, 4 or 6 (the family), and
 * the table's name. The kernel hands the whole table over in one getsockopt
 * (IPT_SO_GET_ENTRIES, as iptables-legacy-save reads it); the entries are
 * walked here, in place, and the answer is text in 'D' frames of at most
 * XT_OUT bytes: per chain, in the table's order, "C NAME RULES\n", then
 * "J TARGET\n" for each of its rules that jumps or goes to a chain. A
 * built-in chain runs from its hook's entry to its policy (underflow), which
 * is no rule; a user chain from its ERROR head to the RETURN at its foot,
 * neither a rule; the last entry (ERROR "ERROR") ends the table. A jump's
 * verdict is an offset inside the chain it names. Status: 0, -ENOENT for a
 * table the kernel does not have, -errno otherwise.
 */
#define XT_OUT (512 * 1024)
#define XT_MAX_CHAINS (1u << 22)

struct xt_chain_span {
	const char *name;
	unsigned int start, end; /* [start, end): its entries' offsets */
	int builtin;
};

static unsigned char xt_out[XT_OUT];
static size_t xt_used;

static void xt_emit(const char *a, const char *b, unsigned int n, int with_n) {
	char line[128];
	int l = with_n ? snprintf(line, sizeof line, "%s %s %u\n", a, b, n) : snprintf(line, sizeof line, "%s %s\n", a, b);
	if (l < 0 || (size_t)l >= sizeof line) return;
	if (xt_used + (size_t)l > XT_OUT) {
		frame('D', xt_out, (uint32_t)xt_used);
		xt_used = 0;
	}
	memcpy(xt_out + xt_used, line, (size_t)l);
	xt_used += (size_t)l;
}

static const char *const XT_HOOKS[5] = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"};

/* xt_entry_offsets: an entry's target and next offsets (both families' entries differ only in their address part). */
static void xt_entry_offsets(int v6, const unsigned char *e, unsigned int *target, unsigned int *next) {
	if (v6) {
		const struct ip6t_entry *x = (const struct ip6t_entry *)e;
		*target = x->target_offset;
		*next = x->next_offset;
	} else {
		const struct ipt_entry *x = (const struct ipt_entry *)e;
		*target = x->target_offset;
		*next = x->next_offset;
	}
}

static int xt_find(const struct xt_chain_span *spans, unsigned int n, unsigned int offset) {
	unsigned int lo = 0, hi = n;
	while (lo < hi) {
		unsigned int mid = lo + (hi - lo) / 2;
		if (spans[mid].end <= offset) lo = mid + 1;
		else hi = mid;
	}
	return lo < n && spans[lo].start <= offset ? (int)lo : -1;
}

static void xtables(const unsigned char *buf, uint32_t len) {
	if (len < 2 || len - 1 >= XT_TABLE_MAXNAMELEN || (buf[0] != 4 && buf[0] != 6)) {
		end(-EINVAL);
		return;
	}
	int v6 = buf[0] == 6;
	char table[XT_TABLE_MAXNAMELEN] = {0};
	memcpy(table, buf + 1, len - 1);
	/*
	 * Asking the kernel for a table makes it (x_tables instantiate a table on
	 * first use): only a table the namespace already has is read, as
	 * iptables-save reads only those /proc/net/ip_tables_names lists.
	 */
	FILE *names = fopen(v6 ? "/proc/net/ip6_tables_names" : "/proc/net/ip_tables_names", "re");
	int listed = 0;
	if (names) {
		char line[XT_TABLE_MAXNAMELEN + 2];
		while (!listed && fgets(line, sizeof line, names)) {
			line[strcspn(line, "\n")] = 0;
			listed = strcmp(line, table) == 0;
		}
		fclose(names);
	}
	if (!listed) {
		end(-ENOENT);
		return;
	}
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	if (fd < 0) {
		end(-errno);
		return;
	}
	/* ipt_getinfo and ip6t_getinfo are the same structure. */
	struct ipt_getinfo info;
	unsigned char *blob = NULL;
	unsigned int size = 0;
	for (int attempt = 0;; attempt++) {
		memset(&info, 0, sizeof info);
		memcpy(info.name, table, sizeof info.name);
		socklen_t sl = sizeof info;
		if (getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IP6T_SO_GET_INFO : IPT_SO_GET_INFO, &info, &sl) < 0) {
			int err = errno;
			close(fd);
			end(-err);
			return;
		}
		size = info.size;
		free(blob);
		/* ipt_get_entries and ip6t_get_entries: the name, the size, then the entries. */
		blob = malloc(sizeof(struct ipt_get_entries) + size);
		if (!blob) {
			close(fd);
			end(-ENOMEM);
			return;
		}
		struct ipt_get_entries *ge = (struct ipt_get_entries *)blob;
		memset(ge, 0, sizeof *ge);
		memcpy(ge->name, table, sizeof ge->name);
		ge->size = size;
		sl = (socklen_t)(sizeof *ge + size);
		if (getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IP6T_SO_GET_ENTRIES : IPT_SO_GET_ENTRIES, ge, &sl) == 0) break;
		/* EAGAIN: the table changed between the two calls (its size with it): read it again. */
		if (errno != EAGAIN || attempt >= 5) {
			int err = errno;
			free(blob);
			close(fd);
			end(-err);
			return;
		}
	}
	close(fd);
	const unsigned char *entries = blob + sizeof(struct ipt_get_entries);
	unsigned int heads = 0, cap = 64;
	struct xt_chain_span *spans = malloc(cap * sizeof *spans);
	if (!spans) {
		free(blob);
		end(-ENOMEM);
		return;
	}
	/* First walk: where each chain starts (a built-in chain at its hook's entry, a user chain at its ERROR head). */
	int bad = 0;
	for (unsigned int off = 0; off < size;) {
		unsigned int to = 0, next = 0;
		xt_entry_offsets(v6, entries + off, &to, &next);
		if (next < sizeof(struct xt_entry_target) || off + next > size || to + sizeof(struct xt_entry_target) > next) {
			bad = 1;
			break;
		}
		const struct xt_entry_target *t = (const struct xt_entry_target *)(entries + off + to);
		const char *name = NULL;
		int builtin = 0;
		for (int h = 0; h < 5; h++)
			if ((info.valid_hooks & (1u << h)) && info.hook_entry[h] == off) {
				name = XT_HOOKS[h];
				builtin = 1;
			}
		if (!name && strcmp(t->u.user.name, XT_ERROR_TARGET) == 0 && t->u.target_size > sizeof *t) {
			const char *chain = (const char *)t->data;
			/* The table's last entry is an ERROR target named "ERROR" itself. */
			if (strcmp(chain, XT_ERROR_TARGET) != 0) name = chain;
		}
		if (name) {
			if (heads == cap) {
				if (cap >= XT_MAX_CHAINS) {
					bad = 1;
					break;
				}
				cap *= 2;
				struct xt_chain_span *more = realloc(spans, cap * sizeof *spans);
				if (!more) {
					bad = 1;
					break;
				}
				spans = more;
			}
			if (heads) spans[heads - 1].end = off;
			spans[heads++] = (struct xt_chain_span){name, off, size, builtin};
		} else if (strcmp(t->u.user.name, XT_ERROR_TARGET) == 0 && heads) {
			spans[heads - 1].end = off;
		}
		off += next;
	}
	if (bad) {
		free(spans);
		free(blob);
		end(-EPROTO);
		return;
	}
	/* Second walk, chain by chain: its rules (not its policy or its head and RETURN) and the chains they jump to. */
	xt_used = 0;
	for (unsigned int c = 0; c < heads; c++) {
		const struct xt_chain_span *s = &spans[c];
		unsigned int entries_in = 0;
		for (unsigned int off = s->start; off < s->end;) {
			unsigned int to = 0, next = 0;
			xt_entry_offsets(v6, entries + off, &to, &next);
			entries_in++;
			off += next;
		}
		unsigned int policy = s->builtin ? 1 : 2;
		xt_emit("C", s->name, entries_in >= policy ? entries_in - policy : 0, 1);
		unsigned int n = 0;
		for (unsigned int off = s->start; off < s->end; n++) {
			unsigned int to = 0, next = 0;
			xt_entry_offsets(v6, entries + off, &to, &next);
			const struct xt_entry_target *t = (const struct xt_entry_target *)(entries + off + to);
			int rule = s->builtin ? n + 1 < entries_in : n > 0 && n + 1 < entries_in;
			if (rule && t->u.user.name[0] == 0 && t->u.target_size >= sizeof(struct xt_standard_target)) {
				int verdict = ((const struct xt_standard_target *)t)->verdict;
				if (verdict >= 0) {
					int k = xt_find(spans, heads, (unsigned int)verdict);
					if (k >= 0) xt_emit("J", spans[k].name, 0, 0);
				}
			}
			off += next;
		}
	}
	if (xt_used) frame('D', xt_out, (uint32_t)xt_used);
	free(spans);
	free(blob);
	end(0);
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
		case 'X':
			xtables(buf, len);
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
