import { describe, expect, it } from 'vitest';
import { createLogger, silentLogger } from '../log.ts';
import { NLMSG_ERROR, parseMessages } from './nfnl.ts';
import { NfnlPipeError, NfnlPipeGoneError, type NfnlPipe } from './nfnl-pipe.ts';
import { nftErrorLines, NftTransactionFailure, type NftRunner } from './nft.ts';
import { encodeTransaction, msgType, NFT_MSG_GETTABLE } from './nft-netlink-encode.ts';
import { freshLoadPhases } from './nft-netlink-phases.ts';
import { createNetlinkNftRunner, RESTART_BACKOFF_MAX_MS, restartDelayMs } from './nft-netlink.ts';
import { formatTransaction, parseTransaction } from './nft-script.ts';
import type { NftOp } from './nft-types.ts';

/** errorReply: the kernel's NLMSG_ERROR for the request with sequence number seq (NETLINK_CAP_ACK: its header only). */
function errorReply(seq: number, errno: number, type = msgType(6)): Buffer {
  const b = Buffer.alloc(16 + 4 + 16);
  b.writeUInt32LE(b.length, 0);
  b.writeUInt16LE(NLMSG_ERROR, 4);
  b.writeUInt16LE(0x100, 6);
  b.writeUInt32LE(seq, 8);
  b.writeInt32LE(-errno, 16);
  b.writeUInt32LE(20, 20);
  b.writeUInt16LE(type, 24);
  b.writeUInt32LE(seq, 28);
  return b;
}

/** FakePipe answers batches with refusals chosen by the test, and GETTABLE with ENOENT unless told the table exists. */
class FakePipe implements NfnlPipe {
  readonly pid: number;
  alive = true;
  foreignDatagrams = 0;
  readonly batches: Buffer[] = [];
  refuse: (seqs: number[]) => Buffer[] = () => [];
  fail: Error | null = null;
  tableExists = false;
  interfaces = new Map<string, number>();
  closed = false;
  constructor(pid = 1) {
    this.pid = pid;
  }
  dieInBatch = false;
  /** die makes the helper exit in its next batch, as a SIGKILL mid-run would: that and every later request fail with NfnlPipeGoneError. */
  die(): void {
    this.dieInBatch = true;
  }
  async batch(bytes: Uint8Array): Promise<Buffer[]> {
    if (this.dieInBatch) {
      this.alive = false;
      this.fail = new NfnlPipeGoneError('nfnl-pipe exited (SIGKILL)');
    }
    if (this.fail) throw this.fail;
    const b = Buffer.from(bytes);
    this.batches.push(b);
    return this.refuse(parseMessages(b).map((m) => m.seq));
  }
  async requests(bytes: Uint8Array): Promise<Buffer[]> {
    const [m] = parseMessages(Buffer.from(bytes));
    expect(m.type).toBe(msgType(NFT_MSG_GETTABLE));
    return this.tableExists ? [Buffer.from(bytes)] : [errorReply(m.seq, 2, m.type)];
  }
  async ifindex(name: string): Promise<number> {
    return this.interfaces.get(name) ?? -19;
  }
  async xtables(): Promise<Buffer[] | null> {
    throw new Error('not used by the netlink runner');
  }
  async ifname(index: number): Promise<string | null> {
    return [...this.interfaces].find(([, i]) => i === index)?.[0] ?? null;
  }
  close(): void {
    this.closed = true;
    this.alive = false;
  }
}

class RecordingRunner implements NftRunner {
  readonly runs: string[] = [];
  async run(text: string): Promise<void> {
    this.runs.push(text);
  }
  async listTable(): Promise<null> {
    return null;
  }
  async deleteTable(): Promise<boolean> {
    return false;
  }
}

const TEXT = ['add table ip kube-proxy', 'add chain ip kube-proxy a', 'add chain ip kube-proxy b', 'add rule ip kube-proxy a jump b', 'add rule ip kube-proxy b drop'].join('\n') + '\n';

function setup(opts: { phasedFrom?: number } = {}) {
  const pipe = new FakePipe();
  const nft = new RecordingRunner();
  const runner = createNetlinkNftRunner({ pipe, fallback: nft, logger: silentLogger, ...opts });
  return { pipe, nft, runner };
}

