import { describe, expect, it } from 'vitest';
import { CommandNotFoundError } from '../../errors.ts';
import type { ExecFn } from '../../kernel/exec.ts';
import { iptablesFamilyUnsupported } from './family-support.ts';

/** hostExec answers like a host whose ip6tables is missing, or lists a nat table without POSTROUTING. */
const hostExec = (ip6: 'missing' | 'no-nat' | 'works'): { exec: ExecFn; ran: string[] } => {
  const ran: string[] = [];
  const exec: ExecFn = async (file, args) => {
    ran.push([file, ...args].join(' '));
    if (file.startsWith('ip6tables') && ip6 === 'missing') throw new CommandNotFoundError(`${file} is not installed`);
    if (args[0] === '--version') return { code: 0, stdout: `${file} v1.8.9 (nf_tables)`, stderr: '' };
    if (file.startsWith('ip6tables') && ip6 === 'no-nat') return { code: 1, stdout: '', stderr: 'ip6tables: No chain/target/match by that name.\n' };
    if (args.includes('-S')) return { code: 0, stdout: '-P POSTROUTING ACCEPT\n', stderr: '' };
    return { code: 0, stdout: '', stderr: '' };
  };
  return { exec, ran };
};

describe("iptablesFamilyUnsupported (kube-proxy's Present())", () => {
  it("answers null when the family's iptables lists the nat table's POSTROUTING", async () => {
    const { exec, ran } = hostExec('works');
    expect(await iptablesFamilyUnsupported('IPv6', 'nft', exec)).toBeNull();
    expect(ran).toContain('ip6tables-nft -w 5 -W 100000 -S POSTROUTING -t nat');
  });

  it('says why when the binary is missing or cannot list the nat table', async () => {
    expect(await iptablesFamilyUnsupported('IPv6', 'nft', hostExec('missing').exec)).toMatch(/cannot run ip6tables-nft --version/);
    expect(await iptablesFamilyUnsupported('IPv6', 'nft', hostExec('no-nat').exec)).toBe('IPv6 iptables has no nat POSTROUTING chain');
    expect(await iptablesFamilyUnsupported('IPv4', 'nft', hostExec('no-nat').exec)).toBeNull();
  });
});
