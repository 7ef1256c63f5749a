import { FlagInvalidError } from '../errors.ts';
import { setDefaults } from './defaults.ts';
import { DurationSyntaxError, formatDuration, parseDuration } from './duration.ts';
import { FLAG_SPECS, KUBE_PROXY_FLAGS_NOT_IMPLEMENTED, type FlagGroup, type FlagSpec } from './flag-specs.ts';
import type { RunOptions } from './types.ts';
import type { KubeProxyConfiguration } from './v1alpha1.ts';

export { FLAG_SPECS, type FlagSpec } from './flag-specs.ts';

/** FlagValue is a parsed flag value (durations in milliseconds). */
export type FlagValue = string | boolean | number | string[] | Record<string, boolean>;

/**
 * ParsedFlags maps each flag given on the command line (by long name) to its
 * value. Repeating a flag replaces its value, except list flags, which append,
 * and --feature-gates, which merges, as with kube-proxy's pflag flags.
 */
export type ParsedFlags = ReadonlyMap<string, FlagValue>;

const BY_NAME = new Map(FLAG_SPECS.map((s) => [s.name, s]));
const BY_SHORT = new Map(FLAG_SPECS.filter((s) => s.short).map((s) => [s.short!, s]));
const TRUE = new Set(['1', 't', 'T', 'true', 'TRUE', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'false', 'FALSE', 'False']);

/**
 * parseFlags reads argv (without the node and script paths): `--flag=value`,
 * `--flag value`, booleans as `--flag` or `--flag=true|false`, `-v 2`, `-v=2`,
 * `-h`. Every unknown flag, missing or malformed value and stray argument is
 * collected; if any, one FlagInvalidError lists them all, one per line.
 */
