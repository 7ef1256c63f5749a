import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import type { Backend } from '../proxy/backend.ts';
import type { IptablesBackend } from '../proxy/iptables/proxier.ts';
import type { IpvsBackend } from '../proxy/ipvs/proxier.ts';
import { IptablesView } from './iptables/view.ts';
import { IpvsView } from './ipvs/view.ts';
import type { KernelViewProvider } from './kernel-view.ts';

function isIptablesBackend(b: Backend): b is IptablesBackend {
  return b.mode === 'iptables' && 'runner' in b && 'metrics' in b;
}

function isIpvsBackend(b: Backend): b is IpvsBackend {
  return b.mode === 'ipvs' && 'runners' in b && 'planned' in b;
}

/**
 * kernelViewFor picks the dashboard's view of a backend's kernel objects. A
 * new mode adds its case here (see README.md, "Adding a mode"); a mode
 * without one cannot serve the dashboard and says so at start-up.
 */
export function kernelViewFor(backend: Backend, simulated: boolean, logger: Logger, clock: Clock): KernelViewProvider | null {
  if (isIptablesBackend(backend)) return new IptablesView({ runner: backend.runner, simulated, skipped: backend.metrics.skippedServicePorts, logger });
  if (isIpvsBackend(backend)) return new IpvsView({ backend, simulated, clock });
  return null;
}
