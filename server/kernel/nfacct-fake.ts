import { CommandNotFoundError, CommandTimeoutError, NfacctError } from '../errors.ts';
import type { NfacctCounter, NfacctRunner } from './nfacct.ts';

/** FakeNfacct is an in-memory table of accounting objects behind NfacctRunner, for tests. */
export class FakeNfacct implements NfacctRunner {
  readonly #counters = new Map<string, { packets: number; bytes: number }>();
  /** calls: every operation, in order. */
  readonly calls: string[] = [];
  /** fail: behave like a host without the tool, a kernel without nfnetlink_acct, or a hung process. */
  fail: 'not-installed' | 'unsupported' | 'timeout' | null = null;
  /** slow: while set, list() waits for it (a listing on a loaded node). */
  slow: Promise<void> | null = null;

  async ensure(name: string): Promise<void> {
    this.calls.push(`ensure ${name}`);
    this.#check();
    if (!this.#counters.has(name)) this.#counters.set(name, { packets: 0, bytes: 0 });
  }

  async list(): Promise<NfacctCounter[]> {
    this.calls.push('list');
    this.#check();
    if (this.slow) await this.slow;
    return [...this.#counters].map(([name, c]) => ({ name, ...c }));
  }

  /** count adds packets to an object, as a matching rule would. */
  count(name: string, packets: number, bytes = packets * 60): void {
    const c = this.#counters.get(name);
    if (!c) throw new Error(`no nfacct object ${name}`);
    c.packets += packets;
    c.bytes += bytes;
  }

  #check(): void {
    if (this.fail === 'not-installed') throw new CommandNotFoundError('nfacct is not installed or not on PATH');
    if (this.fail === 'unsupported') throw new NfacctError('nfacct list failed (exit 1): nfacct v1.0.2: error: Protocol not supported');
    if (this.fail === 'timeout') throw new CommandTimeoutError('nfacct list did not finish within 2000 ms');
  }
}