describe('the netlink runner', () => {
  it('writes a transaction as one nf_tables batch, nothing through nft', async () => {
    const { pipe, nft, runner } = setup();
    await runner.run(TEXT);
    expect(pipe.batches).toHaveLength(1);
    expect(pipe.batches[0]).toEqual(encodeTransaction(parseTransaction(TEXT), { ifindex: () => 0 }).bytes);
    expect(nft.runs).toEqual([]);
    expect(runner.lastRun()?.writer).toBe('netlink');
  });

  it('takes the commands from the proxier instead of parsing the text back', async () => {
    const { pipe, runner } = setup();
    const ops: NftOp[] = [
      { op: 'add', kind: 'chain', name: 'a' },
      { op: 'add', kind: 'rule', chain: 'a', rule: 'drop' },
    ];
    const text = formatTransaction('ip', 'kube-proxy', ops);
    await runner.run(text, { family: 'ip', table: 'kube-proxy', ops });
    expect(pipe.batches[0]).toEqual(encodeTransaction(parseTransaction(text), { ifindex: () => 0 }).bytes);
  });

  it("names the lines the kernel refused, in nft's words", async () => {
    const { pipe, runner } = setup();
    // Sequence numbers: 0 the batch's begin, then one per line (5 lines, none with anonymous sets).
    pipe.refuse = () => [errorReply(4, 2)];
    const err = await runner.run(TEXT).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NftTransactionFailure);
    const f = err as NftTransactionFailure;
    expect(f.lines).toEqual([4]);
    expect(nftErrorLines(f.stderr)).toEqual([4]);
    expect(f.stderr).toContain('/dev/stdin:4:1-');
    expect(f.stderr).toContain('Error: Could not process rule: No such file or directory');
    expect(f.stderr).toContain('add rule ip kube-proxy a jump b');
  });

  it('hands nft a transaction holding anything the encoder does not write, text unchanged', async () => {
    const { pipe, nft, runner } = setup();
    const text = TEXT + 'add rule ip kube-proxy a counter\n';
    await runner.run(text);
    expect(pipe.batches).toEqual([]);
    expect(nft.runs).toEqual([text]);
    expect(runner.lastRun()).toMatchObject({ writer: 'nft', why: expect.stringContaining('counter') });
  });

  it('hands nft a rule naming an interface the namespace does not have (nft names the line)', async () => {
    const { pipe, nft, runner } = setup();
    pipe.interfaces.set('cbr0', 7);
    await runner.run('add rule ip kube-proxy a iif "cbr0" accept\n');
    expect(pipe.batches).toHaveLength(1);
    await runner.run('add rule ip kube-proxy a iif "cbr9" accept\n');
    expect(nft.runs).toEqual(['add rule ip kube-proxy a iif "cbr9" accept\n']);
  });

  it('fails the transaction when the helper dies, and writes with nft from then on when it cannot be started again', async () => {
    const { pipe, nft, runner } = setup();
    pipe.die();
    await expect(runner.run(TEXT)).rejects.toBeInstanceOf(NftTransactionFailure);
    expect(pipe.closed).toBe(true);
    expect(runner.writer).toBe('nft');
    await runner.run(TEXT);
    expect(nft.runs).toEqual([TEXT]);
    expect(runner.helperStats()).toMatchObject({ failures: 1, restarts: 0 });
  });

  it('loads a big table from nothing in phases, and in one batch when the table exists', async () => {
    const text = [
      'add table ip kube-proxy',
      'add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }',
      'add chain ip kube-proxy services',
      'add chain ip kube-proxy service-a',
      'add chain ip kube-proxy endpoint-a',
      'add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }',
      'add rule ip kube-proxy nat-output jump services',
      'add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips',
      'add rule ip kube-proxy service-a ip daddr 10.96.0.1 jump endpoint-a',
      'add rule ip kube-proxy service-a numgen random mod 1 vmap { 0 : goto endpoint-a }',
      'add rule ip kube-proxy endpoint-a meta l4proto tcp dnat to 10.0.0.1:80',
      'add element ip kube-proxy service-ips { 10.96.0.1 . tcp . 80 : goto service-a }',
    ].join('\n');
    const fresh = setup({ phasedFrom: 1 });
    await fresh.runner.run(text);
    // Definitions; the chain with the anonymous map; the other chains; the base chain's rules and the elements.
    expect(fresh.pipe.batches).toHaveLength(4);
    expect(fresh.runner.lastRun()?.phaseMs).toHaveLength(4);
    const there = setup({ phasedFrom: 1 });
    there.pipe.tableExists = true;
    await there.runner.run(text);
    expect(there.pipe.batches).toHaveLength(1);
  });

  it('stops at the first refused phase and names its lines', async () => {
    const { pipe, runner } = setup({ phasedFrom: 1 });
    pipe.refuse = (seqs) => (pipe.batches.length === 2 ? [errorReply(seqs[1], 22)] : []);
    const text = 'add table ip kube-proxy\nadd chain ip kube-proxy a\nadd chain ip kube-proxy b\nadd rule ip kube-proxy a numgen random mod 1 vmap { 0 : goto b }\n';
    const err = (await runner.run(text).catch((e: unknown) => e)) as NftTransactionFailure;
    expect(err.lines).toEqual([4]);
    expect(pipe.batches).toHaveLength(2);
  });
});

