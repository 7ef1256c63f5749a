import { SysctlError } from '../errors.ts';
import { checkSysctlName, type Sysctl } from './sysctl.ts';

/** SimulatedSysctl is an in-memory /proc/sys; unknown names fail to read, like a missing file. */
export class SimulatedSysctl implements Sysctl {
  readonly values: Map<string, string>;
  readonly writes: { name: string; value: string }[] = [];
  /** #refused: names whose writes fail, with the errno the kernel would give. */
  readonly #refused = new Map<string, string>();

  constructor(values: Record<string, string> = {}) {
    this.values = new Map(Object.entries(values));
  }

  /**
   * refuse makes writes to a sysctl fail as the kernel does: EROFS for a
   * read-only /proc/sys mount (containers), EACCES for a file that is
   * read-only in this network namespace. Writes are still recorded in `writes`
   * only when they succeed.
   */
  refuse(name: string, errno = 'EROFS'): this {
    this.#refused.set(name, errno);
    return this;
  }

  async read(name: string): Promise<string> {
    checkSysctlName(name);
    const v = this.values.get(name);
    if (v === undefined) throw new SysctlError(`cannot read sysctl ${name}: no such file`);
    return v;
  }

  async write(name: string, value: string): Promise<void> {
    checkSysctlName(name);
    const errno = this.#refused.get(name);
    if (errno) {
      const cause = Object.assign(new Error(`${errno}: cannot write ${name}`), { code: errno });
      throw new SysctlError(`cannot set sysctl ${name} to ${value}`, { cause });
    }
    this.writes.push({ name, value });
    this.values.set(name, value);
  }
}
