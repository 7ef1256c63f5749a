import type { Logger } from '../log.ts';
import type { Backend } from '../proxy/backend.ts';
import type { IptablesBackend } from '../proxy/iptables/proxier.ts';
import { IptablesView } from './iptables/view.ts';
import type { KernelViewProvider } from './kernel-view.ts';

function isIptablesBackend(b: Backend): b is IptablesBackend {
  return b.mode === 'iptables' && 'runner' in b && 'metrics' in b;
}

/**
 * kernelViewFor picks the dashboard's view of a backend's kernel objects. A
 * new mode adds its case here (see README.md, "Adding a mode"); a mode
 * without one cannot serve the dashboard and says so at start-up.
 */
export function kernelViewFor(backend: Backend, simulated: boolean, logger: Logger): KernelViewProvider | null {
  if (isIptablesBackend(backend)) return new IptablesView({ runner: backend.runner, simulated, skipped: backend.metrics.skippedServicePorts, logger });
  return null;
}
