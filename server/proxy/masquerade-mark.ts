import { RuleBuildError } from '../errors.ts';

/**
 * masqueradeMark renders 1 << bit the way kube-proxy's fmt "%#08x" does
 * ("0x00004000"): the packet mark that asks for SNAT, as the iptables, IPVS
 * and nftables proxiers each compute it from their masqueradeBit.
 */
export function masqueradeMark(bit: number): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) throw new RuleBuildError(`masquerade bit ${bit} must be 0..31`);
  return '0x' + (2 ** bit).toString(16).padStart(8, '0');
}
