import { existsSync } from 'node:fs';
import { CommandNotFoundError, IptablesFlavorError } from '../errors.ts';
import type { IPFamily } from '../net/ip.ts';
import { execFile, type ExecFn } from './exec.ts';
import { iptablesBinaries, type IptablesFlavor } from './iptables.ts';

/** FlavorChoice is --iptables-flavor: auto detects like kube-proxy's images. */
export type FlavorChoice = 'auto' | 'legacy' | 'nft';

export interface FlavorDecision {
  readonly flavor: IptablesFlavor;
  /** reason: one sentence for the start-up log. */
  readonly reason: string;
}

export interface DetectOptions {
  exec?: ExecFn;
  /** exists checks a path (the legacy tables files in /proc); injectable for tests. */
  exists?: (path: string) => boolean;
}

/** KUBELET_HINT_CHAINS: chains kubelet (>= 1.17) creates in mangle, in the flavour the node uses. */
export const KUBELET_HINT_CHAINS = ['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY'];

const HINT_RE = /^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)\s/m;

/**
 * legacyTablesLoaded: the legacy (x_tables) tables of the family exist in this
 * network namespace. Without them there is no legacy rule to find, and running
 * iptables-legacy-save would only load the module for nothing.
 */
export function legacyTablesLoaded(family: IPFamily, exists: (p: string) => boolean = existsSync): boolean {
  return exists(family === 'IPv6' ? '/proc/net/ip6_tables_names' : '/proc/net/ip_tables_names');
}

async function saveText(exec: ExecFn, program: string, args: string[]): Promise<string | null> {
  try {
    const res = await exec(program, args, { timeoutMs: 15_000 });
    return res.code === 0 ? res.stdout : '';
  } catch (err) {
    if (err instanceof CommandNotFoundError) return null;
    // A hung or failing save (old iptables-nft could loop) counts as "no rules there".
    return '';
  }
}

function countRules(text: string, kubeOnly: boolean): number {
  let n = 0;
  for (const line of text.split('\n')) {
    const l = line.replace(/^\[\d+:\d+\]\s*/, '');
    if (!l.startsWith('-A ')) continue;
    if (!kubeOnly || l.includes('KUBE-')) n++;
  }
  return n;
}

/**
 * detectIptablesFlavor decides between iptables-legacy and iptables-nft the
 * way kube-proxy's images do (kubernetes-sigs/iptables-wrappers):
 *  1. kubelet's KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY chain in the nft mangle table: nft;
 *  2. the same chains among the legacy rules: legacy;
 *  3. otherwise the flavour holding more KUBE- rules (a kube-proxy we take over from),
 *     then the one holding more rules at all (the host firewall; the v2 wrapper's count);
 *  4. a tie (a fresh node or namespace): nft, the newer wrapper's default.
 * When neither suffixed binary exists, the system's plain `iptables` is used.
 */
export async function detectIptablesFlavor(opts: DetectOptions = {}): Promise<FlavorDecision> {
  const exec = opts.exec ?? execFile;
  const exists = opts.exists ?? existsSync;
  const nftV4Mangle = await saveText(exec, 'iptables-nft-save', ['-t', 'mangle']);
  const nftAvailable = nftV4Mangle !== null;
  if (nftAvailable && HINT_RE.test(nftV4Mangle)) return { flavor: 'nft', reason: 'kubelet chains found in the nft mangle table' };
  const nftV6Mangle = nftAvailable ? await saveText(exec, 'ip6tables-nft-save', ['-t', 'mangle']) : null;
  if (nftV6Mangle && HINT_RE.test(nftV6Mangle)) return { flavor: 'nft', reason: 'kubelet chains found in the nft ip6 mangle table' };

  let legacyAvailable = false;
  let legacyText = '';
  for (const family of ['IPv4', 'IPv6'] as const) {
    const bins = iptablesBinaries(family, 'legacy');
    if (!legacyTablesLoaded(family, exists)) {
      // Still note whether the binary exists, for the "system" fallback below.
      if (!legacyAvailable) legacyAvailable = (await saveText(exec, bins.iptables, ['--version'])) !== null;
      continue;
    }
    const text = await saveText(exec, bins.save, []);
    if (text === null) continue;
    legacyAvailable = true;
    if (HINT_RE.test(text)) return { flavor: 'legacy', reason: `kubelet chains found in the legacy ${family} tables` };
    legacyText += text;
  }

  if (!nftAvailable && !legacyAvailable) {
    const res = await saveText(exec, 'iptables', ['--version']);
    if (res === null) throw new IptablesFlavorError('no iptables binary found (iptables-nft, iptables-legacy or iptables)');
    return { flavor: 'system', reason: `only the plain iptables binary exists (${res.trim()})` };
  }
  if (!nftAvailable) return { flavor: 'legacy', reason: 'iptables-nft is not installed' };
  if (!legacyAvailable) return { flavor: 'nft', reason: 'iptables-legacy is not installed' };

  const nftText = ((await saveText(exec, 'iptables-nft-save', [])) ?? '') + ((await saveText(exec, 'ip6tables-nft-save', [])) ?? '');
  const kubeLegacy = countRules(legacyText, true);
  const kubeNft = countRules(nftText, true);
  if (kubeLegacy !== kubeNft) {
    const flavor = kubeLegacy > kubeNft ? 'legacy' : 'nft';
    return { flavor, reason: `${flavor} holds more KUBE- rules (legacy ${kubeLegacy}, nft ${kubeNft})` };
  }
  const allLegacy = countRules(legacyText, false);
  const allNft = countRules(nftText, false);
  if (allLegacy > allNft) return { flavor: 'legacy', reason: `legacy holds more rules (legacy ${allLegacy}, nft ${allNft})` };
  if (allNft > allLegacy) return { flavor: 'nft', reason: `nft holds more rules (legacy ${allLegacy}, nft ${allNft})` };
  return { flavor: 'nft', reason: 'no rules in either flavour: nft by default' };
}

/** resolveIptablesFlavor applies --iptables-flavor: a forced flavour must have its binaries. */
export async function resolveIptablesFlavor(choice: FlavorChoice, opts: DetectOptions = {}): Promise<FlavorDecision> {
  if (choice === 'auto') return detectIptablesFlavor(opts);
  const exec = opts.exec ?? execFile;
  const bin = iptablesBinaries('IPv4', choice).iptables;
  const res = await saveText(exec, bin, ['--version']);
  if (res === null) throw new IptablesFlavorError(`--iptables-flavor=${choice} but ${bin} is not installed`);
  return { flavor: choice, reason: `--iptables-flavor=${choice}` };
}
