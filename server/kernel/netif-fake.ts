import type { InterfaceAddress, NetInterfaces } from './netif.ts';

/** FakeNetInterfaces serves a fixed, editable list of interface addresses. */
export class FakeNetInterfaces implements NetInterfaces {
  list: InterfaceAddress[];
  calls = 0;

  constructor(list: InterfaceAddress[] = FakeNetInterfaces.defaults()) {
    this.list = list;
  }

  /** defaults: loopback plus one node address, like a single-NIC node. */
  static defaults(): InterfaceAddress[] {
    return [
      { ifname: 'lo', family: 'IPv4', address: '127.0.0.1', prefixLength: 8 },
      { ifname: 'lo', family: 'IPv6', address: '::1', prefixLength: 128 },
      { ifname: 'eth0', family: 'IPv4', address: '10.0.0.10', prefixLength: 24 },
    ];
  }

  async addresses(): Promise<InterfaceAddress[]> {
    this.calls++;
    return this.list.map((a) => ({ ...a }));
  }
}
