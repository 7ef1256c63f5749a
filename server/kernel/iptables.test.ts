import { describe, expect, it } from 'vitest';
import { CommandNotFoundError } from '../errors.ts';
import { createLogger } from '../log.ts';
import type { ExecFn, ExecResult } from './exec.ts';
import { cleanStderr, createIptablesRunner, iptablesBinaries, IptablesRestoreError, parseIptablesVersion, RESTORE_MS_PER_MIB, restoreErrorLines } from './iptables.ts';
import { detectIptablesFlavor, resolveIptablesFlavor } from './iptables-flavor.ts';

// stderr texts captured from iptables 1.8.9 in a network namespace.
const LEGACY_PARSE = `Ignoring deprecated --wait-interval option.
iptables-restore v1.8.9 (legacy): Couldn't load target \`KUBE-NOPE':No such file or directory

Error occurred at line: 7
Try \`iptables-restore -h' or 'iptables-restore --help' for more information.`;
const LEGACY_COMMIT = 'Ignoring deprecated --wait-interval option.\niptables-restore: line 4 failed\n';
const NFT_COMMIT = 'iptables-nft-restore v1.8.9 (nf_tables): \nline 4: CHAIN_DEL failed (Device or resource busy): chain KUBE-A\n';

describe('restore error lines', () => {
  it('finds the blamed line in every format iptables-restore uses', () => {
    expect(restoreErrorLines(LEGACY_PARSE)).toEqual([7]);
    expect(restoreErrorLines(LEGACY_COMMIT)).toEqual([4]);
    expect(restoreErrorLines(NFT_COMMIT)).toEqual([4]);
    expect(restoreErrorLines('iptables-restore: unable to initialize table')).toEqual([]);
  });
  it('drops the noise lines from the message', () => {
    expect(cleanStderr(LEGACY_PARSE)).toBe("iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-NOPE':No such file or directory; Error occurred at line: 7");
  });
});

describe('version and binaries', () => {
  it('parses versions and flavours', () => {
    expect(parseIptablesVersion('iptables v1.8.9 (nf_tables)\n')).toEqual({ version: [1, 8, 9], flavor: 'nft' });
    expect(parseIptablesVersion('iptables v1.6.1')).toEqual({ version: [1, 6, 1], flavor: null });
  });
  it('names the binaries of a family and flavour', () => {
    expect(iptablesBinaries('IPv6', 'legacy')).toEqual({ iptables: 'ip6tables-legacy', save: 'ip6tables-legacy-save', restore: 'ip6tables-legacy-restore' });
    expect(iptablesBinaries('IPv4', 'system').restore).toBe('iptables-restore');
  });
});

interface Call {
  file: string;
  args: readonly string[];
  stdin?: string;
}

function scriptedExec(answer: (c: Call) => ExecResult | 'missing'): { exec: ExecFn; calls: Call[] } {
  const calls: Call[] = [];
  const exec: ExecFn = async (file, args, opts) => {
    const c = { file, args, stdin: opts?.stdin as string | undefined };
    calls.push(c);
    const a = answer(c);
    if (a === 'missing') throw new CommandNotFoundError(`${file} is not installed or not on PATH`);
    return a;
  };
  return { exec, calls };
}

const ok = (stdout = ''): ExecResult => ({ code: 0, stdout, stderr: '' });

