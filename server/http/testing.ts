import { testConfig } from '../config/testing.ts';
import type { ProxyConfig } from '../config/types.ts';

/** testProxyConfig is kproxy's default configuration with top-level overrides, for tests of the node servers. */
export function testProxyConfig(over: Partial<ProxyConfig> = {}): ProxyConfig {
  return { ...testConfig(), ...over };
}
