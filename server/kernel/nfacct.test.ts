import { describe, expect, it } from 'vitest';
import { CommandTimeoutError, NfacctError } from '../errors.ts';
import type { ExecFn } from './exec.ts';
import { createNfacctRunner, parseNfacctList } from './nfacct.ts';

const LISTED =
  '{ pkts = 00000000000000000017, bytes = 00000000000000001020 } = ct_state_invalid_dropped_pkts;\n' + '{ pkts = 00000000000000000000, bytes = 00000000000000000000 } = localhost_nps_accepted_pkts;\n';

describe('parseNfacctList', () => {
  it('reads the objects and their packet and byte counts as nfacct 1.0 prints them', () => {
    expect(parseNfacctList(LISTED)).toEqual([
      { name: 'ct_state_invalid_dropped_pkts', packets: 17, bytes: 1020 },
      { name: 'localhost_nps_accepted_pkts', packets: 0, bytes: 0 },
    ]);
    expect(parseNfacctList('')).toEqual([]);
  });

  it('refuses a line it cannot read, naming it', () => {
    expect(() => parseNfacctList('pkts 3 = x\n')).toThrow(NfacctError);
    expect(() => parseNfacctList('pkts 3 = x\n')).toThrow(/pkts 3 = x/);
  });
});

describe('createNfacctRunner', () => {
  function scripted(answers: Record<string, { code: number; stdout?: string; stderr?: string } | Error>) {
    const calls: string[] = [];
    const timeouts: (number | undefined)[] = [];
    const exec: ExecFn = async (file, args, opts) => {
      calls.push([file, ...args].join(' '));
      timeouts.push(opts?.timeoutMs);
      const a = answers[args.join(' ')];
      if (a instanceof Error) throw a;
      return { code: a.code, stdout: a.stdout ?? '', stderr: a.stderr ?? '' };
    };
    return { exec, calls, timeouts };
  }

  it('creates a missing object and leaves an existing one, every call bounded in time', async () => {
    const { exec, calls, timeouts } = scripted({ list: { code: 0, stdout: LISTED.split('\n')[0] + '\n' }, 'add localhost_nps_accepted_pkts': { code: 0 } });
    const runner = createNfacctRunner({ exec, timeoutMs: 500 });
    await runner.ensure('ct_state_invalid_dropped_pkts');
    await runner.ensure('localhost_nps_accepted_pkts');
    expect(calls).toEqual(['nfacct list', 'nfacct list', 'nfacct add localhost_nps_accepted_pkts']);
    expect(timeouts.every((t) => t === 500)).toBe(true);
  });

  it('says why when the kernel refuses, and refuses a name the kernel cannot hold without running anything', async () => {
    const { exec, calls } = scripted({ list: { code: 1, stderr: 'nfacct v1.0.2: error: Protocol not supported\n' } });
    const runner = createNfacctRunner({ exec });
    await expect(runner.ensure('ct_state_invalid_dropped_pkts')).rejects.toThrow(/nfacct list failed \(exit 1\): nfacct v1.0.2: error: Protocol not supported/);
    await expect(runner.ensure('a name; with spaces')).rejects.toThrow(/invalid nfacct object name/);
    expect(calls).toEqual(['nfacct list']);
  });

  it('passes a timed-out listing on as the error it is', async () => {
    const { exec } = scripted({ list: new CommandTimeoutError('nfacct list did not finish within 2000 ms') });
    await expect(createNfacctRunner({ exec }).list()).rejects.toBeInstanceOf(CommandTimeoutError);
  });
});