describe('real runner (spawned commands)', () => {
  it('passes kube-proxy flags to iptables-restore and feeds the input on stdin', async () => {
    const { exec, calls } = scriptedExec((c) => (c.args[0] === '--version' ? ok('iptables v1.8.9 (nf_tables)') : ok()));
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'nft', exec });
    expect(r.hasRandomFully).toBe(true);
    await r.restore('*nat\nCOMMIT\n');
    expect(calls[1]).toEqual({ file: 'iptables-nft-restore', args: ['-w', '5', '-W', '100000', '--noflush', '--counters'], stdin: '*nat\nCOMMIT\n' });
  });

  it('gives a restore its timeout and 5 s more per MiB of input, so a big cluster on a slow node is not cut off', async () => {
    const timeouts: (number | undefined)[] = [];
    const exec: ExecFn = async (_file, args, opts) => {
      timeouts.push(opts?.timeoutMs);
      return args[0] === '--version' ? ok('iptables v1.8.9 (nf_tables)') : ok();
    };
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'nft', exec, restoreTimeoutMs: 120_000 });
    await r.restore('*nat\nCOMMIT\n');
    await r.restore('#'.repeat(98 * 1024 * 1024));
    expect(timeouts.slice(1)).toEqual([120_001, 120_000 + 98 * RESTORE_MS_PER_MIB]);
    expect(RESTORE_MS_PER_MIB).toBe(5_000);
  });

  it("runs the dashboard's iptables-save in the background (lower CPU priority), and the proxy's own at kproxy's priority", async () => {
    const seen: { args: readonly string[]; background: boolean | undefined }[] = [];
    const exec: ExecFn = async (_file, args, opts) => {
      seen.push({ args, background: opts?.background });
      return args[0] === '--version' ? ok('iptables v1.8.9 (legacy)') : ok('*nat\nCOMMIT\n');
    };
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec });
    await r.save({ counters: true, background: true });
    await r.save();
    expect(seen.slice(1)).toEqual([
      { args: ['-c'], background: true },
      { args: [], background: undefined },
    ]);
  });

  it('orders command arguments like kube-proxy: wait flags, operation, chain, table, rule words', async () => {
    const { exec, calls } = scriptedExec((c) => (c.args[0] === '--version' ? ok('iptables v1.8.9 (legacy)') : c.args.includes('-C') ? { code: 1, stdout: '', stderr: '' } : ok()));
    const r = await createIptablesRunner({ family: 'IPv6', flavor: 'legacy', exec });
    await r.insertRule('filter', 'INPUT', ['-m', 'comment', '--comment', 'a comment with spaces', '-j', 'KUBE-X']);
    expect(calls[1]).toEqual({
      file: 'ip6tables-legacy',
      args: ['-w', '5', '-W', '100000', '-I', 'INPUT', '-t', 'filter', '-m', 'comment', '--comment', 'a comment with spaces', '-j', 'KUBE-X'],
      stdin: undefined,
    });
    expect(await r.deleteRule('filter', 'INPUT', ['-j', 'KUBE-X'])).toBe(false);
  });

  it('turns a failed restore into IptablesRestoreError with the blamed lines', async () => {
    const { exec } = scriptedExec((c) => (c.args[0] === '--version' ? ok('iptables v1.8.9 (legacy)') : { code: 2, stdout: '', stderr: LEGACY_PARSE }));
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec });
    const err = await r.restore('x').catch((e) => e);
    expect(err).toBeInstanceOf(IptablesRestoreError);
    expect(err.lines).toEqual([7]);
    expect(err.code).toBe('KPROXY_ERR_RESTORE_FAILED');
    expect(err.message).toMatch(/iptables-legacy-restore failed at line 7 \(exit 2\): .*KUBE-NOPE/);
  });

  it('reports chain existence from the exit code and fails on other errors', async () => {
    const { exec } = scriptedExec((c) => {
      if (c.args[0] === '--version') return ok('iptables v1.8.9 (nf_tables)');
      if (c.args.includes('KUBE-GONE')) return { code: 1, stdout: '', stderr: 'iptables: No chain/target/match by that name.' };
      if (c.args.includes('KUBE-LOCKED')) return { code: 4, stdout: '', stderr: 'Another app is currently holding the xtables lock.' };
      return ok('-N KUBE-HERE');
    });
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'nft', exec });
    expect(await r.chainExists('mangle', 'KUBE-HERE')).toBe(true);
    expect(await r.chainExists('mangle', 'KUBE-GONE')).toBe(false);
    await expect(r.chainExists('mangle', 'KUBE-LOCKED')).rejects.toThrow(/exit 4.*xtables lock/);
  });
});

describe('flavour detection (iptables-wrappers logic)', () => {
  const exists = () => true;
  function host(outputs: Record<string, string | 'missing'>) {
    return scriptedExec((c) => {
      const key = [c.file, ...c.args].join(' ');
      const out = outputs[key] ?? outputs[c.file];
      if (out === undefined) return ok('');
      return out === 'missing' ? 'missing' : ok(out);
    }).exec;
  }

  it('prefers kubelet chains in the nft mangle table', async () => {
    const exec = host({ 'iptables-nft-save -t mangle': '*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n', 'iptables-legacy-save': '*nat\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n' });
    expect((await detectIptablesFlavor({ exec, exists })).flavor).toBe('nft');
  });

  it('then kubelet chains among the legacy rules', async () => {
    const exec = host({ 'iptables-legacy-save': '*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n' });
    expect(await detectIptablesFlavor({ exec, exists })).toEqual({ flavor: 'legacy', reason: 'kubelet chains found in the legacy IPv4 tables' });
  });

  it('then the flavour with more KUBE- rules (taking over from kube-proxy)', async () => {
    const legacy = '*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n';
    const nft = '*filter\n-A INPUT -j ACCEPT\n-A INPUT -j ACCEPT\n-A INPUT -j ACCEPT\nCOMMIT\n';
    const exec = host({ 'iptables-legacy-save': legacy, 'iptables-nft-save': nft });
    expect((await detectIptablesFlavor({ exec, exists })).flavor).toBe('legacy');
  });

  it('defaults to nft on an empty node, and skips legacy when its tables are not loaded', async () => {
    const { exec, calls } = scriptedExec(() => ok(''));
    expect(await detectIptablesFlavor({ exec, exists: () => false })).toEqual({ flavor: 'nft', reason: 'no rules in either flavour: nft by default' });
    expect(calls.some((c) => c.file === 'iptables-legacy-save')).toBe(false);
  });

  it('falls back to the plain binary when no suffixed one exists', async () => {
    const exec = host({
      'iptables-nft-save': 'missing',
      'ip6tables-nft-save': 'missing',
      'iptables-legacy-save': 'missing',
      'ip6tables-legacy-save': 'missing',
      'iptables-legacy': 'missing',
      'ip6tables-legacy': 'missing',
      iptables: 'iptables v1.8.7 (legacy)',
    });
    expect((await detectIptablesFlavor({ exec, exists })).flavor).toBe('system');
  });

  it('honours a forced flavour only when its binary exists', async () => {
    expect((await resolveIptablesFlavor('legacy', { exec: host({}) })).flavor).toBe('legacy');
    await expect(resolveIptablesFlavor('nft', { exec: host({ 'iptables-nft': 'missing' }) })).rejects.toThrow(/--iptables-flavor=nft but iptables-nft is not installed/);
  });
});