export function parseFlags(argv: readonly string[]): ParsedFlags {
  const values = new Map<string, FlagValue>();
  const problems: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      for (const rest of argv.slice(i + 1)) problems.push(`unexpected argument ${JSON.stringify(rest)}: kproxy takes flags only`);
      break;
    }
    const m = /^(--?)([^=]*)(?:=([\s\S]*))?$/.exec(arg);
    if (!m || arg === '-') {
      problems.push(`unexpected argument ${JSON.stringify(arg)}: kproxy takes flags only`);
      continue;
    }
    const [, dashes, rawName = '', inline] = m;
    let name = rawName;
    let attached = inline;
    let spec: FlagSpec | undefined;
    if (dashes === '--') {
      spec = BY_NAME.get(name);
    } else {
      // One dash: a one-letter flag, its value possibly attached (-v4).
      spec = BY_SHORT.get(name[0] ?? '');
      if (spec && name.length > 1 && attached === undefined && spec.kind !== 'bool') {
        attached = name.slice(1);
        name = name[0]!;
      } else if (!spec || name.length > 1) {
        spec = undefined;
      }
    }
    const shown = `${dashes}${name}`;
    if (!spec) {
      problems.push(unknownFlag(dashes!, name));
      continue;
    }
    let text = attached;
    if (text === undefined && spec.kind !== 'bool') {
      if (i + 1 >= argv.length) {
        problems.push(`flag needs an argument: ${shown} ${spec.arg ?? 'VALUE'}`);
        continue;
      }
      text = argv[++i]!;
    }
    try {
      const value = parseValue(spec, text);
      const prev = values.get(spec.name);
      if (spec.kind === 'strings' && Array.isArray(prev)) values.set(spec.name, [...prev, ...(value as string[])]);
      else if (spec.kind === 'boolMap' && prev) values.set(spec.name, { ...(prev as Record<string, boolean>), ...(value as Record<string, boolean>) });
      else values.set(spec.name, value);
    } catch (err) {
      problems.push(`invalid value ${JSON.stringify(text)} for ${shown}: ${(err as Error).message}`);
    }
  }
  if (problems.length === 1) throw new FlagInvalidError(problems[0]!);
  if (problems.length > 1) throw new FlagInvalidError(`${problems.length} problems with the flags:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  return values;
}

function unknownFlag(dashes: string, name: string): string {
  const long = name.split('=')[0]!;
  if (dashes === '-' && BY_NAME.has(long)) return `unknown flag: -${long} (long flags take two dashes: --${long})`;
  if (KUBE_PROXY_FLAGS_NOT_IMPLEMENTED.includes(long)) return `unknown flag: --${long} (a kube-proxy flag kproxy does not implement)`;
  return `unknown flag: ${dashes}${name} (see --help)`;
}

function parseValue(spec: FlagSpec, text: string | undefined): FlagValue {
  switch (spec.kind) {
    case 'bool':
      if (text === undefined || TRUE.has(text)) return true;
      if (FALSE.has(text)) return false;
      throw new Error('must be true or false');
    case 'string':
      if (spec.name === 'hostname-override') return hostnameOverride(text!);
      return text!;
    case 'enum':
      if (!spec.values!.includes(text!)) throw new Error(`must be one of ${spec.values!.filter((v) => v !== '').join(', ')}`);
      return text!;
    case 'int32':
    case 'uint32': {
      const n = /^[+-]?\d+$/.test(text!) ? Number(text) : NaN;
      const [lo, hi] = spec.kind === 'int32' ? [-(2 ** 31), 2 ** 31 - 1] : [0, 2 ** 32 - 1];
      if (!Number.isInteger(n)) throw new Error('must be a whole number');
      if (n < lo || n > hi) throw new Error(`must be within [${lo}, ${hi}]`);
      return n;
    }
    case 'float': {
      const n = text!.trim() === '' ? NaN : Number(text);
      if (!Number.isFinite(n)) throw new Error('must be a number');
      return n;
    }
    case 'duration':
      try {
        return parseDuration(text!);
      } catch (err) {
        throw new Error(err instanceof DurationSyntaxError ? `${err.message}; write e.g. 30s, 1m30s, 500ms` : String(err), { cause: err });
      }
    case 'strings':
      return text === '' ? [] : text!.split(',').map((s) => s.trim());
    case 'boolMap': {
      const out: Record<string, boolean> = {};
      for (const pair of text!.split(',').filter((p) => p.trim() !== '')) {
        const eq = pair.indexOf('=');
        const key = eq < 0 ? '' : pair.slice(0, eq).trim();
        const value = eq < 0 ? '' : pair.slice(eq + 1).trim();
        if (key === '' || !(TRUE.has(value) || FALSE.has(value))) throw new Error(`${JSON.stringify(pair)} is not NAME=true|false`);
        out[key] = TRUE.has(value);
      }
      return out;
    }
  }
}

/** hostnameOverride trims and lowercases the flag like kube-proxy; blank is an error. */
function hostnameOverride(text: string): string {
  const name = text.trim();
  if (name === '') throw new Error('empty hostname-override is invalid');
  return name.toLowerCase();
}

/**
 * applyConfigFlags writes the configuration flags over a defaulted document and
 * returns which v1alpha1 field each flag set (field path -> "--flag"), so
 * validation errors can say a value came from the command line.
 */
export function applyConfigFlags(c: KubeProxyConfiguration, flags: ParsedFlags): Map<string, string> {
  const setBy = new Map<string, string>();
  for (const [name, value] of flags) {
    const spec = BY_NAME.get(name)!;
    for (const field of spec.fields ?? []) {
      setPath(c, field, Array.isArray(value) ? [...value] : typeof value === 'object' ? { ...(getPath(c, field) as object), ...value } : value);
      setBy.set(field, `--${name}`);
    }
  }
  return setBy;
}

/** runFlags returns the RunOptions entries the command line set. */
export function runFlags(flags: ParsedFlags): Partial<RunOptions> {
  const out: Record<string, FlagValue> = {};
  for (const [name, value] of flags) {
    const spec = BY_NAME.get(name)!;
    if (spec.run) out[spec.run] = value;
  }
  return out as Partial<RunOptions>;
}

function getPath(obj: object, path: string): unknown {
  return path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], obj);
}

function setPath(obj: object, path: string, value: unknown): void {
  const keys = path.split('.');
  const last = keys.pop()!;
  const parent = keys.reduce<Record<string, unknown>>((o, k) => o[k] as Record<string, unknown>, obj as Record<string, unknown>);
  parent[last] = value;
}

const GROUPS: readonly FlagGroup[] = ['Sources and node', 'Proxy', 'iptables and nftables', 'IPVS', 'Userspace', 'Conntrack', 'Servers', 'Process and logging', 'Run modes'];

function defaultOf(spec: FlagSpec, defaults: KubeProxyConfiguration): string {
  if (spec.defaultText !== undefined) return spec.defaultText;
  if (!spec.fields) return '';
  const v = getPath(defaults, spec.fields[0]!);
  if (spec.kind === 'duration') return formatDuration(v as number);
  if (spec.kind === 'bool') return v ? 'true' : '';
  if (Array.isArray(v) || (typeof v === 'object' && v !== null)) return '';
  return String(v);
}

/** usage is the --help text: every flag, grouped, with its default. */
export function usage(): string {
  const defaults = setDefaults();
  const lines = [
    'Usage: kproxy [flags]',
    '',
    'kproxy is a Kubernetes service proxy for Linux nodes, compatible with kube-proxy.',
    "Flags keep kube-proxy's names and meanings, and override the --config file.",
  ];
  for (const group of GROUPS) {
    lines.push('', `${group}:`);
    for (const spec of FLAG_SPECS.filter((s) => s.group === group)) {
      const names = spec.short ? `-${spec.short}, --${spec.name}` : `    --${spec.name}`;
      const left = `  ${names}${spec.arg ? ` ${spec.arg}` : ''}`;
      const dflt = defaultOf(spec, defaults);
      const help = `${spec.help}${dflt ? ` (default ${dflt})` : ''}`;
      lines.push(left.length < 44 ? `${left.padEnd(44)}${help}` : `${left}\n${' '.repeat(44)}${help}`);
    }
  }
  lines.push('', 'Durations are Go durations: 500ms, 30s, 1m30s, 2h45m.', '');
  return lines.join('\n');
}
