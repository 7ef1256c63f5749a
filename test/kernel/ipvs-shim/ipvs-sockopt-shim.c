/*
 * ipvs-sockopt-shim: an LD_PRELOAD stand-in for the kernel's IPVS, for
 * kproxy's kernel tests on kernels without the ip_vs module.
 *
 * ipvsadm initialises IPVS before it parses a single option, so without
 * ip_vs it refuses every batch alike ("Can't initialize ipvs: Protocol not
 * available"). This shim lets the real ipvsadm binary run its real parser:
 *
 *   - genl_ctrl_resolve() fails, so libipvs takes its getsockopt/setsockopt
 *     path (IPv4 only) even on a kernel that has IPVS;
 *   - getsockopt/setsockopt with IP_VS_SO_* options are answered from a small
 *     table kept in the file $KPT_IPVS_SHIM_STATE, with the kernel's error
 *     codes (EEXIST, ESRCH, ENOENT for an unknown scheduler...);
 *   - every change ipvsadm asks for is appended to $KPT_IPVS_SHIM_LOG, decoded
 *     from the structures ipvsadm filled in: what the kernel would have been told.
 *
 * The state file is read at ipvsadm's first request and written back when it
 * exits. It is text, one object per line, so tests can seed counters:
 *   S <proto> <addr> <port> <sched> <flags> <timeout> <netmask>
 *   D <addr> <port> <conn_flags> <weight> <activeconns> <inactconns> <conns> <inpkts> <outpkts> <inbytes> <outbytes>
 * (D lines belong to the S line above them; addresses dotted, ports host order.)
 *
 * Everything else (sockets, real netlink) passes through untouched.
 *
 * ipvsadm 1.31's socket option path copies only the kernel's part of each
 * service entry into a malloc'ed table, leaving its persistence engine name
 * uninitialised; stale heap bytes there print as " --pe <garbage>". Netlink
 * kernels never take that path. The shim makes malloc hand out zeroed memory
 * (M_PERTURB 255: new blocks are filled with ~0xff) so listings are stable.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <linux/ip_vs.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct dest {
  struct ip_vs_dest_entry e;
};

/* Tables grow as needed: the edge cases hold a virtual server with 10,000 real servers and 2,000 virtual servers. */
struct svc {
  struct ip_vs_service_entry e;
  struct dest *dests;
  unsigned ndests, capdests;
};

static struct svc *table;
static unsigned nsvc, capsvc;
static int loaded;
/* dirty: the table changed since it was read; written back once, when ipvsadm exits (not after each of 10,000 requests). */
static int dirty;

static struct svc *new_svc(void) {
  if (nsvc == capsvc) {
    capsvc = capsvc ? capsvc * 2 : 64;
    table = realloc(table, capsvc * sizeof *table);
    if (!table) abort();
  }
  struct svc *s = &table[nsvc++];
  memset(s, 0, sizeof *s);
  return s;
}

static struct dest *new_dest(struct svc *s) {
  if (s->ndests == s->capdests) {
    s->capdests = s->capdests ? s->capdests * 2 : 16;
    s->dests = realloc(s->dests, s->capdests * sizeof *s->dests);
    if (!s->dests) abort();
  }
  struct dest *d = &s->dests[s->ndests++];
  memset(d, 0, sizeof *d);
  return d;
}
static struct ip_vs_timeout_user timeouts = {900, 120, 300};

static const char *schedulers[] = {"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos", NULL};

static const char *proto_name(unsigned p) { return p == IPPROTO_TCP ? "tcp" : p == IPPROTO_UDP ? "udp" : p == IPPROTO_SCTP ? "sctp" : "?"; }

static unsigned proto_num(const char *s) { return !strcmp(s, "tcp") ? IPPROTO_TCP : !strcmp(s, "udp") ? IPPROTO_UDP : IPPROTO_SCTP; }