describe('freshLoadPhases', () => {
  const cmds = (lines: string[]) => parseTransaction(lines.join('\n'));

  it('keeps each chain’s rules together and in order, base chains last with the elements', () => {
    const phases = freshLoadPhases(
      cmds([
        'add table ip t',
        'add chain ip t in { type filter hook input priority 0 ; }',
        'add chain ip t s',
        'add chain ip t e',
        'add rule ip t s ip daddr 10.0.0.1 jump e',
        'add rule ip t in jump s',
        'add rule ip t s numgen random mod 1 vmap { 0 : goto e }',
        'add rule ip t e drop',
        'add set ip t ips { type ipv4_addr ; }',
        'add element ip t ips { 10.0.0.1 }',
      ]),
      1,
    )!;
    expect(phases.phases.map((p) => p.map((c) => c.line))).toEqual([[1, 2, 3, 4, 9], [5, 7], [8], [6, 10]]);
    expect(phases.tables).toEqual([{ family: 'ip', name: 't' }]);
  });

  it('leaves anything but a table made from nothing in one transaction', () => {
    expect(freshLoadPhases(cmds(['add table ip t', 'flush chain ip t c']), 1)).toBeNull();
    expect(freshLoadPhases(cmds(['add chain ip t c']), 1)).toBeNull();
    expect(freshLoadPhases(cmds(['add table ip t', 'add chain ip u c']), 1)).toBeNull();
    expect(freshLoadPhases(cmds(['add table ip t', 'add chain ip t c']))).toBeNull();
  });
});

