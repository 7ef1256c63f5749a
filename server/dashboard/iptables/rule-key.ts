import { splitArgs } from '../../kernel/iptables-save-parser.ts';

/**
 * iptablesRuleKey reduces a rule to what the kernel keeps of it, so that the
 * rule kproxy wrote and the rule iptables-save lists compare equal. The
 * kernel does not keep the text: iptables-save prints matches in its own
 * order and spelling. Seen with iptables 1.8 (legacy and nft) against
 * kproxy's restore input:
 *
 *   written                                  listed
 *   -m tcp -p tcp -d 10.96.0.10 --dport 80   -d 10.96.0.10/32 -p tcp -m tcp --dport 80
 *   --mark 0x00004000/0x00004000             --mark 0x4000/0x4000
 *   -j MARK --or-mark 0x00004000             -j MARK --set-xmark 0x4000/0x4000
 *   -j MARK --xor-mark 0x00004000            -j MARK --set-xmark 0x4000/0x0
 *   --probability 0.3333333333               --probability 0.33333333349
 *   -m recent --name X --set                 -m recent --set --name X --mask 255.255.255.255 --rsource
 *   -j REJECT                                -j REJECT --reject-with icmp-port-unreachable
 *
 * So: matches become a sorted set of "option values" groups (module loads
 * "-m x" dropped: their options name them), addresses lose a host prefix
 * length, hex numbers lose leading zeros, probabilities become the number the
 * kernel stores (iptables' statistic match keeps lround(p * 2^31) and lists
 * it back with 11 decimals; comparing decimals instead, a tenth of the rules
 * of a Service with 1,000 endpoints came out different), defaults the kernel
 * adds are dropped, and MARK's shorthands become --set-xmark.
 */
export function iptablesRuleKey(spec: string): string {
  let args: string[];
  try {
    args = splitArgs(spec);
  } catch {
    // Unbalanced quotes cannot come from iptables-save; compare such a rule as written.
    return spec;
  }
  const matches: string[] = [];
  let target: string[] = [];
  for (let i = 0; i < args.length;) {
    let negated = false;
    let opt = args[i];
    if (opt === '!') {
      negated = true;
      opt = args[++i] ?? '';
    }
    if (opt === '-j' || opt === '--jump' || opt === '-g' || opt === '--goto') {
      target = targetKey(opt === '-g' || opt === '--goto' ? '-g' : '-j', args.slice(i + 1));
      break;
    }
    i++;
    const values: string[] = [];
    while (i < args.length && !isOption(args[i])) values.push(args[i++]);
    const name = opt.length > 2 ? (LONG_TO_SHORT.get(opt) ?? opt) : opt;
    if (name === '-m') continue;
    const group = matchGroup(name, values);
    if (group !== null) matches.push((negated ? '! ' : '') + group);
  }
  matches.sort(byCodeUnits);
  return target.length ? `${matches.join(' ')} ${target.join(' ')}` : matches.join(' ');
}

const LONG_TO_SHORT = new Map([
  ['--source', '-s'],
  ['--destination', '-d'],
  ['--protocol', '-p'],
  ['--in-interface', '-i'],
  ['--out-interface', '-o'],
  ['--match', '-m'],
]);

/** Defaults iptables-save prints although nobody wrote them. */
const DEFAULT_GROUPS = new Set([
  '--mask 255.255.255.255',
  '--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
  '--rsource',
  '--reject-with icmp-port-unreachable',
  '--reject-with icmp6-port-unreachable',
]);

/** byCodeUnits orders strings as sort() does without a comparator, without its conversions. */
function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** isOption: "!" or a word that starts with "-" and is not a negative number. */
function isOption(word: string): boolean {
  if (word === '!') return true;
  if (word.length < 2 || word.charCodeAt(0) !== 0x2d) return false;
  const c = word.charCodeAt(1);
  return c < 0x30 || c > 0x39;
}

function matchGroup(name: string, values: string[]): string | null {
  let group = name;
  for (const v of values) group += ' ' + normalizeValue(name, v);
  return DEFAULT_GROUPS.has(group) ? null : group;
}

function targetKey(jump: string, words: string[]): string[] {
  const name = words[0] ?? '';
  const groups: string[] = [];
  for (let i = 1; i < words.length;) {
    const opt = words[i++];
    const values: string[] = [];
    while (i < words.length && !isOption(words[i])) values.push(words[i++]);
    let group = matchGroup(opt, values);
    if (group === null) continue;
    if (name === 'MARK' && opt === '--or-mark' && values.length === 1) group = `--set-xmark ${hex(values[0])}/${hex(values[0])}`;
    if (name === 'MARK' && opt === '--xor-mark' && values.length === 1) group = `--set-xmark ${hex(values[0])}/0x0`;
    groups.push(group);
  }
  groups.sort(byCodeUnits);
  return [jump, name, ...groups];
}

function normalizeValue(option: string, value: string): string {
  if (option === '-s' || option === '-d') {
    if (value.endsWith('/32')) return value.slice(0, -3);
    return value.endsWith('/128') ? value.slice(0, -4) : value;
  }
  if (option === '--probability') {
    const p = Number(value);
    return Number.isFinite(p) && p >= 0 && p <= 1 ? String(Math.round(p * STATISTIC_ONE)) : value;
  }
  // Most values are not hex (ports, names, addresses): look at the first two characters before the pattern.
  if (value.length > 2 && value.charCodeAt(0) === 0x30 && (value.charCodeAt(1) | 0x20) === 0x78 && HEX_VALUE.test(value)) return value.split('/').map(hex).join('/');
  return value;
}

/** STATISTIC_ONE: probability 1 in xt_statistic's fixed point (libxt_statistic parses --probability into lround(0x80000000 * p)). */
const STATISTIC_ONE = 0x80000000;

const HEX_VALUE = /^0x[0-9a-f]+(\/0x[0-9a-f]+)?$/i;

function hex(value: string): string {
  return /^0x[0-9a-f]+$/i.test(value) ? '0x' + BigInt(value).toString(16) : value;
}
