import type { UserspaceIntent } from './proxier.ts';

/**
 * describeProxySockets lists, from what the last sync programmed
 * (intended()), every proxy socket (service port, policy, listening address,
 * the rotation new connections take), the ports held for it, and the service
 * ports left out with why: what --dry-run prints as "would be opened" and
 * what the golden cases hold.
 */
export function describeProxySockets(intent: UserspaceIntent | null, listen: string, skipped: ReadonlyMap<string, string> = new Map()): string[] {
  const lines = ['# proxy sockets and claimed ports'];
  const host = listen.includes(':') ? `[${listen}]` : listen;
  for (const id of intent?.ids() ?? []) {
    const p = intent!.port(id)!;
    for (const s of p.sockets) {
      const rotation = s.endpoints.length ? s.endpoints.join(' ') : '(no endpoint)';
      lines.push(`${p.sp.protocol} ${host}:${s.port} ${id} ${s.pool === 'local' ? 'Local' : 'Cluster'} policy -> ${rotation}`);
    }
    for (const c of p.claims) lines.push(`  held ${c}`);
    for (const why of p.problems) lines.push(`  problem ${why}`);
  }
  for (const [id, why] of [...skipped].sort(([a], [b]) => (a < b ? -1 : 1))) lines.push(`# not relayed: ${id}: ${why}`);
  return lines;
}
