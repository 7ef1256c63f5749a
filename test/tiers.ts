import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Tier says whether a testing tier can run on this machine, and if not, why. */
export interface Tier {
  readonly name: string;
  readonly ok: boolean;
  readonly reason: string;
}

function has(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function canMakeNetns(): boolean {
  const name = `kpt-probe-${process.pid}`;
  try {
    execFileSync('ip', ['netns', 'add', name], { stdio: 'ignore' });
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function kernel(): Tier {
  const missing = ['ip', 'curl', 'iptables-restore', 'iptables-save', 'iptables-legacy', 'iptables-nft', 'nft', 'conntrack', 'ipset'].filter((c) => !has(c));
  if (process.getuid?.() !== 0) return { name: 'kernel', ok: false, reason: 'kernel tests need root: skipped' };
  if (missing.length) return { name: 'kernel', ok: false, reason: `kernel tests need ${missing.join(', ')} (bash .ci/run installs them): skipped` };
  if (!existsSync('dist/server/cli.js')) return { name: 'kernel', ok: false, reason: 'kernel tests need the built daemon (npm run build): skipped' };
  if (!canMakeNetns()) return { name: 'kernel', ok: false, reason: 'kernel tests need network namespaces (ip netns add failed): skipped' };
  return { name: 'kernel', ok: true, reason: 'root, network namespaces, iptables, nftables, conntrack and ipset available' };
}

function browser(): Tier {
  if (!existsSync('/usr/bin/chromium')) return { name: 'browser', ok: false, reason: 'browser tests need /usr/bin/chromium (Debian package chromium): skipped' };
  if (!existsSync('dist/web/index.html')) return { name: 'browser', ok: false, reason: 'browser tests need the built dashboard (npm run build): skipped' };
  return { name: 'browser', ok: true, reason: 'Debian chromium and the built dashboard available' };
}

let cached: { kernel: Tier; browser: Tier } | null = null;

/** tiers probes the machine once per process. */
export function tiers(): { kernel: Tier; browser: Tier } {
  cached ??= { kernel: kernel(), browser: browser() };
  return cached;
}
