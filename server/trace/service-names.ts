/**
 * Service port names ("ns/name:port") as the kernel's rules carry them:
 * iptables rule comments, nftables chain names and element comments. A port
 * without a name is "ns/name".
 */

const SERVICE_PORT = /(?:^|\s)([a-z0-9](?:[-a-z0-9]*[a-z0-9])?\/[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?(?::[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)?)(?=\s|$)/;

/** serviceInComment finds the service port a comment names ("shop/web:http cluster IP" → "shop/web:http"). */
export function serviceInComment(comment: string | null): string | null {
  if (!comment) return null;
  return SERVICE_PORT.exec(comment)?.[1] ?? null;
}

/** commentOf reads an iptables rule's comment from its listed text. */
export function commentOf(spec: string | null): string | null {
  if (!spec) return null;
  const m = /--comment (?:"((?:[^"\\]|\\.)*)"|(\S+))/.exec(spec);
  return m ? (m[1] ?? m[2]).replace(/\\(.)/g, '$1') : null;
}

/**
 * serviceOfNftChain reads a per-service-port nftables chain name
 * ("service-ULMVA6XW-ns1/svc1/tcp/p80", "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80")
 * back into "ns1/svc1:p80"; null for other names (and for names cut short by their length limit).
 */
export function serviceOfNftChain(chain: string): string | null {
  const m = /^[a-z]+-[A-Z2-7]{8}-([a-z0-9-]+)\/([a-z0-9.-]+)\/(?:tcp|udp|sctp)\/([a-z0-9-]*)(?:__|$)/.exec(chain);
  if (!m) return null;
  return m[3] ? `${m[1]}/${m[2]}:${m[3]}` : `${m[1]}/${m[2]}`;
}
