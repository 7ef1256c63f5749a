import { errorMessage } from '../../errors.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { createIptablesRunner } from '../../kernel/iptables.ts';
import type { IPFamily } from '../../net/ip.ts';

/**
 * iptablesFamilyUnsupported says why a family's iptables cannot be used here
 * (the binary is missing, or it cannot list the nat table: no IPv6 in this
 * kernel), or null when it can, as kube-proxy's iptables Present() check
 * (pkg/util/iptables). Every mode that writes iptables asks it before it
 * proxies a second family.
 */
export async function iptablesFamilyUnsupported(family: IPFamily, flavor: 'legacy' | 'nft', exec: ExecFn = execFile): Promise<string | null> {
  try {
    const runner = await createIptablesRunner({ family, flavor, exec });
    return (await runner.chainExists('nat', 'POSTROUTING')) ? null : `${runner.family} iptables has no nat POSTROUTING chain`;
  } catch (err) {
    return errorMessage(err);
  }
}
