import { describe, expect, it } from 'vitest';
import { CommandNotFoundError } from '../errors.ts';
import type { ExecFn, ExecResult } from './exec.ts';
import { checkNftSupport, createNftRunner, NFT_MS_PER_MIB, nftErrorLines, NftTransactionFailure } from './nft.ts';
import { parseNftTableJson } from './nft-listing.ts';

function fakeExec(answer: (file: string, args: readonly string[], stdin?: string) => ExecResult | Error): ExecFn & { calls: string[] } {
  const calls: string[] = [];
  const fn = (async (file, args, opts) => {
    calls.push([file, ...args].join(' '));
    const a = answer(file, args, opts?.stdin?.toString());
    if (a instanceof Error) throw a;
    return a;
  }) as ExecFn & { calls: string[] };
  fn.calls = calls;
  return fn;
}

const ok = (stdout = ''): ExecResult => ({ code: 0, stdout, stderr: '' });

describe('the nft runner', () => {
  it('feeds one transaction to nft -f - and names the lines nft refused', async () => {
    const stderr = '/dev/stdin:3:1-65: Error: Could not process rule: Operation not supported\nadd rule ip t f jump services\n^^^^\n/dev/stdin:7:22-39: Error: Could not process rule: File exists\n';
    const exec = fakeExec((_f, _a, stdin) => (stdin?.includes('bad') ? { code: 1, stdout: '', stderr } : ok()));
    const nft = createNftRunner({ exec });
    await nft.run('add table ip t\n');
    const err = (await nft.run('bad\n').catch((e: unknown) => e)) as NftTransactionFailure;
    expect(err).toBeInstanceOf(NftTransactionFailure);
    expect(err.code).toBe('KPROXY_ERR_NFT_TRANSACTION');
    expect(err.lines).toEqual([3, 7]);
    expect(err.message).toBe('nft -f refused the transaction (exit 1): Could not process rule: Operation not supported; Could not process rule: File exists');
    expect(exec.calls).toEqual(['nft -f -', 'nft -f -']);
    expect(nftErrorLines('-:12:1-2: Error: x')).toEqual([12]);
  });

  it('gives a transaction its timeout and 30 s more per MiB: nft -f of a big table takes minutes', async () => {
    const timeouts: (number | undefined)[] = [];
    const exec: ExecFn = async (_file, _args, opts) => {
      timeouts.push(opts?.timeoutMs);
      return ok();
    };
    const nft = createNftRunner({ exec, timeoutMs: 120_000 });
    await nft.run('add table ip t\n');
    await nft.run('#'.repeat(34 * 1024 * 1024));
    expect(timeouts).toEqual([120_001, 120_000 + 34 * NFT_MS_PER_MIB]);
    expect(NFT_MS_PER_MIB).toBe(30_000);
  });

  it('lists a table as JSON, and a missing one as null', async () => {
    const json = JSON.stringify({ nftables: [{ metainfo: { version: '1.0.6' } }, { table: { family: 'ip', name: 'kube-proxy', handle: 1 } }] });
    const exec = fakeExec((_f, args) => (args.includes('missing') ? { code: 1, stdout: '', stderr: 'Error: No such file or directory\nlist table ip missing\n' } : ok(json)));
    const nft = createNftRunner({ exec });
    expect(await nft.listTable('ip', 'missing')).toBeNull();
    const t = await nft.listTable('ip', 'kube-proxy');
    expect(t).toMatchObject({ family: 'ip', name: 'kube-proxy', chains: new Map(), sets: new Map() });
    expect(exec.calls).toEqual(['nft -j list table ip missing', 'nft -j list table ip kube-proxy']);
  });

  it('deletes a table without listing anything first, and says whether there was one', async () => {
    const exec = fakeExec((_f, args) =>
      args.includes('missing')
        ? { code: 1, stdout: '', stderr: 'Error: Could not process rule: No such file or directory\ndelete table ip missing\n' }
        : args.includes('locked')
          ? { code: 1, stdout: '', stderr: 'Error: Could not process rule: Operation not permitted\n' }
          : ok(''),
    );
    const nft = createNftRunner({ exec });
    expect(await nft.deleteTable('ip', 'kube-proxy')).toBe(true);
    expect(await nft.deleteTable('ip6', 'missing')).toBe(false);
    await expect(nft.deleteTable('ip', 'locked')).rejects.toThrow(/nft delete table ip locked failed \(exit 1\): Could not process rule: Operation not permitted/);
    expect(exec.calls).toEqual(['nft delete table ip kube-proxy', 'nft delete table ip6 missing', 'nft delete table ip locked']);
  });

  it('renders listed rules and elements in the text kproxy writes', () => {
    // As nft 1.0.6 prints them (captured from a namespace).
    const listing = {
      nftables: [
        { chain: { family: 'ip', table: 'kube-proxy', name: 'masquerading', handle: 3 } },
        { chain: { family: 'ip', table: 'kube-proxy', name: 'nat-output', handle: 6, type: 'nat', hook: 'output', prio: -100, policy: 'accept' } },
        {
          map: {
            family: 'ip',
            name: 'no-endpoint-services',
            table: 'kube-proxy',
            type: ['ipv4_addr', 'inet_proto', 'inet_service'],
            handle: 11,
            map: 'verdict',
            elem: [[{ elem: { val: { concat: ['1.2.3.4', 'tcp', 80] }, comment: 'ns2/svc2:p80' } }, { drop: null }]],
          },
        },
        { set: { family: 'ip', name: 'affinity-X', table: 'kube-proxy', type: 'ipv4_addr', handle: 20, size: 65535, flags: ['timeout'], timeout: 10800 } },
        {
          rule: {
            family: 'ip',
            table: 'kube-proxy',
            chain: 'masquerading',
            handle: 16,
            expr: [{ match: { op: '==', left: { '&': [{ meta: { key: 'mark' } }, 16384] }, right: 0 } }, { return: null }],
          },
        },
        { rule: { family: 'ip', table: 'kube-proxy', chain: 'masquerading', handle: 17, expr: [{ mangle: { key: { meta: { key: 'mark' } }, value: { '^': [{ meta: { key: 'mark' } }, 16384] } } }] } },
        { rule: { family: 'ip', table: 'kube-proxy', chain: 'masquerading', handle: 18, expr: [{ masquerade: { flags: 'fully-random' } }] } },
        {
          rule: {
            family: 'ip',
            table: 'kube-proxy',
            chain: 'nat-output',
            handle: 19,
            comment: 'x y',
            expr: [{ match: { op: 'in', left: { ct: { key: 'state' } }, right: 'new' } }, { jump: { target: 'services' } }],
          },
        },
        {
          rule: {
            family: 'ip',
            table: 'kube-proxy',
            chain: 'nat-output',
            handle: 20,
            expr: [{ match: { op: '!=', left: { meta: { key: 'iifname' } }, right: 'veth*' } }, { counter: { packets: 3, bytes: 180 } }, { log: { prefix: 'x' } }],
          },
        },
      ],
    };
    const t = parseNftTableJson(JSON.stringify(listing), 'ip', 'kube-proxy');
    expect(t.chains.get('masquerading')!.rules).toEqual(['mark and 0x00004000 == 0 return', 'mark set mark xor 0x00004000', 'masquerade fully-random']);
    expect(t.chains.get('nat-output')!.base).toEqual({ type: 'nat', hook: 'output', priority: -100 });
    // A counter reads as nft prints it (the dashboard shows its figures); an expression kproxy never writes reads as
    // its JSON. Either way the rule can never equal a wanted one (kproxy writes no counters).
    expect(t.chains.get('nat-output')!.rules).toEqual(['ct state new jump services comment "x y"', 'iifname != "veth*" counter packets 3 bytes 180 <{"log":{"prefix":"x"}}>']);
    expect([...t.sets.get('no-endpoint-services')!.elements.values()]).toEqual([{ key: '1.2.3.4 . tcp . 80', value: 'drop', comment: 'ns2/svc2:p80' }]);
    expect(t.sets.get('affinity-X')).toMatchObject({ map: false, flags: ['timeout'], timeoutSeconds: 10800 });
  });
});

