/**
 * The iptables mode's public file: what the composition builds the mode with.
 * Nothing outside server/proxy imports another file of this folder (the
 * kproxy/layers rule); the dashboard reads this mode's rules in the iptables
 * language the modes share (../xtables/), not here.
 */
export { createHostIptablesBackends, type HostIptables, type HostIptablesFamilies } from './host.ts';
export type { IptablesBackend } from './proxier.ts';