static void load(void) {
  if (loaded) return;
  loaded = 1;
  const char *path = getenv("KPT_IPVS_SHIM_STATE");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[512], proto[8], addr[64], sched[IP_VS_SCHEDNAME_MAXLEN + 1];
  while (fgets(line, sizeof line, f)) {
    unsigned port, flags, timeout, netmask, cflags, active, inact;
    int weight;
    unsigned long long conns, inp, outp, inb, outb;
    if (sscanf(line, "S %7s %63s %u %16s %u %u %x", proto, addr, &port, sched, &flags, &timeout, &netmask) == 7) {
      struct ip_vs_service_entry *e = &new_svc()->e;
      e->protocol = proto_num(proto);
      inet_pton(AF_INET, addr, &e->addr);
      e->port = htons(port);
      strncpy(e->sched_name, sched, IP_VS_SCHEDNAME_MAXLEN - 1);
      e->flags = flags;
      e->timeout = timeout;
      e->netmask = htonl(netmask);
    } else if (sscanf(line, "D %63s %u %u %d %u %u %llu %llu %llu %llu %llu", addr, &port, &cflags, &weight, &active, &inact, &conns, &inp, &outp, &inb, &outb) == 11 && nsvc > 0) {
      struct svc *s = &table[nsvc - 1];
      struct ip_vs_dest_entry *d = &new_dest(s)->e;
      inet_pton(AF_INET, addr, &d->addr);
      d->port = htons(port);
      d->conn_flags = cflags;
      d->weight = weight;
      d->activeconns = active;
      d->inactconns = inact;
      d->stats.conns = conns;
      d->stats.inpkts = inp;
      d->stats.outpkts = outp;
      d->stats.inbytes = inb;
      d->stats.outbytes = outb;
      s->e.stats.conns += conns;
      s->e.stats.inpkts += inp;
      s->e.stats.outpkts += outp;
      s->e.stats.inbytes += inb;
      s->e.stats.outbytes += outb;
    }
  }
  fclose(f);
}