describe('checkNftSupport', () => {
  const version = (v: string) => ok(`nftables v${v} (Lester Gooch #5)\n`);
  it('passes on nft 1.0.6 and Linux 6.18 with nf_tables', async () => {
    const exec = fakeExec((_f, args) => (args[0] === '--version' ? version('1.0.6') : ok()));
    expect(await checkNftSupport({ exec, kernelRelease: '6.18.44-fc', env: {} })).toEqual({ nftVersion: '1.0.6', kernel: '6.18.44-fc' });
    expect(exec.calls).toEqual(['nft --version', 'nft --check -f -']);
  });

  it('names what is missing', async () => {
    await expect(checkNftSupport({ exec: fakeExec(() => new CommandNotFoundError('nft is not installed or not on PATH')), env: {} })).rejects.toThrow(
      /needs the nft command .*apt-get install nftables/,
    );
    await expect(checkNftSupport({ exec: fakeExec(() => version('0.9.8')), kernelRelease: '6.1.0', env: {} })).rejects.toThrow('nftables mode needs nft 1.0.1 or later; this host has nft 0.9.8');
    const newNft = fakeExec((_f, args) => (args[0] === '--version' ? version('1.0.6') : { code: 1, stdout: '', stderr: 'Error: Could not process rule: Operation not supported\n' }));
    await expect(checkNftSupport({ exec: newNft, kernelRelease: '5.10.0-28-amd64', env: {} })).rejects.toThrow(
      /needs Linux 5\.13 or later; this kernel is 5\.10\.0-28-amd64 \(set KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK=1/,
    );
    await expect(checkNftSupport({ exec: newNft, kernelRelease: '5.10.0-28-amd64', env: { KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK: '1' } })).rejects.toThrow(
      /refused an nftables table \(nf_tables missing\? try "modprobe nf_tables"\): Could not process rule: Operation not supported/,
    );
    await expect(checkNftSupport({ exec: newNft, kernelRelease: '6.18.0', env: {} })).rejects.toMatchObject({ code: 'KPROXY_ERR_NFT_UNSUPPORTED' });
  });
});
