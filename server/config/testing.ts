import { toProxyConfig } from './convert.ts';
import { setDefaults } from './defaults.ts';
import type { ProxyConfig } from './types.ts';

export type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

/**
 * testConfig is the configuration kproxy runs with when given no flags (kube-proxy's
 * v1alpha1 defaults, converted as the loader does), with overrides merged in.
 * Tests take their defaults from here so they cannot drift from the real ones.
 */
export function testConfig(over: DeepPartial<ProxyConfig> = {}): ProxyConfig {
  return merge(toProxyConfig(setDefaults()), over) as ProxyConfig;
}

function merge(a: unknown, b: unknown): unknown {
  if (b === undefined) return a;
  if (Array.isArray(b) || b === null || typeof b !== 'object' || typeof a !== 'object' || a === null) return b;
  const out: Record<string, unknown> = { ...(a as Record<string, unknown>) };
  for (const [k, v] of Object.entries(b)) out[k] = merge((a as Record<string, unknown>)[k], v);
  return out;
}