static void save(void) {
  if (!dirty) return;
  dirty = 0;
  const char *path = getenv("KPT_IPVS_SHIM_STATE");
  FILE *f = path ? fopen(path, "w") : NULL;
  if (!f) return;
  char a[INET_ADDRSTRLEN];
  for (unsigned i = 0; i < nsvc; i++) {
    struct ip_vs_service_entry *e = &table[i].e;
    inet_ntop(AF_INET, &e->addr, a, sizeof a);
    fprintf(f, "S %s %s %u %s %u %u %08x\n", proto_name(e->protocol), a, ntohs(e->port), e->sched_name, e->flags, e->timeout, ntohl(e->netmask));
    for (unsigned j = 0; j < table[i].ndests; j++) {
      struct ip_vs_dest_entry *d = &table[i].dests[j].e;
      inet_ntop(AF_INET, &d->addr, a, sizeof a);
      fprintf(f, "D %s %u %u %d %u %u %u %u %u %llu %llu\n", a, ntohs(d->port), d->conn_flags, d->weight, d->activeconns, d->inactconns, d->stats.conns,
              d->stats.inpkts, d->stats.outpkts, (unsigned long long)d->stats.inbytes, (unsigned long long)d->stats.outbytes);
    }
  }
  fclose(f);
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  const char *path = getenv("KPT_IPVS_SHIM_LOG");
  FILE *f = path ? fopen(path, "a") : NULL;
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int find_svc(const struct ip_vs_service_user *u) {
  for (unsigned i = 0; i < nsvc; i++) {
    struct ip_vs_service_entry *e = &table[i].e;
    if (e->protocol == u->protocol && e->addr == u->addr && e->port == u->port && e->fwmark == u->fwmark) return (int)i;
  }
  return -1;
}

static int find_dest(struct svc *s, const struct ip_vs_dest_user *d) {
  for (unsigned j = 0; j < s->ndests; j++)
    if (s->dests[j].e.addr == d->addr && s->dests[j].e.port == d->port) return (int)j;
  return -1;
}

static int known_scheduler(const char *name) {
  for (int i = 0; schedulers[i]; i++)
    if (!strncmp(name, schedulers[i], IP_VS_SCHEDNAME_MAXLEN)) return 1;
  return 0;
}

static const char *svc_text(const struct ip_vs_service_user *u, char *buf, size_t n) {
  char a[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &u->addr, a, sizeof a);
  snprintf(buf, n, "%s %s:%u", proto_name(u->protocol), a, ntohs(u->port));
  return buf;
}

static const char *fwd_text(unsigned flags) {
  switch (flags & IP_VS_CONN_F_FWD_MASK) {
  case IP_VS_CONN_F_MASQ: return "masq";
  case IP_VS_CONN_F_TUNNEL: return "tunnel";
  case IP_VS_CONN_F_DROUTE: return "route";
  case IP_VS_CONN_F_LOCALNODE: return "local";
  }
  return "?";
}

/* set_op applies one IP_VS_SO_SET_* request as the kernel would; returns 0 or an errno. */
static int set_op(int op, const void *arg) {
  const struct ip_vs_service_user *u = arg;
  const struct ip_vs_dest_user *d = (const struct ip_vs_dest_user *)(u + 1);
  char sv[96], a[INET_ADDRSTRLEN];
  int i = (op == IP_VS_SO_SET_FLUSH || op == IP_VS_SO_SET_TIMEOUT) ? -1 : find_svc(u);
  switch (op) {
  case IP_VS_SO_SET_FLUSH:
    for (unsigned k = 0; k < nsvc; k++) free(table[k].dests);
    nsvc = 0;
    logf_("FLUSH");
    return 0;
  case IP_VS_SO_SET_TIMEOUT: {
    const struct ip_vs_timeout_user *t = arg;
    if (t->tcp_timeout) timeouts.tcp_timeout = t->tcp_timeout;
    if (t->tcp_fin_timeout) timeouts.tcp_fin_timeout = t->tcp_fin_timeout;
    if (t->udp_timeout) timeouts.udp_timeout = t->udp_timeout;
    logf_("TIMEOUT tcp=%d tcpfin=%d udp=%d", t->tcp_timeout, t->tcp_fin_timeout, t->udp_timeout);
    return 0;
  }
  case IP_VS_SO_SET_ADD:
  case IP_VS_SO_SET_EDIT: {
    char sched[IP_VS_SCHEDNAME_MAXLEN + 1] = {0};
    memcpy(sched, u->sched_name, IP_VS_SCHEDNAME_MAXLEN);
    logf_("%s %s sched=%s flags=0x%x timeout=%u netmask=%08x", op == IP_VS_SO_SET_ADD ? "ADD" : "EDIT", svc_text(u, sv, sizeof sv), sched, u->flags, u->timeout,
          ntohl(u->netmask));
    if (op == IP_VS_SO_SET_ADD && i >= 0) return EEXIST;
    if (op == IP_VS_SO_SET_EDIT && i < 0) return ESRCH;
    if (!known_scheduler(sched)) return ENOENT;
    if (op == IP_VS_SO_SET_ADD) {
      new_svc();
      i = (int)nsvc - 1;
      table[i].e.protocol = u->protocol;
      table[i].e.addr = u->addr;
      table[i].e.port = u->port;
      table[i].e.fwmark = u->fwmark;
    }
    memcpy(table[i].e.sched_name, u->sched_name, IP_VS_SCHEDNAME_MAXLEN);
    table[i].e.flags = u->flags | IP_VS_SVC_F_HASHED;
    table[i].e.timeout = u->timeout;
    table[i].e.netmask = u->netmask;
    return 0;
  }
  case IP_VS_SO_SET_DEL:
    logf_("DEL %s", svc_text(u, sv, sizeof sv));
    if (i < 0) return ESRCH;
    free(table[i].dests);
    memmove(&table[i], &table[i + 1], (nsvc - i - 1) * sizeof table[0]);
    nsvc--;
    return 0;
  case IP_VS_SO_SET_ADDDEST:
  case IP_VS_SO_SET_EDITDEST:
  case IP_VS_SO_SET_DELDEST: {
    inet_ntop(AF_INET, &d->addr, a, sizeof a);
    const char *name = op == IP_VS_SO_SET_ADDDEST ? "ADDDEST" : op == IP_VS_SO_SET_EDITDEST ? "EDITDEST" : "DELDEST";
    if (op == IP_VS_SO_SET_DELDEST)
      logf_("%s %s -> %s:%u", name, svc_text(u, sv, sizeof sv), a, ntohs(d->port));
    else
      logf_("%s %s -> %s:%u fwd=%s weight=%d", name, svc_text(u, sv, sizeof sv), a, ntohs(d->port), fwd_text(d->conn_flags), d->weight);
    if (i < 0) return ESRCH;
    struct svc *s = &table[i];
    int j = find_dest(s, d);
    if (op == IP_VS_SO_SET_ADDDEST) {
      if (j >= 0) return EEXIST;
      if (d->weight < 0) return EINVAL;
      new_dest(s);
      j = (int)s->ndests - 1;
      s->dests[j].e.addr = d->addr;
      s->dests[j].e.port = d->port;
    } else if (j < 0) {
      return ENOENT;
    }
    if (op == IP_VS_SO_SET_DELDEST) {
      memmove(&s->dests[j], &s->dests[j + 1], (s->ndests - j - 1) * sizeof s->dests[0]);
      s->ndests--;
      return 0;
    }
    s->dests[j].e.conn_flags = d->conn_flags;
    s->dests[j].e.weight = d->weight;
    s->dests[j].e.u_threshold = d->u_threshold;
    s->dests[j].e.l_threshold = d->l_threshold;
    return 0;
  }
  }
  return EINVAL;
}

static int get_op(int op, void *arg, socklen_t *len) {
  switch (op) {
  case IP_VS_SO_GET_VERSION:
    snprintf(arg, *len, "IP Virtual Server version 1.2.1 (size=4096)");
    return 0;
  case IP_VS_SO_GET_INFO: {
    struct ip_vs_getinfo *i = arg;
    i->version = 0x010201;
    i->size = 4096;
    i->num_services = nsvc;
    return 0;
  }
  case IP_VS_SO_GET_SERVICES: {
    struct ip_vs_get_services *g = arg;
    unsigned n = g->num_services < nsvc ? g->num_services : nsvc;
    for (unsigned i = 0; i < n; i++) {
      g->entrytable[i] = table[i].e;
      g->entrytable[i].num_dests = table[i].ndests;
    }
    g->num_services = n;
    return 0;
  }
  case IP_VS_SO_GET_SERVICE: {
    struct ip_vs_service_entry *e = arg;
    for (unsigned i = 0; i < nsvc; i++)
      if (table[i].e.protocol == e->protocol && table[i].e.addr == e->addr && table[i].e.port == e->port && table[i].e.fwmark == e->fwmark) {
        *e = table[i].e;
        e->num_dests = table[i].ndests;
        return 0;
      }
    return ESRCH;
  }
  case IP_VS_SO_GET_DESTS: {
    struct ip_vs_get_dests *g = arg;
    for (unsigned i = 0; i < nsvc; i++)
      if (table[i].e.protocol == g->protocol && table[i].e.addr == g->addr && table[i].e.port == g->port && table[i].e.fwmark == g->fwmark) {
        unsigned n = g->num_dests < table[i].ndests ? g->num_dests : table[i].ndests;
        for (unsigned j = 0; j < n; j++) g->entrytable[j] = table[i].dests[j].e;
        g->num_dests = n;
        return 0;
      }
    return ESRCH;
  }
  case IP_VS_SO_GET_TIMEOUT:
    *(struct ip_vs_timeout_user *)arg = timeouts;
    return 0;
  case IP_VS_SO_GET_DAEMON:
    memset(arg, 0, *len);
    return 0;
  }
  return EINVAL;
}

__attribute__((constructor)) static void zero_new_memory(void) { mallopt(M_PERTURB, 255); }

/* write_back: the table as ipvsadm left it, when it exits (ipvsadm returns from main or calls exit). */
__attribute__((destructor)) static void write_back(void) { save(); }

static int is_ipvs(int level, int optname) { return level == IPPROTO_IP && optname >= IP_VS_BASE_CTL && optname <= IP_VS_BASE_CTL + 15; }

int setsockopt(int fd, int level, int optname, const void *optval, socklen_t optlen) {
  static int (*real)(int, int, int, const void *, socklen_t);
  if (!is_ipvs(level, optname)) {
    if (!real) real = dlsym(RTLD_NEXT, "setsockopt");
    return real(fd, level, optname, optval, optlen);
  }
  load();
  int err = set_op(optname, optval);
  if (err) {
    logf_("  -> error %d (%s)", err, strerror(err));
    errno = err;
    return -1;
  }
  dirty = 1;
  return 0;
}

int getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen) {
  static int (*real)(int, int, int, void *, socklen_t *);
  if (!is_ipvs(level, optname)) {
    if (!real) real = dlsym(RTLD_NEXT, "getsockopt");
    return real(fd, level, optname, optval, optlen);
  }
  load();
  int err = get_op(optname, optval, optlen);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

/* genl_ctrl_resolve: the IPVS generic netlink family "does not exist", so libipvs uses the socket options above. */
int genl_ctrl_resolve(void *sock, const char *name) {
  (void)sock;
  (void)name;
  return -12; /* -NLE_OBJ_NOTFOUND */
}