describe('the xtables lock (legacy iptables-restore)', () => {
  // What iptables-legacy-restore 1.8.9 prints when it gave up waiting (exit 4).
  const GAVE_UP =
    "Ignoring deprecated --wait-interval option.\nCan't lock /run/xtables.lock: Resource temporarily unavailable\nAnother app is currently holding the xtables lock. Stopped waiting after 5s.\n";
  const HOLDER = { pid: 77, command: 'firewalld' };

  /** lockedExec: a restore that runs as PID 4242 for ms, then ends with result; every process found waiting on the lock is 4242. */
  function lockedExec(ms: number, result: ExecResult): { exec: ExecFn; spawned: boolean[] } {
    const spawned: boolean[] = [];
    const exec: ExecFn = async (file, args, opts) => {
      if (args.includes('--version')) return ok('iptables v1.8.9 (legacy)');
      spawned.push(opts?.onSpawn !== undefined);
      opts?.onSpawn?.(4242);
      await new Promise((r) => setTimeout(r, ms));
      return result;
    };
    return { exec, spawned };
  }
  const lockWatch = { waiting: async (pid: number) => pid === 4242, holder: async () => HOLDER, firstCheckMs: 5, everyMs: 5 };

  it('says in the log while a restore waits for the lock, and counts the wait once it got it', async () => {
    const lines: string[] = [];
    const { exec } = lockedExec(80, ok());
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec, lockWatch, logger: createLogger({ write: (l) => lines.push(l) }) });
    await r.restore('*nat\nCOMMIT\n');
    expect(lines[0]).toMatch(/^W .*iptables-legacy-restore is waiting for the xtables lock, as kube-proxy does \(up to 5 s\) lock=\/run\/xtables.lock holder="held by pid 77 \(firewalld\)"$/);
    expect(lines[1]).toMatch(/^I .*iptables-legacy-restore got the xtables lock lock=\/run\/xtables.lock ms=\d+ exit=0$/);
    expect(r.lockWaits!()).toEqual({ acquired: 1, timedOut: 0 });
  });

  it('fails a restore that gave up waiting with an error naming the lock and its holder, and counts it', async () => {
    const { exec } = lockedExec(20, { code: 4, stdout: '', stderr: GAVE_UP });
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec, lockWatch });
    const err = (await r.restore('*nat\nCOMMIT\n').catch((e: unknown) => e)) as IptablesRestoreError;
    expect(err).toBeInstanceOf(IptablesRestoreError);
    expect(err.message).toBe('iptables-legacy-restore could not take the xtables lock (/run/xtables.lock) within 5 s, held by pid 77 (firewalld): nothing was restored, and the sync is retried');
    expect(err.lines).toEqual([]);
    expect(r.lockWaits!()).toEqual({ acquired: 0, timedOut: 1 });
  });

  it('does not watch iptables-nft, which takes no xtables lock, nor count a restore that never waited', async () => {
    const nft = lockedExec(1, ok());
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'nft', exec: nft.exec, lockWatch });
    await r.restore('*nat\nCOMMIT\n');
    expect(nft.spawned).toEqual([false]);
    const quick = lockedExec(1, ok());
    const legacy = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec: quick.exec, lockWatch: { ...lockWatch, firstCheckMs: 200 } });
    await legacy.restore('*nat\nCOMMIT\n');
    expect(quick.spawned).toEqual([true]);
    expect(legacy.lockWaits!()).toEqual({ acquired: 0, timedOut: 0 });
  });

  it('names the lock when a one-rule command gave up waiting', async () => {
    const { exec } = scriptedExec((c) => (c.args.includes('--version') ? ok('iptables v1.8.9 (legacy)') : { code: 4, stdout: '', stderr: GAVE_UP }));
    const r = await createIptablesRunner({ family: 'IPv4', flavor: 'legacy', exec });
    await expect(r.chainExists('nat', 'KUBE-PROXY-CANARY')).rejects.toThrow(
      'iptables-legacy -S KUBE-PROXY-CANARY -t nat failed (exit 4): it could not take the xtables lock (/run/xtables.lock) within 5 s, another program held it',
    );
  });
});
