import { createHash } from 'node:crypto';
import type { Pod } from './plan.ts';
import type { TestCluster } from './topology.ts';

/**
 * kube-proxy-rules writes what kube-proxy's iptables mode (pkg/proxy/iptables/proxier.go,
 * masquerade bit 14) leaves on a node for ClusterIP services, so a take-over
 * test starts from a node kube-proxy ran on. The chain names are computed here
 * independently of kproxy (base32 of sha256, 16 characters), so the test also
 * checks that kproxy recognises kube-proxy's chains as its own. kubeProxyNftables
 * (below) is the nftables mode's table, for take-overs from that mode.
 */

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

function base32(bytes: Uint8Array): string {
  let out = '';
  let bits = 0;
  let value = 0;
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

/** kubeProxyChain is kube-proxy's chain name: prefix + base32(sha256(portName + protocol [+ endpoint]))[:16]. */
export function kubeProxyChain(prefix: 'KUBE-SVC-' | 'KUBE-SEP-' | 'KUBE-EXT-' | 'KUBE-SVL-' | 'KUBE-FW-', portName: string, protocol: string, endpoint = ''): string {
  return (
    prefix +
    base32(
      createHash('sha256')
        .update(portName + protocol + endpoint)
        .digest(),
    ).slice(0, 16)
  );
}

/** KubeProxyService is one TCP ClusterIP service port as kube-proxy saw it. */
export interface KubeProxyService {
  /** portName: "namespace/name:port-name". */
  portName: string;
  clusterIP: string;
  port: number;
  targetPort: number;
  endpoints: readonly Pod[];
}

/** kubeProxyRestore is iptables-restore input for the whole filter, nat and mangle tables of such a node. */
export function kubeProxyRestore(services: readonly KubeProxyService[], clusterCIDR: string): string {
  const natChains: string[] = [];
  const natRules: string[] = [];
  for (const s of services) {
    const svc = kubeProxyChain('KUBE-SVC-', s.portName, 'tcp');
    natChains.push(svc);
    natRules.push(`-A KUBE-SERVICES -m comment --comment "${s.portName} cluster IP" -m tcp -p tcp -d ${s.clusterIP} --dport ${s.port} -j ${svc}`);
    natRules.push(`-A ${svc} -m comment --comment "${s.portName} cluster IP" -m tcp -p tcp -d ${s.clusterIP} --dport ${s.port} ! -s ${clusterCIDR} -j KUBE-MARK-MASQ`);
    s.endpoints.forEach((pod, i) => {
      const ep = `${pod.ip}:${s.targetPort}`;
      const sep = kubeProxyChain('KUBE-SEP-', s.portName, 'tcp', ep);
      const left = s.endpoints.length - i;
      const probability = left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(10)}` : '';
      natChains.push(sep);
      natRules.push(`-A ${svc} -m comment --comment "${s.portName} -> ${ep}"${probability} -j ${sep}`);
      natRules.push(`-A ${sep} -m comment --comment ${s.portName} -s ${pod.ip} -j KUBE-MARK-MASQ`);
      natRules.push(`-A ${sep} -m comment --comment ${s.portName} -m tcp -p tcp -j DNAT --to-destination ${ep}`);
    });
  }
  return [
    '*mangle',
    ':KUBE-PROXY-CANARY - [0:0]',
    'COMMIT',
    '*filter',
    ':INPUT ACCEPT [0:0]',
    ':FORWARD ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ...['KUBE-EXTERNAL-SERVICES', 'KUBE-FIREWALL', 'KUBE-FORWARD', 'KUBE-NODEPORTS', 'KUBE-PROXY-CANARY', 'KUBE-PROXY-FIREWALL', 'KUBE-SERVICES'].map((c) => `:${c} - [0:0]`),
    '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
    '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    '-A INPUT -j KUBE-FIREWALL',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    '-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -j KUBE-FIREWALL',
    '-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
    '-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP',
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    'COMMIT',
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':INPUT ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ...['KUBE-MARK-MASQ', 'KUBE-NODEPORTS', 'KUBE-POSTROUTING', 'KUBE-PROXY-CANARY', 'KUBE-SERVICES', ...natChains].map((c) => `:${c} - [0:0]`),
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000',
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    ...natRules,
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
    'COMMIT',
    '',
  ].join('\n');
}

/**
 * kubeProxyNftables is what kube-proxy's nftables mode leaves on node-a for the
 * cluster's manifests: its `ip kube-proxy` table as kube-proxy spells it
 * (one-element sets in braces, the mark as "0x4000"), made from kproxy's
 * --dry-run of the same state, as input for `nft -f`.
 */
export async function kubeProxyNftables(c: TestCluster): Promise<string> {
  const dump = await c.kproxy.command(['--once', '--dry-run', '--proxy-mode', 'nftables', '--source', `file:${c.manifests.path}`, '--hostname-override', 'node-a', '--cluster-cidr', '10.244.0.0/16']);
  if (dump.code !== 0) throw new Error(`kproxy --dry-run --proxy-mode nftables exited ${dump.code}: ${dump.stderr}`);
  return (
    dump.stdout
      .split('\n')
      .filter((l) => l.startsWith('add '))
      .join('\n')
      .replaceAll('0x00004000', '0x4000')
      .replace(/ saddr != (\d[\d./]+) drop/g, ' saddr != { $1 } drop') + '\n'
  );
}