describe('the netlink helper lost mid-run', () => {
  /** restarting: a runner whose helper is started again by the test's start(), on a clock the test moves. */
  function restarting() {
    const clock = { ms: 0 };
    const pipes = [new FakePipe(100)];
    const starts: (() => FakePipe | Error)[] = [];
    const nft = new RecordingRunner();
    const lines: string[] = [];
    const logger = createLogger({ write: (l) => lines.push(l), level: 'debug' });
    const runner = createNetlinkNftRunner({
      pipe: pipes[0],
      fallback: nft,
      logger,
      now: () => clock.ms,
      restart: async () => {
        const next = starts.shift()?.() ?? new FakePipe(100 + pipes.length);
        if (next instanceof Error) throw next;
        pipes.push(next);
        return next;
      },
    });
    return { clock, pipes, starts, nft, runner, lines };
  }

  it('fails the transaction in flight, and writes the next one through a helper started again', async () => {
    const { pipes, nft, runner, lines } = restarting();
    pipes[0].die();
    const err = (await runner.run(TEXT).catch((e: unknown) => e)) as NftTransactionFailure;
    expect(err).toBeInstanceOf(NftTransactionFailure);
    expect(err.message).toContain('nfnl-pipe exited (SIGKILL)');
    expect(pipes[0].closed).toBe(true);
    await runner.run(TEXT);
    expect(pipes).toHaveLength(2);
    expect(pipes[1].batches).toHaveLength(1);
    expect(nft.runs).toEqual([]);
    expect(runner.writer).toBe('netlink');
    expect(runner.helperStats()).toEqual({ failures: 1, restarts: 1, restartFailures: 0, foreignDatagrams: 0 });
    expect(lines.some((l) => /^E .*the netlink helper failed; it is started again for the next transaction .*pid=100 /.test(l))).toBe(true);
    expect(lines.some((l) => /^I .*started the netlink helper again pid=101 /.test(l))).toBe(true);
  });

  it('starts a helper that died between transactions before writing, so no sync fails for it', async () => {
    const { pipes, nft, runner } = restarting();
    pipes[0].alive = false;
    await runner.run(TEXT);
    expect(pipes[1].batches).toHaveLength(1);
    expect(nft.runs).toEqual([]);
    expect(runner.helperStats()).toMatchObject({ failures: 1, restarts: 1 });
  });

  it('backs off while starts fail or new helpers die at once, writing through nft meanwhile, and starts again after a success at once', async () => {
    const { clock, pipes, starts, nft, runner } = restarting();
    // Lost (1 in a row): started again at once, but that start fails (2): the next try waits 1 s.
    pipes[0].die();
    starts.push(() => new Error('nfnl-pipe exited (code 1): cannot open a netfilter netlink socket'));
    await expect(runner.run(TEXT)).rejects.toBeInstanceOf(NftTransactionFailure);
    await runner.run(TEXT);
    expect(nft.runs).toHaveLength(1);
    clock.ms = 999;
    await runner.run(TEXT);
    expect(nft.runs).toHaveLength(2);
    // At 1 s: started (pipe 1), and it dies in its first batch (3 in a row): the next try waits 2 s.
    clock.ms = 1000;
    starts.push(() => {
      const p = new FakePipe(101);
      p.die();
      return p;
    });
    await expect(runner.run(TEXT)).rejects.toBeInstanceOf(NftTransactionFailure);
    clock.ms = 2999;
    await runner.run(TEXT);
    expect(nft.runs).toHaveLength(3);
    expect(pipes).toHaveLength(2);
    // At 3 s: a helper that works; its batch ends the row, so its own death is retried at once.
    clock.ms = 3000;
    await runner.run(TEXT);
    expect(pipes).toHaveLength(3);
    expect(pipes[2].batches).toHaveLength(1);
    pipes[2].die();
    await expect(runner.run(TEXT)).rejects.toBeInstanceOf(NftTransactionFailure);
    await runner.run(TEXT);
    expect(pipes).toHaveLength(4);
    expect(pipes[3].batches).toHaveLength(1);
    expect(nft.runs).toHaveLength(3);
    expect(runner.helperStats()).toEqual({ failures: 3, restarts: 3, restartFailures: 1, foreignDatagrams: 0 });
  });

  it('keeps a helper whose send failed with an errno (it still runs): the transaction fails, the next goes through it', async () => {
    const { pipes, nft, runner } = restarting();
    pipes[0].fail = new NfnlPipeError('sending the batch failed: ENOBUFS');
    await expect(runner.run(TEXT)).rejects.toThrow(/ENOBUFS/);
    pipes[0].fail = null;
    await runner.run(TEXT);
    expect(pipes).toHaveLength(1);
    expect(pipes[0].batches).toHaveLength(1);
    expect(nft.runs).toEqual([]);
    expect(runner.helperStats().failures).toBe(0);
  });

  it('lists through nft -j when the helper is lost during the dumps, and over netlink again with the next helper', async () => {
    const { pipes, starts, runner } = restarting();
    pipes[0].requests = async () => {
      pipes[0].alive = false;
      throw new NfnlPipeGoneError('nfnl-pipe exited (SIGKILL)');
    };
    // The next helper answers the chain dump: no such table.
    const dumps: number[] = [];
    starts.push(() => {
      const p = new FakePipe(101);
      p.requests = async (bytes) => {
        const [m] = parseMessages(Buffer.from(bytes));
        dumps.push(m.type);
        return [errorReply(m.seq, 2, m.type)];
      };
      return p;
    });
    expect(await runner.listTableForSync!('ip', 'kube-proxy')).toBeNull();
    expect(runner.lastList()?.writer).toBe('nft');
    expect(await runner.listTableForSync!('ip', 'kube-proxy')).toBeNull();
    expect(runner.lastList()?.writer).toBe('netlink');
    expect(pipes).toHaveLength(2);
    expect(dumps).toHaveLength(1);
  });

  it('counts the foreign datagrams of every helper it ran', async () => {
    const { pipes, runner } = restarting();
    pipes[0].foreignDatagrams = 3;
    pipes[0].die();
    await runner.run(TEXT).catch(() => {});
    await runner.run(TEXT);
    pipes[1].foreignDatagrams = 2;
    expect(runner.helperStats().foreignDatagrams).toBe(5);
  });

  it('waits no longer than a minute between two starts', () => {
    expect([1, 2, 3, 4, 7, 8, 9, 100].map(restartDelayMs)).toEqual([0, 1000, 2000, 4000, 32_000, RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_MAX_MS]);
  });
});
