import { SysctlError } from '../errors.ts';
import { checkSysctlName, type Sysctl } from './sysctl.ts';

/** FakeSysctl is an in-memory /proc/sys; unknown names fail to read, like a missing file. */
export class FakeSysctl implements Sysctl {
  readonly values: Map<string, string>;
  readonly writes: { name: string; value: string }[] = [];

  constructor(values: Record<string, string> = {}) {
    this.values = new Map(Object.entries(values));
  }

  async read(name: string): Promise<string> {
    checkSysctlName(name);
    const v = this.values.get(name);
    if (v === undefined) throw new SysctlError(`cannot read sysctl ${name}: no such file`);
    return v;
  }

  async write(name: string, value: string): Promise<void> {
    checkSysctlName(name);
    this.writes.push({ name, value });
    this.values.set(name, value);
  }
}
