import { formatDuration } from '../config/duration.ts';
import type { ProxyConfig } from '../config/types.ts';

/** CONFIGZ_GROUP is the key kube-proxy registers its configuration under in /configz. */
export const CONFIGZ_GROUP = 'kubeproxy.config.k8s.io';

/**
 * configzDocument renders the effective configuration the way kube-proxy's
 * /configz does (its KubeProxyConfiguration as JSON, durations as Go duration
 * strings): kproxy keeps durations as "…Ms" milliseconds, which become the
 * KubeProxyConfiguration field without the suffix ("syncPeriodMs": 30000 ->
 * "syncPeriod": "30s").
 */
export function configzDocument(config: ProxyConfig): Record<string, unknown> {
  return { [CONFIGZ_GROUP]: renderValue(config) };
}

function renderValue(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(renderValue);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key.endsWith('Ms') && typeof v === 'number') out[key.slice(0, -2)] = formatDuration(v);
    else out[key] = renderValue(v);
  }
  return out;
}
